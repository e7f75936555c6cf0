"""The open grpc.health.v1 Watch streams: how many may be open, their updates, their end.

Updates go out from one thread of their own. The stock HealthServicer calls a stream's send
callback while it holds its lock, and grpc's send waits until the transport has taken the
message, which grpc reports on the server's event thread; that same thread runs the close
callback of a stream its client just ended, and that callback takes the servicer's lock. Sending
from the caller's thread deadlocks the two whenever a status changes (stop's NOT_SERVING
included) while a watcher hangs up, and the server then never stops.

One thread for every watcher: a watcher that stops reading until its HTTP/2 window is full (some
thousands of unread updates) holds the others' updates until the idle reaper closes it
(`stream_idle_seconds`) or the stop's grace ends. Updates are rare (a few per process life).

What the watches keep is bounded: at most `server.max_watch_streams` are open, a closed one's
entry goes (HealthServicer below), and a service name is at most MAX_SERVICE_NAME_BYTES.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

import grpc
from grpc_health.v1 import health

from .admission import Ticket
from ..errors import BadInput, Exhausted, Unavailable

log = logging.getLogger("contextsvc")

# The longest service name Health/Check and Watch take: gRPC service names are tens of bytes
# (ours: contextsvc.v1.ContextService). A watched name is kept while its watch is open.
MAX_SERVICE_NAME_BYTES = 1024


def check_service_name(name: str) -> None:
    """Refuses a HealthCheckRequest.service over MAX_SERVICE_NAME_BYTES."""
    n = len(name.encode("utf-8", "surrogatepass")) if len(name) * 4 > MAX_SERVICE_NAME_BYTES else 0
    if n > MAX_SERVICE_NAME_BYTES:
        raise BadInput("service", f"is {n} bytes, more than {MAX_SERVICE_NAME_BYTES}: "
                                  "a health service name is a gRPC service's full name")


class HealthServicer(health.HealthServicer):
    """The stock servicer, with a service's entry in its table of watchers dropped once its last
    watcher has gone: the stock one keeps every name ever watched (an empty set under it) for
    the life of the process, 150 MB after 150 watches of 1 MB names."""

    def _on_close_callback(self, send_response_callback, service):
        def callback():
            with self._lock:
                watchers = self._send_response_callbacks.get(service)
                if watchers is not None:
                    watchers.discard(send_response_callback)
                    if not watchers:
                        del self._send_response_callbacks[service]
            send_response_callback(None)

        return callback


def on_close(context, callback) -> None:
    """Runs callback when the call ends, or at once when it already has (grpc's add_callback
    then answers False and would never run it)."""
    if not context.add_callback(callback):
        callback()


class WatchStream:
    """One Watch call: its idle ticket and its sends (made on the sender thread only)."""
    __slots__ = ("ticket", "_context", "_send", "_ended")

    def __init__(self, context, send_response_callback):
        self.ticket = Ticket("watch", on_idle=context.cancel)
        self._context = context
        self._send = send_response_callback
        self._ended = False

    def deliver(self, response) -> None:
        """A status update, or None: the stream ends (grpc sends the status)."""
        if self._ended:
            return
        self._ended = response is None
        self.ticket.touch()
        self._send(response)

    def end(self, code: grpc.StatusCode, details: str) -> None:
        if self._ended:
            return
        self._context.set_code(code)
        self._context.set_details(details)
        self.deliver(None)


class HealthWatches:
    def __init__(self, limit: int):
        self.limit = limit
        self._lock = threading.Lock()
        self._open: dict[WatchStream, None] = {}
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._ended = False  # end_all has run: the server is stopping

    def open(self, context, send_response_callback) -> WatchStream:
        """The new stream. Raises Exhausted when `limit` are already open, Unavailable once the
        server is stopping (a watch opened after end_all would hold the stop for its grace)."""
        stream = WatchStream(context, send_response_callback)
        with self._lock:
            if self._ended:
                raise Unavailable("Watch: the server is shutting down; watch another replica")
            if len(self._open) >= self.limit:
                raise Exhausted(f"Watch: {self.limit} health watches already open "
                                "(server.max_watch_streams); use Health/Check or retry later")
            self._open[stream] = None
        on_close(context, lambda: self.forget(stream))
        return stream

    def forget(self, stream: WatchStream) -> None:
        with self._lock:
            self._open.pop(stream, None)

    def send(self, stream: WatchStream, response) -> None:
        """Queues the update; never blocks (it is called under the servicer's lock)."""
        self._outbox.put((stream.deliver, (response,)))

    def idle_streams(self, idle_seconds: float) -> list[Ticket]:
        """Watches with no update sent for idle_seconds (as Admission.idle_streams)."""
        cutoff = time.monotonic() - idle_seconds
        with self._lock:
            return [s.ticket for s in self._open if s.ticket.last_active < cutoff]

    def end_all(self, details: str) -> None:
        """Ends every open stream with UNAVAILABLE after the updates already queued (at stop: a
        watcher would otherwise hold the server open for the whole grace period)."""
        with self._lock:
            self._ended = True
            streams = list(self._open)
        for stream in streams:
            self._outbox.put((stream.end, (grpc.StatusCode.UNAVAILABLE, details)))

    def start(self) -> None:
        self._sender = threading.Thread(target=self._send_loop, name="health-watch-sender", daemon=True)
        self._sender.start()

    def stop(self) -> None:
        if self._sender is not None:
            self._outbox.put(None)
            self._sender.join(5.0)

    def _send_loop(self) -> None:
        while (item := self._outbox.get()) is not None:
            deliver, args = item
            try:
                deliver(*args)
            except Exception:  # one broken stream must not silence the others
                log.exception("health Watch: sending an update failed")
