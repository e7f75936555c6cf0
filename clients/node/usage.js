// A provider's reported usage as the Usage stored with its answer (proto-loader's plain object,
// field names as in the proto). The service reads Usage.input as the uncached input alone, beside
// cache_read and cache_write: their sum is what the provider counted of the request. Providers
// split their counts differently (the Python client's contextsvc_client/usage.py says how); a
// total that already holds the cached tokens stored as `input`, with those again in cache_read,
// counts them twice, and a request that fits is compacted.
// usage: the provider's JSON (Anthropic's and OpenAI's `usage`, Bedrock Converse's `usage`,
// Gemini's `usageMetadata`); provider: the Model's provider, "PROVIDER_ANTHROPIC" and so on.
"use strict";

const CHAT = new Set(["PROVIDER_OPENAI", "PROVIDER_OPENAI_COMPATIBLE", "PROVIDER_OPENROUTER", "PROVIDER_ALIBABA",
  "PROVIDER_COPILOT"]);

// the first of names obj has a number for (a field left out, or null, is 0)
function n(obj, ...names) {
  for (const name of names) {
    const value = obj == null ? undefined : obj[name];
    if (value != null) return Number(value);
  }
  return 0;
}

function usageFrom(provider, usage) {
  const u = usage || {};
  if (provider === "PROVIDER_ANTHROPIC" || provider === "PROVIDER_BEDROCK") {
    const thinking = n(u.output_tokens_details, "thinking_tokens");
    return { input: n(u, "input_tokens", "inputTokens"),
      output: Math.max(0, n(u, "output_tokens", "outputTokens") - thinking), reasoning: thinking,
      cache_read: n(u, "cache_read_input_tokens", "cacheReadInputTokens"),
      cache_write: n(u, "cache_creation_input_tokens", "cacheWriteInputTokens") };
  }
  if (CHAT.has(provider)) {
    const read = n(u.prompt_tokens_details, "cached_tokens");
    const write = n(u.prompt_tokens_details, "cache_write_tokens", "cache_creation_input_tokens");
    const reasoning = n(u.completion_tokens_details, "reasoning_tokens");
    return { input: Math.max(0, n(u, "prompt_tokens") - read - write), cache_read: read, cache_write: write,
      output: Math.max(0, n(u, "completion_tokens") - reasoning), reasoning };
  }
  if (provider === "PROVIDER_OPENAI_RESPONSES") {
    const read = n(u.input_tokens_details, "cached_tokens");
    const write = n(u.input_tokens_details, "cache_write_tokens");
    const reasoning = n(u.output_tokens_details, "reasoning_tokens");
    return { input: Math.max(0, n(u, "input_tokens") - read - write), cache_read: read, cache_write: write,
      output: Math.max(0, n(u, "output_tokens") - reasoning), reasoning };
  }
  if (provider === "PROVIDER_GEMINI") {
    const read = n(u, "cachedContentTokenCount", "cached_content_token_count");
    return { input: Math.max(0, n(u, "promptTokenCount", "prompt_token_count") - read), cache_read: read,
      cache_write: 0, output: n(u, "candidatesTokenCount", "candidates_token_count"),
      reasoning: n(u, "thoughtsTokenCount", "thoughts_token_count") };
  }
  throw new Error(`usageFrom: no usage rule for provider ${JSON.stringify(provider)}`);
}

module.exports = { usageFrom };
