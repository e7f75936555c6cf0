"""A fake Anthropic Messages API on loopback, for the summarizer's and the token count's real SDK
paths.

One mode per behaviour (MODES below); set `mode` at any time. Every request is recorded in
`requests` as (path, headers, JSON body). `release` lets go of the requests a hanging or
trickling mode holds (close() sets it). The modes are the provider's envelope around them
(`reply`, `error`, `refusal`): fake_openai's Chat Completions API reuses them all.

`/v1/messages/count_tokens` answers with `count(body)`: cl100k's count of the system, messages
and tools scaled by CLAUDE_SCALE, a tokenizer the service counts with neither offline nor in
its calibration, so a figure equal to it can only have come from the endpoint."""
from __future__ import annotations

import functools
import gzip
import json
import math
import socket
import threading
import time
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextsvc import encodings
from contextsvc.compact import template
from helpers.server import start_server


SUMMARY = template.render({"goal": ["Fix src/app/server.py"], "files": ["`src/app/server.py`: read"]})
BLOCK = 64 * 1024  # what the streaming modes write at a time
COUNT_PATH = "/v1/messages/count_tokens"
CLAUDE_SCALE = 1.35  # the stand-in Claude tokenizer: cl100k's count times this
_MARK = "@@TEXT@@"


def response(status: int, payload, headers: str = "") -> bytes:
    """A whole HTTP response: the status line (HTTP/1.0, as BaseHTTPRequestHandler sends it),
    the headers and the body (bytes as given, anything else as JSON)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    head = (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"{headers}content-length: {len(body)}\r\n\r\n")
    return head.encode() + body


@functools.cache
def gzip_bomb(inflated: int = 200 << 20) -> bytes:
    """A gzip body inflating to `inflated` bytes of JSON-looking spaces, built in 1 MB steps."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    step = b" " * (1 << 20)
    out = [packer.compress(step) for _ in range(inflated >> 20)]
    return b"".join(out) + packer.flush()


# ---- the modes: each answers one request (api, the request handler, the request's JSON body) ----

def answer(api, handler, body):
    if handler.path.split("?")[0] == COUNT_PATH:
        handler.wfile.write(response(200, {"input_tokens": count(body)}))
        return
    handler.wfile.write(response(200, api.reply(body, api.summary_text)))


def count(body) -> int:
    """The fake's token count of a count_tokens request body."""
    text = json.dumps([body.get("system"), body["messages"], body.get("tools")], ensure_ascii=False)
    return math.ceil(len(encodings.get(encodings.CL100K).encode_ordinary(text)) * CLAUDE_SCALE)


def slow(api, handler, body):
    time.sleep(1.0)
    answer(api, handler, body)


def hang(api, handler, body):
    """Holds the request until released (or 60 s), then answers."""
    api.release.wait(60)
    answer(api, handler, body)


def trickle(api, handler, body):
    """A valid answer, one byte a second (status line and headers included), until released."""
    data = response(200, api.reply(body, SUMMARY))
    for i in range(len(data)):
        if api.release.wait(1.0):
            return
        handler.wfile.write(data[i:i + 1])
        handler.wfile.flush()


def die(api, handler, body):
    """The headers and half the body, then the connection closes."""
    data = response(200, api.reply(body, SUMMARY))
    body_at = data.index(b"\r\n\r\n") + 4
    handler.wfile.write(data[:body_at + (len(data) - body_at) // 2])
    handler.wfile.flush()
    handler.connection.shutdown(socket.SHUT_RDWR)


def reset(api, handler, body):
    """The connection closes without an answer."""
    handler.connection.shutdown(socket.SHUT_RDWR)


def too_long(api, handler, body):
    api.mode = "ok"  # only the first, whole-head request is refused
    handler.wfile.write(api.error(400, "invalid_request_error", api.TOO_LONG))


def gzip_bombed(api, handler, body):
    """200 KB of gzip inflating to 200 MB."""
    handler.wfile.write(response(200, gzip_bomb(), headers="content-encoding: gzip\r\n"))


def gzip_bombed_unsized(api, handler, body):
    """The same bomb with no content-length (the body ends when the connection does): only its
    inflated size gives it away."""
    handler.wfile.write(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n\r\n"
                        + gzip_bomb())


def endless(api, handler, body):
    """A 200 whose body never ends (no length: it would end when the connection does), written
    as fast as the client reads it, until released or the client goes."""
    handler.wfile.write(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n")
    block = b"[" * BLOCK
    while not api.release.is_set():
        handler.wfile.write(block)


def well_formed(size: int):
    """A well-formed reply whose text is `size` bytes, the template (SUMMARY) and a line of "a"s
    to that size, streamed in blocks (never held whole)."""
    def mode(api, handler, body):
        head, tail = (x.encode() for x in json.dumps(api.reply(body, _MARK)).split(_MARK))
        head += json.dumps(SUMMARY + "\n")[1:-1].encode()  # the text's start, escaped in the JSON string
        pad = size - len(SUMMARY) - 1
        handler.wfile.write(f"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n"
                            f"content-length: {len(head) + pad + len(tail)}\r\n\r\n".encode() + head)
        block = b"a" * BLOCK
        for _ in range(pad // BLOCK):
            handler.wfile.write(block)
        handler.wfile.write(block[:pad % BLOCK] + tail)
    return mode


MODES = {
    "ok": answer,
    "slow": slow,  # answers after a second
    "hang": hang,
    "trickle": trickle,
    "die": die,
    "reset": reset,
    "garbage": lambda api, handler, body: handler.wfile.write(response(200, b"<html>502 upstream went away</html>")),
    "500": lambda api, handler, body: handler.wfile.write(api.error(500, "api_error", "boom")),
    "401": lambda api, handler, body: handler.wfile.write(api.error(401, "authentication_error", "invalid x-api-key")),
    "429": lambda api, handler, body: handler.wfile.write(api.error(  # retry-after: api.retry_after seconds
        429, "rate_limit_error", "rate limited", headers=f"retry-after: {api.retry_after}\r\n")),
    "too-long": too_long,
    "refusal": lambda api, handler, body: handler.wfile.write(response(200, api.refusal(body))),
    "gzip": lambda api, handler, body: handler.wfile.write(response(
        200, gzip.compress(json.dumps(api.reply(body, SUMMARY)).encode()), headers="content-encoding: gzip\r\n")),
    "br": lambda api, handler, body: handler.wfile.write(response(  # an encoding not asked for
        200, b"\x1b\x00\x00", headers="content-encoding: br\r\n")),
    "gzip-bomb": gzip_bombed,
    "gzip-bomb-unsized": gzip_bombed_unsized,
    "endless": endless,
    "40MB": well_formed(40 << 20),
    "5MB": well_formed(5 << 20),
    "raw": lambda api, handler, body: handler.wfile.write(response(200, api.raw_body)),  # 200 with raw_body
    # a redirect to the same path: a loop
    "redirect-loop": lambda api, handler, body: handler.wfile.write(response(
        307, b"", headers=f"location: {handler.path}\r\n")),
}


class FakeMessagesAPI:
    BACKEND = "anthropic"  # the summarizer backend that speaks to it
    TOO_LONG = "prompt is too long: 250000 tokens > 200000 maximum"

    @staticmethod
    def reply(request_body, text: str) -> dict:
        return {"id": "msg_test", "type": "message", "role": "assistant", "model": request_body["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 50}}

    @staticmethod
    def refusal(request_body) -> dict:
        return {"id": "msg_test", "type": "message", "role": "assistant", "model": request_body["model"],
                "content": [], "stop_reason": "refusal", "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 0}}

    @staticmethod
    def error(status: int, kind: str, message: str, headers: str = "") -> bytes:
        return response(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

    def __init__(self, mode="ok", raw_body=b""):
        self.mode = mode
        self.raw_body = raw_body
        self.summary_text = SUMMARY  # what "ok" answers
        self.retry_after = "1"  # what "429" asks
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


def summarizer_server(api, fallback=False, timeout=30.0, retries=0, **server):
    """A server on loopback whose summarizer is the backend api fakes (api.BACKEND), talking to
    api (the caller sets the key, CONTEXTSVC_TEST_KEY)."""
    return start_server(summarizer_overrides=dict(
        backend=api.BACKEND, base_url=api.url, api_key_env="CONTEXTSVC_TEST_KEY",
        timeout_seconds=timeout, max_retries=retries, fallback_to_offline=fallback), **server)
