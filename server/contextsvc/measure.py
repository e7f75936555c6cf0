"""Measure (SPEC section 3): bytes, token figures, usable window, overflow and output budget."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from . import model as m, native, request, tokens, validate
from .config import Config
from .errors import BadInput


@dataclass(slots=True)
class MeasureInput:
    conversation: m.Conversation
    model: m.Model
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    exact: bool = False
    configured_output_tokens: int = 0


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


# ---- window arithmetic ---------------------------------------------------------------------

def max_output(mdl: m.Model, cfg: Config) -> int:
    """min(model output limit, OUTPUT_TOKEN_MAX), or the cap when the model declares none."""
    cap = cfg.measure.output_token_max
    return min(mdl.limits.output, cap) if mdl.limits.output > 0 else cap


def usable(mdl: m.Model, settings: m.CompactionSettings, cfg: Config) -> int:
    context = mdl.limits.context
    if context == 0:
        return 0  # unknown window: never overflow
    if mdl.limits.input > 0:
        reserved = settings.reserved
        if reserved is None:
            reserved = min(cfg.measure.reserved_max, max_output(mdl, cfg))
        return max(0, mdl.limits.input - reserved)
    return max(0, context - max_output(mdl, cfg))


def limit(mdl: m.Model, settings: m.CompactionSettings, cfg: Config) -> int:
    u = usable(mdl, settings, cfg)
    if settings.threshold_percent is not None and mdl.limits.context > 0:
        return min(u, math.floor(mdl.limits.context * settings.threshold_percent / 100))
    return u


def _last(messages: list, pred) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if pred(messages[i]):
            return i
    return -1


def baseline(messages: list) -> Optional[m.Message]:
    """The last finished assistant, when its reported usage can anchor a projection."""
    i = _last(messages, lambda x: x.role == m.ASSISTANT and x.finished)
    if i < 0:
        return None
    msg = messages[i]
    if msg.summary or msg.usage.input_side() == 0:
        return None
    if any(x.role == m.ASSISTANT and not x.finished for x in messages[i + 1:]):
        return None
    return msg


def mid_tool_round_trip(messages: list) -> bool:
    """A tool result follows the last user message: compacting now would orphan it."""
    u = _last(messages, lambda x: x.role == m.USER)
    return any(
        x.role == m.ASSISTANT and any(isinstance(p.content, m.Tool) for p in x.parts)
        for x in messages[u + 1:]
    )


def output_budget(mdl: m.Model, configured: int, reported: int, normalized: int,
                  media_count: int, cfg: Config) -> int:
    """The configured output cap, lowered to what the window has left (SPEC section 3)."""
    context = mdl.limits.context
    if context == 0:
        return configured
    used = max(reported, normalized + cfg.measure.media_token_pad * media_count)
    available = context - used - cfg.measure.output_headroom
    if available <= 0:
        return configured  # let the provider report the real overflow: it drives compaction
    if available >= configured:
        return configured
    return max(available, cfg.measure.min_output_tokens)


# ---- the RPC ---------------------------------------------------------------------------------

def check(inp: MeasureInput) -> None:
    validate.request(inp.conversation, inp.model, inp.tools, inp.compaction)
    if inp.configured_output_tokens < 0:
        raise BadInput("configured_output_tokens", "must not be negative")


def measure(inp: MeasureInput, cfg: Config, exact_counter: Optional[tokens.ExactCounter] = None) -> Measurement:
    return evaluate(inp, cfg, exact_counter)[0]


def evaluate(inp: MeasureInput, cfg: Config, exact_counter: Optional[tokens.ExactCounter] = None,
             policy=None, hashes: bool = False, checked: bool = False) -> tuple:
    """(Measurement, the built request): Assemble serializes exactly what was measured.

    checked: the caller already ran check() on the request this input was derived from.
    """
    if not checked:
        check(inp)
    mdl, settings, msgs = inp.model, inp.compaction, inp.conversation.messages
    factor = cfg.measure.factor
    a = cfg.assemble
    built = request.build(inp.conversation, mdl, inp.tools, inp.system, a.prompt_dir, policy,
                          a.anthropic_max_breakpoints, a.anthropic_auto_breakpoints, hashes)
    low = built.lowered

    system_units = built.units(low.system)
    message_units = built.units(low.messages)
    estimate = tokens.estimate_units(tokens.json_array_units(system_units + message_units))
    tool_tokens = 0
    if inp.tools:
        tool_tokens = native.estimate_tokens(native.json_lengths(request.tool_schema_list(inp.tools))[1])
    last_assistant = _last(low.roles, lambda r: r == "assistant")
    tail_messages = message_units[last_assistant + 1:]
    tail = 0
    if tail_messages:
        tail = tokens.preflight(tokens.estimate_units(tokens.json_array_units(tail_messages)), factor)
    system_tokens = tokens.estimate_units(tokens.json_array_units(system_units)) if system_units else 0
    overhead = tokens.preflight(tool_tokens + system_tokens, factor)
    extra = built.ledger.extra
    normalized = tokens.preflight(estimate + tool_tokens, factor)
    raw = tokens.preflight(estimate + extra + tool_tokens, factor)

    lim = limit(mdl, settings, cfg)
    use = usable(mdl, settings, cfg)
    context_known = mdl.limits.context > 0
    auto = cfg.measure.auto if settings.auto is None else settings.auto
    # a summary's usage is the summarizer's own input (the old history): never an overflow signal
    last = _last(msgs, lambda x: x.role == m.ASSISTANT and not x.summary)
    overflow = bool(auto and context_known and last >= 0 and msgs[last].usage.count() >= lim)
    base = baseline(msgs)
    reported = base.usage.count() if base is not None else 0
    projected = reported + tail + overhead if base is not None else normalized
    mid = mid_tool_round_trip(msgs)
    should = context_known and not mid and (overflow or projected >= lim)

    max_out = max_output(mdl, cfg)
    configured = inp.configured_output_tokens or max_out
    out_tokens = output_budget(mdl, configured, reported, normalized, built.ledger.media_count, cfg)
    low.set_max_output(out_tokens)

    exact = None
    if inp.exact:
        counter = exact_counter or tokens.ExactCounter(cfg.measure.exact_encoding)
        text = request.estimate_text(inp.conversation, mdl, inp.tools, inp.system, a.prompt_dir, policy,
                                     a.anthropic_max_breakpoints, a.anthropic_auto_breakpoints)
        exact = (counter.count(text), counter.method)

    return Measurement(
        body_bytes=built.body_bytes(),
        estimate=(estimate, tokens.ESTIMATE),
        normalized=(normalized, tokens.PREFLIGHT),
        raw=(raw, tokens.PREFLIGHT),
        extra=extra,
        tools=tool_tokens,
        tail=tail,
        overhead=overhead,
        exact=exact,
        exact_for_model=bool(exact) and tokens.cl100k_is_native(mdl.id),
        usable=use,
        limit=lim,
        reported=reported,
        overflow=overflow,
        has_baseline=base is not None,
        projected=projected,
        mid_tool_round_trip=mid,
        should_compact=should,
        max_output_tokens=max_out,
        output_tokens=out_tokens,
        media_count=built.ledger.media_count,
    ), built
