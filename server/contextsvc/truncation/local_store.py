"""`LocalDiskStore`: the tool-output `Store` on a local directory, one file per output.

A client-supplied string never becomes a path: the id is matched against a strict regex,
parsed into integers, and the file name is re-formatted from those integers (ids.py).
"""
from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import threading
import time
from typing import Callable, Iterator

from ..deadline import NO_DEADLINE, Deadline
from .ids import ID_LENGTH, ID_RE, IdGenerator, format_output_id, parse_output_id
from .settings import TruncationSettings
from .store import CleanupReport, OutputNotFound, Store, StoreUnavailable, report_evictions

__all__ = ["LocalDiskStore"]

log = logging.getLogger(__name__)

# A temp file is named ".tmp-<id>.<8 hex>": the dot prefix never matches the id pattern, and
# the embedded id tells its age without reading file metadata.
_TMP_PREFIX = ".tmp-"
_TMP_RE = re.compile(r"\.tmp-(tool_[0-9a-f]{26})\.[0-9a-f]{8}", re.ASCII)


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

    The caller's deadline is not applied to the local disk: its I/O is not waited for on a
    network, and an interrupted write would leave only a temp file to clean up. Nor is its
    tenant: one directory holds one tenant's outputs (config.Config refuses several tenants
    with this store).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        settings: TruncationSettings,
        clock: Callable[[], float] = time.time,
        on_evict: Callable[[int, int], None] | None = None,
    ) -> None:
        super().__init__(settings, clock)
        self._dir = os.path.abspath(os.fspath(directory))
        self._on_evict = on_evict
        self._lock = threading.Lock()
        self._ids = IdGenerator()
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

    def _ensure_dir(self) -> None:
        os.makedirs(self._dir, mode=0o700, exist_ok=True)

    def _scan_outputs(self) -> Iterator[tuple[str, int]]:
        """(id, size) of every file named by a valid id, sorted by id."""
        found = []
        with os.scandir(self._dir) as it:
            for entry in it:
                if ID_RE.fullmatch(entry.name) and len(entry.name) == ID_LENGTH:
                    try:
                        found.append((entry.name, entry.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:
                        continue
        found.sort()
        return iter(found)

    # -- Store ---------------------------------------------------------------------------

    def put(self, text: str | bytes, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> str:
        data = self._utf8(text)
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
        report_evictions(self._on_evict, count, freed)
        return count, freed

    def get_bytes(self, output_id: str, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> bytes:
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

    def delete(self, output_id: str, tenant: str = "") -> bool:
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
            if len(name) == ID_LENGTH and ID_RE.fullmatch(name):
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
