"""A prune past its gates that spares a compaction (docs/design.md §4).

PRUNE_MINIMUM is there so that breaking the cached prefix pays for itself, PRUNE_PROTECT so that
the freshest outputs stay readable. Once the request is over its limit the alternative to a prune
is a compaction, which breaks the prefix too, and keeps less of the history: everything before its
kept tail becomes a summary. A prune that brings the request under its limit pays for itself,
whatever it frees, and marks less than a compaction drops. The caller says how far over the limit
the request is (tokens_needed: figures.projected - figures.limit + 1 of the Assemble or Measure
that said should_compact); the oldest outputs past the newest protected results (never those,
never a protected tool, never across a compaction) are marked on a copy, as few as do it, and the
request measured with and without them, with the step's model, tools and system. Measured, not
estimated: the decision figure drops by its own count of the outputs (margins, the provider's
scale), not by their chars/4.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from . import conversation as m, measure, prune
from .compact import edits
from .config import Config
from .deadline import NO_DEADLINE, Deadline


# the decision figure of outputs is at most this many times their chars/4 estimate (CJK text, at a
# token a character, is 4x; margins and the family prior on top): a prune asked to free more is
# not measured
MAX_SCALE = 8


def prune_to_fit(conv: m.Conversation, reason: str, settings: m.CompactionSettings, cfg: Config,
                 model: Optional[m.Model] = None, tools: list = (), system: Optional[m.SystemPrompt] = None,
                 tokens_needed: int = 0, memo=None, deadline: Deadline = NO_DEADLINE) -> prune.PruneResult:
    """prune.prune, acting also when its gates stopped it, or further when what they marked leaves
    the request over its limit: on the fewest oldest outputs past the newest protected results
    whose marks lower the request's projected figure by at least tokens_needed (and under the
    limit as the next step reads it) without leaving the last answer's usage over the limit (the
    backward check).
    Needs the model: its window is the limit. At most FIT_TRIES measures of a marked copy."""
    r = prune.prune(conv, reason, settings, cfg, model=model, memo=memo, deadline=deadline)
    # what the gates marked comes first (the oldest); past them, the spare outputs they left
    marked = set(r.part_ids)
    spare = tuple((pid, cost) for pid, cost in r.spare if pid not in marked)
    spare_tokens = sum(cost for _, cost in spare)
    if not spare or tokens_needed <= 0 or model is None or model.limits.context <= 0 \
            or tokens_needed > MAX_SCALE * (spare_tokens + r.tokens_freed) + MAX_SCALE:
        return r
    system = system if system is not None else m.SystemPrompt()

    def measured(messages: list):
        return measure.measure(measure.MeasureInput(m.Conversation(messages, conv.session_id), model, list(tools),
                                                    system, settings), cfg, deadline=deadline, memo=memo)

    # stamped after every answer, as a client marking them now would: a pruned output counts as
    # removed since the last answer (the rebase), whatever the skew of this clock to the client's
    stamp = max([int(time.time() * 1000)] + [x.time_completed_ms + 1 for x in conv.messages])
    before = measured(conv.messages)
    # as the step after the prune reads it: the marks change the prefix the last answer counted,
    # so its count no longer decides alone (step.decision._count_stands) and the whole request's
    # figure may stand, above the projection tokens_needed was read from
    needed = max(tokens_needed, before.projected - before.limit + 1)

    def fits(ids: list) -> bool:
        after = measured(edits.apply(conv.messages, [edits.MarkCompacted(ids, stamp)]))
        return before.projected - after.projected >= needed and not after.overflow

    target = needed  # in chars/4 estimates, as the spare outputs' costs are
    if r.acted:  # the gates' marks first: when they make it fit, nothing more
        if fits(r.part_ids):
            return dataclasses.replace(r, fits=True)
        target = max(1, needed - r.tokens_freed)  # what the spare outputs are to free beside them
    for k in _prefixes(spare, target):
        ids = r.part_ids + [pid for pid, _ in spare[:k]]
        if fits(ids):
            return prune.PruneResult(part_ids=ids, acted=True, reason=reason,
                                     tokens_freed=r.tokens_freed + sum(c for _, c in spare[:k]),
                                     tokens_scanned=r.tokens_scanned, fits=True)
    return r


FIT_TRIES = 3  # measures of a marked copy a prune that fits may take


def _prefixes(spare: tuple, needed: int) -> list:
    """How many of the oldest spare outputs to try marking: the fewest whose estimate reaches
    needed, then twice that, then all (the decision figure of an output is mostly at or above its
    chars/4 estimate: code and logs read higher, margins and the provider's scale on top)."""
    out, total, target = [], 0, needed
    for k, (_, cost) in enumerate(spare, 1):
        total += cost
        if total >= target and len(out) < FIT_TRIES - 1:
            out.append(k)
            target = 2 * total
    if not out or out[-1] != len(spare):
        out.append(len(spare))
    return out[:FIT_TRIES]
