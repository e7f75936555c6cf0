"""What Measure answers (and Assemble beside its body): the figures, the window and the decision
of one request, gathered from the stages that computed them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import prefix, provider_management, tokens
from .decision import Decision
from .figures import Figures


@dataclass(slots=True)
class Measurement:
    body_bytes: int
    estimate: tuple  # (tokens, method)
    normalized: tuple
    raw: tuple
    extra: int
    tools: int
    tail: int
    overhead: int
    exact: Optional[tuple]
    exact_for_model: bool
    usable: int
    limit: int
    reported: int
    overflow: bool
    has_baseline: bool
    projected: int
    mid_tool_round_trip: bool
    should_compact: bool
    max_output_tokens: int
    output_tokens: int
    media_count: int
    calibrated: tuple = (0, tokens.CALIBRATED)  # (tokens, method) of the same text as estimate+tools
    self_calibrated: tuple = (0, tokens.CALIBRATED)
    calibration_factor: float = 0.0  # provider-reported input / our calibrated prefix; 0 = none
    calibration_anchor: str = ""  # the assistant message id the factor came from
    projected_calibrated: int = 0
    projected_self_calibrated: int = 0
    projected_exact: int = 0  # 0 unless the exact count was asked for
    compaction_figure: str = "calibrated"  # the method the decision figure was taken with
    decision: tuple = (0, "")  # (tokens, method): the decision figure of the whole request
    # the decision figure's count of every element from the first change since the previous
    # request on (prefix.compare); 0 when nothing was compared or nothing changed
    rewrite: int = 0
    # what the provider's own context management does to this request (CompactionSettings.provider_managed)
    provider_management: provider_management.Outlook = provider_management.Outlook()
    # our figures of the body's tools and system, carried in its cache_state (step.decision._resent)
    overhead_figures: Optional[prefix.Overhead] = None


def gather(body_bytes: int, fig: Figures, dec: Decision, usable: int, limit: int,
           max_output_tokens: int, output_tokens: int) -> Measurement:
    return Measurement(
        body_bytes=body_bytes,
        estimate=(fig.estimate, tokens.ESTIMATE),
        normalized=(fig.normalized, tokens.PREFLIGHT),
        raw=(fig.raw, tokens.PREFLIGHT),
        extra=fig.extra,
        tools=fig.tools,
        tail=fig.tail,
        overhead=fig.overhead,
        exact=fig.exact,
        exact_for_model=bool(fig.exact) and fig.exact_tokenizer.native,
        usable=usable,
        limit=limit,
        reported=dec.reported,
        overflow=dec.overflow,
        has_baseline=dec.has_baseline,
        projected=dec.projected,
        mid_tool_round_trip=dec.mid_tool_round_trip,
        should_compact=dec.should_compact,
        max_output_tokens=max_output_tokens,
        output_tokens=output_tokens,
        media_count=fig.media_count,
        calibrated=fig.calibrated,
        self_calibrated=fig.self_calibrated,
        calibration_factor=fig.factor,
        calibration_anchor=fig.anchor_id,
        projected_calibrated=dec.projected_calibrated,
        projected_self_calibrated=dec.projected_self_calibrated,
        projected_exact=dec.projected_exact,
        compaction_figure=dec.figure,
        decision=(dec.total, dec.method),
        rewrite=dec.rewrite,
        provider_management=dec.provider,
        overhead_figures=fig.overhead_figures,
    )
