"""Compact (SPEC section 5): summarize the head, keep the tail, say honestly whether it worked."""
from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

from .. import history, measure, model as m, native, prune, tokens, validate
from ..config import Config
from ..errors import BadInput, Unavailable
from ..limits import NO_DEADLINE, Deadline
from ..lowering.neutral import attachment_note
from . import offline, retention as ret, select as sel_mod, serialize, template
from .job import ContextTooLong, SummaryJob

COMPACTED = "compacted"
INSUFFICIENT = "insufficient"
CONTEXT_OVERFLOW = "context_overflow"
NOTHING_TO_DO = "nothing_to_do"

CONTINUE_PROMPT = ("Continue if you have next steps, or stop and ask for clarification if you are "
                   "unsure how to proceed.")
REPLAY_NOTE = ("[The last request was too large to repeat verbatim after compaction; "
               "what follows is a summary of it.]")
SUMMARY_SUFFIX = "~summary"  # appended to the last id: sorts after it, before any longer next id
MARKER_SUFFIX = "~marker"  # a compaction marker standing in when the caller sent none
CONTINUE_SUFFIX = "~continue"
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


@dataclass(slots=True)
class CompactResult:
    outcome: str
    tail_start_id: str = ""
    summarized_ids: list = field(default_factory=list)
    summary: Optional[m.Message] = None
    continue_message: Optional[m.Message] = None
    pruned_part_ids: list = field(default_factory=list)
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


def check(inp: CompactInput) -> None:
    validate.request(inp.conversation, inp.model, inp.tools, inp.compaction)
    if inp.attempts < 0:
        raise BadInput("attempts", "must not be negative")
    if not any(x.role == m.USER for x in inp.conversation.messages):
        raise BadInput("conversation.messages", "needs a user message: the last one is the compaction parent")


def make_summarizer(cfg: Config):
    if cfg.summarizer.backend == "anthropic":
        from .anthropic_backend import AnthropicSummarizer

        return AnthropicSummarizer(cfg)
    return offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer))


def _measure(conv: m.Conversation, inp: CompactInput, cfg: Config) -> measure.Measurement:
    return measure.measure(measure.MeasureInput(conv, inp.model, list(inp.tools), inp.system,
                                                inp.compaction), cfg)


def _under(tokens_: int, lim: int, mdl: m.Model) -> bool:
    return mdl.limits.context == 0 or tokens_ < lim


# ---- summarizing -------------------------------------------------------------------------------

def _preflight(text: str, cfg: Config) -> int:
    return tokens.preflight(native.estimate_tokens(text), cfg.measure.factor)


def needs_chunks(job: SummaryJob, usable: int, cfg: Config) -> bool:
    """ceil(estimate * 1.3) + output cap > usable, for the summary request itself."""
    if usable <= 0:
        return False
    request_text = template.TEMPLATE_RULES + template.prompt(job.transcript, job.previous)
    return _preflight(request_text, cfg) + job.max_tokens > usable


def chunk_budget(usable: int, cfg: Config) -> int:
    cc = cfg.compact
    return max(cc.chunk_min_tokens, math.floor(usable * Fraction(cc.chunk_ratio)))


def split_chunks(transcript: serialize.Transcript, budget: int) -> list:
    """Greedy runs of whole messages of at most budget tokens: [(messages, blocks), ...]."""
    chunks, msgs, blocks, size = [], [], [], 0
    for msg, block in zip(transcript.messages, transcript.blocks):
        cost = native.estimate_tokens(block)
        if blocks and size + cost > budget:
            chunks.append((msgs, blocks))
            msgs, blocks, size = [], [], 0
        msgs.append(msg)
        blocks.append(block)
        size += cost
    if blocks:
        chunks.append((msgs, blocks))
    return chunks


def _chunk_text(blocks: list, budget: int, cfg: Config) -> str:
    text = "\n\n".join(blocks)
    if native.estimate_tokens(text) > budget:
        text = serialize.clip(text, cfg.compact.chunk_clip_chars)  # one message over budget
    return text


def _reduce(summarizer, partials: list, previous: str, cap: int, depth: int, cfg: Config,
            deadline: Deadline) -> str:
    """Merge partial summaries; on failure halve and reduce each half, at most merge_depth deep."""
    deadline.check("compact")
    try:
        return summarizer.merge(partials, previous, cap, deadline=deadline)
    except ContextTooLong:
        if depth >= cfg.compact.merge_depth or len(partials) < 2:
            raise
    half = len(partials) // 2
    left = _reduce(summarizer, partials[:half], "", cap, depth + 1, cfg, deadline)
    right = _reduce(summarizer, partials[half:], "", cap, depth + 1, cfg, deadline)
    deadline.check("compact")
    return summarizer.merge([left, right], previous, cap, deadline=deadline)


def _summarize_chunked(summarizer, transcript: serialize.Transcript, usable: int, cap: int,
                       cfg: Config, deadline: Deadline) -> str:
    budget = chunk_budget(usable, cfg)
    chunks = split_chunks(transcript, budget)
    out_cap = cfg.compact.chunk_output_tokens
    if isinstance(summarizer, offline.OfflineSummarizer):
        # The extractive merge is the rolling update: fold the chunks in, oldest first.
        summary = transcript.previous_summary
        for msgs, blocks in chunks:
            deadline.check("compact")  # a caller gone or out of time stops the work here
            summary = summarizer.summarize(SummaryJob(msgs, "\n\n".join(blocks), summary, out_cap))
        return summary
    jobs = [SummaryJob(msgs, _chunk_text(blocks, budget, cfg), "", out_cap, deadline) for msgs, blocks in chunks]

    def one(job: SummaryJob) -> str:
        deadline.check("compact")  # chunks not started yet when time is up are not sent
        return summarizer.summarize(job)

    with ThreadPoolExecutor(max_workers=max(1, cfg.compact.chunk_concurrency)) as pool:
        partials = list(pool.map(one, jobs))
    if len(partials) == 1 and not transcript.previous_summary:
        return partials[0]
    return _reduce(summarizer, partials, transcript.previous_summary, cap, 1, cfg, deadline)


def _run(summarizer, transcript: serialize.Transcript, usable: int, cap: int,
         cfg: Config, deadline: Deadline) -> tuple[str, bool]:
    deadline.check("compact")
    job = SummaryJob(transcript.messages, transcript.text, transcript.previous_summary, cap, deadline)
    if needs_chunks(job, usable, cfg):
        return _summarize_chunked(summarizer, transcript, usable, cap, cfg, deadline), True
    try:
        return summarizer.summarize(job), False
    except ContextTooLong:
        return _summarize_chunked(summarizer, transcript, usable, cap, cfg, deadline), True


# ---- the new messages --------------------------------------------------------------------------

def _placeholder_copy(msg: m.Message, new_id: str, now_ms: int) -> m.Message:
    """The replay of a user message, media replaced by their placeholder notes."""
    parts = []
    for k, p in enumerate(msg.parts):
        c = p.content
        if isinstance(c, m.Text):
            if c.ignored or not c.text:
                continue
            c = m.Text(c.text, synthetic=c.synthetic)
        elif isinstance(c, m.File):
            c = m.Text(attachment_note(c))
        elif isinstance(c, (m.Subtask, m.Agent)):
            c = dataclasses.replace(c)
        else:
            continue
        parts.append(m.Part(f"{new_id}:{k}", c))
    return m.Message(new_id, m.USER, parts, time_created_ms=now_ms, agent=msg.agent)


def _continue_message(replay: Optional[m.Message], new_id: str, now_ms: int) -> m.Message:
    if replay is not None:
        return _placeholder_copy(replay, new_id, now_ms)
    return m.Message(new_id, m.USER, [m.Part(f"{new_id}:0", m.Text(CONTINUE_PROMPT, synthetic=True))],
                     time_created_ms=now_ms)


def _with_tail_start(marker: m.Message, tail_start_id: str) -> m.Message:
    parts = [m.Part(p.id, dataclasses.replace(p.content, tail_start_id=tail_start_id))
             if isinstance(p.content, m.Compaction) else p for p in marker.parts]
    return dataclasses.replace(marker, parts=parts)


# ---- the RPC -----------------------------------------------------------------------------------

def compact(inp: CompactInput, cfg: Config, summarizer=None, deadline: Deadline = NO_DEADLINE) -> CompactResult:
    """deadline: the caller's; when it passes (or the caller cancels) the work stops with
    errors.DeadlineExceeded, between summary requests and with each request's timeout cut to it."""
    check(inp)
    mdl, settings = inp.model, inp.compaction
    msgs = inp.conversation.messages
    now_ms = inp.now_ms or time.time_ns() // 1_000_000
    lim = measure.limit(mdl, settings, cfg)
    use = measure.usable(mdl, settings, cfg)
    before = _measure(inp.conversation, inp, cfg).projected
    result = CompactResult(outcome=NOTHING_TO_DO, tokens_before=before, tokens_after=before,
                           limit=lim, attempts=inp.attempts, under_limit=_under(before, lim, mdl))

    if inp.attempts >= cfg.compact.max_attempts:
        result.outcome = CONTEXT_OVERFLOW
        return result

    parent_index = max(i for i, x in enumerate(msgs) if x.role == m.USER)
    parent = msgs[parent_index]
    marker = parent if parent.compaction() is not None else None
    # Earlier attempts at this same compaction (summaries answering the marker) are dropped.
    projected = [x for x in history.project(msgs) if x is not marker
                 and not (marker is not None and x.summary and x.parent_id == marker.id)]

    replay = None
    candidates = projected
    if inp.overflow:
        r = next((i for i in range(len(projected) - 1, -1, -1)
                  if sel_mod.starts_turn(projected[i])), -1)
        if r > 0:
            replay, candidates = projected[r], projected[:r]

    selection = sel_mod.select(candidates, mdl, use, settings, cfg)
    transcript = serialize.serialize(selection.head, cfg.compact.tool_output_max_chars)
    if not transcript.messages:
        return result
    result.attempts = inp.attempts + 1

    chosen = summarizer or make_summarizer(cfg)
    cap = measure.max_output(mdl, cfg)

    def summarize(tr: serialize.Transcript) -> tuple[str, bool, str]:
        nonlocal chosen
        try:
            text_, chunked_ = _run(chosen, tr, use, cap, cfg, deadline)
            return text_, chunked_, chosen.name
        except Unavailable as exc:
            if not cfg.summarizer.fallback_to_offline or isinstance(chosen, offline.OfflineSummarizer):
                raise
            deadline.check("compact")  # no time left for the fallback either
            result.fell_back = True
            result.fallback_reason = f"{exc}; the offline summarizer answered instead"
            chosen = offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer))  # once failed, the rest of the call stays offline
            text_, chunked_ = _run(chosen, tr, use, cap, cfg, deadline)
            return text_, chunked_, chosen.name

    text, chunked, backend = summarize(transcript)

    last_id = msgs[-1].id
    summary_id = last_id + SUMMARY_SUFFIX
    summary = m.Message(
        summary_id, m.ASSISTANT, [m.Part(f"{summary_id}:0", m.Text(text))],
        time_created_ms=now_ms, time_completed_ms=now_ms, summary=True, parent_id=parent.id,
        model_id=cfg.summarizer.model if backend != offline.NAME else offline.NAME,
        provider_id=m.ANTHROPIC if backend != offline.NAME else "", agent=SUMMARY_AGENT)
    cont = _continue_message(replay, summary_id + CONTINUE_SUFFIX, now_ms)
    if replay is not None and use > 0 and sel_mod.message_size(cont, mdl) > chunk_budget(use, cfg):
        # A replay too big to resend is summarized the same way and replaced by a note saying so.
        replay_summary, _, _ = summarize(serialize.serialize([replay], cfg.compact.tool_output_max_chars))
        cont = m.Message(cont.id, m.USER, [m.Part(f"{cont.id}:0", m.Text(
            f"{REPLAY_NOTE}\n\n{replay_summary}"))], time_created_ms=now_ms)

    # The stored conversation after this compaction, then the post-compaction prune over it.
    stored_marker = _with_tail_start(marker, selection.tail_start_id) if marker is not None else None
    stored = [stored_marker if x is marker else x for x in msgs] + [summary, cont]
    pr = prune.prune(m.Conversation(stored, inp.conversation.session_id), prune.POST_COMPACTION,
                     settings, cfg, model=inp.model)
    pruned = pr.part_ids if pr.acted else []

    # What the next request holds: [compaction marker, summary, kept tail, continue message].
    # A stand-in marker sorting after every stored id keeps the measured history well ordered.
    marker_id = last_id + MARKER_SUFFIX
    stand_in = m.Message(marker_id, m.USER, [m.Part(f"{marker_id}:0", m.Compaction(
        auto=inp.auto, overflow=inp.overflow, tail_start_id=selection.tail_start_id))],
        time_created_ms=now_ms)
    after_summary = dataclasses.replace(summary, parent_id=marker_id)
    after = prune.apply(m.Conversation(selection.tail + [stand_in, after_summary, cont],
                                       inp.conversation.session_id), pruned, now_ms)
    tokens_after = _measure(after, inp, cfg).normalized[0]

    under = _under(tokens_after, lim, mdl)
    result.outcome = COMPACTED if under else INSUFFICIENT
    result.tail_start_id = selection.tail_start_id
    result.summarized_ids = [x.id for x in selection.head]
    result.summary = summary
    result.continue_message = cont
    result.pruned_part_ids = pruned
    result.under_limit = under
    result.tokens_after = tokens_after
    result.backend = backend
    result.chunked = chunked
    result.retention = ret.measure(ret.extract(transcript.messages), text)
    return result
