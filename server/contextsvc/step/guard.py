"""The payload guard (docs/design.md §6 "Payload guard"): a body over REQUEST_PRUNE_BYTES runs
the payload-limit prune and strips historical media, then the step builds what is sent instead;
a body still over is sent anyway, and the response says so (the provider's real error is better
than a guess)."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from .. import conversation as m, prune
from ..deadline import NO_DEADLINE, Deadline
from ..memo import Memo, pruned_digest
from . import media_strip
from .plan import Plan


@dataclass(slots=True)
class Guard:
    """What the payload guard did to a request (docs/design.md §6, "Payload guard")."""
    tripped: bool = False  # the body as first built exceeded REQUEST_PRUNE_BYTES
    pruned_part_ids: list = field(default_factory=list)  # the payload-limit prune's parts
    media_stripped: int = 0  # historical media turned into attachment notes
    conversation: m.Conversation | None = None  # what is sent instead, when anything changed


def payload_guard(conv: m.Conversation, body_bytes: int, plan: Plan, memo: Memo | None = None,
                  deadline: Deadline = NO_DEADLINE) -> Guard:
    """The payload guard, one step of every RPC that sizes a body (Measure, Assemble): a body
    over REQUEST_PRUNE_BYTES runs the payload-limit prune (parts marked compacted at
    plan.now_ms, default now) and strips historical media; Guard.conversation is then what to build
    instead. A body still over is sent anyway (the caller says so). memo: the
    prune's per-message validation and scans, as the Prune RPC keeps them."""
    if body_bytes <= plan.cfg.assemble.request_prune_bytes:
        return Guard()
    pruned = prune.prune(conv, prune.PAYLOAD_LIMIT, plan.compaction, plan.cfg, model=plan.model, memo=memo,
                         deadline=deadline).part_ids
    shrunk = prune.apply(conv, pruned, plan.now_ms or time.time_ns() // 1_000_000, deadline) if pruned else conv
    messages, stripped = media_strip.strip(shrunk.messages)
    if not (pruned or stripped):
        return Guard(tripped=True)
    if pruned:
        _keep_digests(conv.messages, shrunk.messages, pruned)
    return Guard(True, pruned, stripped, dataclasses.replace(shrunk, messages=messages))


def _keep_digests(before: list, after: list, part_ids) -> None:
    """Gives each message of after (prune.apply's copy of before) that prune copied the digest
    memo.pruned_digest derives from its original's, so the memo still serves
    it from one step to the next. A message media stripping then changes is a new copy, with
    none."""
    wanted = set(part_ids)
    for old, new in zip(before, after):
        if new is not old and old.digest:
            new.digest = pruned_digest(old.digest, [p.id for p in new.parts if p.id in wanted])


