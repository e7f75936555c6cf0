"""Which calls get one of the executor's `workers` threads: the concurrency limit, the stream
bound, and work whose caller has gone.

The core's work runs on a pool of `workers` threads (calls.py); a call that would wait there for
a thread is refused instead (the hot path is CPU-bound: a queue only adds latency). So:
- ContextService calls: at most `max_calls` whose callers are still there; one more is refused,
  unless one connection holds more than half of them (a burst: a hundred streams on one
  channel) and the call's connection has none in flight: then it may take a spare thread past
  the limit (workers - 1 - max_calls of them), so that a burst never refuses the callers on
  other connections. Callers behind one proxy connection are one connection here.
- reflection streams: at most `max_streams` (each costs memory while open).
- a call whose caller has gone (cancelled, deadline passed) still runs on its thread until it
  notices, but no longer holds a slot of the limit; its thread stays counted.
- whatever the mix, one thread is kept free, so a refusal never waits behind abandoned work.

Knows nothing of gRPC: a call is represented by an `alive()` callable.
"""
from __future__ import annotations

import threading
from typing import Callable

from ..errors import Exhausted, Unavailable


class Ticket:
    __slots__ = ("kind", "alive", "abandoned", "connection")

    def __init__(self, kind: str, alive: Callable[[], bool] | None = None, connection: str = ""):
        self.kind = kind
        self.alive = alive  # calls: whether the caller is still there
        self.abandoned = False
        self.connection = connection


class Admission:
    def __init__(self, workers: int, max_calls: int, max_streams: int):
        self.workers = workers
        self.max_calls = max_calls  # 0 = no limit (calls queue for a thread)
        self.max_streams = max_streams
        self._lock = threading.Lock()
        self._calls: set[Ticket] = set()  # callers still there
        self._per_connection: dict[str, int] = {}  # of _calls
        self._abandoned = 0  # calls running for callers who left
        self._streams: set[Ticket] = set()
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def _busy(self) -> int:
        return len(self._calls) + self._abandoned

    def _sweep(self) -> None:
        """Moves calls whose caller has gone out of the limit (their threads stay counted)."""
        for t in [t for t in self._calls if not t.alive()]:
            self._drop(t)
            t.abandoned = True
            self._abandoned += 1

    def _drop(self, ticket: Ticket) -> None:
        self._calls.discard(ticket)
        n = self._per_connection[ticket.connection] - 1
        if n:
            self._per_connection[ticket.connection] = n
        else:
            del self._per_connection[ticket.connection]

    def enter_call(self, what: str, alive: Callable[[], bool], connection: str = "") -> Ticket:
        """A slot for a call from connection (its peer: address and port), or Exhausted."""
        if self._closed.is_set():
            raise Unavailable(f"{what}: the server is shutting down; retry on another replica")
        with self._lock:
            if self.max_calls:
                if len(self._calls) >= self.max_calls or self._busy() >= self.workers - 1:
                    self._sweep()
                if len(self._calls) >= self.max_calls and not self._past_a_burst(connection):
                    raise Exhausted(f"{what}: server busy, {self.max_calls} calls already in flight "
                                    "(server.max_concurrent_rpcs); retry with backoff")
                if self._busy() >= self.workers - 1:
                    raise Exhausted(f"{what}: server busy: {self._abandoned} calls abandoned by their "
                                    f"callers are still finishing on the server's threads "
                                    "(server.workers); retry with backoff")
            ticket = Ticket("call", alive, connection)
            self._calls.add(ticket)
            self._per_connection[connection] = self._per_connection.get(connection, 0) + 1
            return ticket

    def _past_a_burst(self, connection: str) -> bool:
        """Whether a call over the limit may take a spare thread: its connection has no call in
        flight, one other connection holds more than half the limit, and a thread is spare."""
        held = self._per_connection
        return (bool(connection) and connection not in held and self._busy() < self.workers - 1
                and max(held.values(), default=0) * 2 > self.max_calls)

    def enter_stream(self, what: str) -> Ticket:
        if self._closed.is_set():
            raise Unavailable(f"{what}: the server is shutting down; retry on another replica")
        with self._lock:
            if len(self._streams) >= self.max_streams:
                raise Exhausted(f"{what}: {len(self._streams)} streams already open "
                                "(server.max_streams); retry later")
            ticket = Ticket("stream")
            self._streams.add(ticket)
            return ticket

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.kind == "stream":
                self._streams.discard(ticket)
            elif ticket.abandoned:
                self._abandoned -= 1
            elif ticket in self._calls:
                self._drop(ticket)

    def stalled(self) -> bool:
        """True when a new call would be refused because of work nobody waits for: health then
        says NOT_SERVING (a full limit of live calls is load, not a fault)."""
        with self._lock:
            self._sweep()
            return bool(self.max_calls) and self._abandoned > 0 and (
                len(self._calls) >= self.max_calls or self._busy() >= self.workers - 1)

    def running(self) -> int:
        """Calls still on a thread (abandoned ones included)."""
        with self._lock:
            return self._busy()
