"""The tool-output `Store` interface, what a cleanup run reports, and the errors a store raises.

A store keeps full tool outputs between `truncate_output` and the reads of them. Two implement
it: `LocalDiskStore` (local_store.py, one file per output) and `RedisStore` (redis_store.py,
shared by replicas). Ids are made and parsed by ids.py, line ranges are read by lines.py on top
of `Store.get_bytes`, and cleanup.py runs `Store.cleanup` on a schedule.
"""
from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from typing import Callable

from ..deadline import NO_DEADLINE, Deadline
from ..errors import BadInput, NotFound, Unavailable

log = logging.getLogger(__name__)

__all__ = [
    "Store",
    "CleanupReport",
    "StoreError",
    "OutputNotFound",
    "InvalidOutputId",
    "StoreUnavailable",
]


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

    - ``put(text)`` stores the text and returns a fresh id (made by `ids.IdGenerator`). The id
      is valid on every replica as soon as ``put`` returns; a failed ``put`` raises
      `StoreUnavailable` and leaves nothing readable under any id (no partial object).
    - ``get_bytes(id)`` returns exactly the stored text, as UTF-8 (``get`` decodes it). A malformed id raises `InvalidOutputId`
      before any storage access; an unknown, deleted, evicted or expired id raises
      `OutputNotFound`. Expiry is computed from the time in the id, so an expired output is
      not found even before cleanup removed it; a backend problem raises `StoreUnavailable`.
    - ``put`` and ``get_bytes`` take the caller's `Deadline`: a backend that waits on a network
      waits no longer than it (DeadlineExceeded), so the RPC answers before its caller gave up.
    - ``put`` and ``get_bytes`` take the caller's tenant (a digest of its token, "" without
      tokens): an output put for one tenant is `OutputNotFound` for any other, with the message
      of an unknown id. (`LocalDiskStore` keeps none apart: config.Config refuses several
      tenants with it.)
    - ``delete(id, tenant)`` removes the tenant's output if present (idempotent) and returns
      whether it was.
    - ``list_ids()`` lists the ids of the stored, unexpired outputs, oldest first.
    - ``cleanup(now)`` removes expired outputs and leftovers of interrupted writes, then
      evicts oldest first while over the size cap; it must be safe to run concurrently with
      puts and gets, and on several replicas at once (removing an already removed object is
      not an error).
    - ``usage()`` returns (count, bytes) of the stored outputs, possibly approximate between
      cleanups.
    - ``close()`` releases what the store holds open (a connection pool); nothing by default.

    The expiry rule and the clock are kept here, so that every backend, and every replica,
    agrees on when an output is gone.
    """

    def __init__(self, settings, clock: Callable[[], float]):
        self._settings = settings
        self._clock = clock
        self._retention_ms = int(settings.retention_seconds * 1000)

    def _now_ms(self, now: float | None = None) -> int:
        return int((self._clock() if now is None else now) * 1000)

    def _expired(self, created_ms: int, now_ms: int) -> bool:
        """An output is alive while now - created <= retention."""
        return now_ms - created_ms > self._retention_ms

    @staticmethod
    def _utf8(text: str | bytes) -> bytes:
        return text.encode("utf-8") if isinstance(text, str) else bytes(text)

    def close(self) -> None:
        """Releases what the store holds open; nothing by default."""

    @abc.abstractmethod
    def put(self, text: str | bytes, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> str:
        """Store ``text`` (a str, or its UTF-8 encoding) and return its new id."""

    @abc.abstractmethod
    def get_bytes(self, output_id: str, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> bytes:
        """The stored text of ``output_id`` as UTF-8 (ranged reads work on bytes)."""

    def get(self, output_id: str, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> str:
        """The stored text of ``output_id``."""
        data = self.get_bytes(output_id, deadline, tenant)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise StoreUnavailable(f"tool output {output_id} is corrupt (not UTF-8)") from e

    @abc.abstractmethod
    def delete(self, output_id: str, tenant: str = "") -> bool:
        """Remove the tenant's ``output_id``; True if it existed."""

    @abc.abstractmethod
    def list_ids(self) -> list[str]:
        """Ids of the stored, unexpired outputs, oldest first."""

    @abc.abstractmethod
    def cleanup(self, now: float | None = None) -> CleanupReport:
        """Remove expired outputs and leftovers, enforce the size cap. ``now``: epoch seconds."""

    @abc.abstractmethod
    def usage(self) -> tuple[int, int]:
        """(number of stored outputs, their total bytes)."""


def report_evictions(on_evict, count: int, nbytes: int) -> None:
    """Tells a store's on_evict hook (metrics) about evictions; a failing hook never fails a put."""
    if count and on_evict is not None:
        try:
            on_evict(count, nbytes)
        except Exception:
            log.exception("on_evict hook failed")
