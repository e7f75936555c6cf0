"""The provider's own context management, an option per request (CompactionSettings.provider_managed,
off by default; README "Provider-native context management"): Anthropic's tool-result clearing
(`context_management.edits`, clear_tool_uses_20250919) configured from the prune settings, OpenAI
Responses' server-side compaction (`context_management`, compaction) with its threshold from the
limit. Ours stays the backstop: Measure says what the provider will clear and holds should_compact
back only while the provider's management keeps the request under the limit.

Each wire format writes its own entry (WireFormat.context_management); this module decides the
numbers, what the provider will clear and whether the decision may rely on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from . import native, projection, prune
from . import conversation as m
from .lowering import anthropic, openai_responses
from .lowering.tool_ids import wire_name

# The provider acts at this fraction of our limit: below it, so that a provider counting up to a
# tenth fewer tokens than our decision figure has still acted by the time ours reaches the limit
# (the decision relies on the provider only when its trigger is below our limit).
TRIGGER_FRACTION = Fraction(9, 10)

CLEAR_TOOL_USES = anthropic.FORMAT.context_strategy  # old tool results replaced by a placeholder
COMPACTION = openai_responses.FORMAT.context_strategy  # the whole input compacted into an opaque item


@dataclass(frozen=True, slots=True)
class Management:
    """The provider's management of one request, as the body configures it."""
    strategy: str  # CLEAR_TOOL_USES or COMPACTION
    trigger: int  # input tokens at which the provider acts
    keep: int  # tool uses kept (CLEAR_TOOL_USES)
    clear_at_least: int  # the provider clears only when it frees at least this (0 = any)
    exclude: tuple  # tool names (as the request names them) never cleared


@dataclass(frozen=True, slots=True)
class Outlook:
    """What Measure says of it: what the provider will clear and whether the decision relied on it."""
    strategy: str = ""  # "" = off
    trigger: int = 0
    clears: int = 0  # estimate of what it clears once past the trigger; 0 when unknowable (opaque)
    relied_on: bool = False  # should_compact held back: the provider's management keeps it under


def of(model: m.Model, fmt, settings: m.CompactionSettings, cfg, tools: list, limit: int) -> Optional[Management]:
    """The management the request asks for; None when off, when the format has none, or when the
    window is unknown (no limit to derive the trigger from)."""
    if not settings.provider_managed or not fmt.context_strategy or limit <= 0:
        return None
    g = prune.gates(settings, cfg, model)
    defined = {t.name for t in tools}
    # keep: the newest N results prune protects ("turns" protection has no counterpart there)
    return Management(fmt.context_strategy, int(limit * TRIGGER_FRACTION), g.protected_results, g.minimum_tokens,
                      tuple(sorted(g.protected_tools & defined)))


def clears(messages: list, mg: Management) -> int:
    """Estimate (prune's, of each output) of what the provider clears once past its trigger:
    Anthropic clears the results of every tool use but the newest `keep`, except excluded tools,
    and only when that frees at least clear_at_least. Responses' compaction is opaque: 0."""
    if mg.strategy != CLEAR_TOOL_USES:
        return 0
    uses = []  # (tool, status, compacted, output) in send order
    for msg in projection.project(messages):
        if msg.role == m.ASSISTANT:
            uses.extend(p.content for p in msg.parts if isinstance(p.content, m.Tool))
    older = uses[:max(0, len(uses) - mg.keep)]
    freed = sum(native.estimate_tokens(t.output) for t in older
                if t.status == m.COMPLETED and not t.compacted and t.tool not in mg.exclude)
    return freed if freed > 0 and freed >= mg.clear_at_least else 0


def outlook(mg: Optional[Management], messages: list, projected: int, limit: int, usable: int,
            compacting: bool) -> Outlook:
    """Whether our compaction may wait for the provider's. Conservative: only with a trigger below
    our limit; for Anthropic, only when what it clears (prune's estimate of the outputs, below the
    decision figure's terms) brings the projection under the limit; for Responses, whose compaction
    leaves an amount nobody can size beforehand, only while the request as sent still fits the
    usable window (the provider must accept it before it compacts). compacting: our decision
    without the provider (forward-looking only: a reported usage over the limit says the provider's
    management did not keep the last request under it)."""
    if mg is None:
        return Outlook()
    freed = clears(messages, mg)
    relied = False
    if compacting and mg.trigger < limit:
        relied = projected - freed < limit if mg.strategy == CLEAR_TOOL_USES else projected < usable
    return Outlook(mg.strategy, mg.trigger, freed, relied)


def body_fields(mg: Optional[Management], fmt, tools: list) -> tuple:
    """(body fields, HTTP headers) the format writes for mg; both empty without one."""
    if mg is None:
        return {}, {}
    return fmt.context_management(mg, {t.name: wire_name(fmt, t.name) for t in tools})
