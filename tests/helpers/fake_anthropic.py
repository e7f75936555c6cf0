"""A fake Anthropic Messages API on loopback, for the summarizer's real SDK path.

One mode per behaviour (MODES below); set `mode` at any time. Every request is recorded in
`requests` as (path, headers, JSON body). `release` lets go of the requests a hanging or
trickling mode holds (close() sets it)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextsvc.compact import template
from helpers.server import start_server


SUMMARY = template.render({"goal": ["Fix src/app/server.py"], "files": ["`src/app/server.py`: read"]})


def response(status: int, payload) -> bytes:
    """A whole HTTP response: the status line (HTTP/1.0, as BaseHTTPRequestHandler sends it),
    the headers and the body (bytes as given, anything else as JSON)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    head = (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    return head.encode() + body


def summary(request_body) -> bytes:
    return response(200, {"id": "msg_test", "type": "message", "role": "assistant",
                          "model": request_body["model"], "content": [{"type": "text", "text": SUMMARY}],
                          "stop_reason": "end_turn", "stop_sequence": None,
                          "usage": {"input_tokens": 100, "output_tokens": 50}})


def error(status: int, kind: str, message: str) -> bytes:
    return response(status, {"type": "error", "error": {"type": kind, "message": message}})


# ---- the modes: each answers one request (api, the request handler, the request's JSON body) ----

def answer(api, handler, body):
    handler.wfile.write(summary(body))


def slow(api, handler, body):
    time.sleep(1.0)
    answer(api, handler, body)


def hang(api, handler, body):
    """Holds the request until released (or 60 s), then answers."""
    api.release.wait(60)
    answer(api, handler, body)


def trickle(api, handler, body):
    """A valid answer, one byte a second (status line and headers included), until released."""
    data = summary(body)
    for i in range(len(data)):
        if api.release.wait(1.0):
            return
        handler.wfile.write(data[i:i + 1])
        handler.wfile.flush()


def die(api, handler, body):
    """The headers and half the body, then the connection closes."""
    data = summary(body)
    body_at = data.index(b"\r\n\r\n") + 4
    handler.wfile.write(data[:body_at + (len(data) - body_at) // 2])
    handler.wfile.flush()
    handler.connection.shutdown(socket.SHUT_RDWR)


def reset(api, handler, body):
    """The connection closes without an answer."""
    handler.connection.shutdown(socket.SHUT_RDWR)


def too_long(api, handler, body):
    api.mode = "ok"  # only the first, whole-head request is refused
    handler.wfile.write(error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"))


MODES = {
    "ok": answer,
    "slow": slow,  # answers after a second
    "hang": hang,
    "trickle": trickle,
    "die": die,
    "reset": reset,
    "garbage": lambda api, handler, body: handler.wfile.write(response(200, b"<html>502 upstream went away</html>")),
    "500": lambda api, handler, body: handler.wfile.write(error(500, "api_error", "boom")),
    "401": lambda api, handler, body: handler.wfile.write(error(401, "authentication_error", "invalid x-api-key")),
    "too-long": too_long,
    "raw": lambda api, handler, body: handler.wfile.write(response(200, api.raw_body)),  # 200 with raw_body
}


class FakeMessagesAPI:
    def __init__(self, mode="ok", raw_body=b""):
        self.mode = mode
        self.raw_body = raw_body
        self.requests = []
        self.release = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                api.requests.append((self.path, dict(self.headers), body))
                self.close_connection = True
                try:
                    MODES[api.mode](api, self, body)
                except OSError:
                    pass  # the client went away

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def anthropic_server(api, fallback=False, timeout=30.0, retries=0, **server):
    """A server on loopback whose summarizer is the anthropic backend talking to api (the caller
    sets the key, CONTEXTSVC_TEST_KEY)."""
    return start_server(summarizer_overrides=dict(
        backend="anthropic", base_url=api.url, api_key_env="CONTEXTSVC_TEST_KEY",
        timeout_seconds=timeout, max_retries=retries, fallback_to_offline=fallback), **server)
