"""The earlier step a conversation continues, found by its bytes.

An agent resends its whole history every step. The conversion of a step's messages is kept with
their bytes (memo.CONVERTED), under the session and the bytes of its first message (several
sessions may share that key: each keeps its last step, STEPS_PER_KEY at most); the next step
of the session compares its own bytes with them (one memcmp, no hash of the history), and
converts, hashes and scans only what follows the longest earlier prefix it starts with. Equal
bytes parse to equal messages, so the kept conversion stands; different bytes are a miss, never
a wrong answer.

The transport's parse leaves those messages out (skeleton): it finds the earlier step in the
request's bytes before parsing them, and parses the request without the messages that step
converted, so a step of a megabyte history parses what it adds. The bytes left out are equal to
bytes that parsed before, as whole message entries, so the request parses; a request the
skeleton cannot stand for exactly (its session id not the one its key was read with) is parsed
whole. Otherwise the request was parsed whole first: its bytes are valid protobuf.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from typing import Optional

from ..conversation import NOTHING_SCANNED, Scanned
from ..memo import CONVERTED, RESUME_WITHIN, Memo
from ..prefix import read_varint, varint_bytes
from ..native import WIRE_LEN, wire_entries
from ..v1 import context_pb2 as pb

_MESSAGES = pb.Conversation.MESSAGES_FIELD_NUMBER
_SESSION_ID = pb.Conversation.SESSION_ID_FIELD_NUMBER
# the steps kept under one key, newest first: sessions without a session id that start with the
# same message (a fleet running one task) each keep their own last step
STEPS_PER_KEY = 8
# a request smaller than this is parsed whole: that is quicker than finding its skeleton (about
# 10 µs), and a parse costs in proportion to the bytes it reads
SKELETON_FROM_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Converted:
    """A step's messages as converted, with the bytes they came in (memo.CONVERTED)."""
    # the conversation's bytes from its first message to the end of its last: a view of the
    # request's own bytes (kept whole rather than copied)
    region: memoryview
    ends: tuple  # where each message ends in region
    messages: tuple  # conversation.Message of each
    keys: tuple  # the memo's MESSAGE key of each (touched while the step is continued)
    token: bytes  # names this conversation for what later stages keep (conversation.Lineage)
    size: int  # what it holds: the request's bytes, and its tuples
    # its messages are written back to back from the first: region holds nothing else (no entry
    # of another field between them), so a request may be parsed without them (skeleton)
    contiguous: bool = False
    scanned: Scanned = NOTHING_SCANNED  # what the steps' scans read of its messages


@dataclass(frozen=True, slots=True)
class Located:
    """Where a request's conversation lies in its bytes."""
    origin: int  # the start of its first message's entry
    end: int  # the end of the conversation
    key: tuple  # memo.CONVERTED key: the session and the bytes of the first message
    start: int = 0  # the start of the conversation's value
    length_at: int = -1  # where the conversation's length is written; -1: the bytes are the conversation
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    """The earlier step a conversation continues."""
    kept: int  # its first messages that are that step's
    converted: Converted
    whole: bool  # kept is all of that step's messages


# fields of a request read before the conversation is located: a request of a great many small
# fields takes the general way instead (the parse; the compiled scanner reads the conversation)
MAX_ENTRIES = 4096


def locate(wire: bytes, at: int, session_id: str | None = None) -> Optional[Located]:
    """Where the conversation of a request lies in wire (at: its field number; 0: wire is the
    conversation), or None when it is written in a way this does not follow (the conversation
    in several pieces, no message), which the general way handles. session_id: the parsed
    conversation's; None: the last one written before its first message (how encoders write
    it), which the caller checks against the parse."""
    try:
        start, end, length_at = 0, len(wire), -1
        if at:
            found = [(entry, value, after) for number, kind, entry, value, after
                     in wire_entries(wire, 0, len(wire), 0, MAX_ENTRIES) if number == at and kind == WIRE_LEN]
            if len(found) != 1:
                return None
            entry, start, end = found[0]
            length_at = read_varint(wire, entry)[1]
        written = ""
        for number, kind, origin, value, after in wire_entries(wire, start, end, _MESSAGES, MAX_ENTRIES):
            if number == _MESSAGES and kind == WIRE_LEN:
                first = hashlib.sha256(memoryview(wire)[origin:after]).digest()
                sid = written if session_id is None else session_id
                return Located(origin, end, (CONVERTED, sid, first), start, length_at, sid)
            if number == _SESSION_ID and kind == WIRE_LEN and session_id is None:
                written = bytes(wire[value:after]).decode()
    except (ValueError, IndexError):  # UnicodeDecodeError is a ValueError: the parse refuses it
        return None
    return None


@dataclass(frozen=True, slots=True)
class Resumed:
    """The earlier step whose messages a request was parsed without (skeleton)."""
    where: Located
    found: Found


def skeleton(memo: Memo, wire: bytes, at: int) -> Optional[tuple[bytes, Resumed]]:
    """(the bytes of the request wire without the messages of the earlier step its conversation
    (field at) continues, that step), or None when there is none, or its messages were not
    written alone back to back. The session id its key was read with is the caller's to check
    against the parse of those bytes: they hold every session id entry wire holds."""
    where = locate(wire, at)
    if where is None or where.length_at < 0:
        return None
    found = find(memo, wire, where)
    if found is None or not found.converted.contiguous:
        return None
    cut = found.converted.ends[found.kept - 1]  # the bytes of the messages left out
    view = memoryview(wire)
    rest = b"".join((view[:where.length_at], varint_bytes(where.end - where.start - cut),
                     view[where.start:where.origin], view[where.origin + cut:]))
    return rest, Resumed(where, found)


def back_to_back(spans: list, first: int) -> bool:
    """Whether the message entries whose values are wire[a:b] for (a, b) in spans are written one
    after the other from first, nothing between them: each a one-byte tag and its length in the
    fewest bytes, as encoders write them (any other way reads as a gap: a miss)."""
    at = first
    for a, b in spans:
        if a - 1 - len(varint_bytes(b - a)) != at:  # the entry's tag and length end where its value starts
            return False
        at = b
    return True


def find(memo: Memo, wire: bytes, where: Located) -> Optional[Found]:
    """The kept step this conversation continues: one all of whose messages' bytes start this
    one's, else the longest of their last RESUME_WITHIN prefixes that does."""
    kept = memo.get_many([where.key], counted=False)[0]  # what it serves is counted (touch)
    if kept is None:
        return None
    for step in kept:  # a session's own last step, as a rule
        if where.origin + step.ends[-1] <= where.end and wire.startswith(step.region, where.origin):
            return Found(len(step.ends), step, True)
    best = None
    for step in kept:
        n = len(step.ends)
        for k in range(n - 1, max(0, n - RESUME_WITHIN), -1):
            if best is not None and k <= best.kept:
                break
            end = step.ends[k - 1]
            if where.origin + end <= where.end and wire.startswith(step.region[:end], where.origin):
                best = Found(k, step, False)
                break
    return best


def keep(memo: Memo, wire: bytes, where: Located, ends: tuple, messages: list, keys: tuple,
         found: Optional[Found], contiguous: bool, scanned: Scanned) -> Converted:
    """Keeps this step's conversion for the next, in place of the step it continues (others
    under the same key stay, up to STEPS_PER_KEY): ends are where each message ends, from
    where.origin; contiguous: each message starts where the one before it ends; scanned: its
    messages' scans. Its token is the digest of its bytes, chained from the earlier step's when
    it continues all of that step (so only the new bytes are hashed): equal tokens, equal
    bytes."""
    region = memoryview(wire)[where.origin:where.origin + ends[-1]]
    if found is None:
        token = hashlib.sha256(region).digest()
    elif found.whole:
        token = hashlib.sha256(found.converted.token + region[found.converted.ends[-1]:]).digest()
    else:  # its first messages are the earlier step's first: their bytes are named by its token
        # and their length (8 bytes, the first 0: never a message's tag, as follows the token
        # when the earlier step is continued whole)
        kept = found.converted.ends[found.kept - 1]
        token = hashlib.sha256(found.converted.token + kept.to_bytes(8, "big") + region[kept:]).digest()
    # the messages' tuple and the scans' per-message one are as long as keys
    size = len(wire) + sys.getsizeof(ends) + 3 * sys.getsizeof(keys) + sys.getsizeof(scanned.cuts) + \
        sys.getsizeof(scanned.first_calls)
    value = Converted(region, ends, tuple(messages), keys, token, size, contiguous, scanned)
    replaced = found.converted if found is not None else None

    def merged(others) -> tuple:  # under the memo's lock: another session's step kept meanwhile stays
        steps = (value,) + tuple(step for step in others or () if step is not replaced)[:STEPS_PER_KEY - 1]
        return steps, sum(step.size for step in steps)

    memo.merge(where.key, merged)
    return value
