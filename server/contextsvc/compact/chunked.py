"""The chunked fallback of Compact (docs/design.md §5, "Chunked fallback").

When the summary request itself would not fit the usable window, or the summarizer reports an
overflow, the head is split greedily into chunks of whole messages, each chunk summarized (a few
at a time), and the partial summaries merged, halving and reducing again when a merge is too long.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from .. import native, tokens
from ..config import Config
from ..deadline import Deadline
from . import serialize, template
from .summarizers import offline
from .summarizers.job import ContextTooLong, SummaryJob


def _preflight(text: str, cfg: Config) -> int:
    return tokens.preflight(native.estimate_tokens(text), cfg.measure.factor)


def needs_chunks(job: SummaryJob, usable: int, cfg: Config) -> bool:
    """ceil(estimate * 1.3) + output > usable, for the summary request itself, its output capped
    at the chunk output budget (2048) as the reference agent sizes it: the model's full output cap
    would send small heads down the chunked path."""
    if usable <= 0:
        return False
    request_text = template.TEMPLATE_RULES + template.prompt(job.transcript, job.previous)
    output = min(job.max_tokens, cfg.compact.chunk_output_tokens)
    return _preflight(request_text, cfg) + output > usable


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


def summarize(summarizer, transcript: serialize.Transcript, usable: int, cap: int,
              cfg: Config, deadline: Deadline) -> str:
    """The summary of the whole transcript, made chunk by chunk."""
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
