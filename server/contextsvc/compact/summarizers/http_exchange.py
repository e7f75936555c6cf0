"""The bounds of one HTTP exchange with the summarizer: a total deadline and a reply byte cap.

The SDK's HTTP client (httpx) has per-read timeouts only: a peer that sends one byte a second
never trips them, and a request can run for hours. Here every connection the client opens is
recorded for the thread's current `Exchange`; when the exchange's time is up a timer shuts the
socket down, which ends the blocked read at once (the SDK then raises a connection error).

Nor does httpx bound a reply's size: the transport here reads the body through reply_cap, which
counts the wire and the inflated bytes against the exchange's cap. A reply over it (or in an
encoding not asked for, or corrupt) ends with a decoding error the SDK reports as a connection
failure; `Exchange.refused` tells the summarizer what really happened.

Connections are not kept alive between requests, so every request's socket is one this module
saw opened (a summary takes seconds: one more handshake is nothing next to it).
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Callable

from . import reply_cap

_current = threading.local()
ABANDONED_POLL_SECONDS = 0.25  # how soon an exchange ends after its caller has gone


class Exchange:
    """`with Exchange(seconds, max_bytes) as ex:` around one request; ex.expired tells whether
    its time ran out (or abandoned() said its caller has gone), ex.refused why its reply was
    refused ("" when it was not)."""

    def __init__(self, seconds: float, max_bytes: int, abandoned: Callable[[], bool] | None = None):
        self.expired = False
        self.refused = ""
        self.max_bytes = max_bytes
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._over = threading.Event()
        self._watch = threading.Thread(target=self._watch_time, args=(time.monotonic() + max(0.0, seconds), abandoned),
                                       name="summary-exchange", daemon=True)

    def __enter__(self) -> "Exchange":
        _current.exchange = self
        self._watch.start()
        return self

    def __exit__(self, *exc) -> None:
        self._over.set()
        _current.exchange = None

    def _watch_time(self, end: float, abandoned) -> None:
        """Ends the exchange at end, or once abandoned() (polled every ABANDONED_POLL_SECONDS):
        a caller who cancelled a Compact left its thread waiting on a hung summarizer for the
        whole timeout, and 19 such calls had the server refuse everyone for a minute."""
        while True:
            left = end - time.monotonic()
            if left <= 0 or (abandoned is not None and abandoned()):
                self._expire()
                return
            if self._over.wait(min(left, ABANDONED_POLL_SECONDS) if abandoned is not None else left):
                return

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
    """An httpx client for the SDK whose exchanges the current Exchange bounds."""
    import httpx2

    class CappedStream(httpx2.SyncByteStream):
        def __init__(self, raw, encoding: str, exchange: Exchange):
            self._raw, self._encoding, self._exchange = raw, encoding, exchange

        def __iter__(self):
            try:
                yield from reply_cap.capped(self._raw, self._encoding, self._exchange.max_bytes)
            except reply_cap.Oversize as exc:
                self._exchange.refused = str(exc)
                raise httpx2.DecodingError(str(exc)) from None

        def close(self) -> None:
            self._raw.close()

    class ExchangeTransport(httpx2.HTTPTransport):
        def handle_request(self, request):
            request.extensions = {**request.extensions, "trace": _trace}
            request.headers["accept-encoding"] = reply_cap.ACCEPT_ENCODING
            response = super().handle_request(request)
            exchange = getattr(_current, "exchange", None)
            if exchange is None:
                return response
            refusal = reply_cap.refusal(response.headers, exchange.max_bytes)
            if refusal:
                response.close()
                exchange.refused = refusal
                raise httpx2.DecodingError(refusal)
            # inflated by CappedStream: httpx must not inflate it again
            response.stream = CappedStream(response.stream, response.headers.pop("content-encoding", ""), exchange)
            return response

    return httpx2.Client(transport=ExchangeTransport(limits=httpx2.Limits(max_keepalive_connections=0)),
                         timeout=timeout, follow_redirects=True, max_redirects=MAX_REDIRECTS)


# redirects a summary request follows (an endpoint moved, http to https); more is a loop, which
# the endpoint answers the same way every time: refused, not retried (a loop of 20, retried
# twice, sent 63 requests and read as "connection failed")
MAX_REDIRECTS = 5


def redirect_loop(exc: BaseException) -> bool:
    """The SDK's connection error is the client's give-up on redirects (MAX_REDIRECTS)."""
    import httpx2

    return isinstance(exc.__cause__, httpx2.TooManyRedirects)
