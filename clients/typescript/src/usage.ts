// A provider's reported usage as the Usage stored with its answer. The service reads
// Usage.input as the uncached input alone, beside cacheRead and cacheWrite: their sum is what the
// provider counted of the request. Providers split their counts differently (the Python client's
// contextsvc_client/usage.py says how); a total that already holds the cached tokens stored as
// `input`, with those again in cacheRead, counts them twice, and a request that fits is compacted.
import { Provider, Usage } from "./gen/contextsvc/v1/context";

/** A provider's usage JSON: Anthropic's and OpenAI's `usage`, Bedrock Converse's `usage`,
 *  Gemini's `usageMetadata` (each a tree of token counts, any of them left out or null). */
export interface ProviderUsage {
  [field: string]: number | null | undefined | ProviderUsage;
}

const CHAT = new Set([Provider.PROVIDER_OPENAI, Provider.PROVIDER_OPENAI_COMPATIBLE, Provider.PROVIDER_OPENROUTER,
  Provider.PROVIDER_ALIBABA, Provider.PROVIDER_COPILOT]);

// the first of names obj has a number for (a field left out, or null, is 0)
function n(obj: ProviderUsage | number | null | undefined, ...names: string[]): number {
  if (obj == null || typeof obj === "number") return 0;
  for (const name of names) {
    const value = obj[name];
    if (typeof value === "number") return value;
  }
  return 0;
}

function part(obj: ProviderUsage, name: string): ProviderUsage | undefined {
  const value = obj[name];
  return value != null && typeof value === "object" ? value : undefined;
}

function usage(fields: Partial<Usage>): Usage {
  return Usage.fromPartial(fields);
}

/** The Usage to store with an answer of `provider` whose reported usage is `reported`. Throws for
 *  an unknown provider. */
export function usageFrom(provider: Provider, reported: ProviderUsage): Usage {
  const u = reported ?? {};
  if (provider === Provider.PROVIDER_ANTHROPIC || provider === Provider.PROVIDER_BEDROCK) {
    const thinking = n(part(u, "output_tokens_details"), "thinking_tokens");
    return usage({ input: n(u, "input_tokens", "inputTokens"),
      output: Math.max(0, n(u, "output_tokens", "outputTokens") - thinking), reasoning: thinking,
      cacheRead: n(u, "cache_read_input_tokens", "cacheReadInputTokens"),
      cacheWrite: n(u, "cache_creation_input_tokens", "cacheWriteInputTokens") });
  }
  if (CHAT.has(provider)) {
    const details = part(u, "prompt_tokens_details");
    const read = n(details, "cached_tokens");
    const write = n(details, "cache_write_tokens", "cache_creation_input_tokens");
    const reasoning = n(part(u, "completion_tokens_details"), "reasoning_tokens");
    return usage({ input: Math.max(0, n(u, "prompt_tokens") - read - write), cacheRead: read, cacheWrite: write,
      output: Math.max(0, n(u, "completion_tokens") - reasoning), reasoning });
  }
  if (provider === Provider.PROVIDER_OPENAI_RESPONSES) {
    const details = part(u, "input_tokens_details");
    const read = n(details, "cached_tokens");
    const write = n(details, "cache_write_tokens");
    const reasoning = n(part(u, "output_tokens_details"), "reasoning_tokens");
    return usage({ input: Math.max(0, n(u, "input_tokens") - read - write), cacheRead: read, cacheWrite: write,
      output: Math.max(0, n(u, "output_tokens") - reasoning), reasoning });
  }
  if (provider === Provider.PROVIDER_GEMINI) {
    const read = n(u, "cachedContentTokenCount", "cached_content_token_count");
    return usage({ input: Math.max(0, n(u, "promptTokenCount", "prompt_token_count") - read), cacheRead: read,
      output: n(u, "candidatesTokenCount", "candidates_token_count"),
      reasoning: n(u, "thoughtsTokenCount", "thoughts_token_count") });
  }
  throw new Error(`usageFrom: no usage rule for provider ${Provider[provider] ?? provider}`);
}
