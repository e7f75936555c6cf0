"""The providers' token-counting endpoints (docs/design.md §3 "Token figures"): Anthropic's
`messages.count_tokens` through the `anthropic` SDK, Gemini's `countTokens` through `google-genai`,
for the providers named in measure.count_endpoints.

Their count is the reported `exact` figure of a request to that provider, never the decision figure
(SPEC §3: the decision must not depend on a network call, so every replica answers alike). Each
call is bounded by the caller's deadline (a total bound on the exchange, http_exchange: a trickling
endpoint is cut too), and cached by the request's digest, so a request measured again (Measure,
then Assemble, or a retried step) is counted once. On timeout or error the offline figure stands
and its method says why.

Bedrock's Claude is not counted: the `anthropic` SDK refuses token counting on Bedrock
("Token counting is not supported in Bedrock yet"); its figure stays the offline proxy's.
"""
from __future__ import annotations

import hashlib
import importlib
import os

from . import exact_cache, native
from .compact.summarizers import http_exchange

ANTHROPIC_METHOD = "anthropic-count-tokens"
GEMINI_METHOD = "gemini-count-tokens"
REPLY_BYTES = 65536  # a count reply is a few dozen bytes: anything longer is not one
MIN_TIMEOUT = 0.01  # below this the call could not finish: the offline figure stands at once


class Endpoint:
    """One provider's count endpoint: its SDK client (made on first use) and how a lowered body is
    sent to it."""
    method = ""
    sdk = ""  # the SDK's module
    install = ""  # how to get it
    # the body's fields the count reads besides its system and message elements
    fields: tuple = ()

    def __init__(self, base_url: str, api_key_env: str, timeout: float):
        self.base_url, self.api_key_env, self.timeout = base_url, api_key_env, timeout
        self._client = None
        try:
            importlib.import_module(self.sdk)  # now, not within the first caller's deadline
        except ImportError:
            raise RuntimeError(f"measure.count_endpoints: {self.method} needs the {self.sdk} package "
                               f"({self.install})") from None

    def client(self):
        if self._client is None:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise LookupError(f"no API key in ${self.api_key_env}")
            self._client = self.make_client(key, http_exchange.http_client(self.timeout))
        return self._client

    def make_client(self, key: str, http_client):
        raise NotImplementedError

    def send(self, request, model: str, timeout: float) -> int:
        """The endpoint's count of the request's body (raises whatever the SDK raises)."""
        raise NotImplementedError

    def offline_share(self, body: dict) -> bool:
        """Whether the system and tools are left to the offline count (the endpoint cannot take them)."""
        return False

    def digest(self, request, model: str) -> bytes:
        """What identifies the count: the model, the counted fields, and the element texts the
        prefix digests hash (step.request: serialized once per build, shared with the exact counts)."""
        low = request.lowered
        h = hashlib.sha256(f"{self.method}\0{model}\0{len(low.system)}\0".encode())
        h.update(native.json_text([low.body.get(k) for k in self.fields]).encode())
        for text in request.texts(low.system) + request.texts(low.messages):
            h.update(text.encode())
        return h.digest()


class AnthropicEndpoint(Endpoint):
    method = ANTHROPIC_METHOD
    sdk = "anthropic"
    install = "a dependency of contextsvc"
    fields = ("tools", "tool_choice", "thinking")

    def make_client(self, key: str, http_client):
        import anthropic

        return anthropic.Anthropic(api_key=key, base_url=self.base_url or None, timeout=self.timeout,
                                   max_retries=0, http_client=http_client)

    def send(self, request, model: str, timeout: float) -> int:
        body = request.lowered.body
        params = {k: body[k] for k in ("system",) + self.fields if k in body}
        r = self.client().with_options(timeout=timeout).messages.count_tokens(
            model=model, messages=body["messages"], **params)
        return _count(getattr(r, "input_tokens", None))


class GeminiEndpoint(Endpoint):
    """The Gemini Developer API: its SDK counts `contents` only (a system instruction or tools in
    the count's config are refused outside Vertex AI), so those two come from the offline count."""
    method = GEMINI_METHOD
    sdk = "google.genai"
    install = "pip install contextsvc[gemini]"

    def make_client(self, key: str, http_client):
        from google import genai
        from google.genai import types

        return genai.Client(api_key=key, http_options=types.HttpOptions(
            base_url=self.base_url or None, httpx_client=http_client))

    def send(self, request, model: str, timeout: float) -> int:
        from google.genai import types

        # from the JSON text, so base64 fields (inline data, thought signatures) are read as bytes
        contents = [types.Content.model_validate_json(text) for text in request.texts(request.lowered.messages)]
        r = self.client().models.count_tokens(model=model, contents=contents, config=types.CountTokensConfig(
            http_options=types.HttpOptions(timeout=max(1, int(timeout * 1000)))))
        return _count(getattr(r, "total_tokens", None))

    def offline_share(self, body: dict) -> bool:
        return "systemInstruction" in body or "tools" in body


KINDS = {"anthropic": AnthropicEndpoint, "gemini": GeminiEndpoint}  # by provider (config.COUNT_ENDPOINTS)


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"the reply held no token count ({value!r})")
    return value


class CountEndpoints:
    """The configured endpoints by provider, and the counts they gave, by request digest."""

    def __init__(self, mc):
        self.timeout = mc.count_endpoint_timeout_seconds
        self._by_provider = {
            name: KINDS[name](getattr(mc, f"{name}_count_base_url"), getattr(mc, f"{name}_count_api_key_env"),
                              self.timeout)
            for name in mc.count_endpoints}
        self.cache = exact_cache.CountCache(mc.count_endpoint_cache_entries)

    def __bool__(self) -> bool:
        return bool(self._by_provider)

    def exact(self, request, model, offline: tuple, offline_overhead: int, deadline) -> tuple | None:
        """((tokens, method), the model's own count) of the request from its provider's endpoint,
        or None when none is configured for it. offline: the offline exact figure, which stands
        (its method saying why) when the endpoint fails or the caller's time is short;
        offline_overhead: its count of the system and tools."""
        endpoint = self._by_provider.get(model.provider)
        if endpoint is None:
            return None
        try:
            key = endpoint.digest(request, model.id)
            counted = self.cache.lookup([key])[0]
            if counted is None:
                counted = self._ask(endpoint, request, model.id, deadline)
                self.cache.store([(key, counted)], 0)
        except _Failed as exc:
            return (offline[0], f"{offline[1]} ({endpoint.method} unavailable: {exc})"), False
        if endpoint.offline_share(request.lowered.body):
            return (counted + offline_overhead, f"{endpoint.method}(contents)+{offline[1]}(system,tools)"), False
        return (counted, endpoint.method), True

    def _ask(self, endpoint: Endpoint, request, model_id: str, deadline) -> int:
        left = deadline.remaining()
        # the rest of the step and the answer still have to reach the caller: half of what is left
        timeout = self.timeout if left is None else min(self.timeout, left / 2)
        if timeout < MIN_TIMEOUT:
            raise _Failed("no time left before the caller's deadline")
        exchange = http_exchange.Exchange(timeout, REPLY_BYTES, abandoned=deadline.expired)  # ended when the caller goes
        try:
            with exchange:
                return endpoint.send(request, model_id, timeout)
        except Exception as exc:  # informative only: whatever failed, the offline figure stands
            if exchange.refused:
                raise _Failed(exchange.refused) from exc
            if exchange.expired or "timeout" in type(exc).__name__.lower() or "timed out" in str(exc).lower():
                raise _Failed(f"no answer within {timeout:.3g}s") from exc
            status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
            detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise _Failed(f"HTTP {status}: {detail}" if isinstance(status, int) else detail) from exc


class _Failed(Exception):
    """Why an endpoint gave no count (said in the offline figure's method)."""
