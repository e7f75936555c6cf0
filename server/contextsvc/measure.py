"""Measure (docs/design.md §3): bytes, token figures, usable window, overflow and output budget."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from . import body, projection, conversation as m, native, prefix, tokens, validate
from .config import Config
from .errors import BadInput
from .deadline import NO_DEADLINE, Deadline
from .lowering.media import MEDIA_PLACEHOLDER


@dataclass(slots=True)
class MeasureInput:
    conversation: m.Conversation
    model: m.Model
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    exact: bool = False
    configured_output_tokens: int = 0
    tools_disabled: bool = False  # tools stay in the body, with the provider's "no tool use" choice


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
        # as JavaScript computes it: Math.floor(context * (percent / 100)), in doubles
        return min(u, math.floor(mdl.limits.context * (settings.threshold_percent / 100)))
    return u


def baseline(messages: list) -> Optional[m.Message]:
    """The last finished assistant, when its reported usage can anchor a projection."""
    i = projection.last_index(messages, lambda x: x.role == m.ASSISTANT and x.finished)
    if i < 0:
        return None
    msg = messages[i]
    if msg.summary or msg.usage.input_side() == 0:
        return None
    if any(x.role == m.ASSISTANT and not x.finished for x in messages[i + 1:]):
        return None
    return msg


def backward_overflow_source(messages: list) -> Optional[m.Message]:
    """The newest finished assistant stored after the last completed compaction, unless it is a
    summary (a summary's usage is the summarizer's input, the old history: never ours). The kept
    tail is stored before the compaction marker, so its pre-compaction usage is never read."""
    start = projection.last_compaction(messages) + 1
    for msg in reversed(messages[start:]):
        if msg.role == m.ASSISTANT and msg.finished:
            return None if msg.summary else msg
    return None


def mid_tool_round_trip(messages: list) -> bool:
    """A tool result follows the last user message. Informational: a tool part holds call and
    result together and Compact never separates them, so this no longer blocks compaction."""
    u = projection.last_index(messages, lambda x: x.role == m.USER)
    return any(
        x.role == m.ASSISTANT and any(isinstance(p.content, m.Tool) for p in x.parts)
        for x in messages[u + 1:]
    )


def output_budget(mdl: m.Model, configured: int, reported: int, normalized: int,
                  media_count: int, cfg: Config) -> int:
    """The configured output cap, lowered to what the window has left (design.md §3)."""
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


# ---- calibrated, self-calibrated and exact figures -----------------------------------------


@dataclass(slots=True)
class _Estimated:
    """The elements the estimate stands for (body.estimate_text is their JSON)."""
    system: list  # system elements
    messages: list  # non-system message elements
    tools: str  # JSON of the tool definitions, "" without tools

    @property
    def elements(self) -> list:
        return self.system + self.messages


def _estimated(inp: MeasureInput, built: body.Built, cfg: Config, policy) -> _Estimated:
    low, ledger = built.lowered, built.ledger
    if ledger.media_count or ledger.saved_units or ledger.extra:
        a = cfg.assemble  # media or opaque state in the body: the estimate sees placeholders
        low = body.estimate_lowered(inp.conversation, inp.model, inp.tools, inp.system, a.prompt_dir,
                                       policy, a.anthropic_max_breakpoints, a.anthropic_auto_breakpoints,
                                       a.marker_models)
    tools_text = native.json_text(body.tool_schema_list(inp.tools)) if inp.tools else ""
    return _Estimated(low.system, low.messages, tools_text)


def _join_parts(elements: list, t: _Estimated) -> list:
    """Parts whose join is the estimate's text: "[" e0, "," e1, ..., "]", then the tools;
    elements are the JSON texts of t's elements."""
    if not elements:
        parts = ["[]"]
    else:
        parts = ["[" + elements[0]] + ["," + e for e in elements[1:]]
        parts[-1] += "]"
    if t.tools:
        parts.append(t.tools)
    return parts


def _anchor(msgs: list, low_sources: list, model_id: str) -> tuple:
    """(assistant message, index of its first lowered element) whose reported input anchors the
    self-calibration: the last finished, non-summary one of this model still in the request."""
    first = {}
    for i, ids in enumerate(low_sources):
        for mid in ids:
            first.setdefault(mid, i)
    for msg in reversed(msgs):
        if (msg.role == m.ASSISTANT and msg.finished and not msg.summary and msg.usage.input_side() > 0
                and msg.model_id in ("", model_id) and msg.id in first):
            return msg, first[msg.id]
    return None, -1


def _calibrated_text(text: str) -> tuple:
    """(calibrated, calibrated with the per-class decision margins) of text, unrounded, from one
    native.text_profile."""
    if not text:
        return (0.0, 0.0)
    return tokens.calibrated_pair(native.text_profile(text))


def _projection(base, reported: int, tail: int, overhead: int, total: int) -> int:
    return reported + tail + overhead if base is not None else total


@dataclass(slots=True)
class _Figures:
    calibrated: tuple
    self_calibrated: tuple
    factor: float
    anchor_id: str
    projected_calibrated: int
    projected_self_calibrated: int
    exact: Optional[tuple]
    projected_exact: int
    # (whole request, tail, overhead, rewrite) of each method, for the decision figure
    stretches: dict
    media_tail: int  # media items in the tail elements
    media_rewrite: int  # media items in the rewritten elements


def _media_in(element_texts) -> int:
    placeholder = '"' + MEDIA_PLACEHOLDER + '"'
    return sum(t.count(placeholder) for t in element_texts)


def _figures(inp: MeasureInput, built: body.Built, cfg: Config, policy, exact_counter, base,
             reported: int, last_assistant: int, has_tail: bool, rewrite_from,
             deadline: Deadline = NO_DEADLINE) -> _Figures:
    """The calibrated, self-calibrated and (when asked) exact figures and their projections,
    summed over the same stretches as the reference agent's (tail after the last assistant element,
    overhead = system + tools), and the rewrite: the elements from rewrite_from on (an index
    into system + messages; -1 = the whole request, tools included; None = none)."""
    msgs, mdl, low = inp.conversation.messages, inp.model, built.lowered
    mc = cfg.measure
    needs_text = mc.calibrated_figures or inp.exact
    texts = _estimated(inp, built, cfg, policy) if needs_text else _Estimated([], [], "")
    deadline.check("figures")
    n_sys = len(texts.system)
    tail_from = n_sys + last_assistant + 1  # element index where the tail starts

    # calibrated: the class-aware estimate of each stretch of elements the sums below need
    anchor, at = _anchor(msgs, low.sources, mdl.id)
    elements = texts.elements
    # exact counts need each element's JSON; so does a build that already serialized its
    # elements (Assemble's prefix hashing), for free; otherwise one JSON text per stretch
    built_elements = texts.system is low.system  # not the placeholder copy made for media
    element_json = None
    if inp.exact or (built_elements and built.texts):
        text = built.element_text if built_elements else native.json_text
        element_json = [text(e) for e in elements]
        deadline.check("figures")
    cuts = [0, n_sys, n_sys + max(at, 0), tail_from, len(elements)]
    if mc.calibrated_figures:
        pairs = [(_calibrated_text(body.array_text(element_json[a:b])) if element_json
                  else tokens.calibrated_pair(native.json_profile(elements[a:b]))) if b > a else (0.0, 0.0)
                 for a, b in zip(cuts, cuts[1:])] + [_calibrated_text(texts.tools)]
    else:
        pairs = [(0.0, 0.0)] * 5
    (system_cal, head_cal, middle_cal, tail_cal, tools_cal), margined = zip(*pairs)
    cal_total = tokens.round_half_up(system_cal + head_cal + middle_cal + tail_cal + tools_cal)
    cal_tail = tokens.round_half_up(tail_cal) if has_tail else 0
    cal_overhead = tokens.round_half_up(system_cal + tools_cal)
    projected_cal = _projection(base, reported, cal_tail, cal_overhead, cal_total)
    cal_rewrite = margined_rewrite = 0.0  # (calibrated, with margins) from the first change on
    if rewrite_from is not None and mc.calibrated_figures:
        if rewrite_from < 0:
            cal_rewrite, margined_rewrite = cal_total, sum(margined)
        elif rewrite_from < len(elements):
            cal_rewrite, margined_rewrite = (
                _calibrated_text(body.array_text(element_json[rewrite_from:])) if element_json
                else tokens.calibrated_pair(native.json_profile(elements[rewrite_from:])))

    # self-calibrated: the provider's own count of a prefix over ours gives this model's factor
    factor, anchor_id = 0.0, ""
    if anchor is not None and mc.calibrated_figures:
        ours = system_cal + head_cal + tools_cal
        if ours >= mc.self_calibration_min_tokens:
            f = anchor.usage.input_side() / ours
            if mc.self_calibration_min_factor <= f <= mc.self_calibration_max_factor:
                factor, anchor_id = f, anchor.id
    if factor:
        self_cal = (tokens.scaled(cal_total, factor), f"{tokens.SELF_CALIBRATED}{factor:.4f}x({anchor_id})")
        projected_self = _projection(base, reported, tokens.scaled(cal_tail, factor),
                                     tokens.scaled(cal_overhead, factor), self_cal[0])
    else:  # nothing to calibrate against: the calibrated figure stands
        self_cal, projected_self = (cal_total, tokens.CALIBRATED), projected_cal

    exact = None
    projected_exact = 0
    if inp.exact:
        counter = exact_counter or tokens.ExactCounter(mc.exact_encoding)
        counts, method = counter.count_parts_with_method(_join_parts(element_json, texts), deadline)
        exact = (sum(counts), method)
        n_el = n_sys + len(texts.messages)
        ex_tools = counts[-1] if texts.tools else 0
        ex_tail = sum(counts[tail_from:n_el]) if has_tail else 0
        ex_overhead = sum(counts[:n_sys]) + ex_tools
        projected_exact = _projection(base, reported, ex_tail, ex_overhead, exact[0])
        ex_rewrite = 0
        if rewrite_from is not None:
            ex_rewrite = exact[0] if rewrite_from < 0 else sum(counts[rewrite_from:n_el])

    # the decision figure's stretches: with the per-class margins unless a fixed one is configured
    if mc.measured_margins:
        m_sys, _, _, m_tail, m_tools = margined  # system, head, middle, tail, tools
        decide = (tokens.round_half_up(sum(margined)), tokens.round_half_up(m_tail) if has_tail else 0,
                  tokens.round_half_up(m_sys + m_tools), tokens.round_half_up(margined_rewrite))
    else:
        decide = (cal_total, cal_tail, cal_overhead, tokens.round_half_up(cal_rewrite))
    stretches = {"calibrated": decide}
    if factor:
        stretches["self-calibrated"] = tuple(tokens.scaled(x, factor) for x in decide)
    else:
        stretches["self-calibrated"] = stretches["calibrated"]
    if exact is not None:
        stretches["exact"] = (exact[0], ex_tail, ex_overhead, ex_rewrite)
    media_tail = media_rewrite = 0
    if built.ledger.media_count:
        def media_from(k):
            return _media_in(element_json[k:] if element_json else map(native.json_text, elements[k:]))
        if has_tail:
            media_tail = media_from(tail_from)
        if rewrite_from is not None:
            media_rewrite = built.ledger.media_count if rewrite_from < 0 else media_from(rewrite_from)
    return _Figures((cal_total, tokens.CALIBRATED), self_cal, factor, anchor_id, projected_cal,
                    projected_self, exact, projected_exact, stretches, media_tail, media_rewrite)


# ---- the decision figure ---------------------------------------------------------------------

@dataclass(slots=True)
class Decision:
    total: int  # the whole request
    tail: int  # what follows the last assistant element
    overhead: int  # tools and leading system elements
    method: str
    rewrite: int  # the elements from the first change since the previous request on


def _decision(figure: str, stretch: tuple, media: int, media_tail: int, media_rewrite: int,
              self_method: str, mdl: m.Model, cfg: Config) -> Decision:
    """The figure every compaction choice reads: the method's count of the text (media as
    placeholders) times the safety margin, plus a fixed cost per media item (design.md §3)."""
    mc = cfg.measure
    total, tail, overhead, rewrite = stretch
    margin = mc.margin
    names = {"estimate": tokens.PREFLIGHT, "calibrated": tokens.CALIBRATED,
             "self-calibrated": self_method, "exact": tokens.EXACT_PREFIX + mc.exact_encoding.removesuffix("_offline")}
    method = names[figure]
    if figure == "estimate" or (figure == "exact" and tokens.cl100k_is_native(mdl.id)):
        margin = 1  # the reference's figure carries its own factor; cl100k is this model's own
    elif figure == "exact":
        margin = mc.exact_margin  # cl100k standing in for another model's tokenizer
    elif mc.measured_margins:  # the stretch holds the per-class margins already
        margin = 1
        method += "+" + tokens.ratios().margin_text()
    if margin != 1:
        percent = (margin - 1) * 100
        method += f"+{percent.numerator if percent.denominator == 1 else float(percent)}%"
    method += f"+media:{mc.media_decision_tokens}"
    per_item = mc.media_decision_tokens
    whole = math.ceil(total * margin) + media * per_item
    # the rewrite is profiled as its own text, whose blocks can fall a little differently from
    # the whole request's: it is never more than the whole request
    return Decision(whole, math.ceil(tail * margin) + media_tail * per_item,
                    math.ceil(overhead * margin), method,
                    min(whole, math.ceil(rewrite * margin) + media_rewrite * per_item))


# ---- the RPC ---------------------------------------------------------------------------------

def check(inp: MeasureInput, deadline: Deadline = NO_DEADLINE, memo=None) -> None:
    """memo (memo.StepMemo): each message's own checks kept across steps (validate.conversation)."""
    validate.request(inp.conversation, inp.model, inp.tools, inp.compaction, memo=memo, deadline=deadline)
    if inp.configured_output_tokens < 0:
        raise BadInput("configured_output_tokens", "must not be negative")


def measure(inp: MeasureInput, cfg: Config, exact_counter: Optional[tokens.ExactCounter] = None,
            deadline: Deadline = NO_DEADLINE, memo=None) -> Measurement:
    return evaluate(inp, cfg, exact_counter, deadline=deadline, memo=memo)[0]


def evaluate(inp: MeasureInput, cfg: Config, exact_counter: Optional[tokens.ExactCounter] = None,
             policy=None, hashes: bool = False, checked: bool = False, now_ms: int = 0,
             previous: Optional[prefix.State] = None, deadline: Deadline = NO_DEADLINE, memo=None) -> tuple:
    """(Measurement, the built request) of the body that would be sent, payload guard included
    (built.guard says what it did): Assemble serializes exactly what was measured.

    checked: the caller already ran check() on the request this input was derived from.
    hashes: also the prefix digests (built.digests); with previous, the previous request's
    digests, what changed since (built.change) and the decision figure of what is written again
    (Measurement.rewrite). deadline: the caller's, checked between stages and inside the
    per-element loops (errors.DeadlineExceeded). memo (memo.StepMemo): for check() and the
    payload guard's prune.
    """
    if not checked:
        check(inp, deadline, memo)
    result, built = _evaluate(inp, cfg, exact_counter, policy, hashes, previous, deadline)
    guard = body.payload_guard(inp.conversation, result.body_bytes, inp.compaction, cfg, now_ms, inp.model,
                               deadline, memo)
    if guard.conversation is not None:
        result, built = _evaluate(dataclasses.replace(inp, conversation=guard.conversation), cfg,
                                  exact_counter, policy, hashes, previous, deadline)
    built.guard = guard
    return result, built


def _evaluate(inp: MeasureInput, cfg: Config, exact_counter, policy, hashes: bool, previous,
              deadline: Deadline = NO_DEADLINE) -> tuple:
    """evaluate for the request as given, without the payload guard."""
    mdl, settings, msgs = inp.model, inp.compaction, inp.conversation.messages
    factor = cfg.measure.factor
    a = cfg.assemble
    built = body.build(inp.conversation, mdl, inp.tools, inp.system, a.prompt_dir, policy,
                          a.anthropic_max_breakpoints, a.anthropic_auto_breakpoints, hashes,
                          tools_disabled=inp.tools_disabled, marker_models=a.marker_models, deadline=deadline)
    low = built.lowered
    rewrite_from = None  # index into system + messages; -1 = the whole request
    deadline.check("measure")
    if hashes:
        built.digests = prefix.digests(low, built.prefix_chain, msgs)
        if previous is not None:
            built.change = prefix.compare(previous, built.digests)
            if built.change is not None:
                rewrite_from = -1 if built.change.segment == prefix.TOOLS else \
                    built.change.flat - built.digests.counts[0]

    system_units = built.units(low.system)
    message_units = built.units(low.messages)
    estimate = tokens.estimate_units(tokens.json_array_units(system_units + message_units))
    tool_tokens = 0
    if inp.tools:
        tool_tokens = native.estimate_tokens(native.json_lengths(body.tool_schema_list(inp.tools))[1])
    last_assistant = projection.last_index(low.roles, lambda r: r == "assistant")
    tail_messages = message_units[last_assistant + 1:]
    tail = 0
    if tail_messages:
        tail = tokens.preflight(tokens.estimate_units(tokens.json_array_units(tail_messages)), factor)
    system_tokens = tokens.estimate_units(tokens.json_array_units(system_units)) if system_units else 0
    overhead = tokens.preflight(tool_tokens + system_tokens, factor)
    extra = built.ledger.extra
    normalized = tokens.preflight(estimate + tool_tokens, factor)
    rewrite = 0
    if rewrite_from is not None:
        rewritten = (system_units + message_units)[rewrite_from:]
        if rewrite_from < 0:
            rewrite = normalized
        elif rewritten:  # nothing when the previous request was longer and this one is its prefix
            rewrite = tokens.preflight(tokens.estimate_units(tokens.json_array_units(rewritten)), factor)
    raw = tokens.preflight(estimate + extra + tool_tokens, factor)

    lim = limit(mdl, settings, cfg)
    use = usable(mdl, settings, cfg)
    context_known = mdl.limits.context > 0
    auto = cfg.measure.auto if settings.auto is None else settings.auto
    source = backward_overflow_source(msgs)
    overflow = bool(auto and context_known and source is not None and source.usage.count() >= lim)
    base = baseline(msgs)
    reported = base.usage.count() if base is not None else 0
    mid = mid_tool_round_trip(msgs)

    max_out = max_output(mdl, cfg)
    configured = inp.configured_output_tokens or max_out
    out_tokens = output_budget(mdl, configured, reported, normalized, built.ledger.media_count, cfg)
    low.set_max_output(out_tokens)

    fig = _figures(inp, built, cfg, policy, exact_counter, base, reported, last_assistant,
                   bool(tail_messages), rewrite_from, deadline)
    figure = cfg.measure.compaction_figure
    if figure == "exact" and fig.exact is None:
        figure = "calibrated"  # exact counts decide only when the request asks for them
    stretches = dict(fig.stretches, estimate=(normalized, tail, overhead, rewrite))
    decision = _decision(figure, stretches[figure], built.ledger.media_count, fig.media_tail,
                         fig.media_rewrite, fig.self_calibrated[1], mdl, cfg)
    # One figure decides (design.md §3): the decision figure of the whole request, or the projection
    # from the last reported usage when that is higher (it saw what the provider really counted).
    # Never the lower of the two: a tail the estimate undercounts must not slip a request past
    # the window. Mid tool round-trip included.
    projected = decision.total
    if base is not None:
        projected = max(projected, reported + decision.tail + decision.overhead)
    should = context_known and auto and (overflow or projected >= lim)

    return Measurement(
        body_bytes=built.body_bytes(),
        estimate=(estimate, tokens.ESTIMATE),
        normalized=(normalized, tokens.PREFLIGHT),
        raw=(raw, tokens.PREFLIGHT),
        extra=extra,
        tools=tool_tokens,
        tail=tail,
        overhead=overhead,
        exact=fig.exact,
        exact_for_model=bool(fig.exact) and tokens.cl100k_is_native(mdl.id),
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
        calibrated=fig.calibrated,
        self_calibrated=fig.self_calibrated,
        calibration_factor=fig.factor,
        calibration_anchor=fig.anchor_id,
        projected_calibrated=fig.projected_calibrated,
        projected_self_calibrated=fig.projected_self_calibrated,
        projected_exact=fig.projected_exact,
        compaction_figure=figure,
        decision=(decision.total, decision.method),
        rewrite=decision.rewrite,
    ), built
