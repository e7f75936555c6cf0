"""Figures (docs/design.md §3 "Token figures"): every token figure of the request, each with the
method that produced it: the reference's estimate (chars / 4, the 1.3 pre-flight factor), the
calibrated estimate (per text class, with the decision margins), the self-calibrated one (scaled
by the provider's own count of an earlier prefix) and, when asked, the exact count. Each is
summed over the stretches the decision reads: the whole request, the tail after the last
assistant element, the overhead (system and tools) and the rewrite (from the first change since
the previous request on).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import sys
from dataclasses import dataclass
from typing import Optional

from .. import conversation as m, encodings, native, prefix, projection, tokens
from ..deadline import NO_DEADLINE, Deadline
from ..lowering import media
from ..lowering.lowered import Lowered
from ..memo import PROFILES, TOOL_TEXT, Memo
from ..model_ids import drops_earlier_turns_reasoning, same_model
from ..positions import positions
from .baseline import (KnownPairs, as_counted, baseline, changed_key, changed_pieces, counted_plan, known_key,
                       with_rules_changed)
from . import scripts
from .plan import Plan
from .request import Request, array_text, tool_schema_list


@dataclass(slots=True)
class Figures:
    # the reference's figures (chars / 4 and its pre-flight factor)
    estimate: int  # of system and messages
    tools: int  # of the tool definitions
    tail: int  # pre-flight figure of what follows the last assistant element
    overhead: int  # pre-flight figure of the tools and leading system elements
    normalized: int  # pre-flight figure of the whole request, media as placeholders
    raw: int  # the same with what media really cost
    extra: int  # what media and opaque state cost beyond their placeholders
    rewrite: int  # pre-flight figure from the first change since the previous request on
    has_tail: bool
    media_count: int
    # the calibrated, self-calibrated and exact figures
    calibrated: tuple  # (tokens, method)
    self_calibrated: tuple
    factor: float  # provider-reported input / our calibrated prefix as it counted it; 0 = none
    anchor_id: str  # the assistant message id the factor came from
    exact: Optional[tuple]
    # method -> (whole request, tail, overhead) each projection adds to the reported usage
    projections: dict
    # method -> (whole request, tail, overhead, rewrite) the decision figure is taken from
    stretches: dict
    media_tail: int  # media items in the tail elements
    media_rewrite: int  # media items in the rewritten elements
    # what changed before the baseline since the provider counted it (step.baseline), as now
    # minus as counted: method -> its change in the projections' terms, and in the decision
    # stretches' terms; the change in media items
    rebase_projections: dict = dataclasses.field(default_factory=dict)
    rebase_stretches: dict = dataclasses.field(default_factory=dict)
    media_rebase: int = 0
    # the tool definitions and system elements are those of the previous request (the cache_state
    # the client sent back: the body the reported usage answered), so the provider's count holds
    # them already and a projection from it does not add them again (step.decision)
    overhead_counted: bool = False
    # otherwise, the figures of the tool definitions and system elements the previous request
    # sent (its cache_state), where that request is the one the baseline answered
    # (_counted_overhead): the provider's count holds those, and a projection from it swaps them
    # for these (step.decision); None where not known
    counted_overhead: Optional[prefix.Overhead] = None
    # this body's, for its own cache_state: None without the calibrated figures
    overhead_figures: Optional[prefix.Overhead] = None
    # the body is the previous request's (the cache_state the client sent back: the body the
    # reported usage answered) with elements appended, nothing before them changed (step.decision)
    prefix_as_counted: bool = False
    # reasoning the baseline's count holds that the provider leaves out now, a new turn having
    # begun since (_stripped_since): in the rebase, and the count no longer decides (step.decision)
    stripped_since: bool = False
    exact_tokenizer: Optional[encodings.ExactTokenizer] = None  # what the exact figures counted with
    # the baseline's message is in the last assistant element sent: the tail is what follows the
    # provider's count. Not so for one sent as nothing (a whitespace-only answer): the elements
    # after the last one sent then hold what it counted too (step.decision)
    tail_follows_baseline: bool = False
    # media items in the prefix the anchor's reported input counted, those stripped since
    # included: that count holds what they cost, which our text figures of the prefix do not
    # (step.decision._tokenizer_factor)
    media_prefix: int = 0
    # the decision stretch of the elements from the anchor's answer to the tail (the answer as
    # sent again, which its output tokens do not measure: a tool call's wrapper, thinking the
    # provider drops), before the tokenizer's factor; and its media items
    answer: Optional[int] = None
    media_answer: int = 0
    # the baseline's answer goes back with its reasoning (WireFormat.carries_reasoning: text, a
    # signature, redacted or encrypted reasoning): what the model reasoned may be in the next
    # count (step.decision)
    answer_reasoning: bool = False
    # reasoning tokens the baseline's count holds of its turn's earlier steps that the provider
    # leaves out now, a new user turn having begun (WireFormat.drops_earlier_turns_reasoning: the
    # answer's own reasoning is then left out too, answer_reasoning being False): taken off the
    # count (step.decision)
    dropped_reasoning: int = 0
    # reasoning tokens of the current turn's steps whose encrypted items this request sends, which
    # the whole request's figure holds as placeholders (the same format): added to that figure
    # where it decides (step.decision)
    unseen_reasoning: int = 0
    # the anchor's reported input over the decision figure of the prefix as it counted it; 0 = none
    decision_factor: float = 0.0
    decision_anchor: Optional[m.Message] = None  # the assistant whose reported input it is
    decision_prefix: float = 0.0  # the decision figure of that prefix as it is now
    calibrated_prefix: float = 0.0  # its calibrated figure (no margins)
    # the provider's count of that prefix over its calibrated figure: what the text added since
    # (the tail) is scaled by, so its own classes' margins stay on top of the provider's scale
    new_text_factor: float = 0.0
    count_ratio: float = 0.0  # that count over the calibrated figure of the prefix, unbounded
    # the provider's count of the message elements between its last two answers (the difference
    # of their reported inputs) over our calibrated figure of them: the same for message text
    # alone, which tool definitions our calibration may read high do not weigh on; 0 = none
    between_factor: float = 0.0
    # the tool definitions and system are a third or more of that prefix's calibrated figure: its
    # ratio then speaks for them as much as for message text (step.decision)
    overhead_heavy: bool = False


def rewrite_from(request: Request) -> Optional[int]:
    """Where the rewrite starts: an index into system + message elements of the body (a marker
    among the system elements, as Bedrock's cachePoint, is one, which the cache order leaves
    out); -1 = the whole request, tools included; None = nothing compared or nothing changed."""
    change = request.change
    if change is None:
        return None
    if change.segment == "tools":
        return -1
    return change.index if change.segment == "system" else len(request.lowered.system) + change.index


@dataclass(frozen=True, slots=True)
class _Appended:
    """The blocks appended to the element the rewrite starts at, when that element is the
    previous request's last one grown (prefix.Change.kept_blocks): the provider reads the blocks
    it cached from its cache and writes these and what follows."""
    text: str  # their JSON, media as their placeholders
    media: int  # media items in them (their placeholders say how many)


def appended_blocks(request: Request, plan: Plan) -> Optional[_Appended]:
    change = request.change
    if change is None or not change.kept_blocks or change.segment != "messages":
        return None
    held = prefix.grown_blocks((request.estimated or request.lowered).messages[change.index], plan.fmt.merged_key,
                               change.kept_blocks)
    if held is None:
        return None
    text = native.json_text(held[change.kept_blocks:])
    return _Appended(text, _media_in([text]) if request.ledger.media_count else 0)


def figures(conv: m.Conversation, request: Request, plan: Plan, exact_counters=None, memo: Memo | None = None,
            before: m.Conversation | None = None, deadline: Deadline = NO_DEADLINE,
            known: KnownPairs | None = None) -> Figures:
    """Every figure of the request. before: conv as it was before this step changed some of its
    messages (the payload guard), one message for one, for the baseline's rebase, and known:
    what the step knows of those changes (Guard.pairs); memo: the changed messages' lowering."""
    factor = plan.cfg.measure.factor
    low = request.lowered
    since = rewrite_from(request)
    system_units = request.units(low.system)
    message_units = request.units(low.messages)
    estimate = tokens.estimate_units(tokens.json_array_units(system_units + message_units))
    mc = plan.cfg.measure
    # (the model's exact counter, encodings.ExactTokenizer): its own offline tokenizer, else the
    # proxy; the tools and other scripts are counted with it, and the exact figures when asked
    model_counter = (exact_counters or tokens.ExactCounters(mc.exact_encoding)).for_model(plan.model.id)
    tool_text = _tool_text(plan.tools, memo, model_counter[0] if mc.calibrated_figures else None, deadline)
    tool_tokens = native.estimate_tokens(native.utf16_len(tool_text.text)) if tool_text.text else 0
    last_assistant = projection.last_index(low.roles, lambda r: r == "assistant")
    tail_messages = message_units[last_assistant + 1:]
    tail = 0
    if tail_messages:
        tail = tokens.preflight(tokens.estimate_units(tokens.json_array_units(tail_messages)), factor)
    system_tokens = tokens.estimate_units(tokens.json_array_units(system_units)) if system_units else 0
    overhead = tokens.preflight(tool_tokens + system_tokens, factor)
    extra = request.ledger.extra
    normalized = tokens.preflight(estimate + tool_tokens, factor)
    rewrite, appended = 0, appended_blocks(request, plan)
    if since is not None:
        rewritten = (system_units + message_units)[since:]
        if since < 0:
            rewrite = normalized
        elif rewritten:  # nothing when the previous request was longer and this one is its prefix
            if appended is not None:
                rewritten[0] = native.utf16_len(appended.text)
            rewrite = tokens.preflight(tokens.estimate_units(tokens.json_array_units(rewritten)), factor)
    raw = tokens.preflight(estimate + extra + tool_tokens, factor)
    out = Figures(estimate, tool_tokens, tail, overhead, normalized, raw, extra, rewrite, bool(tail_messages),
                  request.ledger.media_count, (0, tokens.CALIBRATED), (0, tokens.CALIBRATED), 0.0, "", None,
                  {}, {}, 0, 0)
    out.overhead_counted = prefix.head_unchanged(plan.previous, request.digests, request.change)
    out.prefix_as_counted = plan.previous is not None and request.digests is not None and (
        request.change is None or request.change.prefix_kept)
    _calibrated_and_exact(out, conv, request, plan, model_counter, last_assistant, since, appended, tool_text, deadline,
                          memo)
    out.stretches["estimate"] = (normalized, tail, overhead, rewrite)
    base = baseline(conv.messages)
    if base is not None:  # what the baseline's count holds of the tools and system, where known
        out.counted_overhead = _counted_overhead(out, plan, lambda: _first_element_from_end(low.sources, base.id))
    out.tail_follows_baseline = base is not None and last_assistant >= 0 and base.id in low.sources[last_assistant]
    # the baseline's first element, where something reads it (a scan from the end: found at once
    # when the tail follows it)
    stripped = request.estimated is not None and bool(request.estimated.stripped)
    base_at = _first_element_from_end(low.sources, base.id) \
        if base is not None and (out.tail_follows_baseline or stripped) else -1
    walks = {}  # held_reasoning's walks of this body's turns
    if out.tail_follows_baseline:  # as the figures read the body: what the provider strips is gone
        out.answer_reasoning = any(map(plan.fmt.carries_reasoning,
                                       (request.estimated or low).messages[base_at:last_assistant + 1]))
        # a user turn opens after the answer: the current turn starts past its first element
        if plan.fmt.drops_earlier_turns_reasoning and drops_earlier_turns_reasoning(plan.model.id) and \
                plan.fmt.turn_start(low.messages, low.roles, len(low.roles) - 1) > last_assistant + 1:
            out.answer_reasoning = False
            out.dropped_reasoning = held_reasoning(low, conv.messages, plan.fmt, last_assistant, base, walks)
    if plan.fmt.drops_earlier_turns_reasoning:
        out.unseen_reasoning = held_reasoning(low, conv.messages, plan.fmt, len(low.messages) - 1, walks=walks)
    if base is not None:
        was = before if before is not None else conv  # as the provider may have counted it
        latest = was.scanned.last_compacted_ms if was.scanned is not None else None

        def pairs_of():
            return as_counted(conv.messages, base, before.messages if before is not None else None, latest)

        counted = plan
        if plan.media_rules_apply(was.messages):  # the media rules may have moved since base's request
            pairs, history = pairs_of(), projection.project(conv.messages, conv.scanned.points if conv.scanned else None)
            counted = counted_plan(history, base, pairs, plan, memo)
            pairs = with_rules_changed(pairs, history, base, plan, counted)
            pairs_of = lambda: pairs  # noqa: E731
        key = known_key(conv.messages, base, known, latest, plan) \
            if before is not None and memo is not None and out.exact is None and counted is plan else None
        _rebase(out, pairs_of, plan, model_counter, memo, key, deadline, counted)
        _stripped_since(out, request, base_at, plan, model_counter)
    anchor = out.decision_anchor
    if anchor is not None and anchor is not base and _pruned_since(conv, anchor):
        # its count held whole what was pruned since, and only the baseline's count is rebased for
        # that: a whitespace-only answer after a prune, sent as nothing, left the answer before it
        # to anchor, whose factor (x1.55) read a request of 36,600 tokens at 63,091 and compacted it
        out.decision_anchor, out.decision_prefix, out.calibrated_prefix = None, 0.0, 0.0
        out.between_factor, out.overhead_heavy = 0.0, False
        anchor = None
    if anchor is not None:
        # what was pruned before the anchor since was counted whole: compare with the prefix as counted
        counted, counted_calibrated = out.decision_prefix, out.calibrated_prefix
        if base is anchor:
            counted -= out.rebase_stretches.get("calibrated", 0)
            counted_calibrated -= out.rebase_projections.get("calibrated", 0)
            # a medium stripped since was counted too: the count holds its cost (a screenshot
            # pruned after the answer read a provider counting with o200k at 1.8x our figure)
            out.media_prefix -= out.media_rebase
        mc = plan.cfg.measure
        sent = anchor.usage.input_as_sent()
        if plan.fmt.drops_earlier_turns_reasoning:  # our figure of a reasoning item is its placeholder
            sent -= held_reasoning(low, conv.messages, plan.fmt, _last_element(low.sources, anchor.id, base_at
                                                                                if base is anchor else -1), anchor, walks)
        f = sent / float(counted) if counted > 0 else 0.0
        out.decision_factor = f if mc.self_calibration_min_factor <= f <= mc.self_calibration_max_factor else 0.0
        g = sent / float(counted_calibrated) if counted_calibrated > 0 else 0.0
        out.new_text_factor = g if out.decision_factor and g <= mc.self_calibration_max_factor else 0.0
        out.count_ratio = g
        if mc.self_calibration_min_factor <= g <= mc.self_calibration_max_factor:
            _self_calibrate(out, g, anchor.id)
    return out


def _pruned_since(conv: m.Conversation, answer: m.Message) -> bool:
    """Whether a tool part was marked compacted after answer was stored (its count held it whole)."""
    return _last_compacted_ms(conv) > answer.time_completed_ms


def _last_compacted_ms(conv: m.Conversation) -> int:
    """The latest time_compacted_ms of any tool output (0: none): from the conversion's scans
    where it made them, else read from every message."""
    scanned = conv.scanned
    return scanned.last_compacted_ms if scanned is not None else max(map(m.LAST_COMPACTED_MS, conv.messages), default=0)


def _stripped_since(out: Figures, request: Request, first: int, plan: Plan, model_counter: tuple) -> None:
    """The reasoning of the baseline's own turn, which its count holds (the current turn's goes
    in), taken out of the rebase once a new user turn has begun and the provider leaves it out
    (request._strip_earlier_reasoning): the provider's count minus our figure of what it no
    longer counts, as for a prune (SPEC §3). The count no longer decides alone (stripped_since):
    the whole request's figure bounds the projection. A Sonnet 4.5 turn of six steps that thought
    16,000 tokens read the next turn's first request that much over. first: the baseline's first
    element."""
    est = request.estimated
    if est is None or not est.stripped or first < 0:
        return
    low = request.lowered
    start = plan.fmt.turn_start(low.messages, low.roles, first - 1)
    removed = [x for i, x in est.stripped.items() if start <= i < first]
    if not removed:
        return
    mc = plan.cfg.measure
    units = [native.json_lengths(x)[1] for x in removed]
    estimate = tokens.preflight(tokens.estimate_units(tokens.json_array_units(units)), mc.factor)
    cal, margined = stretch_pair([native.json_profile(x) for x in removed]) if mc.calibrated_figures else (0.0, 0.0)
    cal = tokens.round_half_up(cal)
    decide = tokens.round_half_up(margined) if mc.measured_margins else cal
    projections, stretches = out.rebase_projections, out.rebase_stretches
    for figure, less in (("calibrated", cal), ("self-calibrated", cal)):
        projections[figure] = projections.get(figure, 0) - less
    for figure, less in (("estimate", estimate), ("calibrated", decide), ("self-calibrated", decide)):
        stretches[figure] = stretches.get(figure, 0) - less
    if out.exact is not None:
        counted = model_counter[0].count(native.json_text(removed))
        projections["exact"] = projections.get("exact", 0) - counted
        stretches["exact"] = stretches.get("exact", 0) - counted
    out.stripped_since = True


def held_reasoning(low: Lowered, msgs: list, fmt, end: int, answer: m.Message | None = None,
                   walks: dict | None = None) -> int:
    """The reported reasoning tokens of the encrypted reasoning items the body sends in the turn
    element end is in, up to it (WireFormat.drops_earlier_turns_reasoning: counted within their
    turn, left out after it): of each message with such an item between the turn's user message
    and end (as sent: an answer of another model, or one the lowering drops, sends none), the
    steps whose reasoning holds encrypted state, by their reported reasoning (StepFinish; an
    answer without them is one step, its usage); answer's last step left out (it is the answer's
    output), and with answer only what was sent to its model. Our figure of such an item is its
    placeholder: a gpt-5 turn of three steps that reasoned 8,000 tokens each read the next turn's
    first request at 32,500 where OpenAI counts about 8,500. walks: the step's walks of its turns
    (by their first element), so that a second reading of one turn (the anchor's, mid-turn) does
    not walk it again."""
    found = _turn_messages(low, msgs, fmt, end, {} if walks is None else walks)
    if answer is None:
        return sum(msg.encrypted_reasoning for msg in found)
    total = 0
    for msg in found:
        if answer.model_id and msg.model_id and not same_model(msg.model_id, answer.model_id):
            continue  # sent now, but not to the answer's model: its count held none of it
        total += msg.encrypted_reasoning - (msg.last_step_encrypted_reasoning if msg is answer else 0)
    return total


def _turn_messages(low: Lowered, msgs: list, fmt, end: int, walks: dict) -> list:
    """The messages with a reasoning item from the start of end's turn to end, in the body's
    order (held_reasoning)."""
    elements, sources = low.messages, low.sources
    start = fmt.turn_start(elements, low.roles, end)
    walked = walks.get(start)
    # a walk of the same turn further on, with no reasoning item past end: the same messages
    if walked is not None and walked[0] >= end and not fmt.reasoning_items(elements, end + 1, walked[0]):
        return walked[1]
    # (from the provider's compaction item on, if any: whether it counts what precedes that item
    # is not known, and what is left out here stays counted)
    items = fmt.reasoning_items(elements, start, end)
    # the messages' ids, in order (a dict: a turn of 600 steps was quadratic in a list)
    ids = dict.fromkeys(itertools.chain.from_iterable(map(sources.__getitem__, items)))
    found = {}
    for msg in reversed(msgs) if ids else ():  # the turn is near the end
        if msg.id in ids:
            found[msg.id] = msg
            if len(found) == len(ids):
                break
    out = [found[x] for x in ids if x in found]
    walks[start] = (end, out)
    return out


def _last_element(low_sources: list, message_id: str, first: int) -> int:
    """The index of the last element of message_id's (first: its first, where known)."""
    at = first if first >= 0 else _first_element_from_end(low_sources, message_id)
    while at + 1 < len(low_sources) and message_id in low_sources[at + 1]:
        at += 1
    return at


def _profiled(texts: _Estimated, estimated: Lowered | None) -> tuple:
    """(text profiles, UTF-8 less UTF-16 lengths) of the estimate's elements: of its message
    elements, what the memo kept of them (Lowered.known), the others profiled here (a session
    with signed thinking or media otherwise profiled its whole history at every step)."""
    known = estimated.known if estimated is not None and estimated.known is not None \
        else [None] * len(texts.messages)
    profiles, wide = [], []
    for e, k in zip(texts.system + texts.messages, [None] * len(texts.system) + known):
        if k is None:
            utf8, utf16 = native.json_lengths(e)
            k = (native.json_profile(e), utf8 - utf16)
        profiles.append(k[0])
        wide.append(k[1])
    return profiles, wide


def _self_calibrate(out: Figures, factor: float, anchor_id: str) -> None:
    """The self-calibrated figures: the calibrated ones scaled by factor, the provider's count of
    the anchor's prefix over our calibrated figure of it as counted (what was pruned in it since
    put back: over the prefix as it is now, a prune read as the provider counting 1.9x where it
    counted 1.33x)."""
    def scaled(x):
        return tokens.scaled(x, factor)

    total, tail, overhead = out.projections["calibrated"]
    out.factor, out.anchor_id = factor, anchor_id
    out.self_calibrated = (scaled(total), f"{tokens.SELF_CALIBRATED}{factor:.4f}x({anchor_id})")
    out.projections["self-calibrated"] = (out.self_calibrated[0], scaled(tail), scaled(overhead))
    out.stretches["self-calibrated"] = tuple(map(scaled, out.stretches["calibrated"]))
    if out.rebase_projections:
        out.rebase_projections["self-calibrated"] = scaled(out.rebase_projections["calibrated"])
        out.rebase_stretches["self-calibrated"] = scaled(out.rebase_stretches["calibrated"])


def _rebase(out: Figures, pairs_of, plan: Plan, model_counter: tuple, memo: Memo | None, key: tuple | None = None,
            deadline: Deadline = NO_DEADLINE, counted: Plan | None = None) -> None:
    """The figures of the changed messages (pairs_of(): step.baseline.as_counted's pairs) now
    minus as counted, per method, each element's calibrated figures corrected as the request's
    are (step.scripts); with the memo, kept for the same changed messages (REBASED: the payload
    guard's marks on a history it prunes again at every step change the same messages each
    time). key: the pairs' changed_key, when the step knows it without making the pairs
    (baseline.known_key): a history of a thousand messages is then not read for them. counted:
    the plan of the request the baseline answered (baseline.counted_plan)."""
    mc = plan.cfg.measure
    counter, own = model_counter[0], model_counter[1].native
    change = memo.get(key) if key is not None else None
    exact = None
    if change is None:
        pairs = pairs_of()
        if not pairs:
            return
        key = changed_key(pairs, plan, counted) if memo is not None and out.exact is None else None
        change = memo.get(key) if key is not None else None
    if change is None:
        now, now_media, then, then_media = changed_pieces(pairs, plan, memo, counted)

        def estimate(pieces):
            return tokens.preflight(tokens.estimate_units(tokens.json_array_units([u for _, (_, u), _ in pieces])),
                                    mc.factor)

        def pair(pieces):
            if not mc.calibrated_figures:
                return (0.0, 0.0)
            profiles = [profile for _, _, profile in pieces]
            fixes = scripts.corrections(profiles, lambda indices: [pieces[i][1][0] - pieces[i][1][1] for i in indices],
                                        lambda indices: [pieces[i][0] for i in indices], counter, memo, deadline,
                                        own=own)
            return fixes.added(stretch_pair(profiles))

        (cal_now, margined_now), (cal_then, margined_then) = pair(now), pair(then)
        cal = tokens.round_half_up(cal_now) - tokens.round_half_up(cal_then)
        decide = (tokens.round_half_up(margined_now) - tokens.round_half_up(margined_then)) if mc.measured_margins \
            else cal
        change = (estimate(now) - estimate(then), cal, decide, now_media - then_media)
        if key is not None:
            memo.put(key, change)
        if out.exact is not None:
            exact = counter.count(array_text([text for text, _, _ in now])) - counter.count(
                array_text([text for text, _, _ in then]))
    estimated, cal, decide, out.media_rebase = change
    out.rebase_projections = {"calibrated": cal, "self-calibrated": cal}  # scaled by _self_calibrate
    out.rebase_stretches = {"estimate": estimated, "calibrated": decide, "self-calibrated": decide}
    if out.exact is not None:
        out.rebase_projections["exact"] = out.rebase_stretches["exact"] = exact


@dataclass(slots=True)
class _Estimated:
    """The elements the estimate stands for (request.estimate_text is their JSON)."""
    system: list  # system elements
    messages: list  # non-system message elements
    tools: str  # JSON of the tool definitions, "" without tools

    @property
    def elements(self) -> list:
        return self.system + self.messages


def _estimated(request: Request, tools_text: str) -> _Estimated:
    low = request.estimated or request.lowered  # media or opaque state: the estimate sees placeholders
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


def _anchor(msgs: list, low_sources: list, model_id: str, last_compaction: int) -> tuple:
    """(assistant message, index of its first lowered element) whose reported input anchors the
    self-calibration: the last finished, non-summary one of this model still in the request,
    stored after the last completed compaction (a kept tail's usage counted the history before)."""
    first = None  # message id -> index of its first element, made only when a scan from the end fails
    for msg in _after_from_end(msgs, last_compaction):
        if _counted_by(msg, model_id):
            if first is None:
                at = _first_element_from_end(low_sources, msg.id)
                if at >= 0:
                    return msg, at
                first = {}
                for i, ids in enumerate(low_sources):
                    for mid in ids:
                        first.setdefault(mid, i)
            if msg.id in first:
                return msg, first[msg.id]
    return None, -1


def _counted_overhead(out: Figures, plan: Plan, answer_at) -> Optional[prefix.Overhead]:
    """The figures of the tools and system an answer's count holds, where they changed since and
    the cache_state the client sent is of the very body that answer counted: its messages end
    where the answer starts (answer_at(): its first element). A state of another request (a
    stale one, or one before another model's answer) is not that count's: None, and the tools
    and system are added whole."""
    was = plan.previous.overhead if plan.previous is not None else None
    if was is None or out.overhead_counted or not plan.cfg.measure.calibrated_figures:
        return None
    return was if plan.previous.counts[2] == answer_at() else None


def _counted_by(msg: m.Message, model_id: str) -> bool:
    """msg is a finished answer of this model whose reported input counted the request before it."""
    return (msg.role == m.ASSISTANT and msg.finished and not msg.summary and msg.usage.input_side() > 0
            and (not msg.model_id or same_model(msg.model_id, model_id)))


def _between_factor(msgs: list, low_sources: list, model_id: str, last_compaction: int, anchor: m.Message,
                    at: int, message_profiles: list, latest_compacted: int, mc,
                    corrections=lambda start, end: 0.0) -> float:
    """The provider's count of the message elements between its answer before the anchor and the
    anchor (their reported inputs' difference) over our calibrated figure of them (with the script
    corrections of those elements, as the text it scales has them: corrections(start, end), their
    sum over message elements start..end), or 0: no such answer, a stretch too short to read, a prune since that answer (its count held the pruned
    outputs whole, the anchor's did not), reasoning in the stretch (a provider may drop an earlier
    turn's thinking from its count, which our figure holds), or a factor outside the
    self-calibration bounds."""
    seen = False
    for msg in _after_from_end(msgs, last_compaction):
        if msg is anchor:
            seen = True
        elif seen and any(isinstance(p.content, m.Reasoning) for p in msg.parts):
            return 0.0
        elif seen and _counted_by(msg, model_id):
            if latest_compacted > msg.time_completed_ms:
                return 0.0
            start = _first_element_from_end(low_sources, msg.id, at)
            counted = anchor.usage.input_as_sent() - msg.usage.input_as_sent()
            # an element it shares with an earlier message holds what its own count held already
            if start < 0 or counted <= 0 or len(low_sources[start]) > 1:
                return 0.0
            ours = stretch_pair(message_profiles[start:at])[0] + corrections(start, at)
            f = counted / ours if ours >= BETWEEN_MIN_TOKENS else 0.0
            return f if mc.self_calibration_min_factor <= f <= mc.self_calibration_max_factor else 0.0
    return 0.0


def _after_from_end(msgs: list, last_compaction: int):
    """The messages after index last_compaction, last first, read in place (the scans stop near
    the end: a thousand-message history is not copied for them)."""
    return map(msgs.__getitem__, range(len(msgs) - 1, max(last_compaction, -1), -1))


# below this, per-message overhead the provider counts weighs too much on the ratio
BETWEEN_MIN_TOKENS = 500
# a prefix whose tools and system are at least 1 / OVERHEAD_HEAVY of it is overhead-heavy
OVERHEAD_HEAVY = 3


def _first_element_from_end(low_sources: list, message_id: str, end: int | None = None) -> int:
    """The index of the first element lowered from message_id, looking from the end (or from
    before end; a message's elements are adjacent: the scan stops past them), or -1."""
    found = -1
    for i in range(len(low_sources) - 1 if end is None else end - 1, -1, -1):
        if message_id in low_sources[i]:
            found = i
        elif found >= 0:
            break
    return found


def stretch_pair(profiles: list) -> tuple:
    """(calibrated, calibrated with the per-class decision margins), unrounded, of the JSON array
    of the elements whose text profiles these are: their sum, and the array's brackets and
    commas. Each element is profiled alone (its blocks start at its own start), so a stretch's
    figure adds up from its elements' and a step profiles only its new ones."""
    if not profiles:
        return (0.0, 0.0)
    return tokens.calibrated_pair(native.sum_profiles(profiles, _separators(len(profiles))))


def _summed_pair(profile: tuple, n: int) -> tuple:
    """stretch_pair of n elements whose profiles add up to profile."""
    if not n:
        return (0.0, 0.0)
    return tokens.calibrated_pair(native.sum_profiles([profile], _separators(n)))


@dataclass(frozen=True, slots=True)
class _Profiles:
    """The message elements' profiles of a step (the PROFILES entry), their sum, and their script
    corrections."""
    profiles: list  # the very tuples the step's element entries held
    total: tuple
    corrections: Optional[scripts.Corrections]  # None: the step's figures made none


def _resumed(profiles: list, resume, memo: Memo | None) -> tuple:
    """(the session's previous step's _Profiles, which of profiles are the very tuples it held:
    a list of bools over the elements both have), or (None, None)."""
    earlier = resume.earlier(memo, PROFILES) if resume is not None else None
    if earlier is None:
        return None, None
    return earlier, list(map(operator.is_, profiles, earlier.profiles))


def _head_profile(profiles: list, at: int, earlier: _Profiles | None, same: list | None) -> tuple:
    """The summed profile (sum_profiles without separators) of profiles[:at], the head stretch:
    nearly all of a long history. The session's previous step kept its elements' profiles and
    their sum (earlier, PROFILES, under the lowering's PREFIX keys): the elements whose profile is
    the very same tuple (same) are taken as summed there, and only the others are added (a sum of
    a thousand profiles reads memory scattered over the whole memo)."""
    total, k = _ZERO, 0
    if earlier is not None:
        before, total, k = earlier.profiles, earlier.total, min(len(earlier.profiles), at)
        changed = positions(same[:k], False)
        # what the earlier sum holds that this head does not: elements past k, and the changed
        drop = before[k:] + [before[i] for i in changed]
        if drop:
            total = _difference(total, native.sum_profiles(drop, _ZERO))
        total = native.sum_profiles([profiles[i] for i in changed], total)
    return native.sum_profiles(profiles[k:at], total)


def _keep_profiles(profiles: list, at: int, head: tuple, corrections, resume, memo: Memo | None) -> None:
    """Keeps the step's message profiles, their sum and corrections for the session's next step."""
    if resume is not None and resume.keeps(memo):
        kept = _Profiles(profiles, native.sum_profiles(profiles[at:], head), corrections)
        resume.keep(memo, PROFILES, kept, sys.getsizeof(profiles) + _PROFILE_BYTES
                    + (corrections.size() if corrections is not None else 0))


def _difference(a: tuple, b: tuple) -> tuple:
    """Profile a less profile b, field by field (b is part of a's sum)."""
    return (a[0] - b[0], tuple(map(operator.sub, a[1], b[1])), tuple(map(operator.sub, a[2], b[2])),
            tuple(map(operator.sub, a[3], b[3])))


@functools.lru_cache(maxsize=64)
def _separators(n: int) -> tuple:
    """The text profile of the n + 1 brackets and commas of a JSON array of n elements (a step
    asks it for each stretch's length: the same few lengths step after step)."""
    return native.text_profile("[" + "," * (n - 1) + "]")


_ZERO = native.text_profile("")  # the profile of nothing: a sum's start
# a sum's tuples, as PROFILES charges them beside its list
_PROFILE_BYTES = sys.getsizeof(_ZERO) + sum(sys.getsizeof(x) for x in _ZERO[1:]) + 32 * sum(len(x) for x in _ZERO[1:])


@dataclass(frozen=True, slots=True)
class _ToolText:
    """What the figures read of a list of tool definitions (the TOOL_TEXT entry)."""
    text: str  # the JSON of tool_schema_list(tools)
    calibrated: tuple  # (figure, decision figure) of text: _tools_counted


def _tool_text(tools: list, memo: Memo | None, counter=None, deadline: Deadline = NO_DEADLINE) -> _ToolText:
    """The tools' _ToolText, counted by counter (None: no calibrated figures); with the memo,
    kept for the same definitions and counter (Memo.for_objects)."""
    def compute() -> tuple:
        text = native.json_text(tool_schema_list(tools)) if tools else ""
        return _ToolText(text, _tools_counted(text, counter, deadline)), sys.getsizeof(text) + 200

    if memo is None:
        return compute()[0]
    return memo.for_objects(TOOL_TEXT, tools, (counter.encoding_name if counter is not None else "",), compute)


def _tools_counted(text: str, counter, deadline: Deadline) -> tuple:
    """The calibrated figure of the tool definitions' JSON, and their decision figure: both the
    exact count of counter's encoding (the model's own offline tokenizer, else the one the
    family priors scale). A session sends the same definitions at every step, so they are
    counted once; the per-class ratios, fitted on other material, read schema JSON 1.2-1.3x
    cl100k, and their margins and a family's prior put 40 MCP tools at twice what Claude counts
    (tests/test_tokens.py)."""
    if not text or counter is None:
        return (0.0, 0.0)
    n = float(counter.count_cached(text, deadline))
    return (n, n)


def _media_in(element_texts) -> int:
    return media.items_in(element_texts)


def _calibrated_and_exact(out: Figures, conv: m.Conversation, request: Request, plan: Plan, model_counter: tuple,
                          last_assistant: int, rewrite_from, appended: Optional[_Appended], tool_text: _ToolText,
                          deadline: Deadline, memo: Memo | None = None) -> None:
    """The calibrated, self-calibrated and (when asked) exact figures, summed over the same
    stretches as the reference agent's (tail after the last assistant element, overhead = system
    + tools), and the rewrite: the elements from rewrite_from on (an index into system +
    messages; -1 = the whole request, tools included; None = none), of the first its appended
    blocks alone when it has grown (appended_blocks)."""
    msgs, mdl, low = conv.messages, plan.model, request.lowered
    mc = plan.cfg.measure
    has_tail = out.has_tail
    needs_text = mc.calibrated_figures or plan.exact
    texts = _estimated(request, tool_text.text) if needs_text else _Estimated([], [], "")
    deadline.check("figures")
    n_sys = len(texts.system)
    tail_from = n_sys + last_assistant + 1  # element index where the tail starts

    # calibrated: the class-aware estimate of each stretch of elements the sums below need
    anchor, at = _anchor(msgs, low.sources, mdl.id, request.last_compaction)
    elements = texts.elements
    # exact counts need each element's JSON, the calibrated figures each element's text profile:
    # both kept by the memo for the elements it holds
    built_elements = texts.system is low.system  # not the placeholder copy made for media
    element_json = None
    if plan.exact:
        element_json = (request.texts(low.system) + request.texts(low.messages) if built_elements
                        else [native.json_text(e) for e in elements])
        deadline.check("figures")
    profiles = []
    head = None  # the head stretch's summed profile, from the session's previous step's (PROFILES)
    fixes = None  # what each element's exact count adds (step.scripts)
    counter, own = model_counter[0], model_counter[1].native
    if mc.calibrated_figures:
        if built_elements:
            system_profiles, message_profiles = request.profiles(low.system), request.profiles(low.messages)
            profiles = system_profiles + message_profiles
            earlier, same = _resumed(message_profiles, request.resume, memo)
            head = _head_profile(message_profiles, max(at, 0), earlier, same)
            message_fixes = scripts.corrections(
                message_profiles, lambda indices: request.wide(low.messages, indices),
                lambda indices: list(map(request.texts(low.messages).__getitem__, indices)), counter, memo,
                deadline, earlier.corrections if earlier is not None else None, same, own)
            fixes = scripts.corrections(
                system_profiles, lambda indices: request.wide(low.system, indices),
                lambda indices: list(map(request.texts(low.system).__getitem__, indices)), counter, memo,
                deadline, own=own) + message_fixes
            _keep_profiles(message_profiles, max(at, 0), head, message_fixes, request.resume, memo)
        else:
            profiles, wide = _profiled(texts, request.estimated)
            fixes = scripts.corrections(profiles, lambda indices: list(map(wide.__getitem__, indices)),
                                        lambda indices: [native.json_text(elements[i]) for i in indices],
                                        counter, memo, deadline, own=own)
        deadline.check("figures")
    cuts = [0, n_sys, n_sys + max(at, 0), tail_from, len(elements)]
    if mc.calibrated_figures:
        pairs = [fixes.added(stretch_pair(profiles[a:b]) if k != 1 or head is None else _summed_pair(head, b - a),
                             a, b)
                 for k, (a, b) in enumerate(zip(cuts, cuts[1:]))] + [tool_text.calibrated]
    else:
        pairs = [(0.0, 0.0)] * 5
    (system_cal, head_cal, middle_cal, tail_cal, tools_cal), margined = zip(*pairs)
    cal_total = tokens.round_half_up(system_cal + head_cal + middle_cal + tail_cal + tools_cal)
    cal_tail = tokens.round_half_up(tail_cal) if has_tail else 0
    cal_overhead = tokens.round_half_up(system_cal + tools_cal)
    out.projections["calibrated"] = (cal_total, cal_tail, cal_overhead)
    cal_rewrite = margined_rewrite = 0.0  # (calibrated, with margins) from the first change on
    if rewrite_from is not None and mc.calibrated_figures:
        if rewrite_from < 0:
            cal_rewrite, margined_rewrite = cal_total, sum(margined)
        elif rewrite_from < len(elements):
            if appended is None:
                cal_rewrite, margined_rewrite = fixes.added(stretch_pair(profiles[rewrite_from:]), rewrite_from)
            else:
                # the appended blocks profiled alone, with the element's script correction in the
                # share of its calibrated figure they take
                own = native.text_profile(appended.text)
                pair = fixes.added(stretch_pair([own] + profiles[rewrite_from + 1:]), rewrite_from + 1)
                whole = tokens.calibrated_pair(profiles[rewrite_from])[0]
                share = min(1.0, tokens.calibrated_pair(own)[0] / whole) if whole > 0 else 0.0
                fix = fixes.added((0.0, 0.0), rewrite_from, rewrite_from + 1)
                cal_rewrite, margined_rewrite = pair[0] + fix[0] * share, pair[1] + fix[1] * share

    # the prefix the provider's count of the anchor covers: its figures give this model's factors
    # once what changed in it since is taken out (figures(): _self_calibrate, decision_factor)
    if anchor is not None and mc.calibrated_figures:
        ours = system_cal + head_cal + tools_cal
        if ours >= mc.self_calibration_min_tokens:
            m_sys, m_head, _, _, m_tools = margined
            out.decision_prefix = m_sys + m_head + m_tools if mc.measured_margins else ours * mc.margin
            out.calibrated_prefix = ours
            was = _counted_overhead(out, plan, lambda: at)
            if was is not None:
                # the count holds the tools and system the previous request sent, not these (30
                # MCP tools added since read a factor too low, tools dropped one too high)
                out.decision_prefix += (was.decision - (m_sys + m_tools) if mc.measured_margins
                                        else (was.decision - system_cal - tools_cal) * mc.margin)
                out.calibrated_prefix += was.calibrated - (system_cal + tools_cal)
            out.decision_anchor = anchor
            out.overhead_heavy = (system_cal + tools_cal) * OVERHEAD_HEAVY >= ours
            if built_elements:
                out.between_factor = _between_factor(msgs, low.sources, mdl.id, request.last_compaction, anchor,
                                                     at, message_profiles, _last_compacted_ms(conv), mc,
                                                     lambda start, end: fixes.calibrated(n_sys + start, n_sys + end))
    # self-calibrated: the calibrated figure until a factor scales it (_self_calibrate)
    out.projections["self-calibrated"] = out.projections["calibrated"]

    exact = None
    if plan.exact:
        counter, tok = model_counter
        counts, method = counter.count_parts_with_method(_join_parts(element_json, texts), deadline)
        exact = (sum(counts), tok.name(method))
        out.exact_tokenizer = tok
        n_el = n_sys + len(texts.messages)
        ex_tools = counts[-1] if texts.tools else 0
        ex_tail = sum(counts[tail_from:n_el]) if has_tail else 0
        ex_overhead = sum(counts[:n_sys]) + ex_tools
        out.projections["exact"] = (exact[0], ex_tail, ex_overhead)
        ex_rewrite = 0
        if rewrite_from is not None:
            ex_rewrite = exact[0] if rewrite_from < 0 else sum(counts[rewrite_from:n_el])
            if appended is not None and 0 <= rewrite_from < n_el:
                ex_rewrite -= counts[rewrite_from] - min(counts[rewrite_from],
                                                         counter.count_cached(appended.text, deadline))

    # the decision figure's stretches: with the per-class margins unless a fixed one is configured
    if mc.measured_margins:
        m_sys, _, _, m_tail, m_tools = margined  # system, head, middle, tail, tools
        decide = (tokens.round_half_up(sum(margined)), tokens.round_half_up(m_tail) if has_tail else 0,
                  tokens.round_half_up(m_sys + m_tools), tokens.round_half_up(margined_rewrite))
    else:
        decide = (cal_total, cal_tail, cal_overhead, tokens.round_half_up(cal_rewrite))
    stretches = out.stretches
    stretches["calibrated"] = stretches["self-calibrated"] = decide
    if mc.calibrated_figures:
        out.overhead_figures = prefix.Overhead(cal_overhead, decide[2])
    # the answer, as sent again (step.decision): when it is one element (a message of several
    # steps lowers to more, and its last step's count holds the earlier ones)
    if anchor is not None and mc.calibrated_figures and tail_from - (n_sys + max(at, 0)) == 1:
        out.answer = tokens.round_half_up(margined[2] if mc.measured_margins else middle_cal)
    if exact is not None:
        stretches["exact"] = (exact[0], ex_tail, ex_overhead, ex_rewrite)
    media_tail = media_rewrite = 0
    if request.ledger.media_count:
        def media_from(k):
            return _media_in(element_json[k:] if element_json else map(native.json_text, elements[k:]))
        if has_tail:
            media_tail = media_from(tail_from)
        if rewrite_from is not None:
            media_rewrite = request.ledger.media_count if rewrite_from < 0 else \
                media_from(rewrite_from) if appended is None else appended.media + media_from(rewrite_from + 1)
        if anchor is not None:  # in the prefix the anchor's count held: before its own elements
            since = media_from(n_sys + max(at, 0))
            out.media_prefix = request.ledger.media_count - since
            out.media_answer = since - media_tail
    out.calibrated = out.self_calibrated = (cal_total, tokens.CALIBRATED)
    out.exact = exact
    out.media_tail, out.media_rewrite = media_tail, media_rewrite
