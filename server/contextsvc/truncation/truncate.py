"""The tool-output truncation algorithm (no RPC, no protobuf: plain Python in and out).

Line model
    The text is split on ``"\\n"``; a trailing newline ends the last line and does not start
    an extra empty one (``"a\\nb\\n"`` is two lines, ``""`` is zero). Each line costs its
    UTF-8 bytes plus 1 for its newline. This is the same model `read_lines` uses, so line
    numbers in markers and offsets of ranged reads agree.

Limits
    A text of at most ``max_lines`` lines and at most ``max_bytes`` UTF-8 bytes comes back
    unchanged and nothing is stored. Otherwise whole lines are kept from the head (or the
    tail) and keeping stops before the first line that would exceed either limit.

Over-long single line
    When not even one whole line fits in ``max_bytes`` (the first line for head, the last
    for tail), a prefix (suffix for tail) of that line is kept instead, charged like a line
    (its bytes + 1 <= max_bytes) and cut on a UTF-8 character boundary, so no multi-byte
    character is ever split. Keeping zero lines would leave an empty preview, which tells
    the model nothing about a 60 KB minified file or JSON blob; a character-safe slice does.

Counts
    ``removed_lines`` is the number of lines not shown in full (a partially kept line counts
    as removed); ``removed_bytes`` is the UTF-8 size of the text minus that of the preview.
    The marker shows ``...N lines truncated...`` with N = removed_lines when the line limit
    cut, or ``...N bytes truncated...`` with N = removed_bytes when the byte limit cut.

The work is done on the UTF-8 bytes with ``bytes.count``/``find``/``rfind`` (C loops), touching
at most ``max_bytes`` bytes of the text plus one ``count`` over all of it, so a 20 MB output
costs about as much as encoding and storing it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..deadline import NO_DEADLINE, Deadline
from .lines import LineTooLong, first_line_over
from .settings import OUTPUT_ID
from .store import Store

__all__ = ["TruncationResult", "truncate_output", "build_hint", "HEAD", "TAIL"]

log = logging.getLogger(__name__)

HEAD = "head"
TAIL = "tail"


@dataclass(frozen=True)
class TruncationResult:
    """What goes into the context, and what was done to get it."""

    content: str  # the text itself, or preview + marker + hint
    truncated: bool
    output_id: str  # id of the stored full text; "" when not truncated
    removed_lines: int  # lines not shown in full; 0 when not truncated
    removed_bytes: int  # UTF-8 bytes not shown; 0 when not truncated
    cut_by: str  # "lines" or "bytes" when truncated, "" otherwise


def build_hint(output_id: str, template: str) -> str:
    """The guidance appended to a truncated preview: template with OUTPUT_ID replaced by the id
    (replaced, not formatted: a hint may hold braces of its own)."""
    return template.replace(OUTPUT_ID, output_id)


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _utf8_prefix_end(data: bytes, start: int, end: int) -> int:
    """Largest cut <= end such that data[start:cut] does not split a UTF-8 character."""
    cut = end
    # A continuation byte (0b10xxxxxx) at `cut` means data[cut] belongs to a character that
    # started before it; step back to that character's lead byte (at most 3 steps).
    while cut > start and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut


def _utf8_suffix_start(data: bytes, begin: int, stop: int) -> int:
    """Smallest cut >= begin such that data[cut:stop] does not start mid-character."""
    cut = begin
    while cut < stop and (data[cut] & 0xC0) == 0x80:
        cut += 1
    return cut


def truncate_output(
    text: str,
    *,
    max_lines: int,
    max_bytes: int,
    direction: str = HEAD,
    hint: str,
    store: Store,
    max_read_bytes: int = 0,
    deadline: Deadline = NO_DEADLINE,
    tenant: str = "",
) -> TruncationResult:
    """Truncate ``text`` to at most ``max_lines`` lines and ``max_bytes`` bytes.

    Under both limits the text is returned unchanged and nothing is stored. Over either
    limit the full text is stored with ``store.put`` and the result holds, for ``"head"``::

        preview + "\\n\\n...N lines truncated...\\n\\n" + hint

    and for ``"tail"``::

        "...N lines truncated...\\n\\n" + hint + "\\n\\n" + preview

    (``bytes`` instead of ``lines`` when the byte limit was what cut), the hint being ``hint``
    with OUTPUT_ID replaced by the id. Raises ValueError for a hint without OUTPUT_ID, a
    non-positive limit, an unknown direction or a text that is not valid Unicode (lone
    surrogates); errors of ``store.put`` (for example `StoreUnavailable`) propagate.

    ``max_read_bytes`` (0 = none) is the most one ranged read may return: a text with a line
    longer than that could be stored but never read back, so it is refused with `LineTooLong`
    before anything is stored (reads of shorter lines are split by `read_lines`).

    A caller whose ``deadline`` has passed (or who cancelled) gets `DeadlineExceeded` before
    anything is stored: an output nobody will ever be told the id of is not kept. One who goes
    while the output is stored, or before the answer is handed to the transport
    (`Deadline.undo_unless_answered`), has it deleted again (best effort: a failed delete is
    logged, and retention or eviction removes the output).
    ``tenant`` is whose output it is (`Store`): only that tenant reads it back.
    """
    _check_positive_int("max_lines", max_lines)
    _check_positive_int("max_bytes", max_bytes)
    if direction not in (HEAD, TAIL):
        raise ValueError(f"direction must be 'head' or 'tail', got {direction!r}")
    if OUTPUT_ID not in hint:
        raise ValueError(f"hint must hold {OUTPUT_ID}, where the id goes")
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")

    data = text.encode("utf-8")  # UnicodeEncodeError is a ValueError
    size = len(data)
    # `body_end` excludes one trailing newline: it ends the last line, it is not a line.
    body_end = size - 1 if size and data[size - 1] == 0x0A else size
    newlines: int | None = None  # newlines inside the body; counted once, lazily
    if size <= max_bytes:
        newlines = data.count(b"\n", 0, body_end)
        if newlines + 1 <= max_lines:
            return TruncationResult(text, False, "", 0, 0, "")

    pick = _head if direction == HEAD else _tail
    start, end, kept_lines, cut_by, newlines = pick(data, body_end, newlines, max_lines, max_bytes)

    preview = data[start:end].decode("utf-8")
    total_lines = newlines + 1 if size else 0
    removed_lines = total_lines - kept_lines
    removed_bytes = size - (end - start)

    if max_read_bytes and size > max_read_bytes:
        over = first_line_over(data, max_read_bytes)
        if over is not None:
            raise LineTooLong(over[0], over[1], max_read_bytes, "output (nothing was stored)")
    deadline.check("TruncateToolOutput, before storing the output")
    output_id = store.put(data, deadline, tenant)
    deadline.undo_unless_answered("TruncateToolOutput, storing the output (deleted again)",
                                  lambda: _delete_unanswered(store, output_id, tenant))
    hint = build_hint(output_id, hint)
    count = removed_lines if cut_by == "lines" else removed_bytes
    marker = f"...{count} {cut_by} truncated..."
    if direction == HEAD:
        content = f"{preview}\n\n{marker}\n\n{hint}"
    else:
        content = f"{marker}\n\n{hint}\n\n{preview}"
    return TruncationResult(content, True, output_id, removed_lines, removed_bytes, cut_by)


def _delete_unanswered(store: Store, output_id: str, tenant: str) -> None:
    """Deletes an output whose caller will never be told its id. Never raises (it runs after the
    call, where nobody would see it): the output then stays until retention or eviction."""
    try:
        store.delete(output_id, tenant)
    except Exception:  # noqa: BLE001 - any failure of any store: logged, the caller is gone
        log.warning("deleting tool output %s, stored for a caller that left, failed", output_id, exc_info=True)


# _head and _tail return (start, end, whole lines kept, cut_by, newlines in the body) for the
# preview slice data[start:end]. `newlines` is passed when already counted; otherwise they
# count it from disjoint ranges, so each byte of the text is scanned by `count` only once.


def _head(
    data: bytes, body_end: int, newlines: int | None, max_lines: int, max_bytes: int
) -> tuple[int, int, int, str, int]:
    # Line i (0-based) ending at newline position q costs q + 1 bytes together with all lines
    # before it, so the lines that fit by bytes are exactly those whose newline lies in
    # data[:max_bytes]. The last line of the body has no newline in it; it costs
    # body_end + 1, and only fits when the whole text is under the byte limit.
    window = min(max_bytes, body_end)
    fit_by_bytes = data.count(b"\n", 0, window)
    if newlines is None:
        newlines = fit_by_bytes + data.count(b"\n", window, body_end)
    if body_end + 1 <= max_bytes:
        fit_by_bytes = newlines + 1
    if fit_by_bytes >= max_lines:
        # The line limit cuts: find the end of line number max_lines.
        end = -1
        for _ in range(max_lines):
            end = data.find(b"\n", end + 1, body_end)
        return 0, end, max_lines, "lines", newlines
    if fit_by_bytes > 0:
        end = data.rfind(b"\n", 0, window)
        return 0, end, fit_by_bytes, "bytes", newlines
    # Not even the first line fits: keep a character-safe prefix of it, charged +1 like a line.
    end = _utf8_prefix_end(data, 0, max_bytes - 1)
    return 0, end, 0, "bytes", newlines


def _tail(
    data: bytes, body_end: int, newlines: int | None, max_lines: int, max_bytes: int
) -> tuple[int, int, int, str, int]:
    # Keeping the lines from line start s to the end costs (body_end - s) + 1 bytes: every
    # kept line but the last is followed by its newline inside the body, the last gets +1.
    lowest = body_end + 1 - max_bytes  # smallest line start that fits by bytes
    if lowest <= 0:
        if newlines is None:
            newlines = data.count(b"\n", 0, body_end)
        fit_by_bytes = newlines + 1
        first = 0
    else:
        nl = data.find(b"\n", lowest - 1, body_end)
        if nl < 0:
            fit_by_bytes = 0
            if newlines is None:
                newlines = data.count(b"\n", 0, lowest - 1)
        else:
            first = nl + 1
            fit_by_bytes = data.count(b"\n", first, body_end) + 1
            if newlines is None:
                newlines = fit_by_bytes - 1 + data.count(b"\n", 0, first)
    if fit_by_bytes >= max_lines:
        start = body_end
        for _ in range(max_lines):
            start = data.rfind(b"\n", 0, start)
        return start + 1, body_end, max_lines, "lines", newlines
    if fit_by_bytes > 0:
        return first, body_end, fit_by_bytes, "bytes", newlines
    # Not even the last line fits: keep a character-safe suffix of it, charged +1 like a line.
    start = _utf8_suffix_start(data, body_end - (max_bytes - 1), body_end)
    return start, body_end, 0, "bytes", newlines
