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

from . import reply_cap

_current = threading.local()


class Exchange:
    """`with Exchange(seconds, max_bytes) as ex:` around one request; ex.expired tells whether
    its time ran out, ex.refused why its reply was refused ("" when it was not)."""

    def __init__(self, seconds: float, max_bytes: int):
        self.expired = False
        self.refused = ""
        self.max_bytes = max_bytes
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
                         timeout=timeout, follow_redirects=True)
