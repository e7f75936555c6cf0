"""A fake Gemini Developer API on loopback that answers `models/{model}:countTokens`, for the
`google-genai` SDK's real path (pointed at it by its base_url).

Its count is o200k's count of the contents scaled by GEMINI_SCALE: a tokenizer the service counts
Gemini with neither offline nor in its calibration, so a figure equal to it can only have come
from the endpoint. Every request is recorded in `requests` as (path, headers, JSON body); mode
"hang" holds a request until `release` is set (close() sets it)."""
from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextsvc import encodings
from helpers.fake_anthropic import response

GEMINI_SCALE = 1.2
COUNT_SUFFIX = ":countTokens"


def count(body) -> int:
    """The fake's token count of a countTokens request body."""
    text = json.dumps(body["contents"], ensure_ascii=False)
    return math.ceil(len(encodings.get(encodings.O200K).encode_ordinary(text)) * GEMINI_SCALE)


class FakeGeminiAPI:
    def __init__(self, mode="ok"):
        self.mode = mode
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
                if api.mode == "hang":
                    api.release.wait(60)
                try:
                    if not self.path.split("?")[0].endswith(COUNT_SUFFIX):
                        self.wfile.write(response(404, {"error": {"code": 404, "message": "not found",
                                                                   "status": "NOT_FOUND"}}))
                        return
                    self.wfile.write(response(200, {"totalTokens": count(body)}))
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
