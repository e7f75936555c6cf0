"""The payload guard (docs/design.md §6 "Payload guard"): a body over REQUEST_PRUNE_BYTES runs
the payload-limit prune and strips historical media, then the step builds what is sent instead;
a body still over is sent anyway, and the response says so (the provider's real error is better
than a guess).

With the memo, the guard pays once: what its prune found for a conversation and the message
copies it marked are kept under the digest of the conversation's messages and the prune's gates
(GUARD), each copy under the copy's digest (GUARDED). The same conversation over the guard again
(Measure then Assemble of one step, a retry, a guard that cannot shrink the body) neither prunes
nor copies again, and nor does one
grown by messages the prune passes over (prune.passed_over: a client that does not store the
guard's marks resends the same history grown by a step, over the guard every time): only the
new messages are read. The entry keeps the bytes its marks take off the body too (Guard.freed):
such a step sizes the body the guard replaces without building it (step.run)."""
from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field

from .. import conversation as m, prune
from ..deadline import NO_DEADLINE, Deadline
from ..memo import (GUARD, GUARDED, MESSAGE_DIGEST_BYTES, OVER_GUARD, Memo, joined_digests, message_prefix_digests,
                    message_prefix_keys, pruned_digest, resident_size)
from . import media_strip, pieces
from .baseline import KnownPairs, pairs_hash
from .plan import Plan


@dataclass(slots=True)
class Guard:
    """What the payload guard did to a request (docs/design.md §6, "Payload guard")."""
    tripped: bool = False  # the body as first built exceeded REQUEST_PRUNE_BYTES
    pruned_part_ids: list = field(default_factory=list)  # the payload-limit prune's parts
    tokens_pruned: int = 0  # the prune's estimate of their outputs (prune.PruneResult.tokens_freed)
    media_stripped: int = 0  # historical media turned into attachment notes
    conversation: m.Conversation | None = None  # what is sent instead, when anything changed
    # the bytes the prune's marks take off the body (those of the marked messages lowered alone,
    # as marked and as they were), when the memo's entry for an earlier step gave the prune and
    # each message's lowering alone is its share of the body (lowering_alone); None otherwise,
    # and when media were stripped too
    freed: int | None = None
    # memo.message_prefix_digests(conversation.messages), when the memo's entry kept what they
    # are made of; None otherwise
    digests: list | None = None
    # the changed messages (conversation's, against the request's), as the baseline's rebase
    # keys them (baseline.known_key), when the memo's entry kept what they are made of
    pairs: KnownPairs | None = None


def payload_guard(conv: m.Conversation, over: bool, plan: Plan, memo: Memo | None = None,
                  deadline: Deadline = NO_DEADLINE, keys: list | None = None, points: list | None = None) -> Guard:
    """The payload guard, one step of every RPC that sizes a body (Measure, Assemble): a body
    over REQUEST_PRUNE_BYTES (over) runs the payload-limit prune (parts marked compacted at
    plan.now_ms, default now) and strips historical media; Guard.conversation is then what to build
    instead. A body still over is sent anyway (the caller says so). memo: the prune's
    per-message validation and scans, as the Prune RPC keeps them, and the guard's own entries;
    keys: guard_keys(conv), and points: projection.compaction_points(conv.messages), when the
    step has them already (the prune's marks move no compaction point)."""
    if not over:
        return Guard()
    hint = _over_guard_key(conv) if memo is not None else None
    if hint is not None:
        memo.put(hint, True)
    marked = _pruned(conv, plan, memo, deadline, keys, lowering_alone(plan, conv.messages, points))
    messages, stripped = media_strip.strip(marked.messages, points)
    if not (marked.part_ids or stripped):
        return Guard(tripped=True)
    sent = dataclasses.replace(conv, messages=messages)
    if stripped:  # copies of the guard's own, which the memo kept nothing of
        return Guard(True, list(marked.part_ids), marked.tokens, stripped, sent)
    return Guard(True, list(marked.part_ids), marked.tokens, stripped, sent, marked.freed,
                 None if marked.joined is None else message_prefix_digests(messages, marked.joined), marked.pairs)


@dataclass(frozen=True, slots=True)
class _Found:
    """What the guard's prune found for a conversation's first messages (the GUARD entry)."""
    part_ids: tuple
    tokens: int  # the prune's estimate of their outputs
    wanted: frozenset  # the same ids, looked up in (each new message's parts)
    ids_size: int  # what part_ids and wanted hold, worked out once for the entries that share them
    changed: tuple  # the positions of the messages the prune's marks change
    copies: tuple  # the copy the marks make of each of those
    kept: tuple  # the GUARDED keys of those copies: kept in the memo while this entry serves them
    # memo.joined_digests of the messages with the copies in place: what the prefix keys of the
    # guard's conversation are made of (Guard.digests)
    joined: bytes = b""
    # lowering (lowering_alone) -> the bytes the copies take off the body, worked out at the first
    # step that reads them (_freed): for one lowering, the room charge() holds from the start (a
    # stored entry is not charged again; a session that changes models works the others out)
    freed: dict = field(default_factory=dict)
    # baseline.pairs_hash fed the (copy, original) digests of changed, in order (None when one
    # has none): the rebase's key of the changes (Guard.pairs)
    pairs: object = None

    def charge(self) -> int:
        """What it holds beyond the memo's other entries (the copies are GUARDED entries)."""
        return (sys.getsizeof(self.changed) + sys.getsizeof(self.copies) + sys.getsizeof(self.kept) + self.ids_size
                + sys.getsizeof(self.joined) + _FREED_ROOM
                + sys.getsizeof(self.pairs))


# what a _Found's freed dict takes with its one lowering (the key's tuple is the plan's; 64 for the int)
_FREED_ROOM = sys.getsizeof({None: 0}) + 64


@dataclass(slots=True)
class _Marked:
    """What the guard's prune did to a conversation's messages."""
    part_ids: tuple  # the payload-limit prune's part ids
    tokens: int  # the prune's estimate of their outputs
    messages: list  # the messages with those parts marked
    # when the memo gave the prune (served), what it kept beside it, else None: the bytes the marks
    # take off the body (for lowering_alone's lowering, when it has one), memo.joined_digests of
    # the messages, and what the baseline's rebase keys the changed messages by
    freed: int | None = None
    joined: bytes | None = None
    pairs: KnownPairs | None = None


def _pruned(conv: m.Conversation, plan: Plan, memo: Memo | None, deadline: Deadline, keys: list | None,
            lowering: tuple | None = None) -> _Marked:
    """The payload-limit prune's marks on conv's messages, from the memo when these messages, or
    all but newest ones the prune passes over, were pruned under the same gates before (prune
    reads nothing else: the step checked the request)."""
    now_ms = plan.now_ms or time.time_ns() // 1_000_000
    msgs = conv.messages
    if memo is None:
        ids, tokens = _prune(conv, plan, memo, deadline)
        return _Marked(ids, tokens, _apply(msgs, frozenset(ids), now_ms, memo, deadline)[0] if ids else msgs)
    g = prune.gates(plan.compaction, plan.cfg, plan.model)
    candidates = guard_keys(conv, plan, gates=g) if keys is None else keys
    k, found = memo.longest(candidates)
    # the GUARD key of the session's earlier step's entry: this step's takes its place
    earlier = next(key for n, key in candidates if n == k) if found is not None else None
    served = found is not None and (k == len(msgs) or prune.passed_over(msgs[k:], g, memo))
    if served:
        memo.touch([earlier])
        memo.touch_held(found.kept, k, len(msgs))  # the copies it serves
    else:  # pruned afresh
        ids, tokens = _prune(conv, plan, memo, deadline)
        wanted = frozenset(ids)
        k, found = 0, _Found(ids, tokens, wanted, resident_size(ids) + sys.getsizeof(wanted), (), (), (),
                             pairs=pairs_hash())
    ids = found.part_ids
    newer, keys = _apply(msgs[k:], found.wanted, now_ms, memo, deadline) if ids else \
        (msgs[k:], [None] * (len(msgs) - k))
    shrunk = msgs[:k]
    list(map(shrunk.__setitem__, found.changed, found.copies))  # in C: hundreds of copies a step
    shrunk += newer
    changed = [j for j in range(k, len(msgs)) if newer[j - k] is not msgs[j]]  # the marks' new copies
    # the kept digests go on only as far as every message has one
    joined = found.joined + joined_digests(newer) if len(found.joined) == MESSAGE_DIGEST_BYTES * k else found.joined
    lowering = lowering if served else None
    copies = tuple(newer[j - k] for j in changed)
    fed, freed = _fed(found.pairs, msgs, changed, copies), None  # the rebase's key and freed bytes of all the copies
    if lowering is not None:
        kept_freed = found.freed.get(lowering)
        if kept_freed is None:
            kept_freed = _freed(msgs, found.changed, found.copies, plan, memo, deadline)
            if not found.freed:  # the one lowering its charge made room for
                found.freed[lowering] = kept_freed
        freed = kept_freed + _freed(msgs, changed, copies, plan, memo, deadline)
    if k < len(msgs) and candidates:
        n, key = candidates[0]  # the longest kept: what the session's next step resumes from
        if n == len(msgs) or prune.passed_over(msgs[n:], g, memo):
            added = [j for j in changed if j < n]
            entry_fed, entry_freed = fed, freed
            if len(added) < len(changed):  # copies past the entry's messages: its own figures
                entry_fed = _fed(found.pairs, msgs, added, copies[:len(added)])
                if lowering is not None:
                    entry_freed = kept_freed + _freed(msgs, added, copies[:len(added)], plan, memo, deadline)
            entry = _Found(ids, found.tokens, found.wanted, found.ids_size, found.changed + tuple(added),
                           found.copies + copies[:len(added)],
                           found.kept + tuple(x for x in keys[:n - k] if x is not None),
                           joined[:MESSAGE_DIGEST_BYTES * n], pairs=entry_fed)
            if entry_freed is not None:
                entry.freed[lowering] = entry_freed
            memo.supersede(earlier, key, entry, entry.charge())  # each serves the session's next step
    if not served:
        return _Marked(ids, found.tokens, shrunk)
    last = changed[-1] if changed else found.changed[-1] if found.changed else -1
    return _Marked(ids, found.tokens, shrunk, freed, joined,
                   KnownPairs(fed.digest(), last) if fed is not None and last >= 0 else None)


def _fed(pairs, msgs: list, changed: list, copies) -> object | None:
    """A copy of pairs (a baseline.pairs_hash) fed each copy's digest and its original's, in
    order: the rebase's key of the changes so far; None when a message has no digest (or pairs
    is None)."""
    if pairs is None:
        return None
    digests = [d for j, copy in zip(changed, copies) for d in (copy.digest, msgs[j].digest)]
    if not all(digests):
        return None
    pairs = pairs.copy()
    pairs.update(b"".join(digests))
    return pairs


def lowering_alone(plan: Plan, msgs: list, points: list | None) -> tuple | None:
    """What the bytes a message lowers to depend on (the LOWERED key's settings), when every
    message is sent (no compaction point: points, projection.compaction_points(msgs)) and each
    one's lowering alone is its share of the body (pieces.memoizable); None otherwise."""
    if points is None or points or not pieces.memoizable(msgs, plan.model):
        return None
    return plan.lowering_settings


def _freed(msgs: list, changed, copies, plan: Plan, memo: Memo, deadline: Deadline = NO_DEADLINE) -> int:
    """The bytes the copies take off the body in place of msgs at the positions changed: the
    body is its messages' elements, each lowered alone (step.pieces, whose memo entries the
    build reads next), joined where the format joins them, so a message's share of its bytes is
    its elements' JSON. deadline: counted per copy (the first step an entry serves reads all of
    them: hundreds)."""
    freed = 0
    for j, copy in zip(changed, copies):
        deadline.count("payload guard")
        freed += _lowered_bytes(msgs[j], plan, memo) - _lowered_bytes(copy, plan, memo)
    return freed


def _lowered_bytes(msg: m.Message, plan: Plan, memo: Memo) -> int:
    return sum(lengths[0] for _, lengths, _ in pieces.message_piece(msg, plan, memo).texts)


def over_before(conv: m.Conversation, memo: Memo) -> bool:
    """Whether a step of conv (its session, as far as its first message tells) was over the
    guard, as far as the memo keeps it (OVER_GUARD): what tells a step to look for the guard's
    entry (pruned_before) when nothing else asks for its keys."""
    key = _over_guard_key(conv)
    return key is not None and memo.get_many([key], counted=False)[0] is not None


def _over_guard_key(conv: m.Conversation) -> tuple | None:
    """conv's OVER_GUARD key; None when its first message has no digest (not off the wire)."""
    first = conv.messages[0].digest if conv.messages else b""
    return (OVER_GUARD, conv.session_id, first) if first else None


def pruned_before(keys: list, memo: Memo) -> bool:
    """Whether the guard's prune marked parts of a conversation, or of its first messages, at an
    earlier step (keys: guard_keys of it; their GUARD entry is kept): the body is then most
    likely over the guard again."""
    _, found = memo.longest(keys)
    return found is not None and bool(found.part_ids)


def guard_keys(conv: m.Conversation, plan: Plan, digests: list | None = None,
               gates: prune.Gates | None = None) -> list:
    """The GUARD keys of conv's first messages, longest first (memo.message_prefix_keys; digests:
    memo.message_prefix_digests(conv.messages), and gates: prune.gates of the plan, when the
    caller has them)."""
    g = prune.gates(plan.compaction, plan.cfg, plan.model) if gates is None else gates
    return message_prefix_keys(conv.messages, GUARD, (g.key(), prune.enabled(prune.PAYLOAD_LIMIT, plan.compaction, plan.cfg)),
                               digests)


def _prune(conv: m.Conversation, plan: Plan, memo: Memo | None, deadline: Deadline) -> tuple:
    """(the payload-limit prune's part ids for conv, its estimate of their outputs)."""
    r = prune.prune(conv, prune.PAYLOAD_LIMIT, plan.compaction, plan.cfg, model=plan.model, memo=memo,
                    deadline=deadline)
    return tuple(r.part_ids), r.tokens_freed if r.part_ids else 0


def _apply(messages: list, wanted: frozenset, now_ms: int, memo: Memo | None, deadline: Deadline) -> tuple:
    """(prune.apply's messages with the parts wanted marked, the GUARDED key of each copy, None
    where none), each copy it makes given the digest memo.pruned_digest derives from its
    original's, so the memo still serves it from one step to the next (a message media
    stripping then changes is a new copy, with none). With the memo, a copy made before is
    taken from it: the copies differ only in when their parts were marked, and a step reads
    only whether they are (the baseline's rebase reads the message as it was before the
    guard)."""
    marked = [[p.id for p in msg.parts if p.id in wanted] for msg in messages]
    keys = [(GUARDED, pruned_digest(msg.digest, ids)) if ids and msg.digest else None
            for msg, ids in zip(messages, marked)]
    found = memo.get_many(keys) if memo is not None else [None] * len(keys)
    for i, (msg, ids) in enumerate(zip(messages, marked)):
        if not ids:
            found[i] = msg  # none of its parts is marked: prune.apply shares it
    missing = [msg for msg, copy in zip(messages, found) if copy is None]
    made = iter(prune.apply(m.Conversation(messages=missing), wanted, now_ms, deadline).messages
                if missing else ())
    out = []
    for msg, key, copy in zip(messages, keys, found):
        if copy is None:
            copy = next(made)
            if copy is not msg and key is not None:
                copy.digest = key[1]
                if memo is not None:
                    memo.put(key, copy)
        out.append(copy)
    return out, keys
