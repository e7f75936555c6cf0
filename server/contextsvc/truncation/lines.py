"""Reading a range of lines of a stored output, and the check that every line can be read back.

Works on any `Store` through `Store.get_bytes`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..deadline import NO_DEADLINE, Deadline
from ..errors import Exhausted
from .store import Store, StoreError, StoreUnavailable

__all__ = ["ReadResult", "read_lines", "first_line_over", "LineTooLong"]


class LineTooLong(StoreError, Exhausted):
    """A line of an output is longer than one read may return (RESOURCE_EXHAUSTED)."""

    def __init__(self, line: int, size: int, max_bytes: int, what: str = "stored output"):
        super().__init__(f"line {line} of the {what} is {size} bytes, more than one ReadTruncated "
                         f"response can carry ({max_bytes} bytes: server.max_response_bytes less "
                         "the response's other fields)")
        self.line = line
        self.size = size


@dataclass(frozen=True)
class ReadResult:
    """A range of lines of a stored output."""

    text: str  # the lines, joined by "\n"
    total_lines: int
    offset: int
    lines: int  # lines returned
    eof: bool  # no lines after these


def read_lines(
    store: Store, output_id: str, offset: int = 0, limit: int = 0, *, default_limit: int = 2000,
    max_bytes: int = 0, deadline: Deadline = NO_DEADLINE, tenant: str = "",
) -> ReadResult:
    """Lines ``offset`` .. ``offset + limit - 1`` (0-based) of a stored output.

    Lines are split on "\\n" and a trailing newline does not make an extra empty line (the
    line model of `truncate_output`). ``limit`` 0 means ``default_limit``; any larger limit,
    up to 2^63 - 1, means "to the end". ``max_bytes`` (0 = none) caps the UTF-8 size of the
    returned text, so a read always fits a response: whole lines are returned up to the cap and
    ``lines`` says how many (the caller goes on from ``offset + lines``). A line longer than
    the cap cannot be returned: `LineTooLong` (`truncate_output` refuses to store such text).
    Negative offset or limit raise ValueError; an offset at or past the end gives empty text
    with eof True. Errors of ``store.get`` (InvalidOutputId, OutputNotFound, StoreUnavailable,
    DeadlineExceeded when ``deadline`` came first) propagate.

    The work is done on the UTF-8 bytes with ``count``/``find`` (C loops) and never splits
    the whole text into line objects, so a read of 64 MiB of short lines stays near 64 MiB.
    """
    for name, value in (("offset", offset), ("limit", limit), ("default_limit", default_limit),
                        ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if limit == 0:
        limit = default_limit
    if limit == 0:
        raise ValueError("default_limit must be > 0")
    data = store.get_bytes(output_id, deadline, tenant)
    body_end = len(data) - 1 if data.endswith(b"\n") else len(data)
    total = data.count(b"\n", 0, body_end) + 1 if data else 0
    if offset >= total:
        return ReadResult("", total, offset, 0, True)
    limit = min(limit, total - offset)  # "everything" is just the rest
    start = _after_newlines(data, offset, 0, body_end)
    end = body_end if offset + limit >= total else _after_newlines(data, limit, start, body_end) - 1
    if max_bytes and end - start > max_bytes:
        cut = data.rfind(b"\n", start, start + max_bytes + 1)
        if cut < 0:
            raise LineTooLong(offset, _line_size(data, start, body_end), max_bytes)
        end = cut
    lines = data.count(b"\n", start, end) + 1
    try:
        text = data[start:end].decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoreUnavailable(f"tool output {output_id} is corrupt (not UTF-8)") from e
    return ReadResult(text, total, offset, lines, offset + lines >= total)


def _line_size(data: bytes, pos: int, body_end: int) -> int:
    """UTF-8 size of the line starting at pos (up to its newline, or to body_end)."""
    stop = data.find(b"\n", pos, body_end)
    return (body_end if stop < 0 else stop) - pos


# _after_newlines counts newlines a block of _BLOCK bytes at a time, then halves the block that
# holds the n-th one down to _NARROW bytes before finding it newline by newline
_BLOCK = 1 << 20
_NARROW = 4096


def _after_newlines(data: bytes, n: int, lo: int, hi: int) -> int:
    """The position just after the n-th newline of data[lo:hi] (lo itself for n = 0); the
    caller knows there are at least n."""
    pos = lo
    stop = hi
    while n and pos < hi:
        stop = min(pos + _BLOCK, hi)
        c = data.count(b"\n", pos, stop)
        if c >= n:
            break
        n -= c
        pos = stop
    while n and stop - pos > _NARROW:
        mid = (pos + stop) // 2
        c = data.count(b"\n", pos, mid)
        if c >= n:
            stop = mid
        else:
            n -= c
            pos = mid
    for _ in range(n):
        pos = data.find(b"\n", pos, stop) + 1
    return pos


def first_line_over(data: bytes, max_bytes: int) -> tuple[int, int] | None:
    """(0-based line number, UTF-8 size) of the first line longer than max_bytes, or None.
    Each step jumps past the last newline within max_bytes + 1 bytes: about len / max_bytes
    steps."""
    body_end = len(data) - 1 if data.endswith(b"\n") else len(data)
    pos = 0
    while body_end - pos > max_bytes:
        nl = data.rfind(b"\n", pos, pos + max_bytes + 1)
        if nl < 0:
            return data.count(b"\n", 0, pos), _line_size(data, pos, body_end)
        pos = nl + 1
    return None
