"""Storage of full tool outputs: the `Store` interface, output ids, and `LocalDiskStore`.

Output ids
    ``tool_`` + 12 hex digits of the creation time in milliseconds since the epoch + 4 hex
    digits of a per-process sequence + 10 hex digits of randomness, all lowercase, e.g.
    ``tool_018f3a2b4c5d0000a1b2c3d4e5``. Within one process ids strictly increase (the
    sequence breaks ties inside a millisecond, and the time part never goes back even when
    the wall clock does); ids of different replicas sort by time, and two of them collide only
    if they share the millisecond, the sequence and 40 random bits. Sorting ids as strings sorts them by creation time, and the age of an
    output is read from its id, never from file metadata (which copies, restores and object
    stores do not preserve).

Paths
    A client-supplied string never becomes a path: the id is matched against a strict
    regex, parsed into integers, and the file name is re-formatted from those integers.
"""
from __future__ import annotations

import abc
import errno
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import BadInput, Exhausted, NotFound, Unavailable
from .settings import TruncationSettings

__all__ = [
    "Store",
    "LocalDiskStore",
    "CleanupReport",
    "CleanupScheduler",
    "ReadResult",
    "read_lines",
    "first_line_over",
    "LineTooLong",
    "StoreError",
    "OutputNotFound",
    "InvalidOutputId",
    "StoreUnavailable",
    "ID_PREFIX",
    "ID_LENGTH",
    "parse_output_id",
    "format_output_id",
    "output_id_created_ms",
]

log = logging.getLogger(__name__)

ID_PREFIX = "tool_"
_TIME_HEX = 12
_SEQ_HEX = 4
_RAND_HEX = 10
ID_LENGTH = len(ID_PREFIX) + _TIME_HEX + _SEQ_HEX + _RAND_HEX
_ID_RE = re.compile(r"tool_([0-9a-f]{12})([0-9a-f]{4})([0-9a-f]{10})", re.ASCII)
_SEQ_MAX = 16**_SEQ_HEX - 1
_TIME_MAX = 16**_TIME_HEX - 1
# A temp file is named ".tmp-<id>.<8 hex>": the dot prefix never matches the id pattern, and
# the embedded id tells its age without reading file metadata.
_TMP_PREFIX = ".tmp-"
_TMP_RE = re.compile(r"\.tmp-(tool_[0-9a-f]{26})\.[0-9a-f]{8}", re.ASCII)


class StoreError(Exception):
    """Marks the errors a `Store` or `read_lines` raises, for a caller that catches any of them.
    It decides no status: each one's gRPC status comes from its base in `contextsvc.errors`."""


class InvalidOutputId(StoreError, BadInput):
    """The string is not an output id this service could have generated (INVALID_ARGUMENT,
    naming the field ``output_id``)."""

    def __init__(self, why: str):
        super().__init__("output_id", why)


class OutputNotFound(StoreError, NotFound):
    """No stored output under this id: never stored, deleted, evicted, or expired (NOT_FOUND)."""


class StoreUnavailable(StoreError, Unavailable):
    """The store cannot read or write right now (disk full, read-only, I/O error, Redis down,
    ...): UNAVAILABLE."""


def parse_output_id(output_id: object) -> tuple[int, int, int]:
    """(created_ms, sequence, random) of a well-formed id; InvalidOutputId otherwise."""
    if not isinstance(output_id, str):
        raise InvalidOutputId(f"output id must be a string, got {type(output_id).__name__}")
    if len(output_id) != ID_LENGTH:
        raise InvalidOutputId(
            f"malformed output id (expected {ID_PREFIX}<{ID_LENGTH - len(ID_PREFIX)} hex digits>)"
        )
    m = _ID_RE.fullmatch(output_id)
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


@dataclass(frozen=True)
class CleanupReport:
    """What one cleanup run did."""

    expired: int = 0  # outputs removed because older than the retention
    evicted: int = 0  # outputs removed, oldest first, to get under max_store_bytes
    bytes_freed: int = 0  # bytes of the expired and evicted outputs together
    evicted_bytes: int = 0  # the part of bytes_freed that eviction freed
    temp_removed: int = 0  # leftover temp files of interrupted writes
    remaining: int = 0  # outputs left in the store
    remaining_bytes: int = 0


class Store(abc.ABC):
    """Where full tool outputs live between `truncate_output` and the reads of them.

    This is the contract a shared backend (object storage, a database) must meet to
    replace the local disk when the service runs as several replicas behind one address,
    since a read may reach a different replica than the one that stored the output:

    - ``put(text)`` stores the text and returns a fresh id (format above). The id is valid
      on every replica as soon as ``put`` returns; a failed ``put`` raises
      `StoreUnavailable` and leaves nothing readable under any id (no partial object).
    - ``get(id)`` returns exactly the stored text. A malformed id raises `InvalidOutputId`
      before any storage access; an unknown, deleted, evicted or expired id raises
      `OutputNotFound`. Expiry is computed from the time in the id, so an expired output is
      not found even before cleanup removed it; a backend problem raises `StoreUnavailable`.
    - ``delete(id)`` removes the output if present (idempotent) and returns whether it was.
    - ``list_ids()`` lists the ids of the stored, unexpired outputs, oldest first.
    - ``cleanup(now)`` removes expired outputs and leftovers of interrupted writes, then
      evicts oldest first while over the size cap; it must be safe to run concurrently with
      puts and gets, and on several replicas at once (removing an already removed object is
      not an error).
    - ``usage()`` returns (count, bytes) of the stored outputs, possibly approximate between
      cleanups.
    """

    @abc.abstractmethod
    def put(self, text: str | bytes) -> str:
        """Store ``text`` (a str, or its UTF-8 encoding) and return its new id."""

    @abc.abstractmethod
    def get(self, output_id: str) -> str:
        """The stored text of ``output_id``."""

    def get_bytes(self, output_id: str) -> bytes:
        """The stored text of ``output_id`` as UTF-8 (ranged reads work on bytes)."""
        return self.get(output_id).encode("utf-8")

    @abc.abstractmethod
    def delete(self, output_id: str) -> bool:
        """Remove ``output_id``; True if it existed."""

    @abc.abstractmethod
    def list_ids(self) -> list[str]:
        """Ids of the stored, unexpired outputs, oldest first."""

    @abc.abstractmethod
    def cleanup(self, now: float | None = None) -> CleanupReport:
        """Remove expired outputs and leftovers, enforce the size cap. ``now``: epoch seconds."""

    @abc.abstractmethod
    def usage(self) -> tuple[int, int]:
        """(number of stored outputs, their total bytes)."""


class _IdGenerator:
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


class LocalDiskStore(Store):
    """A `Store` on a local directory: one file per output, named by its id.

    Writes are atomic and durable: the text goes to a temp file in the same directory (its
    name cannot match the id pattern), is flushed and fsynced, renamed over the final name
    with ``os.replace``, and the directory is fsynced. A crash at any point leaves either
    nothing or a complete file under the id; leftover temp files are removed by `cleanup`.

    Thread-safe: ids are generated under a lock; file I/O of concurrent puts runs in
    parallel. An in-memory index (id -> size) tracks usage for the size cap without
    rescanning the directory on every put; each `cleanup` rebuilds it from the directory.

    ``on_evict(count, bytes)`` is called after outputs were evicted by the size cap (from a
    put or from cleanup), e.g. to count evictions in metrics. Exceptions it raises are
    logged and ignored.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        settings: TruncationSettings,
        clock: Callable[[], float] = time.time,
        on_evict: Callable[[int, int], None] | None = None,
    ) -> None:
        self._dir = os.path.abspath(os.fspath(directory))
        self._settings = settings
        self._clock = clock
        self._on_evict = on_evict
        self._retention_ms = int(settings.retention_seconds * 1000)
        self._lock = threading.Lock()
        self._ids = _IdGenerator()
        self._index: dict[str, int] = {}  # id -> size; kept in id order while _sorted
        self._sorted = True
        self._total = 0
        self._in_flight: set[str] = set()  # temp names of writes in progress in this process
        # Group commit of directory fsyncs (see _fsync_dir).
        self._dir_sync = threading.Condition(threading.Lock())
        self._renames = 0  # renames done so far
        self._synced = 0  # renames known durable
        self._syncing = False
        try:
            self._ensure_dir()
            self._index = dict(self._scan_outputs())
            self._total = sum(self._index.values())
        except OSError as e:
            # Not fatal at start: puts will retry and report StoreUnavailable.
            log.warning("tool-output store %s not usable yet: %s", self._dir, e)

    @property
    def directory(self) -> str:
        return self._dir

    # -- paths and ids -------------------------------------------------------------------

    def _path(self, output_id: str) -> tuple[str, int]:
        """(file path, created_ms) built from the parsed, re-formatted id."""
        created_ms, seq, rand = parse_output_id(output_id)
        return os.path.join(self._dir, format_output_id(created_ms, seq, rand)), created_ms

    def _expired(self, created_ms: int, now_ms: int) -> bool:
        return now_ms - created_ms > self._retention_ms

    def _now_ms(self, now: float | None = None) -> int:
        return int((self._clock() if now is None else now) * 1000)

    def _ensure_dir(self) -> None:
        os.makedirs(self._dir, mode=0o700, exist_ok=True)

    def _scan_outputs(self) -> Iterator[tuple[str, int]]:
        """(id, size) of every file named by a valid id, sorted by id."""
        found = []
        with os.scandir(self._dir) as it:
            for entry in it:
                if _ID_RE.fullmatch(entry.name) and len(entry.name) == ID_LENGTH:
                    try:
                        found.append((entry.name, entry.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:
                        continue
        found.sort()
        return iter(found)

    # -- Store ---------------------------------------------------------------------------

    def put(self, text: str | bytes) -> str:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with self._lock:
            output_id = self._ids.next(self._now_ms())
            tmp_name = f"{_TMP_PREFIX}{output_id}.{secrets.token_hex(4)}"
            self._in_flight.add(tmp_name)
        final = os.path.join(self._dir, output_id)
        tmp = os.path.join(self._dir, tmp_name)
        try:
            self._write_atomic(tmp, final, data)
        finally:
            with self._lock:
                self._in_flight.discard(tmp_name)
        victims = self._account_put(output_id, len(data))
        if victims:
            self._evict(victims)
        return output_id

    def _write_atomic(self, tmp: str, final: str, data: bytes) -> None:
        fd = -1
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileNotFoundError:
                self._ensure_dir()  # the directory was removed (or never created): recreate
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, final)
        except OSError as e:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StoreUnavailable(_describe_write_error(self._dir, e)) from e
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        """Make this thread's rename durable, sharing one fsync among concurrent puts.

        Group commit: a directory fsync persists every rename done before it started, so a
        put whose rename happened before a running fsync began waits for that one instead of
        issuing its own. Failing here only risks losing the output in a power cut (never a
        partial file: the data was fsynced before the rename), so it is logged, not raised.
        """
        with self._dir_sync:
            self._renames += 1
            mine = self._renames
            while self._synced < mine:
                if self._syncing:
                    self._dir_sync.wait()
                    continue
                self._syncing = True
                target = self._renames
                self._dir_sync.release()
                try:
                    self._fsync_dir_now()
                finally:
                    self._dir_sync.acquire()
                    self._syncing = False
                    self._synced = max(self._synced, target)
                    self._dir_sync.notify_all()

    def _fsync_dir_now(self) -> None:
        try:
            dfd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            log.warning("fsync of tool-output directory %s failed: %s", self._dir, e)

    def _account_put(self, output_id: str, size: int) -> list[tuple[str, int]]:
        """Record a new output; pick victims (oldest first) if over the cap."""
        with self._lock:
            if self._index and self._sorted and output_id < next(reversed(self._index)):
                self._sorted = False
            old = self._index.get(output_id)
            if old is not None:
                self._total -= old
            self._index[output_id] = size
            self._total += size
            return self._pick_victims_locked(keep=output_id)

    def _pick_victims_locked(self, keep: str | None) -> list[tuple[str, int]]:
        cap = self._settings.max_store_bytes
        if cap <= 0 or self._total <= cap:
            return []
        if not self._sorted:
            self._index = dict(sorted(self._index.items()))
            self._sorted = True
        newest = next(reversed(self._index))
        victims = []
        for output_id, size in self._index.items():
            if self._total <= cap:
                break
            # The newest output (the one a put just returned) is never evicted: its id is
            # about to be handed to a client.
            if output_id == keep or output_id == newest:
                continue
            victims.append((output_id, size))
            self._total -= size
        for output_id, _ in victims:
            del self._index[output_id]
        return victims

    def _evict(self, victims: list[tuple[str, int]]) -> tuple[int, int]:
        count = freed = 0
        for output_id, size in victims:
            try:
                os.unlink(os.path.join(self._dir, output_id))
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("evicting tool output %s failed: %s", output_id, e)
                continue
            count += 1
            freed += size
        if count and self._on_evict is not None:
            try:
                self._on_evict(count, freed)
            except Exception:
                log.exception("on_evict hook failed")
        return count, freed

    def get(self, output_id: str) -> str:
        data = self.get_bytes(output_id)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise StoreUnavailable(f"tool output {output_id} is corrupt (not UTF-8)") from e

    def get_bytes(self, output_id: str) -> bytes:
        path, created_ms = self._path(output_id)
        if self._expired(created_ms, self._now_ms()):
            raise OutputNotFound(f"tool output {output_id} not found (expired)")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise OutputNotFound(f"tool output {output_id} not found") from None
        except OSError as e:
            raise StoreUnavailable(f"reading tool output {output_id} failed: {e.strerror or e}") from e
        return data

    def delete(self, output_id: str) -> bool:
        path, _ = self._path(output_id)
        name = os.path.basename(path)
        try:
            os.unlink(path)
            existed = True
        except FileNotFoundError:
            existed = False
        except OSError as e:
            raise StoreUnavailable(f"deleting tool output {output_id} failed: {e.strerror or e}") from e
        with self._lock:
            size = self._index.pop(name, None)
            if size is not None:
                self._total -= size
        return existed

    def list_ids(self) -> list[str]:
        now_ms = self._now_ms()
        try:
            return [
                output_id
                for output_id, _ in self._scan_outputs()
                if not self._expired(parse_output_id(output_id)[0], now_ms)
            ]
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreUnavailable(f"listing {self._dir} failed: {e.strerror or e}") from e

    def usage(self) -> tuple[int, int]:
        with self._lock:
            return len(self._index), self._total

    def cleanup(self, now: float | None = None) -> CleanupReport:
        now_ms = self._now_ms(now)
        grace_ms = int(self._settings.temp_grace_seconds * 1000)
        expired = temp_removed = bytes_freed = 0
        live: list[tuple[str, int]] = []
        try:
            with os.scandir(self._dir) as it:
                entries = list(it)
        except FileNotFoundError:
            entries = []
        except OSError as e:
            raise StoreUnavailable(f"scanning {self._dir} failed: {e.strerror or e}") from e
        for entry in entries:
            name = entry.name
            if len(name) == ID_LENGTH and _ID_RE.fullmatch(name):
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
                if self._expired(parse_output_id(name)[0], now_ms):
                    if _unlink_quiet(entry.path):
                        expired += 1
                        bytes_freed += size
                else:
                    live.append((name, size))
                continue
            m = _TMP_RE.fullmatch(name) if name.startswith(_TMP_PREFIX) else None
            if m is None:
                continue  # not ours: leave files we did not create alone
            with self._lock:
                busy = name in self._in_flight
            if busy or now_ms - parse_output_id(m.group(1))[0] <= grace_ms:
                continue  # a write in progress, here or in another process sharing the dir
            if _unlink_quiet(entry.path):
                temp_removed += 1
        live.sort()

        with self._lock:
            scanned = dict(live)
            # Outputs put while the scan ran are in the index but not in the scan: keep them
            # if their file is there.
            for output_id, size in self._index.items():
                if output_id not in scanned and not self._expired(
                    parse_output_id(output_id)[0], now_ms
                ) and os.path.exists(os.path.join(self._dir, output_id)):
                    scanned[output_id] = size
            self._index = dict(sorted(scanned.items()))
            self._sorted = True
            self._total = sum(self._index.values())
            victims = self._pick_victims_locked(keep=None)
        evicted, evicted_bytes = self._evict(victims) if victims else (0, 0)
        count, total = self.usage()
        return CleanupReport(
            expired=expired,
            evicted=evicted,
            bytes_freed=bytes_freed + evicted_bytes,
            evicted_bytes=evicted_bytes,
            temp_removed=temp_removed,
            remaining=count,
            remaining_bytes=total,
        )


def _unlink_quiet(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        log.warning("removing %s failed: %s", path, e)
        return False


def _describe_write_error(directory: str, e: OSError) -> str:
    reason = {
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOTDIR: "a path component is not a directory",
        errno.EEXIST: "a path component exists and is not a directory",
    }.get(e.errno or 0, e.strerror or str(e))
    return f"cannot store tool output in {directory}: {reason}"


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
    max_bytes: int = 0,
) -> ReadResult:
    """Lines ``offset`` .. ``offset + limit - 1`` (0-based) of a stored output.

    Lines are split on "\\n" and a trailing newline does not make an extra empty line (the
    line model of `truncate_output`). ``limit`` 0 means ``default_limit``; any larger limit,
    up to 2^63 - 1, means "to the end". ``max_bytes`` (0 = none) caps the UTF-8 size of the
    returned text, so a read always fits a response: whole lines are returned up to the cap and
    ``lines`` says how many (the caller goes on from ``offset + lines``). A line longer than
    the cap cannot be returned: `LineTooLong` (`truncate_output` refuses to store such text).
    Negative offset or limit raise ValueError; an offset at or past the end gives empty text
    with eof True. Errors of ``store.get`` (InvalidOutputId, OutputNotFound, StoreUnavailable)
    propagate.

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
    data = store.get_bytes(output_id)
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
            stop = data.find(b"\n", start, body_end)
            raise LineTooLong(offset, (body_end if stop < 0 else stop) - start, max_bytes)
        end = cut
    lines = data.count(b"\n", start, end) + 1
    try:
        text = data[start:end].decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoreUnavailable(f"tool output {output_id} is corrupt (not UTF-8)") from e
    return ReadResult(text, total, offset, lines, offset + lines >= total)


class LineTooLong(StoreError, Exhausted):
    """A line of an output is longer than one read may return (RESOURCE_EXHAUSTED)."""

    def __init__(self, line: int, size: int, max_bytes: int, what: str = "stored output"):
        super().__init__(f"line {line} of the {what} is {size} bytes, more than one ReadTruncated "
                         f"response can carry ({max_bytes} bytes: server.max_response_bytes less "
                         "the response's other fields)")
        self.line = line
        self.size = size


# Bytes counted per step when looking for the n-th newline; the last block is halved down to
# _NARROW bytes and scanned with find, so no Python loop runs once per line.
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
            stop = data.find(b"\n", pos, body_end)
            return data.count(b"\n", 0, pos), (body_end if stop < 0 else stop) - pos
        pos = nl + 1
    return None


class CleanupScheduler:
    """Runs ``store.cleanup`` on a daemon thread: first after ``cleanup_first_delay_seconds``,
    then every ``cleanup_interval_seconds``. A failing run is logged and the schedule goes on.
    ``clock`` gives the ``now`` passed to each cleanup (epoch seconds).
    """

    def __init__(
        self,
        store: Store,
        settings: TruncationSettings,
        clock: Callable[[], float] = time.time,
        on_report: Callable[[CleanupReport], None] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._on_report = on_report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.runs = 0  # completed runs, successful or not
        self.failures = 0
        self.last_report: CleanupReport | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="contextsvc-tool-output-cleanup", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait for it (a run in progress finishes first)."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def run_once(self) -> CleanupReport | None:
        try:
            report = self._store.cleanup(self._clock())
        except Exception:
            self.failures += 1
            log.exception("tool-output cleanup failed")
            report = None
        else:
            self.last_report = report
            if report.expired or report.evicted or report.temp_removed:
                log.info(
                    "tool-output cleanup: %d expired, %d evicted, %d temp files, %d bytes freed",
                    report.expired, report.evicted, report.temp_removed, report.bytes_freed,
                )
            if self._on_report is not None:
                try:
                    self._on_report(report)
                except Exception:
                    log.exception("cleanup on_report hook failed")
        self.runs += 1
        return report

    def _run(self) -> None:
        delay = self._settings.cleanup_first_delay_seconds
        while not self._stop.wait(delay):
            self.run_once()
            delay = self._settings.cleanup_interval_seconds
