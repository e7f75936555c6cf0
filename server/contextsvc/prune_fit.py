"""A prune below its minimum that spares a compaction (docs/design.md §4).

PRUNE_MINIMUM is there so that breaking the cached prefix pays for itself. Once the request is
over its limit the alternative to a prune is a compaction, which breaks the prefix too and keeps
less of the history: a prune that brings the request under its limit pays for itself, whatever it
frees. The caller says how far over the limit the request is (tokens_needed: figures.projected -
figures.limit + 1 of the Assemble or Measure that said should_compact); the parts the minimum
stopped are marked on a copy and the request measured with and without them, with the step's
model, tools and system. Measured, not estimated: the decision figure drops by its own count of
the outputs (margins, the provider's scale), not by their chars/4.
"""
from __future__ import annotations

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
    """prune.prune, acting also when the minimum stopped it and marking its parts lowers the
    request's projected figure by at least tokens_needed without leaving the last answer's usage
    over the limit (the backward check). Needs the model: its window is the limit."""
    r = prune.prune(conv, reason, settings, cfg, model=model, memo=memo, deadline=deadline)
    if r.stopped_by != prune.MINIMUM or tokens_needed <= 0 or model is None or model.limits.context <= 0 \
            or tokens_needed > MAX_SCALE * r.declined_tokens + MAX_SCALE:
        return r
    system = system if system is not None else m.SystemPrompt()

    def measured(messages: list):
        return measure.measure(measure.MeasureInput(m.Conversation(messages, conv.session_id), model, list(tools),
                                                    system, settings), cfg, deadline=deadline, memo=memo)

    # stamped after every answer, as a client marking them now would: a pruned output counts as
    # removed since the last answer (the rebase), whatever the skew of this clock to the client's
    stamp = max([int(time.time() * 1000)] + [x.time_completed_ms + 1 for x in conv.messages])
    marked = edits.apply(conv.messages, [edits.MarkCompacted(list(r.declined), stamp)])
    before, after = measured(conv.messages), measured(marked)
    if before.projected - after.projected < tokens_needed or after.overflow:
        return r
    return prune.PruneResult(part_ids=list(r.declined), tokens_freed=r.declined_tokens, acted=True, reason=reason,
                             tokens_scanned=r.tokens_scanned, fits=True)
