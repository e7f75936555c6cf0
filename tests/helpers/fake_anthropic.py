"""A fake Anthropic Messages API on loopback, for the summarizer's real SDK path."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextsvc.compact import template


SUMMARY = template.render({"goal": ["Fix src/app/server.py"], "files": ["`src/app/server.py`: read"]})


class FakeMessagesAPI:
    def __init__(self, mode="ok"):
        self.mode = mode
        self.requests = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                api.requests.append((self.path, dict(self.headers), body))
                if api.mode == "slow":
                    time.sleep(1.0)
                    status, payload = 200, api.ok(body)
                elif api.mode == "500":
                    status, payload = 500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}
                elif api.mode == "too-long":
                    api.mode = "ok"  # only the first, whole-head request is refused
                    status, payload = 400, {"type": "error", "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 250000 tokens > 200000 maximum"}}
                elif api.mode == "401":
                    status, payload = 401, {"type": "error", "error": {
                        "type": "authentication_error", "message": "invalid x-api-key"}}
                else:
                    status, payload = 200, api.ok(body)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def ok(body):
        return {"id": "msg_test", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": SUMMARY}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 50}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()
