"""grpc.health.v1: each service's status, Check, and the open Watch streams.

Our own rather than grpcio-health-checking's, whose servicer keeps every service name ever
watched for the life of the process and lets watches grow without bound. Here:
- at most `server.max_watch_streams` watches are open; one more is refused at once;
- a closed watch leaves nothing behind, and a service name is at most MAX_SERVICE_NAME_BYTES;
- a watch with no update for `server.stream_idle_seconds` is closed (CANCELLED), and one whose
  client has not read an update within that time is dropped;
- at stop, watchers see NOT_SERVING, then their streams end UNAVAILABLE (end_all).
Statuses are set from any thread; watches live on the server's event loop.
"""
from __future__ import annotations

import asyncio
import threading

from grpc_health.v1 import health_pb2

from ..errors import BadInput, Exhausted, Unavailable
from .streams import StreamIdle, write_within

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN

# The longest service name Health/Check and Watch take: gRPC service names are tens of bytes
# (ours: contextsvc.v1.ContextService). A watched name is kept while its watch is open.
MAX_SERVICE_NAME_BYTES = 1024

_ENDED = object()  # what a watch's queue receives when the server ends every watch


def check_service_name(name: str) -> None:
    """Refuses a HealthCheckRequest.service over MAX_SERVICE_NAME_BYTES."""
    n = len(name.encode("utf-8", "surrogatepass")) if len(name) * 4 > MAX_SERVICE_NAME_BYTES else 0
    if n > MAX_SERVICE_NAME_BYTES:
        raise BadInput("service", f"is {n} bytes, more than {MAX_SERVICE_NAME_BYTES}: "
                                  "a health service name is a gRPC service's full name")


class Health:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_watches: int, idle_seconds: float):
        self._loop = loop
        self.max_watches = max_watches
        self._idle = idle_seconds
        self._lock = threading.Lock()
        self._status: dict[str, int] = {}
        self._watchers: dict[str, set[asyncio.Queue]] = {}  # name -> its open watches' queues
        self._open = 0
        self._shutting_down = False  # statuses are NOT_SERVING for good
        self._ended = False  # end_all has run: watches are refused

    def set(self, service: str, status: int) -> None:
        with self._lock:
            if self._shutting_down:
                return
            self._set(service, status)

    def _set(self, service: str, status: int) -> None:
        self._status[service] = status
        for queue in self._watchers.get(service, ()):
            self._loop.call_soon_threadsafe(queue.put_nowait, status)

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING from now on; later set() calls are ignored."""
        with self._lock:
            self._shutting_down = True
            for service in list(self._status):
                self._set(service, NOT_SERVING)

    def status(self, service: str) -> int | None:
        """The service's status, None when it is unknown."""
        with self._lock:
            return self._status.get(service)

    def count_open(self) -> int:
        with self._lock:
            return self._open

    def names_watched(self) -> int:
        with self._lock:
            return len(self._watchers)

    def _open_watch(self, service: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        with self._lock:
            if self._ended:
                raise Unavailable("Watch: the server is shutting down; watch another replica")
            if self._open >= self.max_watches:
                raise Exhausted(f"Watch: {self.max_watches} health watches already open "
                                "(server.max_watch_streams); use Health/Check or retry later")
            self._open += 1
            self._watchers.setdefault(service, set()).add(queue)
            queue.put_nowait(self._status.get(service, SERVICE_UNKNOWN))
        return queue

    def _close_watch(self, service: str, queue: asyncio.Queue) -> None:
        with self._lock:
            self._open -= 1
            watchers = self._watchers.get(service)
            if watchers is not None:
                watchers.discard(queue)
                if not watchers:
                    del self._watchers[service]

    async def watch(self, service: str, context) -> None:
        """Sends the service's status now and on every change, until the client leaves, the
        stream idles, or end_all. Raises what the handler maps to a status."""
        queue = self._open_watch(service)
        try:
            last = None
            while True:
                try:
                    status = await asyncio.wait_for(queue.get(), self._idle)
                except asyncio.TimeoutError:
                    raise StreamIdle(f"Watch: no update for {self._idle:g} s (server.stream_idle_seconds)") from None
                if status is _ENDED:
                    raise Unavailable("server shutting down; watch another replica")
                if status != last:
                    last = status
                    await write_within(context, health_pb2.HealthCheckResponse(status=status), self._idle)
        finally:
            self._close_watch(service, queue)

    def end_all(self) -> None:
        """At stop, after the drain: open watches end UNAVAILABLE after the updates they have
        queued; new ones are refused (a watch would otherwise hold the stop for its grace)."""
        with self._lock:
            self._ended = True
            queues = [q for watchers in self._watchers.values() for q in watchers]
        for queue in queues:
            self._loop.call_soon_threadsafe(queue.put_nowait, _ENDED)
