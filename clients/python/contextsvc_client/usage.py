"""A provider's reported usage as the `Usage` stored with its answer.

The service reads `Usage.input` as the uncached input alone, beside `cache_read` and
`cache_write`: their sum is what the provider counted of the request. The providers split their
counts differently, and storing a total that already holds the cached tokens as `input`, with
those tokens again in `cache_read`, counts them twice: the projection then reads the request at
up to twice its size and a request that fits is compacted.

- Anthropic (`usage`) and Bedrock Converse (`usage`): the input is the uncached part already,
  beside the cache reads and writes; Anthropic's `output_tokens` holds the thinking tokens
  (`output_tokens_details.thinking_tokens`).
- OpenAI Chat Completions and the gateways speaking it (`usage`): `prompt_tokens` holds the
  cached tokens and those written to the cache (`prompt_tokens_details.cached_tokens`,
  `cache_write_tokens`); `completion_tokens` holds the reasoning tokens.
- OpenAI Responses (`response.usage`): `input_tokens` holds the cached and written ones
  (`input_tokens_details`), `output_tokens` the reasoning ones.
- Gemini (`usageMetadata`, `usage_metadata` in the SDK): `promptTokenCount` holds
  `cachedContentTokenCount`; the thinking tokens are counted apart from the answer's.

`usage` may be the provider SDK's object or the response JSON's dict. The provider's own context
management (Anthropic's `context_management.applied_edits`) is not part of it: store the cleared
tokens in `Usage.cleared` yourself.
"""
from __future__ import annotations

from contextsvc.v1 import context_pb2 as pb

_CHAT = {pb.PROVIDER_OPENAI, pb.PROVIDER_OPENAI_COMPATIBLE, pb.PROVIDER_OPENROUTER, pb.PROVIDER_ALIBABA,
         pb.PROVIDER_COPILOT}


def usage_from(provider, usage) -> pb.Usage:
    """The Usage to store with an answer of `provider` (a pb.Provider value or its name, e.g.
    "PROVIDER_OPENAI_RESPONSES") whose reported usage is `usage`. Raises ValueError for an
    unknown provider."""
    kind = pb.Provider.Value(provider) if isinstance(provider, str) else int(provider)
    if kind in (pb.PROVIDER_ANTHROPIC, pb.PROVIDER_BEDROCK):
        thinking = _n(_get(usage, "output_tokens_details"), "thinking_tokens")
        return pb.Usage(input=_n(usage, "input_tokens", "inputTokens"),
                        output=max(0, _n(usage, "output_tokens", "outputTokens") - thinking), reasoning=thinking,
                        cache_read=_n(usage, "cache_read_input_tokens", "cacheReadInputTokens"),
                        cache_write=_n(usage, "cache_creation_input_tokens", "cacheWriteInputTokens"))
    if kind in _CHAT:
        details = _get(usage, "prompt_tokens_details")
        read = _n(details, "cached_tokens")
        write = _n(details, "cache_write_tokens") or _n(details, "cache_creation_input_tokens")
        reasoning = _n(_get(usage, "completion_tokens_details"), "reasoning_tokens")
        return pb.Usage(input=max(0, _n(usage, "prompt_tokens") - read - write), cache_read=read, cache_write=write,
                        output=max(0, _n(usage, "completion_tokens") - reasoning), reasoning=reasoning)
    if kind == pb.PROVIDER_OPENAI_RESPONSES:
        details = _get(usage, "input_tokens_details")
        read, write = _n(details, "cached_tokens"), _n(details, "cache_write_tokens")
        reasoning = _n(_get(usage, "output_tokens_details"), "reasoning_tokens")
        return pb.Usage(input=max(0, _n(usage, "input_tokens") - read - write), cache_read=read, cache_write=write,
                        output=max(0, _n(usage, "output_tokens") - reasoning), reasoning=reasoning)
    if kind == pb.PROVIDER_GEMINI:
        read = _n(usage, "cachedContentTokenCount", "cached_content_token_count")
        return pb.Usage(input=max(0, _n(usage, "promptTokenCount", "prompt_token_count") - read), cache_read=read,
                        output=_n(usage, "candidatesTokenCount", "candidates_token_count"),
                        reasoning=_n(usage, "thoughtsTokenCount", "thoughts_token_count"))
    raise ValueError(f"usage_from: no usage rule for provider {provider!r}")


def _get(obj, name: str):
    """obj's field name, as a dict key or an attribute; None when it has none."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _n(obj, *names: str) -> int:
    """The first of names obj has a number for (a field the provider leaves out, or null, is 0)."""
    for name in names:
        value = _get(obj, name)
        if value is not None:
            return int(value)
    return 0
