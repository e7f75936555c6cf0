// Unit tests of usage.ts on each provider's usage JSON: the input side is the provider's count of
// the request, counted once. Run: npm run build && npm test
import test from "node:test";
import assert from "node:assert/strict";
import { ProviderUsage, usageFrom } from "../src/usage";
import { Provider } from "../src/gen/contextsvc/v1/context";

// one request of 30,100 input tokens, 28,000 read from the cache and 1,000 written to it, and 900
// output tokens, 600 of them reasoning, as each provider's API reports it
const REPORTED: [Provider, ProviderUsage][] = [
  [Provider.PROVIDER_ANTHROPIC, { input_tokens: 1100, cache_read_input_tokens: 28000, cache_creation_input_tokens: 1000,
    output_tokens: 900, output_tokens_details: { thinking_tokens: 600 } }],
  [Provider.PROVIDER_BEDROCK, { inputTokens: 1100, cacheReadInputTokens: 28000, cacheWriteInputTokens: 1000,
    outputTokens: 900 }],
  [Provider.PROVIDER_OPENAI, { prompt_tokens: 30100, completion_tokens: 900,
    prompt_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    completion_tokens_details: { reasoning_tokens: 600 } }],
  [Provider.PROVIDER_COPILOT, { prompt_tokens: 30100, completion_tokens: 900,
    prompt_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    completion_tokens_details: { reasoning_tokens: 600 } }],
  [Provider.PROVIDER_OPENAI_RESPONSES, { input_tokens: 30100, output_tokens: 900,
    input_tokens_details: { cached_tokens: 28000, cache_write_tokens: 1000 },
    output_tokens_details: { reasoning_tokens: 600 } }],
  [Provider.PROVIDER_GEMINI, { promptTokenCount: 30100, cachedContentTokenCount: 28000, candidatesTokenCount: 300,
    thoughtsTokenCount: 600 }],
];

for (const [provider, reported] of REPORTED) {
  test(`${Provider[provider]}: the input side is the provider's count of the request, once`, () => {
    const u = usageFrom(provider, reported);
    assert.equal(u.input + u.cacheRead + u.cacheWrite, 30100);
    assert.equal(u.cacheRead, 28000);
    assert.equal(u.input + u.output + u.reasoning + u.cacheRead + u.cacheWrite, 31000);
    if (provider !== Provider.PROVIDER_BEDROCK) assert.deepEqual([u.output, u.reasoning], [300, 600]);
  });
}

test("a field left out or null is 0, and an unknown provider throws", () => {
  const u = usageFrom(Provider.PROVIDER_OPENAI, { prompt_tokens: 500, completion_tokens: 20, prompt_tokens_details: null });
  assert.deepEqual([u.input, u.cacheRead, u.cacheWrite, u.output, u.reasoning], [500, 0, 0, 20, 0]);
  assert.throws(() => usageFrom(Provider.PROVIDER_UNSPECIFIED, {}), /provider/);
});
