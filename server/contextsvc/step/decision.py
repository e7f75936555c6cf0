"""The decision (docs/design.md §3 "One decision figure", "Window, limit, overflow"): the one
figure every compaction choice reads, the reported usage it may project from, the backward and
forward overflow checks, and should_compact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .. import conversation as m, model_ids, projection, provider_management, tokenizer_family, tokens
from .baseline import baseline
from .figures import Figures
from .plan import Plan


@dataclass(slots=True)
class Decision:
    total: int  # the decision figure of the whole request
    tail: int  # of what follows the last assistant element
    overhead: int  # of the tools and leading system elements
    method: str
    rewrite: int  # of the elements from the first change since the previous request on
    figure: str  # the method's name in config (measure.compaction_figure), as applied
    reported: int  # the baseline's reported usage; 0 without one
    rebased: int  # reported, rebased on what changed before the baseline since (step.baseline)
    unsent: int  # of reported: what the baseline's answer reasoned that does not go back (_unsent)
    has_baseline: bool  # the projection starts from reported (Figures.tail_follows_baseline)
    overflow: bool  # backward-looking: the last answer's real usage reached the limit
    projected: int
    projected_calibrated: int
    projected_self_calibrated: int
    projected_exact: int  # 0 unless the exact count was asked for
    mid_tool_round_trip: bool
    should_compact: bool
    provider: provider_management.Outlook  # what the provider's own management does to the request


def backward_overflow_source(messages: list, last_compaction: int) -> Optional[m.Message]:
    """The newest finished assistant stored after the last completed compaction, unless it is a
    summary (a summary's usage is the summarizer's input, the old history: never ours). The kept
    tail is stored before the compaction marker, so its pre-compaction usage is never read.
    last_compaction: projection.last_compaction(messages)."""
    start = last_compaction + 1
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


def decide(messages: list, fig: Figures, plan: Plan, last_compaction: int) -> Decision:
    mdl, cfg = plan.model, plan.cfg
    lim = plan.limit
    context_known = mdl.limits.context > 0
    auto = plan.auto
    base = baseline(messages)
    # the provider's count of the request as sent: what it cleared itself (provider_managed) was
    # sent, and our figures of the request count it
    reported = base.usage.count_as_sent() if base is not None else 0
    # of which the provider leaves out now the reasoning of the baseline's turn (figures.held_reasoning)
    dropped = fig.dropped_reasoning
    unsent = _unsent(base, fig)
    # a projection adds the tail to that count only where the tail is what came after it: a
    # baseline sent as nothing has no place in the body, so the whole request's figure stands;
    # so it does where another tokenizer counted it (_counted_elsewhere)
    anchored = base is not None and fig.tail_follows_baseline and not _counted_elsewhere(base, plan)

    def projected_by(method: str) -> int:
        total, tail, overhead = fig.projections[method]
        if not anchored:
            return total
        was = fig.counted_overhead.calibrated if method == "calibrated" and fig.counted_overhead else None
        rebase = fig.rebase_projections.get(method, 0) + fig.media_rebase * cfg.measure.media_decision_tokens
        return max(0, reported - dropped + rebase) + tail + _resent(overhead, fig, was)

    figure = cfg.measure.compaction_figure
    if figure == "exact-where-known":  # Plan.of counted it for every model with its own offline
        figure = "exact" if fig.exact is not None and fig.exact_tokenizer.native else "calibrated"
    if figure == "exact" and fig.exact is None:
        figure = "calibrated"  # exact counts decide only when the request asks for them
    total, tail, overhead, method, rewrite, rebase, answer, new_since, was = _figure(
        figure, fig.stretches[figure], fig, plan)
    resent = _resent(overhead, fig, was)
    # One figure decides (design.md §3): with a baseline, the projection from the last reported
    # usage (SPEC §3: the provider's own count of the prefix, what is new since by the decision
    # figure's method), where that count is known to be of this prefix (_count_stands); else the
    # decision figure of the whole request, or the projection when that is higher. Mid tool
    # round-trip included. The reported usage stands only for what the provider counted: what was
    # pruned or stripped before it since is taken out (rebased).
    projected = total + fig.unseen_reasoning
    rebased = max(0, reported - dropped + rebase) if anchored else 0
    if anchored:
        if _count_stands(figure, fig, base, plan):
            # the count of the request the answer came from, then the answer as it is sent again
            # and what follows it: a count of input + output fell 116 tokens short of a Gemini
            # request's, the answer's output being less than its function call as sent
            # (and never less than what it generated: opaque reasoning goes in as its placeholder)
            usage = base.usage
            generated = usage.output + usage.reasoning - unsent
            projected = (max(0, usage.input_as_sent() - dropped) + (generated if answer is None else max(answer, generated))
                         + new_since + resent)
        else:
            projected = max(projected, rebased - unsent + tail + resent)
    # backward-looking: the last answer's real usage reached the limit; rebased the same way
    # when it is the baseline's, so a prune that frees enough clears this check too, and without
    # the reasoning the next request does not hold (the limit keeps room for the next answer's:
    # a gpt-5 session on Chat Completions compacted at 59-82% of its limit, each time its last
    # answer's input, output and reasoning passed it). What the window held: without what the
    # provider's own clearing kept out of it
    source = backward_overflow_source(messages, last_compaction)
    if source is not None and _counted_elsewhere(source, plan):
        source = None  # the whole request's figure above is this model's reading of it
    used = source.usage.count() if source is not None else 0
    if source is not None and source is base:
        used = max(0, used - dropped - unsent + rebase)
    overflow = bool(auto and context_known and source is not None and used >= lim)
    should = context_known and auto and (overflow or projected >= lim)
    outlook = provider_management.outlook(plan.management, messages, projected, lim, plan.usable,
                                          should and not overflow)
    should = should and not outlook.relied_on
    return Decision(total, tail, overhead, method, rewrite, figure, reported, rebased, unsent, anchored, overflow,
                    projected, projected_by("calibrated"), projected_by("self-calibrated"),
                    projected_by("exact") if fig.exact is not None else 0, mid_tool_round_trip(messages),
                    should, outlook)


def _unsent(base: m.Message | None, fig: Figures) -> int:
    """The reasoning tokens of the baseline's answer that the next request does not hold: all of
    them unless the answer goes back with its reasoning (fig.answer_reasoning: Claude's signed or
    redacted thinking, DeepSeek's reasoning_content, Responses' encrypted items, Gemini's
    signatures), which may stand for them; none goes back to gpt-5 on Chat Completions, nor of a
    turn the provider strips: a gpt-5 answer that reasoned 15,000 tokens read its next request
    15,000 over, pruned it at 69% of its limit and cut its output cap."""
    return base.usage.reasoning if base is not None and not fig.answer_reasoning else 0


def _count_stands(figure: str, fig: Figures, base: m.Message, plan: Plan) -> bool:
    """The provider's count of the prefix decides for it, where our figure of that prefix may read
    higher: the calibrated figure (its margins and the tokenizer's factor are never below 1, so a
    provider that counts less, gpt-4o's o200k against cl100k's ratios, compacted a 32K session at
    61-72% of its window), once the count is known to be of this very prefix: the baseline is the
    answer the factor was read from (fig.decision_factor: its count over our figure of the prefix
    within the self-calibration bounds, over at least self_calibration_min_tokens; another model's
    answer is no count of this one's), and the body is the one it answered with messages appended
    (fig.prefix_as_counted: the previous_cache_state the client passed back, so nothing a prune,
    the payload guard or a media strip changed since is taken off the count at a ratio that is
    not the provider's), nor, a new turn having begun, reasoning the provider strips since
    (fig.stripped_since: the rebase takes it out). What is new since it keeps its margins and a
    tokenizer factor of at least the family's prior (_figure). A Claude model counts more than cl100k does: a count
    under our calibrated figure of the prefix (no margins) is not its count of it (a client that
    left out the cache reads, which Anthropic reports apart) or one of text we over-read
    (pytest's dots), whose ratio would scale nothing else right. Otherwise the projection never
    reads below the whole request's figure."""
    anchor = fig.decision_anchor
    return (figure == "calibrated" and bool(fig.decision_factor) and fig.prefix_as_counted and not fig.stripped_since
            and fig.count_ratio >= _count_floor(_family(plan), plan) and anchor is not None and base is not None
            and anchor.id == base.id)


def _counted_elsewhere(answer: m.Message, plan: Plan) -> bool:
    """answer's usage was counted by another tokenizer than the request's model's (a switch of
    model mid-session): no count of this model's. After a switch from Claude (64,460 reported) to
    gpt-4o, that count less our figure of what a prune took out left 14,335 of a 11,904 limit
    for a body gpt-4o counts at 1,986, and the session compacted. An answer naming no model is
    taken to be the request's model's, as before."""
    if not answer.model_id or model_ids.same_model(answer.model_id, plan.model.id):
        return False
    proxy = plan.cfg.measure.exact_encoding
    provider = model_ids.provider_name(answer.provider_id) if answer.provider_id else plan.model.provider
    theirs = tokenizer_family.for_model(answer.model_id, provider, proxy)
    return theirs != _family(plan)


def _count_floor(fam: tokenizer_family.Family, plan: Plan) -> float:
    """The least ratio of a reported count to our calibrated figure of the prefix it counted that
    is a count of the model's tokenizer: 1.0 for a family that counts more than cl100k (under it,
    text we over-read or cache reads left out), else the self-calibration bound."""
    return 1.0 if fam.name in COUNTS_MORE else plan.cfg.measure.self_calibration_min_factor


# the families whose tokenizer counts more than cl100k's (tokenizer_family: measured for Claude)
COUNTS_MORE = frozenset((tokenizer_family.CLAUDE, tokenizer_family.CLAUDE_47))


def _family(plan: Plan) -> tokenizer_family.Family:
    return tokenizer_family.for_model(plan.model.id, plan.model.provider, plan.cfg.measure.exact_encoding)


def _resent(overhead: int, fig: Figures, was: int | None = None) -> int:
    """What a projection from the reported usage adds for the tools and system: nothing when the
    previous request's cache state shows them unchanged (the count holds them; 50 MCP tools of
    11K tokens counted twice asked a 32K session to compact at 40% of its window); when they
    changed, what they are now less what that state says they were (was, in the same terms;
    less than nothing when tools were dropped: the count still holds them, and sessions whose MCP
    tool set shrank compacted early); else all of them (the reference's bounded over-count: they
    may have changed since the provider counted them). A swap is used only where the count does
    not decide (_count_stands needs the body unchanged but for messages appended), and there the
    whole request's figure bounds the projection from below."""
    if fig.overhead_counted:
        return 0
    return overhead - was if was is not None else overhead


def _figure(figure: str, stretch: tuple, fig: Figures, plan: Plan) -> tuple:
    """(whole, tail, overhead, method, rewrite, rebase, answer, new, was) of the figure every compaction
    choice reads: the method's count of the text (media as placeholders) times the safety margin
    and the model's tokenizer factor, plus a fixed cost per media item (design.md §3); rebase: the
    change since the baseline was counted; answer and new: the anchor's answer as sent again and
    the tail, as a projection from the provider's count takes them (new text to that count); was:
    the tools and system the count holds, where they changed since and are known (_resent)."""
    mc = plan.cfg.measure
    total, tail, overhead, rewrite = stretch
    margin = mc.margin
    tok = fig.exact_tokenizer  # set when the exact figures were counted
    names = {"estimate": tokens.PREFLIGHT, "calibrated": tokens.CALIBRATED,
             "self-calibrated": fig.self_calibrated[1],
             "exact": tok and tok.name(tokens.EXACT_PREFIX + tok.encoding)}
    method = names[figure]
    scale, tail_scale, scale_term = _tokenizer_factor(figure, fig, plan)
    if figure == "estimate" or (figure == "exact" and tok.native):
        margin = 1  # the reference's figure carries its own factor; the exact count is this model's own
    elif figure == "exact":
        # a proxy tokenizer standing in for this model's: its margin and the tokenizer's factor
        # stand for the same difference, the larger one applies
        margin = mc.exact_margin if mc.exact_margin >= scale else 1
        if margin != 1:
            scale, tail_scale, scale_term = 1, 1, ""
    elif mc.measured_margins:  # the stretch holds the per-class margins already
        margin = 1
        method += "+" + tokens.ratios().margin_text()
    if margin != 1:
        percent = (margin - 1) * 100
        method += f"+{percent.numerator if percent.denominator == 1 else float(percent)}%"
    method += scale_term + f"+media:{mc.media_decision_tokens}"
    per_item = mc.media_decision_tokens

    def text(x, by=scale) -> int:
        return tokens.scaled(math.ceil(x * margin), float(by)) if by != 1 else math.ceil(x * margin)

    # the tail is part of the whole: scaled as the tail, so the whole figure and the projection
    # from the reported usage agree on it (a prune that leaves the whole under the limit clears
    # should_compact)
    tail_text = text(tail, tail_scale)
    whole = text(total) + (tail_text - text(tail)) + fig.media_count * per_item
    # what changed before the baseline, in the provider's terms like the rest (the provider counted
    # a pruned output whole), so a prune that frees enough clears should_compact
    rebase_text = fig.rebase_stretches.get(figure, 0)
    rebase = (text(rebase_text) if rebase_text >= 0 else -text(-rebase_text)) + fig.media_rebase * per_item
    # where the count decides, what is new since it (the answer as sent again, the tail) is
    # scaled at least by the family's prior: the prefix's ratio may be of text we over-read
    # (pytest's dots read 2.1x Claude's count, and a code tail scaled 1.0 came 2,800 short)
    new_scale = max(float(tail_scale), float(_family(plan).prior)) if figure == "calibrated" else tail_scale
    # the tools and system the reported usage counted, where they changed since and the previous
    # request's cache state holds their figure (of the calibrated figure's stretch alone)
    was = fig.counted_overhead
    was_text = text(was.decision) if figure == "calibrated" and was is not None else None
    # the rewrite is profiled as its own text, whose blocks can fall a little differently from
    # the whole request's: it is never more than the whole request
    return (whole, tail_text + fig.media_tail * per_item, text(overhead), method,
            min(whole, text(rewrite) + fig.media_rewrite * per_item), rebase,
            None if fig.answer is None else text(fig.answer, new_scale) + fig.media_answer * per_item,
            text(tail, new_scale) + fig.media_tail * per_item, was_text)


def _tokenizer_factor(figure: str, fig: Figures, plan: Plan) -> tuple:
    """(factor, factor of the tail, method term) for the model's tokenizer (tokenizer_family):
    once the provider has counted an earlier prefix, its count over our decision figure of it
    (fig.decision_factor), never below 1 (the self-calibration bounds cap it), and for the text
    added since (the tail) the provider's count of the messages between its last two answers over
    our calibrated figure of them (fig.between_factor), else its count of the prefix over our
    calibrated figure of it (fig.new_text_factor), never below the family's prior when tools and
    system are much of that prefix (fig.overhead_heavy); so the tail's own classes' margins stay
    on top of the provider's scale (a prefix whose margins are larger than the tail's would
    otherwise scale the tail below what the provider counts);
    before, the family's prior for both, which also bounds both when the provider's count held
    media. Neither for the reference's estimate, for the model's own exact count, nor for the
    self-calibrated figure once it is scaled already."""
    fam = _family(plan)
    if figure == "estimate" or (figure == "exact" and fig.exact_tokenizer.native):
        return 1, 1, ""
    if figure == "self-calibrated" and fig.factor:
        return 1, 1, ""
    if fig.decision_factor:
        # a count under our calibrated figure of its prefix is no count of a tokenizer that counts
        # more (_count_stands: text we over-read, pytest's dots, or cache reads left out): it
        # scales nothing else right (after the dots were pruned, the rest read x1.0 was sent at
        # 30,911 tokens where 25,445 were figured). The family's prior then, as before any usage;
        # the count of the messages between the last two answers still reads the new text
        unread = fam.name in COUNTS_MORE and fig.count_ratio < _count_floor(fam, plan)
        anchored = float(fam.prior) if unread else max(1.0, fig.decision_factor)
        # the new text: by the provider's count of the messages between its last two answers,
        # where tool definitions weigh nothing; without one, by its count of the prefix, and
        # never below the prior when tools and system are much of that prefix: MCP tool
        # definitions, whose calibrated figure reads high, gave 1.03-1.18 where Claude counted
        # prose at 1.5x cl100k, and the projection from the reported usage undercounted what
        # followed it (a prefix of messages speaks for messages: at 1.05 there, the prior
        # compacted an agent's 32K session 18 times where 11 were due)
        if fig.between_factor:
            tail = max(anchored, fig.between_factor)
        elif fig.overhead_heavy:
            tail = max(anchored, fig.new_text_factor, float(fam.prior))
        else:
            tail = max(anchored, fig.new_text_factor)
        if fig.media_prefix:
            # the provider's count holds the media's cost too, which the text it is divided by does
            # not (a screenshot in a short prefix made it 1.73x): the text's factor is at most the
            # family's bound, the same as before any usage (media keep their own cost per item)
            bound = max(1.0, float(fam.prior))
            anchored, tail = min(anchored, bound), min(tail, bound)
        if unread:
            return anchored, tail, fam.method()
        return anchored, tail, fam.method(anchored, fig.decision_anchor.id, fig.media_prefix)
    return fam.prior, fam.prior, fam.method()
