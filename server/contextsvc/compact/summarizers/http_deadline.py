"""A total deadline for one HTTP exchange with the summarizer.

The SDK's HTTP client (httpx) has per-read timeouts only: a peer that sends one byte a second
never trips them, and a request can run for hours. Here every connection the client opens is
recorded for the thread's current `Exchange`; when the exchange's time is up a timer shuts the
socket down, which ends the blocked read at once (the SDK then raises a connection error).

Connections are not kept alive between requests, so every request's socket is one this module
saw opened (a summary takes seconds: one more handshake is nothing next to it).
"""
from __future__ import annotations

import socket
import threading

_current = threading.local()


class Exchange:
    """`with Exchange(seconds) as ex:` around one request; ex.expired tells whether it was cut."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "Exchange":
        _current.exchange = self
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        _current.exchange = None

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if not self.expired:
                return
        _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _trace(event: str, info: dict) -> None:
    if event != "connection.connect_tcp.complete":
        return
    exchange = getattr(_current, "exchange", None)
    stream = info.get("return_value")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if exchange is not None and sock is not None:
        exchange.add(sock)


def http_client(timeout: float):
    """An httpx client for the SDK whose connections the current Exchange can cut."""
    import httpx2

    class DeadlineTransport(httpx2.HTTPTransport):
        def handle_request(self, request):
            request.extensions = {**request.extensions, "trace": _trace}
            return super().handle_request(request)

    return httpx2.Client(transport=DeadlineTransport(limits=httpx2.Limits(max_keepalive_connections=0)),
                         timeout=timeout, follow_redirects=True)
