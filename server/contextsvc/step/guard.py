"""The payload guard (docs/design.md §6 "Payload guard"): a body over REQUEST_PRUNE_BYTES runs
the payload-limit prune and strips historical media, then the step builds what is sent instead;
a body still over is sent anyway, and the response says so (the provider's real error is better
than a guess).

With the memo, the guard pays once per conversation: what its prune and media strip found is kept
under the conversation's digest and the prune's gates (GUARD), and each message copy its prune
marked under the copy's digest (GUARDED), so the same conversation over the guard again (Measure
then Assemble of one step, a retry, a guard that cannot shrink the body) neither prunes nor copies
again."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from .. import conversation as m, prune
from ..deadline import NO_DEADLINE, Deadline
from ..memo import GUARD, GUARDED, Memo, conversation_digest, pruned_digest
from . import media_strip
from .plan import Plan


@dataclass(slots=True)
class Guard:
    """What the payload guard did to a request (docs/design.md §6, "Payload guard")."""
    tripped: bool = False  # the body as first built exceeded REQUEST_PRUNE_BYTES
    pruned_part_ids: list = field(default_factory=list)  # the payload-limit prune's parts
    media_stripped: int = 0  # historical media turned into attachment notes
    conversation: m.Conversation | None = None  # what is sent instead, when anything changed


def payload_guard(conv: m.Conversation, over: bool, plan: Plan, memo: Memo | None = None,
                  deadline: Deadline = NO_DEADLINE) -> Guard:
    """The payload guard, one step of every RPC that sizes a body (Measure, Assemble): a body
    over REQUEST_PRUNE_BYTES (over) runs the payload-limit prune (parts marked compacted at
    plan.now_ms, default now) and strips historical media; Guard.conversation is then what to build
    instead. A body still over is sent anyway (the caller says so). memo: the prune's
    per-message validation and scans, as the Prune RPC keeps them, and the guard's own entries."""
    if not over:
        return Guard()
    pruned = _pruned(conv, plan, memo, deadline)
    shrunk = _apply(conv, pruned, plan.now_ms or time.time_ns() // 1_000_000, memo, deadline) if pruned else conv
    messages, stripped = media_strip.strip(shrunk.messages)
    if not (pruned or stripped):
        return Guard(tripped=True)
    return Guard(True, list(pruned), stripped, dataclasses.replace(shrunk, messages=messages))


def _pruned(conv: m.Conversation, plan: Plan, memo: Memo | None, deadline: Deadline) -> tuple:
    """The payload-limit prune's part ids for conv, from the memo when this conversation was
    pruned under the same gates before (prune reads nothing else: the step checked the request)."""
    run = lambda: tuple(prune.prune(conv, prune.PAYLOAD_LIMIT, plan.compaction, plan.cfg,  # noqa: E731
                                    model=plan.model, memo=memo, deadline=deadline).part_ids)
    whole = conversation_digest(conv.messages) if memo is not None else None
    if whole is None:
        return run()
    key = (GUARD, whole, prune.gates(plan.compaction, plan.cfg, plan.model),
           prune.enabled(prune.PAYLOAD_LIMIT, plan.compaction, plan.cfg))
    found = memo.get(key)
    if found is None:
        found = run()
        memo.put(key, found)
    return found


def _apply(conv: m.Conversation, part_ids, now_ms: int, memo: Memo | None, deadline: Deadline) -> m.Conversation:
    """prune.apply, each copy it makes given the digest memo.pruned_digest derives from its
    original's, so the memo still serves it from one step to the next (a message media stripping
    then changes is a new copy, with none). With the memo, a copy made before is taken from it:
    the copies differ only in when their parts were marked, and a step reads only whether they
    are (the baseline's rebase reads the message as it was before the guard)."""
    wanted = set(part_ids)
    keys = []
    for msg in conv.messages:
        ids = [p.id for p in msg.parts if p.id in wanted] if msg.digest else None
        keys.append((GUARDED, pruned_digest(msg.digest, ids)) if ids else None)
    found = memo.get_many(keys) if memo is not None else [None] * len(keys)
    for i, (msg, key) in enumerate(zip(conv.messages, keys)):
        if key is None and msg.digest:
            found[i] = msg  # none of its parts is marked: prune.apply shares it
    missing = [msg for msg, copy in zip(conv.messages, found) if copy is None]
    made = iter(prune.apply(dataclasses.replace(conv, messages=missing), part_ids, now_ms, deadline).messages
                if missing else ())
    out = []
    for msg, key, copy in zip(conv.messages, keys, found):
        if copy is None:
            copy = next(made)
            if copy is not msg and key is not None:
                copy.digest = key[1]
                if memo is not None:
                    memo.put(key, copy)
        out.append(copy)
    return dataclasses.replace(conv, messages=out)
