// Unit tests of usage.js on each provider's usage JSON: the input side is the provider's count of
// the request, counted once. Run: node --test usage.test.js
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { usageFrom } = require("./usage");

// one request of 30,100 input tokens, 28,000 read from the cache and 1,000 written to it, and 900
// output tokens, 600 of them reasoning, as each provider's API reports it
const REPORTED = {
  PROVIDER_ANTHROPIC: { input_tokens: 1100, cache_read_input_tokens: 28000, cache_creation_input_tokens: 1000,
    output_tokens: 900, output_tokens_details: { thinking_tokens: 600 } },
  PROVIDER_BEDROCK: { inputTokens: 1100, cacheReadInputTokens: 28000, cacheWriteInputTokens: 1000, outputTokens: 900 },
  PROVIDER_OPENAI: { prompt_tokens: 30100, completion_tokens: 900,
    prompt_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    completion_tokens_details: { reasoning_tokens: 600 } },
  PROVIDER_OPENROUTER: { prompt_tokens: 30100, completion_tokens: 900,
    prompt_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    completion_tokens_details: { reasoning_tokens: 600 } },
  PROVIDER_OPENAI_RESPONSES: { input_tokens: 30100, output_tokens: 900,
    input_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    output_tokens_details: { reasoning_tokens: 600 } },
  PROVIDER_GEMINI: { promptTokenCount: 30100, cachedContentTokenCount: 28000, candidatesTokenCount: 300,
    thoughtsTokenCount: 600 },
};

for (const [provider, usage] of Object.entries(REPORTED)) {
  test(`${provider}: the input side is the provider's count of the request, once`, () => {
    const u = usageFrom(provider, usage);
    assert.equal(u.input + u.cache_read + u.cache_write, 30100);
    assert.equal(u.cache_read, 28000);
    assert.equal(u.input + u.output + u.reasoning + u.cache_read + u.cache_write, 31000);
    if (provider !== "PROVIDER_BEDROCK") assert.deepEqual([u.output, u.reasoning], [300, 600]);
  });
}

test("a field left out or null is 0, and an unknown provider throws", () => {
  assert.deepEqual(usageFrom("PROVIDER_OPENAI", { prompt_tokens: 500, completion_tokens: 20, prompt_tokens_details: null }),
    { input: 500, cache_read: 0, cache_write: 0, output: 20, reasoning: 0 });
  assert.throws(() => usageFrom("PROVIDER_UNSPECIFIED", {}), /provider/);
});
