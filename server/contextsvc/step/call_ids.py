"""Tool call ids used again (docs/design.md §6 "What the body must pass"): the stage after inject
gives each tool part whose call id an earlier part of the conversation already used an id of its
own.

Some agents number their calls afresh at every turn (`call_0`, `call_1`, ...), and every provider
that writes ids refuses a request in which two calls share one (Anthropic: "tool_use ids must be
unique"; the OpenAI formats alike). The first part with an id keeps it. A later one is written as
the id of its call id, its message's id and its place in the message, joined by a character no
provider takes, so lowering.tool_ids writes it in the provider's alphabet with a hash of the
whole: its call and its result still agree (one part holds both), it differs from every other
id, and it depends on the messages before it alone, so a new step never changes how an earlier
call is written and the cached prefix stays.
"""
from __future__ import annotations

import dataclasses
import sys

from .. import conversation as m
from ..memo import CALLS, Memo, renamed_digest

# Between the parts of a written-again id: outside every provider's id alphabet, so the id is
# always hashed (lowering.tool_ids), never taken as it is
_JOIN = "\x00"


def own_ids(messages: list, first_calls: dict, repeats: tuple, memo: Memo | None = None) -> list:
    """messages, each of those at repeats replaced by a copy whose tool parts with a call id used
    before carry ids of their own (first_calls and repeats: conversation.Scanned's). With the
    memo, a copy is made once (CALLS)."""
    out = list(messages)
    for i in repeats:
        msg = messages[i]
        out[i] = _copy(msg, _used_again(msg.call_ids, first_calls, i), memo)
    return out


def _used_again(call_ids: tuple, first_calls: dict, i: int) -> tuple:
    """The places, among the tool parts of message i, of those whose id an earlier message used
    (first_calls), or an earlier part of this one."""
    places, own = [], set()
    for k, call in enumerate(call_ids):
        if first_calls[call] < i or call in own:
            places.append(k)
        own.add(call)
    return tuple(places)


def _copy(msg: m.Message, places: tuple, memo: Memo | None) -> m.Message:
    key = (CALLS, msg.digest, places) if memo is not None and msg.digest else None
    if key is not None:
        kept = memo.get(key)
        if kept is not None:
            return kept
    parts, k, charged = [], 0, 0
    for j, part in enumerate(msg.parts):
        c = part.content
        if isinstance(c, m.Tool):
            if k in places:
                own = f"{c.call_id}{_JOIN}{msg.id}{_JOIN}{j}"
                part = m.Part(part.id, dataclasses.replace(c, call_id=own))
                charged += sys.getsizeof(part) + sys.getsizeof(part.content) + sys.getsizeof(own)
            k += 1
        parts.append(part)
    copy = dataclasses.replace(msg, parts=parts)
    if msg.digest:
        copy.digest = renamed_digest(msg.digest, places)  # lowers as no other message does
    if key is not None:
        memo.put_charged(key, copy, charged + sys.getsizeof(copy) + sys.getsizeof(parts))
    return copy
