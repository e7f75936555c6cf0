// The agent loop in Node: replays a session script (tests/agent_loop/session.py writes it as JSON)
// against a running ContextService and a provider endpoint, applying Compact and Prune results
// with apply.js, and prints a JSON summary on stdout.
//
// Usage: node agent_loop.js SCRIPT.json HOST:PORT PROVIDER_URL PROVIDER WINDOW [STEPS]
//   PROVIDER: anthropic | openai | bedrock | openai-responses; WINDOW: 32000 | 200000 (the model's context)
//   The same arguments may come from the environment: AGENT_SCRIPT, CONTEXTSVC_ADDRESS,
//   PROVIDER_URL, PROVIDER, WINDOW, STEPS. PROVIDER_MANAGED=1 turns the provider's own context
//   management on (CompactionSettings.provider_managed): the body goes with the headers Assemble
//   names, and what the provider cleared is stored with the answer's usage (Usage.cleared).
//
// One step (see the README's "The agent loop"), one Assemble call per step: Assemble (editor
// context, step and max_steps, the last accepted body's cache_state passed back); a step that
// fits sends that body with no Prune. Only when figures.should_compact: Prune (normal, with the
// model so its gates scale with the window) first, apply and Assemble again when it acted (Prune
// is lossless but breaks the cached prefix); then, while should_compact still holds,
// Compact(auto), apply and Assemble again; store the persist parts (applyPersist) and POST the
// body; on a "too long" refusal, Compact(overflow), apply, Assemble and resend; store the answer
// with the provider's usage. The summary has one entry per POST (`sent`) with the step, what changed the
// messages in it (compaction, prune) and the body's cache_report. Measure is called only after a
// compaction, to check tokens_after against the decision figure of the applied conversation.
"use strict";

const fs = require("node:fs");
const { connect } = require("./client");
const { applyCompaction, applyPrune, applyPersist } = require("./apply");

const OUTPUT_LIMITS = { 32000: 4096, 200000: 8192 };
const MODELS = {
  anthropic: ["PROVIDER_ANTHROPIC", "claude-sonnet-4-5"],
  openai: ["PROVIDER_OPENAI", "gpt-4o"],
  bedrock: ["PROVIDER_BEDROCK", "anthropic.claude-sonnet-4-5-v1:0"],
  "openai-responses": ["PROVIDER_OPENAI_RESPONSES", "gpt-5"],
};
const DEADLINES_MS = { Measure: 5000, Assemble: 5000, Prune: 5000, TruncateToolOutput: 5000, Compact: 10000 };
const COMPACT_LOOP_GUARD = 10;  // compactions in one step before giving up (the service caps at 3)
const REFUSAL_RETRIES = 3;      // overflow compactions after refusals of one step
const CURRENT_TIME = "2026-01-05T10:00:00+00:00";
const MAX_STEPS = 100;          // the agent's step cap per turn (AssembleRequest.max_steps)
const GOING_ON = new Set(["COMPACT_OUTCOME_COMPACTED", "COMPACT_OUTCOME_INSUFFICIENT"]);

const SYSTEM = {
  soul: "You are a coding agent working in a Python repository. Be precise and terse.",
  env: { working_directory: "/work/app", is_git_repo: true, platform: "linux", date: "2026-01-05", shell: "bash" },
};

// Responses input items: a function_call with no function_call_output after it (same call_id),
// or an output answering no earlier call.
function unpairedItems(items) {
  const problems = [], called = new Map(), answered = new Set();
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
function unpairedToolCalls(provider, body) {
  if (provider === "openai-responses") return unpairedItems(body.input || []);
  const msgs = body.messages || [];
  const parsed = msgs.map((m) => {
    const calls = [], results = [];
    if (provider === "openai") {
      for (const c of m.tool_calls || []) calls.push(c.id);
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
  const problems = [];
  parsed.forEach(([calls], i) => {
    if (!calls.length) return;
    let answered = [];
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

function userMessage(spec) {
  return {
    id: spec.id, role: "ROLE_USER", time_created_ms: spec.time_ms,
    parts: spec.parts.map((p) => (p.type === "text" ? { id: p.id, text: { text: p.text } }
      : { id: p.id, file: { mime: p.mime, filename: p.filename, data: Buffer.from(p.data_b64, "base64") } })),
  };
}

class Session {
  constructor(client, url, provider, window, providerManaged = false) {
    const [enumName, modelId] = MODELS[provider];
    this.client = client;
    this.url = url;
    this.provider = provider;
    this.model = { id: modelId, provider: enumName, limits: { context: window, output: OUTPUT_LIMITS[window] } };
    this.tools = null;
    this.settings = { prune: true, provider_managed: providerManaged };
    this.messages = [];
    this.sessionId = "";
    this.attempts = 0;
    this.envFor = ["", ""];  // [user message id, environment_details]
    this.cacheState = Buffer.alloc(0);  // cache_state of the last body the provider accepted
    this.changed = new Set();  // what changed in this step: compaction, prune (the stored messages), tools
    this.kinds = new Map();    // tool part id -> content class (for refusal reports)
    this.lastKinds = [];
    this.summary = { provider, window, steps: 0, requests: 0, compactions: [], refusals: [], prunes: [],
      unpaired: [], sent: [], turns_ended: 0, max_input: 0, elapsed_s: 0, cleared: [] };
  }

  base() {
    return { conversation: { session_id: this.sessionId, messages: this.messages }, model: this.model,
      tools: this.tools, system: SYSTEM, compaction: this.settings };
  }

  lastUser() {
    return this.messages.findLast((m) => m.role === "ROLE_USER");
  }

  rpc(method, request) {
    return this.client[method](request, DEADLINES_MS[method]);
  }

  // The decision figure of the stored conversation, no per-step fields: what tokens_after is
  // defined against (a check after a compaction, not a loop decision).
  measure() { return this.rpc("Measure", this.base()); }

  async compact(overflow, step, before) {
    const r = await this.rpc("Compact", { ...this.base(), overflow, auto: true, attempts: this.attempts, id_prefix: "cs-",
      previous_cache_state: this.cacheState });  // tokens_before then reads as the step's projected
    this.attempts += 1;
    this.messages = applyCompaction(this.messages, r, { dropOmittable: true });
    this.changed.add("compaction");
    const after = await this.measure();
    this.summary.compactions.push({
      step, overflow, outcome: r.outcome, tokens_before: Number(r.tokens_before), tokens_after: Number(r.tokens_after),
      limit: Number(r.limit), under_limit: r.under_limit,
      measured_after: after.decision ? Number(after.decision.tokens) : null,
      should_compact_before: before ? before.should_compact : null,
      should_compact_after: after.should_compact, method: r.decision_method, edits: r.edits.length,
      omitted: r.omittable_ids.length, messages_after: this.messages.length,
    });
    return r;
  }

  // figures: the Assemble's that said should_compact; how far over its limit the request is lets
  // a prune below its minimum act when it makes the request fit
  async prune(step, figures) {
    const { conversation, model, compaction, tools, system } = this.base();
    const tokens_needed = Math.max(0, Number(figures.projected) - Number(figures.limit) + 1);
    const r = await this.rpc("Prune", { conversation, model, reason: "PRUNE_REASON_NORMAL", compaction,
      tokens_needed, tools, system });
    if (r.acted) {
      this.messages = applyPrune(this.messages, r);
      this.changed.add("prune");
      this.summary.prunes.push({ step, parts: r.part_ids.length, tokens_freed: Number(r.tokens_freed), fits: r.fits });
    }
    return r.acted;
  }

  async assemble(stepInTurn) {
    const lastUser = this.lastUser();
    const lastId = lastUser ? lastUser.id : "";
    const env = this.envFor[0] === lastId ? this.envFor[1] : "";
    const r = await this.rpc("Assemble", { ...this.base(), step: stepInTurn, max_steps: MAX_STEPS,
      editor: { current_time: CURRENT_TIME, working_directory: "/work/app", environment_details: env },
      previous_cache_state: this.cacheState });
    this.envFor = [lastId, r.environment_details];
    if (r.pruned_part_ids.length) {  // the payload guard cleared old outputs in the body: store that too
      this.messages = applyPrune(this.messages, { part_ids: r.pruned_part_ids });
      this.changed.add("prune");
    }
    return r;
  }

  // The body with the headers Assemble names (the beta the provider's own context management needs).
  async post(body, headers) {
    const res = await fetch(this.url, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
    return [res.status, await res.json()];
  }

  // The input tokens the provider's own context management cleared from the request it answered,
  // as its answer's context_management.applied_edits says (stored with the usage: Usage.cleared).
  recordClearing(step, answer) {
    const edits = (answer.context_management || {}).applied_edits || [];
    for (const e of edits) {
      this.summary.cleared.push({ step, type: e.type, tool_uses: e.cleared_tool_uses, tokens: e.cleared_input_tokens });
    }
    return edits.reduce((sum, e) => sum + e.cleared_input_tokens, 0);
  }

  // Steps 1 and 2: the Assemble whose body is sent, or null when the turn ended (CONTEXT_OVERFLOW).
  // Prune only when the request would not fit, then Compact only when it still would not.
  async prepare(step, stepInTurn) {
    let a = await this.assemble(stepInTurn);
    if (a.figures.should_compact && await this.prune(step, a.figures)) {
      a = await this.assemble(stepInTurn);
      // whether what the prune left fits (its own decision figure), and whether a compaction
      // still follows: the two must never hold together
      Object.assign(this.summary.prunes[this.summary.prunes.length - 1], {
        fits_after: Number(a.figures.decision.tokens) < Number(a.figures.limit),
        should_compact_after: a.figures.should_compact,
      });
    }
    for (let i = 0; i < COMPACT_LOOP_GUARD && a.figures.should_compact; i++) {
      const r = await this.compact(false, step, a.figures);
      if (r.outcome === "COMPACT_OUTCOME_CONTEXT_OVERFLOW") return null;
      a = await this.assemble(stepInTurn);
      if (!GOING_ON.has(r.outcome)) break;
    }
    return a;
  }

  // Tool outputs still sent (not compacted) in the conversation, by content class.
  contentClasses() {
    const counts = {};
    for (const m of this.messages) {
      for (const p of m.parts || []) {
        if (!p.tool || Number((p.tool.state || {}).time_compacted_ms || 0)) continue;
        const kind = this.kinds.get(p.id) || "?";
        counts[kind] = (counts[kind] || 0) + 1;
      }
    }
    return counts;
  }

  // Steps 3 and 4: the provider's answer, or null when it kept refusing.
  async send(step, stepInTurn, a) {
    for (let retry = 0; retry <= REFUSAL_RETRIES; retry++) {
      this.messages = applyPersist(this.messages, a);
      const body = JSON.parse(Buffer.from(a.body).toString("utf8"));
      const problems = unpairedToolCalls(this.provider, body);
      if (problems.length) this.summary.unpaired.push({ step, problems: problems.slice(0, 5) });
      const [status, answer] = await this.post(a.body, a.headers || {});
      this.summary.requests += 1;
      const c = a.cache_report || {};
      this.summary.sent.push({ step, status, changed: [...this.changed].sort(), cache: {
        compared: Boolean(c.compared), prefix_kept: Boolean(c.prefix_kept), segment: c.segment || "",
        index: c.index || 0, cause: c.cause || "", rewrite: c.rewrite ? Number(c.rewrite.tokens) : 0,
        reused_elements: c.reused_elements || 0 } });
      if (status === 200) {
        this.cacheState = a.cache_state;  // what the provider's cache now holds
        return answer;
      }
      const f = a.figures;
      this.summary.refusals.push({ step, retry, status, error: answer, should_compact: f.should_compact,
        decision: f.decision ? Number(f.decision.tokens) : null, projected: Number(f.projected), limit: Number(f.limit),
        output_tokens: Number(a.output_tokens), body_bytes: Number(a.body_bytes), content: this.contentClasses(),
        last_step_kinds: this.lastKinds });
      if (problems.length || retry === REFUSAL_RETRIES) return null;
      const r = await this.compact(true, step, f);
      if (r.outcome === "COMPACT_OUTCOME_CONTEXT_OVERFLOW") return null;
      a = await this.assemble(stepInTurn);
    }
    return null;
  }

  async storeAnswer(spec, usageInput, cleared = 0) {
    const a = spec.assistant;
    const usage = { input: usageInput, output: a.output_tokens, cleared };
    const parts = [{ id: a.step_start_id, step_start: {} }, { id: a.text_part_id, text: { text: a.text } }];
    for (const t of a.tools) {
      const cut = await this.rpc("TruncateToolOutput", { text: t.output,
        direction: t.direction === "tail" ? "TRUNCATE_DIRECTION_TAIL" : "TRUNCATE_DIRECTION_HEAD" });
      parts.push({ id: t.part_id, tool: { call_id: t.call_id, tool: t.tool, state: {
        status: "TOOL_STATUS_COMPLETED", input_json: JSON.stringify(t.input), output: cut.content, title: t.tool,
        time_start_ms: a.time_ms, time_end_ms: a.time_ms + 500,
        attachments: t.attachments.map((x) => ({ mime: x.mime, filename: x.filename, data: Buffer.from(x.data_b64, "base64") })),
      } } });
      this.kinds.set(t.part_id, t.kind || "?");
    }
    this.lastKinds = a.tools.map((t) => t.kind || "?");
    parts.push({ id: a.step_finish_id, step_finish: { reason: "tool-calls", tokens: usage } });
    const parent = this.lastUser();
    // completed on the clock that stamps prunes (now), as tests/agent_loop/loop.py completed_ms says why
    this.messages.push({ id: a.id, role: "ROLE_ASSISTANT", time_created_ms: a.time_ms, time_completed_ms: Math.max(a.time_ms + 1000, Date.now()),
      parts, usage, model_id: this.model.id, provider_id: this.provider, parent_id: parent ? parent.id : "" });
  }

  async run(script, steps) {
    const t0 = Date.now();
    this.sessionId = script.session_id;
    this.tools = script.tools;
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
        this.tools = spec.tool_set;
        this.changed.add("tools");
      }
      const a = await this.prepare(i, stepInTurn);
      if (!a) {
        this.summary.turns_ended += 1;  // the person would be asked; the script goes on
        const id = `${spec.assistant.id}-continue`;
        this.messages.push({ id, role: "ROLE_USER", parts: [{ id: `${id}-p`, text: { text: "Continue." } }] });
        this.attempts = 0;
        stepInTurn = 0;
        continue;
      }
      const answer = await this.send(i, stepInTurn, a);
      if (!answer) continue;
      this.attempts = 0;
      const used = answer.usage.input_tokens;
      this.summary.max_input = Math.max(this.summary.max_input, used);
      await this.storeAnswer(spec, used, this.recordClearing(i, answer));
    }
    this.summary.elapsed_s = (Date.now() - t0) / 1000;
    return this.summary;
  }
}

async function main() {
  const [scriptPath, address, url, provider, window, steps] = [
    process.argv[2] || process.env.AGENT_SCRIPT, process.argv[3] || process.env.CONTEXTSVC_ADDRESS,
    process.argv[4] || process.env.PROVIDER_URL, process.argv[5] || process.env.PROVIDER,
    Number(process.argv[6] || process.env.WINDOW), Number(process.argv[7] || process.env.STEPS || 0)];
  // PROVIDER_MANAGED=1: the provider's own context management on (CompactionSettings.provider_managed)
  const providerManaged = process.env.PROVIDER_MANAGED === "1";
  if (!scriptPath || !address || !url || !MODELS[provider] || !OUTPUT_LIMITS[window]) {
    console.error("usage: node agent_loop.js SCRIPT.json HOST:PORT PROVIDER_URL "
      + "anthropic|openai|bedrock|openai-responses 32000|200000 [STEPS]");
    process.exit(2);
  }
  const script = JSON.parse(fs.readFileSync(scriptPath, "utf8"));
  const client = connect(address, { token: process.env.CONTEXTSVC_TOKEN });
  try {
    const summary = await new Session(client, url, provider, window, providerManaged).run(script, steps);
    process.stdout.write(`${JSON.stringify(summary)}\n`);
  } finally {
    client.close();
  }
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`FAILED: ${e.stack || e}`);
    process.exit(1);
  });
}

module.exports = { Session, unpairedToolCalls, userMessage, SYSTEM };
