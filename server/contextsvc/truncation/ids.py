"""Output ids: how they are made and read. Every store uses these, so an id made by one replica
reads the same on another.

``tool_`` + 12 hex digits of the creation time in milliseconds since the epoch + 4 hex digits of
a per-process sequence + 10 hex digits of randomness, all lowercase, e.g.
``tool_018f3a2b4c5d0000a1b2c3d4e5``. Within one process ids strictly increase (the sequence
breaks ties inside a millisecond, and the time part never goes back even when the wall clock
does); ids of different replicas sort by time, and two of them collide only if they share the
millisecond, the sequence and 40 random bits. Sorting ids as strings sorts them by creation time,
and the age of an output is read from its id, never from file metadata (which copies, restores
and object stores do not preserve).

A client-supplied string is matched against a strict regex and parsed into integers before any
store looks at it (`parse_output_id`); a store that needs a name re-formats it from those
integers (`format_output_id`), so a client's string never becomes a path or a key as is.
"""
from __future__ import annotations

import re
import secrets

from .store import InvalidOutputId, StoreUnavailable

__all__ = [
    "ID_PREFIX",
    "ID_LENGTH",
    "ID_RE",
    "IdGenerator",
    "parse_output_id",
    "format_output_id",
    "output_id_created_ms",
]

ID_PREFIX = "tool_"
_TIME_HEX = 12
_SEQ_HEX = 4
_RAND_HEX = 10
ID_LENGTH = len(ID_PREFIX) + _TIME_HEX + _SEQ_HEX + _RAND_HEX
ID_RE = re.compile(r"tool_([0-9a-f]{12})([0-9a-f]{4})([0-9a-f]{10})", re.ASCII)
_SEQ_MAX = 16**_SEQ_HEX - 1
_TIME_MAX = 16**_TIME_HEX - 1


def parse_output_id(output_id: object) -> tuple[int, int, int]:
    """(created_ms, sequence, random) of a well-formed id; InvalidOutputId otherwise."""
    if not isinstance(output_id, str):
        raise InvalidOutputId(f"output id must be a string, got {type(output_id).__name__}")
    if len(output_id) != ID_LENGTH:
        raise InvalidOutputId(
            f"malformed output id (expected {ID_PREFIX}<{ID_LENGTH - len(ID_PREFIX)} hex digits>)"
        )
    m = ID_RE.fullmatch(output_id)
    if m is None:
        raise InvalidOutputId(
            f"malformed output id (expected {ID_PREFIX}<{ID_LENGTH - len(ID_PREFIX)} hex digits>)"
        )
    return int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)


def format_output_id(created_ms: int, seq: int, rand: int) -> str:
    return f"{ID_PREFIX}{created_ms:012x}{seq:04x}{rand:010x}"


def output_id_created_ms(output_id: str) -> int:
    """Creation time (ms since the epoch) encoded in a well-formed id."""
    return parse_output_id(output_id)[0]


class IdGenerator:
    """Strictly increasing ids within a process (thread-safe via the caller's lock)."""

    def __init__(self) -> None:
        self._last_ms = -1
        self._seq = 0

    def next(self, now_ms: int) -> str:
        if now_ms > self._last_ms:
            self._last_ms = now_ms
            self._seq = 0
        else:
            # Same millisecond, or the wall clock went back: keep the last time, bump the
            # sequence; on overflow borrow the next millisecond (ids never go backwards).
            self._seq += 1
            if self._seq > _SEQ_MAX:
                self._last_ms += 1
                self._seq = 0
        if self._last_ms > _TIME_MAX:
            raise StoreUnavailable("clock out of the range of output ids")
        return format_output_id(self._last_ms, self._seq, secrets.randbits(4 * _RAND_HEX))
