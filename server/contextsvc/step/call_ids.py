"""Tool call ids used again (docs/design.md §6 "What the body must pass"): the stage after inject
gives each tool part whose call id an earlier part of the conversation already used an id of its
own.

Some agents number their calls afresh at every turn (`call_0`, `call_1`, ...), and every provider
that writes ids refuses a request in which two calls share one (Anthropic: "tool_use ids must be
unique"; the OpenAI formats alike). The first part sent with an id keeps it. A later one is
written as the id of its call id, its message's id and its place in the message, joined by a
character no provider takes, so lowering.tool_ids writes it in the provider's alphabet with a hash
of the whole: its call and its result still agree (one part holds both), it differs from every
other id, and it depends on the messages sent before it alone, so a new step never changes how an
earlier call is written and the cached prefix stays.
"""
from __future__ import annotations

import dataclasses
import operator
import sys

from .. import conversation as m, projection
from ..deadline import NO_DEADLINE, Deadline
from ..memo import CALLS, Memo, renamed_digest

# Between the parts of a written-again id: outside every provider's id alphabet, so the id is
# always hashed (lowering.tool_ids), never taken as it is
_JOIN = "\x00"


def own_ids(messages: list, points: list, memo: Memo | None = None, deadline: Deadline = NO_DEADLINE) -> tuple:
    """(messages with a copy in place of each message sent whose tool parts reuse a call id an
    earlier part sent used, those parts carrying ids of their own; the indices of the copies),
    for a conversation some of whose call ids are used more than once (conversation.Scanned.repeats).
    points: projection.compaction_points. Only what is sent counts, in send order
    (projection.project): a kept tail is written alike whether or not the client still stores what
    was compacted before it, so Compact's tokens_after is the next step's figure. With the memo, a
    copy is made once (CALLS)."""
    sent = list(filter(_CALL_IDS, projection.project(messages, points, deadline)))
    taken = {call for msg in sent for call in msg.call_ids}  # no id written again may be one of these
    seen, copies = set(), {}
    for msg in sent:
        deadline.count("call ids")
        places = _used_again(msg.call_ids, seen)
        if places:
            copies[id(msg)] = _copy(msg, places, taken, memo, deadline)
        seen.update(msg.call_ids)
    if not copies:
        return messages, ()
    at = tuple(i for i, x in enumerate(messages) if id(x) in copies)
    out = list(messages)
    for i in at:
        out[i] = copies[id(messages[i])]
    return out, at


def holds_calls(messages: list, points: list) -> bool:
    """Whether what is sent of messages holds a tool call (projection.project)."""
    return any(map(_CALL_IDS, projection.project(messages, points)))


_CALL_IDS = operator.attrgetter("call_ids")


def _used_again(call_ids: tuple, seen: set) -> tuple:
    """The places, among a message's tool parts, of those whose id an earlier message used (seen)
    or an earlier part of this one."""
    places, own = [], set()
    for k, call in enumerate(call_ids):
        if call in seen or call in own:
            places.append(k)
        own.add(call)
    return tuple(places)


def _copy(msg: m.Message, places: tuple, taken: set, memo: Memo | None, deadline: Deadline) -> m.Message:
    """A copy of msg whose tool parts at places (among its tool parts) carry ids of their own,
    none of them in taken (the ids sent, and those written again before), which they join."""
    renamed, k, own = frozenset(places), 0, {}
    for j, part in enumerate(msg.parts):
        deadline.count("call ids")
        if isinstance(part.content, m.Tool):
            if k in renamed:
                own[j] = f"{part.content.call_id}{_JOIN}{msg.id}{_JOIN}{j}"
            k += 1
    # an id holding the joining character can be one of them: then one is lengthened until it
    # is no other (such a copy is the request's own, not kept)
    clash = not taken.isdisjoint(own.values()) or len(set(own.values())) < len(own)
    for j in own if clash else ():
        while own[j] in taken:
            own[j] += _JOIN
        taken.add(own[j])
    taken.update(own.values())
    key = (CALLS, msg.digest, places) if memo is not None and msg.digest and not clash else None
    if key is not None:
        kept = memo.get(key)
        if kept is not None:
            return kept
    parts, charged = list(msg.parts), 0
    for j, call_id in own.items():
        part = parts[j] = m.Part(parts[j].id, dataclasses.replace(parts[j].content, call_id=call_id))
        charged += sys.getsizeof(part) + sys.getsizeof(part.content) + sys.getsizeof(call_id)
    copy = dataclasses.replace(msg, parts=parts)
    if msg.digest:
        # lowers as no other message does (a clash's copy: its ids depend on others: none)
        copy.digest = renamed_digest(msg.digest, places) if not clash else b""
    if key is not None:
        memo.put_charged(key, copy, charged + sys.getsizeof(copy) + sys.getsizeof(parts))
    return copy
