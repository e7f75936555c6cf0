"""Compact (docs/design.md §5): summarize the head, keep the tail, say honestly whether it worked."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Optional

from .. import conversation as m, prefix, projection, prune, step, validate, window
from ..config import Config
from ..errors import BadInput, Unavailable
from ..deadline import NO_DEADLINE, Deadline
from ..lowering.neutral import attachment_note
from . import chunked, edits as ed, retention as ret, head_tail, serialize
from .summarizers import make_summarizer, offline, offline_fallback, provider_of
from .summarizers.job import ContextTooLong, SummaryJob

COMPACTED = "compacted"
INSUFFICIENT = "insufficient"
CONTEXT_OVERFLOW = "context_overflow"
NOTHING_TO_DO = "nothing_to_do"

CONTINUE_PROMPT = ("Continue if you have next steps, or stop and ask for clarification if you are "
                   "unsure how to proceed.")
REPLAY_NOTE = ("[The last request was too large to repeat verbatim after compaction; "
               "what follows is a summary of it.]")
MEDIA_REMOVED_NOTE = ("[Attachments of this message were removed to fit the context window; "
                      "their names are given above.]")
SUMMARY_AGENT = "compaction"


@dataclass(slots=True)
class CompactInput:
    conversation: m.Conversation
    model: m.Model
    tools: list = field(default_factory=list)
    system: m.SystemPrompt = field(default_factory=m.SystemPrompt)
    compaction: m.CompactionSettings = field(default_factory=m.CompactionSettings)
    overflow: bool = False  # triggered by a context overflow: replay the last user message
    auto: bool = False  # triggered automatically
    attempts: int = 0  # compactions already made in this agent turn
    now_ms: int = 0  # clock for the new messages and prune marks; 0 = now
    id_prefix: str = ""  # prefix of the ids of the messages Compact creates
    previous_cache_state: bytes = b""  # Assemble's cache state of the request the reported usage answered


@dataclass(slots=True)
class CompactResult:
    outcome: str
    tail_start_id: str = ""
    summarized_ids: list = field(default_factory=list)
    summary: Optional[m.Message] = None
    continue_message: Optional[m.Message] = None
    pruned_part_ids: list = field(default_factory=list)
    post_prune: Optional[prune.PruneResult] = None  # the post-compaction prune, when a summary was made
    under_limit: bool = False
    tokens_before: int = 0
    tokens_after: int = 0
    limit: int = 0
    attempts: int = 0
    backend: str = ""
    fell_back: bool = False
    fallback_reason: str = ""
    chunked: bool = False
    retention: ret.Retention = field(default_factory=ret.Retention)
    edits: list = field(default_factory=list)  # edits.Edit, in the order the client applies them
    omittable_ids: list = field(default_factory=list)  # stored messages no longer sent
    decision_method: str = ""


def check(inp: CompactInput, memo=None, deadline: Deadline = NO_DEADLINE) -> None:
    validate.request(inp.conversation, inp.model, inp.tools, inp.compaction, memo, deadline)
    if inp.attempts < 0:
        raise BadInput("attempts", "must not be negative")
    if not any(x.role == m.USER for x in inp.conversation.messages):
        raise BadInput("conversation.messages", "needs a user message: the last one is the compaction parent")


def _measure(conv: m.Conversation, inp: CompactInput, cfg: Config,
             deadline: Deadline = NO_DEADLINE, memo=None, previous_cache_state: bytes = b"") -> step.Measurement:
    """The step's measurement of conv as Measure would answer it (the decision figure);
    previous_cache_state: Assemble's of the request the reported usage answered, for the
    projection (BadInput when it is not one)."""
    plan = step.Plan.of(inp.model, list(inp.tools), inp.system, inp.compaction, cfg)
    if previous_cache_state:  # as Assemble measures with it (assemble.run)
        plan = dataclasses.replace(plan, hashes=True, previous=prefix.decode(previous_cache_state))
    return step.run(conv, plan, memo=memo, deadline=deadline).measurement


# How many times a tail still over the limit is chosen again, smaller, before it is summarized:
# each time the head may grow, and the summary is asked again.
TAIL_SHRINKS = 3


def _smaller_tail(plan: "_Plan", over_by: int, inp: CompactInput, cfg: Config, deadline: Deadline) -> int:
    """The estimate budget a kept tail over the limit by over_by (decision tokens) is chosen again
    with, at the ratio the decision figure reads the tail at (CJK text at ~5x its chars/4): what
    is left of it once over_by and a tenth of the window are taken off, and at most the preserve
    budget in what the figure reads (the estimate was shown to read it low; a tail at the limit's
    edge would compact again at the next answer). The tail's decision figure is its measure
    alone (without the usage its answers report: that counted the history before) less that of
    a body of one character."""
    mdl = inp.model
    tail = [dataclasses.replace(x, usage=m.Usage()) for x in ed.apply(plan.tail, list(plan.cuts))]
    per_medium = cfg.measure.media_decision_tokens
    estimate = sum(head_tail.sizes(tail, mdl, None, deadline, per_medium, head_tail.media_pixels(mdl, cfg, per_medium)))
    alone = _measure(m.Conversation(tail, inp.conversation.session_id), inp, cfg, deadline).decision[0]
    one = m.Message("tail-size", m.USER, [m.Part("tail-size", m.Text("."))])
    empty = _measure(m.Conversation([one], inp.conversation.session_id), inp, cfg, deadline).decision[0]
    decided = alone - empty
    usable = window.usable(mdl, inp.compaction, cfg)
    # a tenth of the window to spare: a result at the limit's very edge is within the figure's
    # error of the provider's count (gpt-4o at 7,173 of a 7,168 limit), and the next answer
    # would compact again
    room = decided - over_by - usable // 10
    target = min(room, head_tail.budget(usable, inp.compaction, cfg))
    return estimate * target // decided if target > 0 else 0


def _under(tokens_: int, lim: int, mdl: m.Model) -> bool:
    return mdl.limits.context == 0 or tokens_ < lim


# ---- summarizing -------------------------------------------------------------------------------

def _run(summarizer, transcript: serialize.Transcript, usable: int, cap: int,
         cfg: Config, deadline: Deadline) -> tuple[str, bool]:
    """The summary, and whether it was made in chunks: when the request would not fit, or the
    summarizer finds it too long."""
    deadline.check("compact")
    job = SummaryJob(transcript.messages, transcript.text, transcript.previous_summary, cap, deadline)
    if chunked.needs_chunks(job, usable, cfg):
        return chunked.summarize(summarizer, transcript, usable, cap, cfg, deadline), True
    try:
        return summarizer.summarize(job), False
    except ContextTooLong:
        return chunked.summarize(summarizer, transcript, usable, cap, cfg, deadline), True


# ---- the new messages --------------------------------------------------------------------------

def _placeholder_copy(msg: m.Message, new_id: str, now_ms: int) -> m.Message:
    """The replay of a user message, media replaced by their notes, then one line saying so."""
    parts, removed = [], False
    for p in msg.parts:
        c = p.content
        if isinstance(c, m.Text):
            if c.ignored or not c.text:
                continue
            c = m.Text(c.text, synthetic=c.synthetic)
        elif isinstance(c, m.File):
            removed = removed or c.is_media
            c = m.Text(attachment_note(c))
        elif isinstance(c, (m.Subtask, m.Agent)):
            c = dataclasses.replace(c)
        else:
            continue
        parts.append(m.Part(f"{new_id}:{len(parts)}", c))
    if removed:
        parts.append(m.Part(f"{new_id}:{len(parts)}", m.Text(MEDIA_REMOVED_NOTE, synthetic=True)))
    return m.Message(new_id, m.USER, parts, time_created_ms=now_ms, agent=msg.agent)


def _continue_prompt(new_id: str, now_ms: int) -> m.Message:
    return m.Message(new_id, m.USER, [m.Part(f"{new_id}:0", m.Text(CONTINUE_PROMPT, synthetic=True))],
                     time_created_ms=now_ms)


def _sends_content(msg: m.Message) -> bool:
    return any(isinstance(p.content, (m.Tool, m.File, m.Reasoning)) or
               (isinstance(p.content, m.Text) and not p.content.ignored and p.content.text)
               for p in msg.parts)


def _replay_index(projected: list) -> int:
    """The last real user message, when real content precedes it (the reference's hasContent):
    replaying the only content there is would overflow again."""
    r = projection.last_index(projected, head_tail.starts_turn)
    if r > 0 and any(_sends_content(x) for x in projected[:r]):
        return r
    return -1


def _earliest_tail(projected: list, stored: list) -> int:
    """Where a kept tail may start: after the previous compaction's own tail. That tail is stored
    before the previous marker, so a new tail reaching into it could not be projected back."""
    s = projection.last_index(projected, lambda x: x.role == m.ASSISTANT and x.summary)
    if s < 0:
        return 0
    position = {id(x): i for i, x in enumerate(stored)}
    cut = position[id(projected[0] if projected[0].compaction() is not None else projected[s])]
    return next((k for k in range(s + 1, len(projected)) if position[id(projected[k])] > cut),
                len(projected))


# ---- the RPC -----------------------------------------------------------------------------------

@dataclass(slots=True)
class _Plan:
    head: list
    tail: list
    replay: Optional[m.Message]  # the user message to replay after the summary, if any
    cuts: tuple = ()  # ReplaceToolOutput of the tail's newest tool outputs cut to the budget


def _plan(projected: list, stored: list, overflow: bool, mdl: m.Model, use: int,
          settings: m.CompactionSettings, cfg: Config, keep_tail: bool, memo=None,
          deadline: Deadline = NO_DEADLINE, tail_budget: int | None = None) -> _Plan:
    """Head and tail, with the turn in progress never dropped: it is summarized or kept.
    tail_budget: the tail's, in place of the settings' (head_tail.select)."""
    floor = _earliest_tail(projected, stored)
    kept, cuts = len(projected), ()
    if keep_tail:
        # the finished compaction pair the projection starts with is hidden (as upstream): it is
        # never a turn to keep, and a history that is one turn since then is summarized whole
        hidden = projection.finished_pair(projected)
        selection = head_tail.select(projected[hidden:], mdl, use, settings, cfg, memo=memo, deadline=deadline,
                                     tail_budget=tail_budget)
        if selection.tail_start_id:
            kept = max(hidden + len(selection.head), floor)
            # the cut message is the last one: it is kept unless the previous tail reaches past it
            cuts = selection.cuts if kept < len(projected) else ()
    head, tail = projected[:kept], projected[kept:]
    r = _replay_index(projected) if overflow else -1
    # a user message kept verbatim in the tail is not replayed: it would be sent twice
    replay = projected[r] if 0 <= r < kept else None
    return _Plan(head, tail, replay, cuts)


def compact(inp: CompactInput, cfg: Config, summarizer=None, deadline: Deadline = NO_DEADLINE,
            memo=None) -> CompactResult:
    """deadline: the caller's; when it passes (or the caller cancels) the work stops with
    errors.DeadlineExceeded, between summary requests and with each request's timeout cut to it.
    memo (memo.Memo): per-message sizes, prune scans and retention items kept across steps."""
    check(inp, memo, deadline)
    mdl, settings = inp.model, inp.compaction
    msgs = inp.conversation.messages
    now_ms = inp.now_ms or time.time_ns() // 1_000_000
    lim = window.limit(mdl, settings, cfg)
    use = window.usable(mdl, settings, cfg)
    measured = _measure(inp.conversation, inp, cfg, deadline, memo, inp.previous_cache_state)
    before = measured.projected
    over = not _under(before, lim, mdl)
    # with no edits the conversation stays as it is: tokens_after is its decision figure
    result = CompactResult(outcome=NOTHING_TO_DO, tokens_before=before, tokens_after=measured.decision[0],
                           limit=lim, attempts=inp.attempts, under_limit=not over,
                           decision_method=measured.decision[1])

    max_attempts = settings.max_attempts if settings.max_attempts is not None else cfg.compact.max_attempts
    if inp.attempts >= max_attempts:
        result.outcome = CONTEXT_OVERFLOW
        return result

    # The marker this call answers: the last user message when it is a compaction marker no
    # finished summary answers yet (an earlier attempt at it may have failed). One that is
    # answered is a finished compaction (after an overflow compaction it stays the last user
    # message while the turn goes on): this one builds on it, with a marker of its own.
    p = max(i for i, x in enumerate(msgs) if x.role == m.USER)
    parent = msgs[p]
    marker = parent if parent.compaction() is not None and not projection.answered(msgs, p, deadline) else None
    # Earlier attempts at this same compaction (summaries answering the marker) are dropped.
    projected = [x for x in projection.project(msgs, deadline=deadline) if x is not marker
                 and not (marker is not None and x.summary and x.parent_id == marker.id)]

    deadline.check("compact")
    plan = _plan(projected, msgs, inp.overflow, mdl, use, settings, cfg, keep_tail=True, memo=memo,
                 deadline=deadline)
    deadline.check("compact")
    if not serialize.serialize(plan.head, cfg.compact.tool_output_max_chars, deadline).messages:
        if not over:
            return result
        # Never stuck (design.md §5): over the limit with nothing old enough, the tail goes too.
        plan = _plan(projected, msgs, inp.overflow, mdl, use, settings, cfg, keep_tail=False, memo=memo,
                     deadline=deadline)
    result.attempts = inp.attempts + 1

    chosen = summarizer or make_summarizer(cfg, memo)
    cap = window.max_output(mdl, cfg)

    made = {}  # transcript -> summary: a tail chosen again with the same head asks once

    def summarize(tr: serialize.Transcript) -> tuple[str, bool, str]:
        key = (tr.previous_summary, tr.text)
        if key not in made:
            made[key] = _summarized(tr)
        return made[key]

    def _summarized(tr: serialize.Transcript) -> tuple[str, bool, str]:
        nonlocal chosen
        try:
            text_, chunked_ = _run(chosen, tr, use, cap, cfg, deadline)
            return text_, chunked_, chosen.name
        except Unavailable as exc:
            fallback = offline_fallback(chosen, cfg, memo)
            if fallback is None:
                raise
            deadline.check("compact")  # no time left for the fallback either
            result.fell_back = True
            result.fallback_reason = f"{exc}; the offline summarizer answered instead"
            chosen = fallback  # once failed, the rest of the call stays offline
            text_, chunked_ = _run(chosen, tr, use, cap, cfg, deadline)
            return text_, chunked_, chosen.name

    ids = ed.IdMaker(msgs, inp.id_prefix)
    marker_id = marker.id if marker is not None else ids.make("compaction")
    summary_id, next_id = ids.make("summary"), ids.make("continue")
    shrinks = 0
    while True:
        deadline.check("compact")
        transcript = serialize.serialize(plan.head, cfg.compact.tool_output_max_chars, deadline)
        text, was_chunked, backend = summarize(transcript)
        edits = _edits(inp, plan, marker, marker_id, summary_id, next_id, text, backend, summarize, now_ms, cfg)
        stored = ed.apply(msgs, edits)
        # the post-compaction prune reads the edited conversation, in send order
        pr = prune.prune(m.Conversation(stored, inp.conversation.session_id), prune.POST_COMPACTION,
                         settings, cfg, model=mdl, memo=memo, deadline=deadline)
        if pr.acted:
            edits.append(ed.MarkCompacted(list(pr.part_ids), now_ms))
            stored = ed.apply(stored, edits[-1:])
        # measured through the memo too: the kept messages are the request's own
        after = _measure(m.Conversation(stored, inp.conversation.session_id), inp, cfg, deadline, memo)
        tokens_after = after.decision[0]
        if _under(tokens_after, lim, mdl) or not plan.tail:
            break
        # Still over with a verbatim tail: the estimate it was chosen by read it low (CJK text
        # counts ~5x its chars/4, and a file just read went into the summary, never seen). It is
        # chosen again, smaller by what is over, so the newest messages stay (the newest one cut
        # at last); when that cannot help, the tail is summarized too rather than report failure.
        shrinks += 1
        smaller = _smaller_tail(plan, tokens_after - lim, inp, cfg, deadline) if shrinks <= TAIL_SHRINKS else 0
        plan = _plan(projected, msgs, inp.overflow, mdl, use, settings, cfg,
                     keep_tail=shrinks <= TAIL_SHRINKS and smaller > 0, memo=memo, deadline=deadline,
                     tail_budget=smaller)

    under = _under(tokens_after, lim, mdl)
    sent = {id(x) for x in projection.project(stored, deadline=deadline)}
    new = {e.message.id: e.message for e in edits if isinstance(e, ed.InsertMessage)}
    result.outcome = COMPACTED if under else INSUFFICIENT
    result.tail_start_id = _tail_start(stored, marker_id)
    result.summarized_ids = [x.id for x in plan.head]
    result.summary = new[summary_id]
    result.continue_message = new.get(next_id)
    result.pruned_part_ids = list(pr.part_ids) if pr.acted else []
    result.post_prune = pr
    result.under_limit = under
    result.tokens_after = tokens_after
    result.backend = backend
    result.chunked = was_chunked
    result.retention = ret.report(transcript.messages, transcript.previous_summary, text, memo, deadline)
    result.edits = edits
    result.omittable_ids = [x.id for x in stored if id(x) not in sent]
    result.decision_method = after.decision[1]
    return result


def _tail_start(stored: list, marker_id: str) -> str:
    marker = next(x for x in stored if x.id == marker_id)
    return marker.compaction().tail_start_id


def _edits(inp: CompactInput, plan: _Plan, marker: Optional[m.Message], marker_id: str, summary_id: str,
           next_id: str, text: str, backend: str, summarize, now_ms: int, cfg: Config) -> list:
    """The edits that store this compaction, placed so that the next request is
    [marker, summary, (replay,) kept tail, (continue)] and nothing is sent twice."""
    msgs, mdl = inp.conversation.messages, inp.model
    use = window.usable(mdl, inp.compaction, cfg)
    last_id = msgs[-1].id
    replay = None
    if plan.replay is not None:
        replay = _placeholder_copy(plan.replay, next_id, now_ms)
        if use > 0 and head_tail.message_size(replay, mdl) > chunked.chunk_budget(use, cfg):
            # A replay too big to resend is summarized the same way and replaced by a note saying so.
            replay_summary, _, _ = summarize(serialize.serialize([plan.replay], cfg.compact.tool_output_max_chars))
            replay = m.Message(next_id, m.USER, [m.Part(f"{next_id}:0", m.Text(
                f"{REPLAY_NOTE}\n\n{replay_summary}"))], time_created_ms=now_ms)

    edits = []
    tail_start = plan.tail[0].id if plan.tail else ""
    if replay is not None and plan.tail:
        # the replayed request goes right before the kept tail, which answers it
        at = next(i for i, x in enumerate(msgs) if x.id == tail_start)
        edits.append(ed.InsertMessage(msgs[at - 1].id, replay))
        tail_start = replay.id
    if marker is None:
        edits.append(ed.InsertMessage(last_id, m.Message(marker_id, m.USER, [m.Part(f"{marker_id}:0", m.Compaction(
            auto=inp.auto, overflow=inp.overflow, tail_start_id=tail_start))], time_created_ms=now_ms)))
        anchor = marker_id
    else:
        edits.append(ed.SetTailStart(marker_id, tail_start))
        anchor = last_id
    summary = m.Message(
        summary_id, m.ASSISTANT, [m.Part(f"{summary_id}:0", m.Text(text))],
        time_created_ms=now_ms, time_completed_ms=now_ms, summary=True, parent_id=marker_id,
        model_id=cfg.summarizer.model if backend != offline.NAME else offline.NAME,
        provider_id=provider_of(backend, cfg.summarizer), agent=SUMMARY_AGENT)
    edits.append(ed.InsertMessage(anchor, summary))
    if replay is not None and not plan.tail:
        edits.append(ed.InsertMessage(summary_id, replay))
    elif replay is None and inp.auto:
        edits.append(ed.InsertMessage(summary_id, _continue_prompt(next_id, now_ms)))
    edits.extend(plan.cuts)
    return edits
