"""The metrics port's HTTP/1.1 server (/metrics, /healthz): a WSGI app served from one event loop.

prometheus_client's start_http_server (wsgiref: a thread per connection, a listen backlog of 5,
no timeouts) could be starved from the network: connection churn filled its backlog (/healthz
p50 about 1 s, checks over 2 s or lost, and a proxy took a healthy replica out), and idle
connections each held a thread and a descriptor for ever (~1,700 of them used up the process's
1024 descriptors: gRPC calls then failed with "Too many open files"). Here:
- the listen backlog is BACKLOG, and the loop accepts ACCEPT_BURST connections at a time;
- at most MAX_CONNECTIONS are open: one more closes the connection that has waited longest on
  its client (idle between requests, or slow to send one), or is itself closed when every
  connection is being answered, so neither idle nor slow sockets lock a health check out;
- a request's head must arrive within HEAD_SECONDS and fit MAX_HEAD_BYTES, a kept-alive
  connection closes after IDLE_SECONDS without a request, and an answer the client does not
  take within WRITE_SECONDS closes its connection;
- the app runs on APP_THREADS threads (a scrape renders every metric), the loop keeps accepting.
"""
from __future__ import annotations

import asyncio
import io
import logging
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

log = logging.getLogger("contextsvc")

BACKLOG = 1024  # the kernel caps it at net.core.somaxconn (4096 on current Linux)
# Connections accepted in one go: well below MAX_CONNECTIONS, so that no one burst of churn
# fills the table and pushes out a health check still sending its request (asyncio's own
# server accepts up to the backlog at once).
ACCEPT_BURST = 64
MAX_CONNECTIONS = 512  # open at once: a few per scraper and health checker; half of 1024 fds
HEAD_SECONDS = 5.0  # from a request's first byte (or the connection's opening) to its blank line
IDLE_SECONDS = 30.0  # a kept-alive connection's wait for its next request (Prometheus scrapes every 15 s or more often)
WRITE_SECONDS = 10.0  # for the client to take an answer
MAX_HEAD_BYTES = 16 * 1024  # request line and headers
MAX_BODY_BYTES = 64 * 1024  # nothing here takes a body; a small one is read and ignored
APP_THREADS = 4


class _Refused(Exception):
    """A request answered with an error and its connection closed: (status, reason)."""


class _Connection:
    """One client connection; waiting_since is when it began waiting on its client (None while
    its request is being answered)."""
    __slots__ = ("writer", "waiting_since")

    def __init__(self, writer):
        self.writer = writer
        self.waiting_since = time.monotonic()

    def close(self) -> None:
        self.writer.transport.abort()


class HttpServer:
    """Serves app (a WSGI callable) on host:port from a thread of its own; start() binds and
    returns the port (port 0 picks a free one), stop() closes every connection."""

    def __init__(self, app):
        self.app = app
        self.port = None
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._open: set[_Connection] = set()
        self._pool = ThreadPoolExecutor(max_workers=APP_THREADS, thread_name_prefix="metrics-http")

    def start(self, host: str, port: int) -> int:
        started = threading.Event()
        failure = []

        def run():
            asyncio.set_event_loop(self._loop)
            try:
                self._listener = _listen(host, port)
                self.port = self._listener.getsockname()[1]
                self._loop.add_reader(self._listener.fileno(), self._accept)
            except Exception as e:  # a port in use: raised in the caller's thread
                failure.append(e)
                return
            finally:
                started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="metrics-http", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._loop.close()
            raise failure[0]
        return self.port

    def stop(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            return

        def close():
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            for conn in list(self._open):
                conn.close()
            self._loop.call_later(0.1, self._loop.stop)  # the handlers see their connections end

        self._loop.call_soon_threadsafe(close)
        self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self._loop.close()

    # -- connections -------------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: the rest wait in the backlog
                log.warning("metrics HTTP: accepting a connection failed: %s", e)
                return
            self._loop.create_task(self._serve_socket(sock))

    async def _serve_socket(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_HEAD_BYTES)
        except OSError:
            sock.close()
            return
        await self._serve(reader, writer)

    def _admit(self, conn: _Connection) -> bool:
        """Makes room for conn: at the limit, the connection waiting longest on its client goes;
        False (conn is to close) when every open one is being answered."""
        if len(self._open) >= MAX_CONNECTIONS:
            waiting = [c for c in self._open if c.waiting_since is not None]
            if not waiting:
                return False
            oldest = min(waiting, key=lambda c: c.waiting_since)
            self._open.discard(oldest)
            oldest.close()
        self._open.add(conn)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer)
        if not self._admit(conn):
            conn.close()
            return
        try:
            keep_alive, first = True, True
            while keep_alive:
                conn.waiting_since = time.monotonic()
                try:
                    environ = await self._request(reader, writer, first)
                except _Refused as e:
                    status, reason = e.args
                    await self._send(writer, status, [("Content-Type", "text/plain; charset=utf-8")],
                                     f"{reason}\n".encode(), "GET", False)
                    return
                if environ is None:
                    return  # the client closed, or stayed idle too long
                first = False
                conn.waiting_since = None
                keep_alive = _keeps_alive(environ)
                status, headers, body = await self._loop.run_in_executor(self._pool, _call, self.app, environ)
                conn.waiting_since = time.monotonic()
                await self._send(writer, status, headers, body, environ["REQUEST_METHOD"], keep_alive)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError):
            pass  # the connection is gone or timed out; nothing to answer
        except Exception:
            log.exception("metrics HTTP: a request failed")
        finally:
            self._open.discard(conn)
            conn.close()

    async def _request(self, reader: asyncio.StreamReader, writer, first: bool) -> dict | None:
        """The next request's WSGI environ, None when the connection ends before one."""
        start = await asyncio.wait_for(reader.read(1), HEAD_SECONDS if first else IDLE_SECONDS)
        if not start:
            return None
        try:
            head = start + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        except (asyncio.LimitOverrunError, ValueError):
            raise _Refused("431 Request Header Fields Too Large", "the request head is too large") from None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _Refused("400 Bad Request", "not an HTTP/1 request line") from None
        if not version.startswith("HTTP/1."):
            raise _Refused("505 HTTP Version Not Supported", "HTTP/1.0 and HTTP/1.1 only")
        path, _, query = target.partition("?")
        environ = {
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(path, "latin-1"),
            "QUERY_STRING": query, "SERVER_PROTOCOL": version, "SERVER_NAME": "contextsvc",
            "SERVER_PORT": str(self.port), "REMOTE_ADDR": (writer.get_extra_info("peername") or ("",))[0],
            "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
            "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                continue
            key = name.strip().upper().replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value.strip()
            else:
                environ["HTTP_" + key] = value.strip()
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            raise _Refused("411 Length Required", "a body needs a Content-Length")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise _Refused("400 Bad Request", "Content-Length is not a number") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise _Refused("413 Content Too Large", f"a body of at most {MAX_BODY_BYTES} bytes")
        body = await asyncio.wait_for(reader.readexactly(length), HEAD_SECONDS) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        return environ

    async def _send(self, writer, status: str, headers: list, body: bytes, method: str,
                    keep_alive: bool) -> None:
        names = {name.lower() for name, _ in headers}
        head = [f"HTTP/1.1 {status}"] + [f"{name}: {value}" for name, value in headers]
        if "content-length" not in names:
            head.append(f"Content-Length: {len(body)}")
        head.append("Connection: keep-alive" if keep_alive else "Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if method != "HEAD":
            writer.write(body)
        await asyncio.wait_for(writer.drain(), WRITE_SECONDS)


def _listen(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket on host:port ("" = every address)."""
    info = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _keeps_alive(environ: dict) -> bool:
    connection = environ.get("HTTP_CONNECTION", "").lower()
    if environ["SERVER_PROTOCOL"] == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


def _call(app, environ: dict) -> tuple:
    """(status, headers, body) of one WSGI call, run on the app threads."""
    started = []

    def start_response(status, headers, exc_info=None):
        started[:] = [status, headers]

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return started[0], started[1], body
