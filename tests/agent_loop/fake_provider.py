"""A fake LLM provider: a real HTTP server on 127.0.0.1 that enforces a context window.

POST /<provider>/<window> with a provider body (provider: anthropic, openai, bedrock,
openai-responses, gemini; window: the model's context in tokens), or POST
/openai-responses/<window>/responses, where the `openai` SDK posts `client.responses.create` with
`fp.url("openai-responses", window)` as its base_url. The server counts the body's input with its
tokenizer (never the service's estimate; unless told one, each provider's model's own where it is
public, o200k for OpenAI's GPT-4o and GPT-5 as the real API counts them, else cl100k, what the
service calibrates on): the body JSON with every image/document base64
payload replaced by "", plus IMAGE_TOKENS per image or document. It reads the output cap from the body (`max_tokens`,
`max_completion_tokens`, `max_output_tokens`, `inferenceConfig.maxTokens` or
`generationConfig.maxOutputTokens`) and refuses with HTTP 400 and a
provider-like "prompt is too long" error when input + cap > window, as the real APIs do. It also
refuses a body whose tool calls and tool results are not paired (the real APIs reject those too),
and, first of all, any body the provider's own published library refuses (tests/judges).
Otherwise it answers 200 with `usage.input_tokens` = the count (plus the provider's own field; on
Responses a whole `Response` object, as the SDK reads one, with no output items).

The provider's own context management (`context_management`, tests/agent_loop/context_editing.py)
is applied before counting: Anthropic's tool-result clearing, when the request names its beta in
the `anthropic-beta` header (the judge refuses the body otherwise), is counted after clearing and
reported in the answer's `context_management`; what the fake does not emulate is refused.

Every request is logged (`FakeProvider.log`) for the test to read.

    with FakeProvider() as fp:
        url = fp.url("anthropic", 32000)

A provider whose model counts with another tokenizer, for every provider: FakeProvider(O200K),
FakeProvider(CLAUDE_STANDIN) for Claude's (not public; newer generations count up to 1.35x what
cl100k does).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextsvc import encodings
from judges import judge_for

from . import context_editing

IMAGE_TOKENS = 1_600              # what one image or document costs the fake model
PROVIDERS = ("anthropic", "openai", "bedrock", "openai-responses", "gemini")
SDK_PATHS = {"openai-responses": "responses"}  # what a provider's SDK appends to its base_url


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """How the fake model counts text: an offline encoding's count times scale, rounded up."""
    name: str
    encoding: str  # contextsvc.encodings name
    scale: Fraction = Fraction(1)

    def counter(self):
        """text -> tokens."""
        encode = encodings.get(self.encoding).encode_ordinary
        if self.scale == 1:
            return lambda text: len(encode(text))
        return lambda text: math.ceil(len(encode(text)) * self.scale)


CL100K = Tokenizer("cl100k", "cl100k_base")  # config.measure.exact_encoding: what the service calibrates on
O200K = Tokenizer("o200k", "o200k_base")  # GPT-4o, GPT-4.1, GPT-5, o-series
CLAUDE_STANDIN = Tokenizer("cl100k x1.35", "cl100k_base", Fraction("1.35"))  # Claude's newer tokenizers' bound
# the tokenizer Opus 4.7 brought counts 1.53x cl100k at the median and 1.73x at the p90 on the
# calibration material (bench/claude_counts.py, ctok's reconstruction): this stand-in counts the
# p90 throughout
CLAUDE_47_STANDIN = Tokenizer("cl100k x1.73", "cl100k_base", Fraction("1.73"))


@dataclasses.dataclass
class Logged:
    provider: str
    window: int
    input_tokens: int
    max_tokens: int
    media: int
    body_bytes: int
    refused: bool
    error: str = ""
    # the body in cache order (tools, system, messages), cache markers removed: one digest per
    # element, each tagged with its segment (see prefix_elements)
    elements: tuple = ()
    # the provider's own context management: tool uses it cleared and the tokens that freed
    # (input_tokens counts what was left), and the prompt the model read, as elements above
    cleared_tool_uses: int = 0
    cleared_tokens: int = 0
    seen_elements: tuple = ()


def prefix_elements(provider: str, body: dict) -> tuple:
    """The body's elements as the provider's prompt cache reads them (tools -> system -> messages,
    markers removed: tests/test_prefix_stability.py's cache_order), one short digest each."""
    from helpers.prefix import cache_order  # tests/ is on sys.path in the tests and benches

    if provider != "openai":  # a hand-made body may have no system prompt
        body = {"system": [], **body}
    order = cache_order(provider, body)
    return tuple(f"{segment}:" + hashlib.sha256(json.dumps(e, sort_keys=True, ensure_ascii=False).encode())
                 .hexdigest()[:16] for segment in ("tools", "system", "messages") for e in order[segment])


def is_prefix(previous: tuple, current: tuple) -> bool:
    """The previous request's elements all reappear, unchanged and in order, at the head of this one."""
    return len(previous) <= len(current) and current[:len(previous)] == previous


def first_difference(previous: tuple, current: tuple) -> str:
    """Where current stops repeating previous ("segment[index]"), or ""."""
    for i, e in enumerate(previous):
        if i >= len(current) or current[i] != e:
            segment = e.split(":", 1)[0]
            return f"{segment}[{sum(x.startswith(segment + ':') for x in previous[:i])}]"
    return ""


def strip_media(node):
    """(copy of the body with base64 media payloads replaced by "", number of media items)."""
    count = 0

    def walk(x):
        nonlocal count
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        out = {k: walk(v) for k, v in x.items()}
        kind = x.get("type")
        if kind in ("image", "document") and isinstance(x.get("source"), dict):     # Anthropic
            count += 1
            if "data" in out["source"]:
                out["source"] = {**out["source"], "data": ""}
        elif kind == "image_url" and isinstance(x.get("image_url"), dict):            # OpenAI
            count += 1
            out["image_url"] = {**out["image_url"], "url": ""}
        elif kind == "file" and isinstance(x.get("file"), dict):
            count += 1
            out["file"] = {**out["file"], "file_data": ""}
        elif kind == "input_image":                                                    # OpenAI Responses
            count += 1
            out["image_url"] = ""
        elif kind == "input_file":
            count += 1
            out["file_data"] = ""
        if isinstance(x.get("inlineData"), dict):                                      # Gemini
            count += 1
            out["inlineData"] = {**out["inlineData"], "data": ""}
        for key in ("image", "document"):                                             # Bedrock
            if isinstance(x.get(key), dict) and isinstance(x[key].get("source"), dict):
                count += 1
                out[key] = {**out[key], "source": {**out[key]["source"], "bytes": ""}}
        return out

    return walk(node), count


def max_tokens(body: dict) -> int:
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(body.get(key), int):
            return body[key]
    if isinstance((body.get("generationConfig") or {}).get("maxOutputTokens"), int):
        return body["generationConfig"]["maxOutputTokens"]
    return int((body.get("inferenceConfig") or {}).get("maxTokens") or 0)


def unpaired_tool_calls(provider: str, body: dict) -> list[str]:
    """Tool calls without their result in the next message, and results without their call."""
    if provider == "openai-responses":
        return _unpaired_items(body.get("input") or [])
    if provider == "gemini":  # the judge's own rule: calls and responses of adjacent turns, name for name
        return [x for x in judge_for("gemini")(body) if x.startswith("tool-pairing: ")]
    msgs = body.get("messages") or []
    problems = []

    def calls_results(m):
        calls, results = [], []
        content = m.get("content")
        if provider == "openai":
            calls = [c["id"] for c in m.get("tool_calls") or []]
            if m.get("role") == "tool":
                results = [m.get("tool_call_id")]
            return calls, results
        for block in content if isinstance(content, list) else []:
            if provider == "anthropic":
                if block.get("type") == "tool_use":
                    calls.append(block["id"])
                elif block.get("type") == "tool_result":
                    results.append(block["tool_use_id"])
            else:
                if "toolUse" in block:
                    calls.append(block["toolUse"]["toolUseId"])
                elif "toolResult" in block:
                    results.append(block["toolResult"]["toolUseId"])
        return calls, results

    parsed = [calls_results(m) for m in msgs]
    for i, (calls, _) in enumerate(parsed):
        if not calls:
            continue
        if provider == "openai":  # the results are the `tool` messages right after
            answered, j = [], i + 1
            while j < len(msgs) and msgs[j].get("role") == "tool":
                answered += parsed[j][1]
                j += 1
        else:
            answered = parsed[i + 1][1] if i + 1 < len(parsed) else []
        problems += [f"messages[{i}]: call {c} has no result" for c in calls if c not in answered]
    for i, (_, results) in enumerate(parsed):
        if not results:
            continue
        if provider == "openai":
            j = i - 1
            while j >= 0 and msgs[j].get("role") == "tool":
                j -= 1
            asked = parsed[j][0] if j >= 0 else []
        else:
            asked = parsed[i - 1][0] if i > 0 else []
        problems += [f"messages[{i}]: result {r} answers no call" for r in results if r not in asked]
    return problems


def _unpaired_items(items: list) -> list[str]:
    """Responses: a function_call without a function_call_output after it (same call_id), and an
    output answering no earlier call."""
    problems, called, answered = [], {}, set()
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            called[item["call_id"]] = i
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in called:
                problems.append(f"input[{i}]: result {item['call_id']} answers no call")
            answered.add(item["call_id"])
    return problems + [f"input[{i}]: call {c} has no result" for c, i in called.items() if c not in answered]


def _error(provider: str, kind: str, message: str) -> dict:
    if provider == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if provider == "gemini":
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    if provider in ("openai", "openai-responses"):
        return {"error": {"message": message, "type": "invalid_request_error",
                          "param": "input" if provider == "openai-responses" else "messages",
                          "code": "context_length_exceeded" if kind == "too_long" else None}}
    return {"__type": "ValidationException", "message": message}


def _ok(provider: str, tokens: int, body: dict, management: dict | None) -> dict:
    usage = {"input_tokens": tokens, "output_tokens": 0}
    if provider == "openai":
        usage.update(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens)
    elif provider == "bedrock":
        usage.update(inputTokens=tokens, outputTokens=0, totalTokens=tokens)
    elif provider == "gemini":  # GenerateContentResponse: its usage is usageMetadata
        return {"candidates": [], "usage": usage,
                "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": 0, "totalTokenCount": tokens}}
    elif provider == "openai-responses":  # a whole Response (the SDK's type), usage under its own names
        usage.update(total_tokens=tokens, input_tokens_details={"cached_tokens": 0, "cache_write_tokens": 0},
                     output_tokens_details={"reasoning_tokens": 0})
        return {"id": "resp_fake", "object": "response", "created_at": 0, "model": body.get("model", ""),
                "status": "completed", "output": [], "parallel_tool_calls": True,
                "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []), "usage": usage}
    out = {"usage": usage, "stop_reason": "tool_use"}
    if management is not None:  # Anthropic's context_management answer (BetaContextManagementResponse)
        out["context_management"] = management
    return out


# the tokenizer each provider's model counts with, where it is public (the loops' models: gpt-4o,
# gpt-5); the others count with CL100K
OWN_TOKENIZERS = {"openai": O200K, "openai-responses": O200K}


class FakeProvider:
    def __init__(self, tokenizer: Tokenizer | None = None):
        """tokenizer: what every provider's model counts with; None: each its own (OWN_TOKENIZERS)."""
        self.log: list[Logged] = []
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self._counters = {t: t.counter() for t in ({tokenizer} if tokenizer else {CL100K, *OWN_TOKENIZERS.values()})}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, provider: str, window: int) -> str:
        return f"http://127.0.0.1:{self.port}/{provider}/{window}"

    def start(self) -> "FakeProvider":
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def tokenizer_of(self, provider: str) -> Tokenizer:
        return self.tokenizer or OWN_TOKENIZERS.get(provider, CL100K)

    def count(self, body: dict, provider: str) -> tuple[int, int]:
        """(input tokens, media items) as provider's fake model counts them: the prompt, not the
        context_management configuration."""
        stripped, media = strip_media(context_editing.prompt(body))
        text = json.dumps(stripped, ensure_ascii=False, separators=(",", ":"))
        return self._counters[self.tokenizer_of(provider)](text) + IMAGE_TOKENS * media, media

    def answer(self, provider: str, window: int, raw: bytes, headers: dict | None = None) -> tuple[int, dict]:
        """headers: the request's HTTP headers, names in lower case (the betas it names)."""
        body = json.loads(raw)
        cap = max_tokens(body)
        entry = Logged(provider, window, 0, cap, 0, len(raw), False, elements=prefix_elements(provider, body))
        unpaired = unpaired_tool_calls(provider, body)
        problems = [] if unpaired else self._judge(provider, body, headers or {})
        seen, management, unemulated = body, None, ""
        if not unpaired and not problems:
            try:
                seen, management = context_editing.apply(provider, body, lambda prompt: self.count(prompt, provider)[0])
            except context_editing.Unemulated as e:
                unemulated = str(e)
        tokens, media = self.count(seen, provider)
        entry.input_tokens, entry.media = tokens, media
        for edit in (management or {}).get("applied_edits", ()):
            entry.cleared_tool_uses += edit["cleared_tool_uses"]
            entry.cleared_tokens += edit["cleared_input_tokens"]
        entry.seen_elements = prefix_elements(provider, seen) if entry.cleared_tool_uses else entry.elements
        if unpaired:
            entry.refused, entry.error = True, "unpaired: " + "; ".join(unpaired[:3])
            status, out = 400, _error(provider, "unpaired", "tool_use ids were found without tool_result blocks "
                                      "immediately after: " + "; ".join(unpaired[:3]))
        elif problems:
            entry.refused, entry.error = True, "invalid: " + "; ".join(problems[:3])
            status, out = 400, _error(provider, "invalid", "; ".join(problems[:3]))
        elif unemulated:
            entry.refused, entry.error = True, "unemulated: " + unemulated
            status, out = 400, _error(provider, "invalid", "the fake provider does not emulate " + unemulated)
        elif tokens + cap > window:
            entry.refused, entry.error = True, "too_long"
            status, out = 400, _error(provider, "too_long",
                                      f"prompt is too long: {tokens} tokens + {cap} max_tokens > {window} maximum")
        else:
            status, out = 200, _ok(provider, tokens, body, management)
        with self._lock:
            self.log.append(entry)
        return status, out

    @staticmethod
    def _judge(provider: str, body: dict, headers: dict) -> list:
        """What the provider's own library refuses of the body (Anthropic's reads the betas the
        headers name)."""
        if provider == "anthropic":
            return judge_for(provider)(body, headers)
        return judge_for(provider)(body)

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and SDK_PATHS.get(parts[0]) == parts[2]:
                    parts = parts[:2]
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if len(parts) != 2 or parts[0] not in PROVIDERS or not parts[1].isdigit():
                    status, out = 404, {"error": f"POST /<{'|'.join(PROVIDERS)}>/<window>, not {self.path}"}
                else:
                    try:
                        headers = {k.lower(): v for k, v in self.headers.items()}
                        status, out = fake.answer(parts[0], int(parts[1]), raw, headers)
                    except ValueError as e:
                        status, out = 400, {"error": f"bad JSON body: {e}"}
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        return Handler
