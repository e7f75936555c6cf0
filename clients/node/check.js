// Calls every ContextService RPC and the health check against a running server and checks the
// answers. Usage: node check.js HOST:PORT   (exit 0 = all good, 1 = a mismatch or an error)
"use strict";

const assert = require("node:assert/strict");
const { connect, credentials, status } = require("./client");
const { applyCompaction, clientToolName } = require("./apply");

const text = (id, s) => ({ id, text: { text: s } });
const tool = (id, callId, name, input, output) => ({
  id, tool: { call_id: callId, tool: name, state: { status: "TOOL_STATUS_COMPLETED",
    input_json: JSON.stringify(input), output } } });
const user = (id, ...parts) => ({ id, role: "ROLE_USER", parts });
const assistant = (id, usage, ...parts) => ({ id, role: "ROLE_ASSISTANT", parts, usage, time_completed_ms: 1 });
const model = { id: "claude-sonnet-4-5", provider: "PROVIDER_ANTHROPIC",
  limits: { context: 30000, output: 4000 } };

// An agent session: each turn a request, a test run with a long failing output, a decision.
function session(turns) {
  const messages = [];
  let n = 0;
  const id = () => `msg_${String(++n).padStart(3, "0")}`;
  for (let t = 0; t < turns; t++) {
    messages.push(user(id(), text(`u${n}`, `Please fix src/module_${t}.py; keep the API stable`)));
    messages.push(assistant(id(), { input: 2000 * n, output: 100 },
      tool(`t${n}`, `call_${n}`, "bash", { command: `pytest tests/test_module_${t}.py` },
        `FAILED tests/test_module_${t}.py::test_parse - ValueError: bad token\n` + ".".repeat(60000)),
      text(`a${n}`, `Decided to rewrite parse_token in src/module_${t}.py`)));
  }
  messages.push(user(id(), text(`u${n}`, "now run the whole suite")));
  return { session_id: "node-check", messages };
}

// One turn whose last step read a file of ~11,000 tokens, over the tail budget (6,500) alone.
function bigRead() {
  const source = (name, lines) => Array.from({ length: lines }, (_, i) =>
    `def ${name}_${i}(request):\n    return render(request, 'page_${i}.html', {'id': ${i}})\n`).join("");
  const messages = [user("u1", text("u1-t", "Refactor the request handlers in src/"))];
  for (let k = 0; k < 5; k++) {
    messages.push(assistant(`a${k}`, undefined, text(`a${k}-t`, `Reading src/mod_${k}.py.`),
      tool(`a${k}-tool`, `call_${k}`, "read", { path: `src/mod_${k}.py` }, source(`h${k}`, 40))));
  }
  const big = "# src/views.py\n" + source("view", 600) + "# end of src/views.py\n";
  messages.push(assistant("a-big", undefined, text("a-big-t", "Reading src/views.py."),
    tool("a-big-tool", "call_big", "read", { path: "src/views.py" }, big)));
  return { session_id: "node-check-read", messages };
}

async function main(address) {
  const client = connect(address, { token: process.env.CONTEXTSVC_TOKEN });
  const checked = [];
  const check = async (name, fn) => { await fn(); checked.push(name); };
  try {
    await check("Health.Check", async () => {
      const r = await client.Check({ service: "contextsvc.v1.ContextService" });
      assert.equal(r.status, "SERVING");
    });

    const conversation = session(6);
    await check("Measure", async () => {
      const r = await client.Measure({ conversation, model });
      assert.ok(r.body_bytes > 0 && r.estimate.tokens > 0, "sizes the request");
      assert.ok(r.normalized.tokens >= r.estimate.tokens, "normalized is the padded estimate");
      assert.equal(r.limit, 26000, "usable window minus the reserve");
    });

    await check("Assemble", async () => {
      const r = await client.Assemble({ conversation, model, system: { soul: "You are a coding agent." } });
      const body = JSON.parse(Buffer.from(r.body).toString("utf8"));
      assert.equal(r.body_bytes, r.body.length, "body_bytes is the body's length");
      assert.equal(body.model, "claude-sonnet-4-5");
      assert.ok(Array.isArray(body.messages) && body.messages.length > 0);
      assert.ok(r.breakpoints.length > 0, "places cache breakpoints");
    });

    await check("Assemble tool names", async () => {
      const names = ["github.create_issue", "bash"];  // an MCP tool's name and a plain one
      const tools = names.map((name) => ({ name, description: `the ${name} tool` }));
      const r = await client.Assemble({ conversation, model, tools });
      const wire = JSON.parse(Buffer.from(r.body).toString("utf8")).tools.map((t) => t.name);
      assert.match(wire[0], /^[a-zA-Z0-9_-]{1,64}$/, "the MCP name is written in Anthropic's alphabet");
      assert.equal(wire[1], "bash", "a valid name is unchanged");
      assert.deepEqual(wire.map((w) => clientToolName(r, w)), names, "tool_names turns the body's names back");
    });

    await check("Prune", async () => {
      // ten test runs of ~15,000 tokens: the newest 2 are protected (as many of 5 as fit in 40,000),
      // the next 2 kept under 40,000, the six oldest cleared
      const r = await client.Prune({ conversation: session(10), reason: "PRUNE_REASON_PAYLOAD_LIMIT" });
      assert.equal(r.acted, true);
      assert.equal(r.reason, "PRUNE_REASON_PAYLOAD_LIMIT");
      assert.ok(r.part_ids.length > 0 && r.tokens_freed > 0, "frees old tool outputs");
      assert.deepEqual(r.part_ids, ["t12", "t10", "t8", "t6", "t4", "t2"], "the six oldest outputs");
    });

    await check("Compact", async () => {
      const r = await client.Compact({ conversation: session(8), model, auto: true });
      assert.equal(r.outcome, "COMPACT_OUTCOME_COMPACTED");
      assert.equal(r.under_limit, true);
      assert.equal(r.summary.summary, true);
      assert.match(r.summary.parts[0].text.text, /src\/module_0\.py/, "keeps paths verbatim");
      assert.equal(r.summarized_ids[0], "msg_001");
    });

    await check("Compact keeps the file just read", async () => {
      const conv = bigRead();
      const r = await client.Compact({ conversation: conv, model, auto: true });
      assert.equal(r.outcome, "COMPACT_OUTCOME_COMPACTED");
      assert.equal(r.tail_start_id, "a-big", "the read is kept");
      const cut = r.edits.find((e) => e.edit === "replace_output").replace_output;
      assert.equal(cut.part_id, "a-big-tool");
      const [head, tail] = cut.output.split(/\n\[Tool output truncated for compaction: omitted \d+ chars\]\n/);
      assert.ok(head.startsWith("# src/views.py\n") && tail.endsWith("# end of src/views.py\n"), "head and tail kept");
      const messages = applyCompaction(conv.messages, r, { dropOmittable: true });
      assert.equal(messages.find((m) => m.id === "a-big").parts[1].tool.state.output, cut.output);
      const m = await client.Measure({ conversation: { session_id: conv.session_id, messages }, model });
      assert.equal(m.decision.tokens, r.tokens_after, "Measure after applying equals tokens_after");
      assert.ok(r.tokens_after < r.limit);
    });

    const full = Array.from({ length: 5000 }, (_, i) => `line ${i}`).join("\n");
    let outputId;
    await check("TruncateToolOutput", async () => {
      const r = await client.TruncateToolOutput({ text: full, max_lines: 100 });
      assert.equal(r.truncated, true);
      assert.equal(r.cut_by, "lines");
      assert.ok(r.output_id.length > 0);
      outputId = r.output_id;
    });

    await check("ReadTruncated", async () => {
      const r = await client.ReadTruncated({ output_id: outputId, offset: 4998, limit: 10 });
      assert.equal(r.total_lines, 5000);
      assert.equal(r.text, "line 4998\nline 4999");
      assert.equal(r.eof, true);
    });

    await check("error status", async () => {
      await assert.rejects(client.Measure({ model }), (e) => e.code === status.INVALID_ARGUMENT);
    });

    await check("answer over grpc's default 4 MiB", async () => {
      // an Assemble body is as large as its conversation (a screenshot or two)
      const big = { model, conversation: { messages: [{ id: "u1", role: "ROLE_USER",
        parts: [{ id: "p1", text: { text: "x".repeat(5 * 1024 * 1024) } }] }] } };
      // on a channel made with the credentials the package exports (its own @grpc/grpc-js's)
      const own = connect(address, { token: process.env.CONTEXTSVC_TOKEN, credentials: credentials.createInsecure() });
      try {
        const r = await own.Assemble(big);
        assert.ok(r.body.length > 5 * 1024 * 1024, `${r.body.length}`);
      } finally {
        own.close();
      }
    });

    await check("request over maxRequestBytes", async () => {
      // refused by the channel, not sent: no retry uploads it again
      const small = connect(address, { token: process.env.CONTEXTSVC_TOKEN, retry: true, maxRequestBytes: 4096 });
      try {
        const big = { model, conversation: { messages: [{ id: "u1", role: "ROLE_USER",
          parts: [{ id: "p1", text: { text: "x".repeat(10000) } }] }] } };
        const start = Date.now();
        await assert.rejects(small.Measure(big), (e) => e.code === status.RESOURCE_EXHAUSTED);
        assert.ok(Date.now() - start < 1000, "retried");
      } finally {
        small.close();
      }
    });
  } finally {
    client.close();
  }
  console.log(`ok: ${checked.join(", ")}`);
}

const address = process.argv[2];
if (!address) {
  console.error("usage: node check.js HOST:PORT");
  process.exit(2);
}
main(address).catch((e) => {
  console.error(`FAILED: ${e.stack || e}`);
  process.exit(1);
});
