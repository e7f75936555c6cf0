// The agent loop in TypeScript: replays a session script (tests/agent_loop/session.py writes it as
// JSON) against a running ContextService and a provider endpoint, applying Compact and Prune
// results with apply.ts, and prints a JSON summary on stdout. The same loop as
// clients/node/agent_loop.js, on the generated types; the summary keeps that loop's keys, which
// tests/test_agent_loop.py judges.
//
// Usage: node dist/src/agentLoop.js SCRIPT.json HOST:PORT PROVIDER_URL PROVIDER WINDOW [STEPS]
//   PROVIDER: anthropic | openai | bedrock | openai-responses; WINDOW: 32000 | 200000 (the model's context)
//
// One step (see the README's "The agent loop"), one Assemble call per step: Assemble (editor
// context, step and maxSteps, the last accepted body's cacheState passed back); a step that fits
// sends that body with no Prune. Only when figures.shouldCompact: Prune (normal, with the model
// so its gates scale with the window) first, apply and Assemble again when it acted; then, while
// shouldCompact still holds, Compact(auto), apply and Assemble again; store the persist parts
// (applyPersist) and POST the body; on a "too long" refusal, Compact(overflow), apply, Assemble
// and resend; store the answer with the provider's usage. Measure is called only after a
// compaction, to check tokensAfter against the decision figure of the applied conversation.
import * as fs from "node:fs";
import { applyCompaction, applyPersist, applyPrune } from "./apply";
import { connect, ContextService } from "./client";
import {
  AssembleResponse, CompactOutcome, compactOutcomeToJSON, CompactResponse, DeepPartial, Figures, Message, Model, Part,
  PruneReason, Provider, Role, SystemPrompt, ToolDefinition, ToolStatus, TruncateDirection,
} from "./gen/contextsvc/v1/context";

// The script's shape (snake_case: it is session.py's JSON).
interface ScriptFile { mime: string; filename: string; data_b64: string }
interface ScriptUser { id: string; time_ms: number; parts: ({ id: string; type: "text"; text: string }
  | ({ id: string; type: "file" } & ScriptFile))[] }
interface ScriptTool { part_id: string; call_id: string; tool: string; input: unknown; output: string;
  direction: string; kind?: string; attachments: ScriptFile[] }
interface ScriptAssistant { id: string; time_ms: number; text: string; text_part_id: string; step_start_id: string;
  step_finish_id: string; output_tokens: number; tools: ScriptTool[] }
interface ScriptToolDefinition { name: string; description: string; input_schema_json: string }
// tool_set: the tool definitions from this step on, where they change (an MCP server connected or gone)
interface Script { session_id: string; tools: ScriptToolDefinition[];
  steps: { user: ScriptUser | null; assistant: ScriptAssistant; tool_set?: ScriptToolDefinition[] }[] }

function toolDefinitions(defs: ScriptToolDefinition[]): DeepPartial<ToolDefinition>[] {
  return defs.map((t) => ({ name: t.name, description: t.description, inputSchemaJson: t.input_schema_json }));
}

type Wire = "anthropic" | "openai" | "bedrock" | "openai-responses";
const OUTPUT_LIMITS: Record<number, number> = { 32000: 4096, 200000: 8192 };
const MODELS: Record<Wire, [Provider, string]> = {
  anthropic: [Provider.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"],
  openai: [Provider.PROVIDER_OPENAI, "gpt-4o"],
  bedrock: [Provider.PROVIDER_BEDROCK, "anthropic.claude-sonnet-4-5-v1:0"],
  "openai-responses": [Provider.PROVIDER_OPENAI_RESPONSES, "gpt-5"],
};
const DEADLINES_MS = { measure: 5000, assemble: 5000, prune: 5000, truncateToolOutput: 5000, compact: 10000 };
const COMPACT_LOOP_GUARD = 10;  // compactions in one step before giving up (the service caps at 3)
const REFUSAL_RETRIES = 3;      // overflow compactions after refusals of one step
const CURRENT_TIME = "2026-01-05T10:00:00+00:00";
const MAX_STEPS = 100;          // the agent's step cap per turn (AssembleRequest.maxSteps)
const GOING_ON = new Set([CompactOutcome.COMPACT_OUTCOME_COMPACTED, CompactOutcome.COMPACT_OUTCOME_INSUFFICIENT]);

const SYSTEM: DeepPartial<SystemPrompt> = {
  soul: "You are a coding agent working in a Python repository. Be precise and terse.",
  env: { workingDirectory: "/work/app", isGitRepo: true, platform: "linux", date: "2026-01-05", shell: "bash" },
};

interface Body { messages?: Record<string, any>[]; input?: Record<string, any>[] }

// Responses input items: a function_call with no function_call_output after it (same call_id),
// or an output answering no earlier call.
function unpairedItems(items: Record<string, any>[]): string[] {
  const problems: string[] = [], called = new Map<string, number>(), answered = new Set<string>();
  items.forEach((item, i) => {
    if (item.type === "function_call") called.set(item.call_id, i);
    else if (item.type === "function_call_output") {
      if (!called.has(item.call_id)) problems.push(`input[${i}]: result ${item.call_id} answers no call`);
      answered.add(item.call_id);
    }
  });
  for (const [c, i] of called) if (!answered.has(c)) problems.push(`input[${i}]: call ${c} has no result`);
  return problems;
}

// Tool calls without their result in the next message, or results without their call.
export function unpairedToolCalls(provider: Wire, body: Body): string[] {
  if (provider === "openai-responses") return unpairedItems(body.input ?? []);
  const msgs = body.messages ?? [];
  const parsed: [string[], string[]][] = msgs.map((m) => {
    const calls: string[] = [], results: string[] = [];
    if (provider === "openai") {
      for (const c of m.tool_calls ?? []) calls.push(c.id);
      if (m.role === "tool") results.push(m.tool_call_id);
      return [calls, results];
    }
    for (const b of Array.isArray(m.content) ? m.content : []) {
      if (provider === "anthropic") {
        if (b.type === "tool_use") calls.push(b.id);
        else if (b.type === "tool_result") results.push(b.tool_use_id);
      } else if (b.toolUse) calls.push(b.toolUse.toolUseId);
      else if (b.toolResult) results.push(b.toolResult.toolUseId);
    }
    return [calls, results];
  });
  const problems: string[] = [];
  parsed.forEach(([calls], i) => {
    if (!calls.length) return;
    let answered: string[] = [];
    if (provider === "openai") {
      for (let j = i + 1; j < msgs.length && msgs[j].role === "tool"; j++) answered = answered.concat(parsed[j][1]);
    } else if (i + 1 < parsed.length) answered = parsed[i + 1][1];
    for (const c of calls) if (!answered.includes(c)) problems.push(`messages[${i}]: call ${c} has no result`);
  });
  parsed.forEach(([, results], i) => {
    if (!results.length) return;
    let j = i - 1;
    if (provider === "openai") while (j >= 0 && msgs[j].role === "tool") j--;
    const asked = j >= 0 ? parsed[j][0] : [];
    for (const r of results) if (!asked.includes(r)) problems.push(`messages[${i}]: result ${r} answers no call`);
  });
  return problems;
}

function userMessage(spec: ScriptUser): Message {
  return Message.fromPartial({
    id: spec.id, role: Role.ROLE_USER, timeCreatedMs: spec.time_ms,
    parts: spec.parts.map((p) => (p.type === "text" ? { id: p.id, text: { text: p.text } }
      : { id: p.id, file: { mime: p.mime, filename: p.filename, data: Buffer.from(p.data_b64, "base64") } })),
  });
}

const figure = (f: Figures | undefined) => ({ decision: f?.decision ? f.decision.tokens : null,
  projected: f?.projected ?? 0, limit: f?.limit ?? 0, shouldCompact: f?.shouldCompact ?? false });

export class Session {
  private readonly model: Model;
  private tools: DeepPartial<ToolDefinition>[] = [];
  private readonly settings: { prune: boolean; providerManaged: boolean };
  private messages: Message[] = [];
  private sessionId = "";
  private attempts = 0;
  private envFor: [string, string] = ["", ""];  // [user message id, environment_details]
  private cacheState: Buffer = Buffer.alloc(0);  // cacheState of the last body the provider accepted
  private changed = new Set<string>();  // what changed in this step: compaction, prune (the stored messages), tools
  private readonly kinds = new Map<string, string>();  // tool part id -> content class (for refusal reports)
  private lastKinds: string[] = [];
  readonly summary = { provider: "", window: 0, steps: 0, requests: 0, compactions: [] as object[],
    refusals: [] as object[], prunes: [] as Record<string, unknown>[], unpaired: [] as object[], sent: [] as object[],
    turns_ended: 0, max_input: 0, elapsed_s: 0, cleared: [] as object[] };

  // providerManaged: the provider's own context management on (CompactionSettings.providerManaged)
  constructor(private readonly client: ContextService, private readonly url: string,
    private readonly provider: Wire, window: number, providerManaged = false) {
    this.settings = { prune: true, providerManaged };
    const [enumValue, modelId] = MODELS[provider];
    this.model = Model.fromPartial({ id: modelId, provider: enumValue, limits: { context: window, output: OUTPUT_LIMITS[window] } });
    Object.assign(this.summary, { provider, window });
  }

  private base() {
    return { conversation: { sessionId: this.sessionId, messages: this.messages }, model: this.model,
      tools: this.tools, system: SYSTEM, compaction: this.settings };
  }

  private lastUser(): Message | undefined {
    return this.messages.findLast((m) => m.role === Role.ROLE_USER);
  }

  private async compact(overflow: boolean, step: number, before: Figures | undefined): Promise<CompactResponse> {
    // with the cache state, tokensBefore reads as the step's projected
    const r = await this.client.compact({ ...this.base(), overflow, auto: true, attempts: this.attempts, idPrefix: "cs-",
      previousCacheState: this.cacheState }, DEADLINES_MS.compact);
    this.attempts += 1;
    this.messages = applyCompaction(this.messages, r, { dropOmittable: true });
    this.changed.add("compaction");
    // the decision figure of the stored conversation, no per-step fields: what tokensAfter is defined against
    const after = await this.client.measure(this.base(), DEADLINES_MS.measure);
    this.summary.compactions.push({
      step, overflow, outcome: compactOutcomeToJSON(r.outcome), tokens_before: r.tokensBefore,
      tokens_after: r.tokensAfter, limit: r.limit, under_limit: r.underLimit,
      measured_after: after.decision ? after.decision.tokens : null,
      should_compact_before: before ? before.shouldCompact : null,
      should_compact_after: after.shouldCompact, method: r.decisionMethod, edits: r.edits.length,
      omitted: r.omittableIds.length, messages_after: this.messages.length,
    });
    return r;
  }

  // figures: the Assemble's that said shouldCompact; how far over its limit the request is lets
  // a prune below its minimum act when it makes the request fit
  private async prune(step: number, figures: Figures | undefined): Promise<boolean> {
    const { conversation, model, compaction, tools, system } = this.base();
    const f = figure(figures);
    const tokensNeeded = Math.max(0, f.projected - f.limit + 1);
    const r = await this.client.prune({ conversation, model, reason: PruneReason.PRUNE_REASON_NORMAL, compaction,
      tokensNeeded, tools, system }, DEADLINES_MS.prune);
    if (r.acted) {
      this.messages = applyPrune(this.messages, r);
      this.changed.add("prune");
      this.summary.prunes.push({ step, parts: r.partIds.length, tokens_freed: r.tokensFreed, fits: r.fits });
    }
    return r.acted;
  }

  private async assemble(stepInTurn: number): Promise<AssembleResponse> {
    const lastId = this.lastUser()?.id ?? "";
    const env = this.envFor[0] === lastId ? this.envFor[1] : "";
    const r = await this.client.assemble({ ...this.base(), step: stepInTurn, maxSteps: MAX_STEPS,
      editor: { currentTime: CURRENT_TIME, workingDirectory: "/work/app", environmentDetails: env },
      previousCacheState: this.cacheState }, DEADLINES_MS.assemble);
    this.envFor = [lastId, r.environmentDetails];
    if (r.prunedPartIds.length) {  // the payload guard cleared old outputs in the body: store that too
      this.messages = applyPrune(this.messages, { partIds: r.prunedPartIds });
      this.changed.add("prune");
    }
    return r;
  }

  // The body with the headers Assemble names (the beta the provider's own context management needs).
  private async post(body: Buffer, headers: { [key: string]: string }): Promise<[number, any]> {
    const res = await fetch(this.url, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
    return [res.status, await res.json()];
  }

  // The input tokens the provider's own context management cleared from the request it answered,
  // as its answer's context_management.applied_edits says (stored with the usage: Usage.cleared).
  private recordClearing(step: number, answer: any): number {
    const edits: any[] = answer.context_management?.applied_edits ?? [];
    for (const e of edits) {
      this.summary.cleared.push({ step, type: e.type, tool_uses: e.cleared_tool_uses, tokens: e.cleared_input_tokens });
    }
    return edits.reduce((sum: number, e: any) => sum + e.cleared_input_tokens, 0);
  }

  // Steps 1 and 2: the Assemble whose body is sent, or null when the turn ended (CONTEXT_OVERFLOW).
  // Prune only when the request would not fit, then Compact only when it still would not.
  private async prepare(step: number, stepInTurn: number): Promise<AssembleResponse | null> {
    let a = await this.assemble(stepInTurn);
    if (figure(a.figures).shouldCompact && await this.prune(step, a.figures)) {
      a = await this.assemble(stepInTurn);
      // whether what the prune left fits (its own decision figure), and whether a compaction
      // still follows: the two must never hold together
      const f = figure(a.figures);
      Object.assign(this.summary.prunes[this.summary.prunes.length - 1], {
        fits_after: (f.decision ?? 0) < f.limit, should_compact_after: f.shouldCompact });
    }
    for (let i = 0; i < COMPACT_LOOP_GUARD && figure(a.figures).shouldCompact; i++) {
      const r = await this.compact(false, step, a.figures);
      if (r.outcome === CompactOutcome.COMPACT_OUTCOME_CONTEXT_OVERFLOW) return null;
      a = await this.assemble(stepInTurn);
      if (!GOING_ON.has(r.outcome)) break;
    }
    return a;
  }

  // Tool outputs still sent (not compacted) in the conversation, by content class.
  private contentClasses(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const m of this.messages) {
      for (const p of m.parts) {
        if (!p.tool || p.tool.state?.timeCompactedMs) continue;
        const kind = this.kinds.get(p.id) ?? "?";
        counts[kind] = (counts[kind] ?? 0) + 1;
      }
    }
    return counts;
  }

  // Steps 3 and 4: the provider's answer, or null when it kept refusing.
  private async send(step: number, stepInTurn: number, a: AssembleResponse): Promise<any> {
    for (let retry = 0; retry <= REFUSAL_RETRIES; retry++) {
      this.messages = applyPersist(this.messages, a);
      const problems = unpairedToolCalls(this.provider, JSON.parse(a.body.toString("utf8")));
      if (problems.length) this.summary.unpaired.push({ step, problems: problems.slice(0, 5) });
      const [status, answer] = await this.post(a.body, a.headers);
      this.summary.requests += 1;
      const c = a.cacheReport;
      this.summary.sent.push({ step, status, changed: [...this.changed].sort(), cache: {
        compared: c?.compared ?? false, prefix_kept: c?.prefixKept ?? false, segment: c?.segment ?? "",
        index: c?.index ?? 0, cause: c?.cause ?? "", rewrite: c?.rewrite?.tokens ?? 0,
        reused_elements: c?.reusedElements ?? 0 } });
      if (status === 200) {
        this.cacheState = a.cacheState;  // what the provider's cache now holds
        return answer;
      }
      const f = figure(a.figures);
      this.summary.refusals.push({ step, retry, status, error: answer, should_compact: f.shouldCompact,
        decision: f.decision, projected: f.projected, limit: f.limit, output_tokens: a.outputTokens,
        body_bytes: a.bodyBytes, content: this.contentClasses(), last_step_kinds: this.lastKinds });
      if (problems.length || retry === REFUSAL_RETRIES) return null;
      const r = await this.compact(true, step, a.figures);
      if (r.outcome === CompactOutcome.COMPACT_OUTCOME_CONTEXT_OVERFLOW) return null;
      a = await this.assemble(stepInTurn);
    }
    return null;
  }

  private async storeAnswer(spec: ScriptAssistant, usageInput: number, cleared = 0): Promise<void> {
    const usage = { input: usageInput, output: spec.output_tokens, cleared };
    const parts: DeepPartial<Part>[] = [{ id: spec.step_start_id, stepStart: {} }, { id: spec.text_part_id, text: { text: spec.text } }];
    for (const t of spec.tools) {
      const cut = await this.client.truncateToolOutput({ text: t.output, direction: t.direction === "tail"
        ? TruncateDirection.TRUNCATE_DIRECTION_TAIL : TruncateDirection.TRUNCATE_DIRECTION_HEAD }, DEADLINES_MS.truncateToolOutput);
      parts.push({ id: t.part_id, tool: { callId: t.call_id, tool: t.tool, state: {
        status: ToolStatus.TOOL_STATUS_COMPLETED, inputJson: JSON.stringify(t.input), output: cut.content, title: t.tool,
        timeStartMs: spec.time_ms, timeEndMs: spec.time_ms + 500,
        attachments: t.attachments.map((x) => ({ mime: x.mime, filename: x.filename, data: Buffer.from(x.data_b64, "base64") })),
      } } });
      this.kinds.set(t.part_id, t.kind ?? "?");
    }
    this.lastKinds = spec.tools.map((t) => t.kind ?? "?");
    parts.push({ id: spec.step_finish_id, stepFinish: { reason: "tool-calls", tokens: usage } });
    // completed on the clock that stamps prunes (now), as tests/agent_loop/loop.py completed_ms says why
    this.messages.push(Message.fromPartial({ id: spec.id, role: Role.ROLE_ASSISTANT, timeCreatedMs: spec.time_ms,
      timeCompletedMs: Math.max(spec.time_ms + 1000, Date.now()), parts, usage, modelId: this.model.id, providerId: this.provider,
      parentId: this.lastUser()?.id ?? "" }));
  }

  async run(script: Script, steps = 0) {
    const t0 = Date.now();
    this.sessionId = script.session_id;
    this.tools = toolDefinitions(script.tools);
    let stepInTurn = 0;
    for (const [i, spec] of script.steps.slice(0, steps || undefined).entries()) {
      if (spec.user) {
        this.messages.push(userMessage(spec.user));
        this.attempts = 0;
        stepInTurn = 0;
      }
      stepInTurn += 1;
      this.summary.steps += 1;
      this.changed = new Set();
      if (spec.tool_set) {  // an MCP server connected or gone: the tools sent from now on
        this.tools = toolDefinitions(spec.tool_set);
        this.changed.add("tools");
      }
      const a = await this.prepare(i, stepInTurn);
      if (!a) {
        this.summary.turns_ended += 1;  // the person would be asked; the script goes on
        const id = `${spec.assistant.id}-continue`;
        this.messages.push(Message.fromPartial({ id, role: Role.ROLE_USER, parts: [{ id: `${id}-p`, text: { text: "Continue." } }] }));
        this.attempts = 0;
        stepInTurn = 0;
        continue;
      }
      const answer = await this.send(i, stepInTurn, a);
      if (!answer) continue;
      this.attempts = 0;
      const used: number = answer.usage.input_tokens;
      this.summary.max_input = Math.max(this.summary.max_input, used);
      await this.storeAnswer(spec.assistant, used, this.recordClearing(i, answer));
    }
    this.summary.elapsed_s = (Date.now() - t0) / 1000;
    return this.summary;
  }
}

async function main(): Promise<void> {
  const [scriptPath, address, url, provider, window, steps] = [process.argv[2], process.argv[3], process.argv[4],
    process.argv[5] as Wire, Number(process.argv[6]), Number(process.argv[7] ?? 0)];
  if (!scriptPath || !address || !url || !MODELS[provider] || !OUTPUT_LIMITS[window]) {
    console.error("usage: node dist/src/agentLoop.js SCRIPT.json HOST:PORT PROVIDER_URL "
      + "anthropic|openai|bedrock|openai-responses 32000|200000 [STEPS]");
    process.exit(2);
  }
  const script: Script = JSON.parse(fs.readFileSync(scriptPath, "utf8"));
  const client = connect(address, { token: process.env.CONTEXTSVC_TOKEN });
  try {
    // PROVIDER_MANAGED=1: the provider's own context management on
    const summary = await new Session(client, url, provider, window, process.env.PROVIDER_MANAGED === "1").run(script, steps);
    process.stdout.write(`${JSON.stringify(summary)}\n`);
  } finally {
    client.close();
  }
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`FAILED: ${e.stack ?? e}`);
    process.exit(1);
  });
}
