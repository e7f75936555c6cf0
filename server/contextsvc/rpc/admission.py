"""Which calls get one of the server's worker threads: the concurrency limit, the stream bound,
and work whose caller has gone.

grpcio's sync server runs every call on one of `workers` threads, and a call waiting for a
thread waits with no answer (health checks included). So:
- ContextService calls: at most `max_calls` whose callers are still there; one more is refused.
- streams that hold a thread (reflection): at most `max_streams`; an idle one is closed by the
  caller of `idle_streams()`.
- a call whose caller has gone (cancelled, deadline passed) still runs on its thread until it
  notices, but no longer holds a slot of the limit; its thread stays counted.
- whatever the mix, one thread is always left for health checks and refusals.

Knows nothing of gRPC: a call is represented by an `alive()` callable.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..errors import Exhausted, Unavailable


class Ticket:
    __slots__ = ("kind", "alive", "abandoned", "last_active", "on_idle")

    def __init__(self, kind: str, alive: Callable[[], bool] | None = None, on_idle=None):
        self.kind = kind
        self.alive = alive  # calls: whether the caller is still there
        self.abandoned = False
        self.last_active = time.monotonic()
        self.on_idle = on_idle  # streams: closes the stream

    def touch(self) -> None:
        self.last_active = time.monotonic()


class Admission:
    def __init__(self, workers: int, max_calls: int, max_streams: int):
        self.workers = workers
        self.max_calls = max_calls  # 0 = no limit (calls queue for a thread)
        self.max_streams = max_streams
        self._lock = threading.Lock()
        self._calls: set[Ticket] = set()  # callers still there
        self._abandoned = 0  # calls running for callers who left
        self._streams: set[Ticket] = set()
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def _busy(self) -> int:
        return len(self._calls) + self._abandoned + len(self._streams)

    def _sweep(self) -> None:
        """Moves calls whose caller has gone out of the limit (their threads stay counted)."""
        for t in [t for t in self._calls if not t.alive()]:
            self._calls.discard(t)
            t.abandoned = True
            self._abandoned += 1

    def enter_call(self, what: str, alive: Callable[[], bool]) -> Ticket:
        if self._closed.is_set():
            raise Unavailable(f"{what}: the server is shutting down; retry on another replica")
        with self._lock:
            if self.max_calls:
                if len(self._calls) >= self.max_calls or self._busy() >= self.workers - 1:
                    self._sweep()
                if len(self._calls) >= self.max_calls:
                    raise Exhausted(f"{what}: server busy, {self.max_calls} calls already in flight "
                                    "(server.max_concurrent_rpcs); retry with backoff")
                if self._busy() >= self.workers - 1:
                    raise Exhausted(f"{what}: server busy: {self._abandoned} calls abandoned by their "
                                    f"callers are still finishing on the server's threads "
                                    "(server.workers); retry with backoff")
            ticket = Ticket("call", alive)
            self._calls.add(ticket)
            return ticket

    def enter_stream(self, what: str, on_idle: Callable[[], None]) -> Ticket:
        if self._closed.is_set():
            raise Unavailable(f"{what}: the server is shutting down; retry on another replica")
        with self._lock:
            if len(self._streams) >= self.max_streams or self._busy() >= self.workers - 1:
                raise Exhausted(f"{what}: {len(self._streams)} streams already open "
                                f"(server.max_streams, of {self.workers} server.workers); retry later")
            ticket = Ticket("stream", on_idle=on_idle)
            self._streams.add(ticket)
            return ticket

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.kind == "stream":
                self._streams.discard(ticket)
            elif ticket.abandoned:
                self._abandoned -= 1
            else:
                self._calls.discard(ticket)

    def stalled(self) -> bool:
        """True when a new call would be refused because of work nobody waits for: health then
        says NOT_SERVING (a full limit of live calls is load, not a fault)."""
        with self._lock:
            self._sweep()
            return bool(self.max_calls) and self._abandoned > 0 and (
                len(self._calls) >= self.max_calls or self._busy() >= self.workers - 1)

    def running(self) -> int:
        """Calls and streams still on a thread (abandoned ones included)."""
        with self._lock:
            return self._busy()

    def idle_streams(self, idle_seconds: float) -> list[Ticket]:
        """Streams with no message either way for idle_seconds."""
        cutoff = time.monotonic() - idle_seconds
        with self._lock:
            return [t for t in self._streams if t.last_active < cutoff]
