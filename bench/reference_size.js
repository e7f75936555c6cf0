// The reference agent's sizing of a step, in process, for bench_reference.py: from its own message
// list, the messages lowered to model messages (text, tool calls and their results, as the AI
// SDK's ModelMessage writes them), JSON.stringify of them and of the system texts, tools counted
// as the JSON of [{name, description, inputSchema}], and the estimate Math.round(chars / 4)
// (SPEC §3). One history grown step by step; each step is sized from the list as the agent holds
// it (parsed once at load, outside the timing).
//
// Input (a file written by bench_reference.py): {messages: the Conversation's messages as
// protobuf JSON, steps: the message count of each step, system: [texts], tools: [...]}.
// Prints one JSON line: {ms: [per step], median_ms, chars, estimate} (the last step's figures).
"use strict";

const fs = require("fs");

// the agent's message list: its own structure, tool inputs as objects
function agentMessage(m) {
  const role = m.role === "ROLE_ASSISTANT" ? "assistant" : "user";
  const parts = [];
  for (const p of m.parts || []) {
    if (p.text) parts.push({ type: "text", text: p.text.text || "" });
    else if (p.tool) {
      const s = p.tool.state || {};
      parts.push({ type: "tool", callID: p.tool.callId, tool: p.tool.tool,
        state: { status: s.status === "TOOL_STATUS_COMPLETED" ? "completed" : "error",
          input: s.inputJson ? JSON.parse(s.inputJson) : {}, output: s.output || "" } });
    } else if (p.stepStart) parts.push({ type: "step-start" });
  }
  return { info: { id: m.id, role }, parts };
}

// what the reference sends: model messages, a tool message after each assistant message with results
function toModelMessages(list) {
  const out = [];
  for (const msg of list) {
    if (msg.info.role === "user") {
      out.push({ role: "user", content: msg.parts.filter((p) => p.type === "text")
        .map((p) => ({ type: "text", text: p.text })) });
      continue;
    }
    const content = [];
    const results = [];
    for (const p of msg.parts) {
      if (p.type === "text") content.push({ type: "text", text: p.text });
      else if (p.type === "tool") {
        content.push({ type: "tool-call", toolCallId: p.callID, toolName: p.tool, input: p.state.input });
        results.push({ type: "tool-result", toolCallId: p.callID, toolName: p.tool,
          output: p.state.status === "completed" ? { type: "text", value: p.state.output }
            : { type: "error-text", value: p.state.output } });
      }
    }
    out.push({ role: "assistant", content });
    if (results.length) out.push({ role: "tool", content: results });
  }
  return out;
}

function size(list, system, tools) {
  const messages = system.map((text) => ({ role: "system", content: text })).concat(toModelMessages(list));
  const chars = JSON.stringify(messages).length + JSON.stringify(tools).length;
  return { chars, estimate: Math.max(0, Math.round(chars / 4)) };
}

function main() {
  const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const all = input.messages.map(agentMessage);
  const ms = [];
  let last = null;
  size(all.slice(0, input.steps[0]), input.system, input.tools); // warm the JIT, as a running agent is
  for (const n of input.steps) {
    const t = process.hrtime.bigint();
    last = size(all.slice(0, n), input.system, input.tools);
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const sorted = [...ms].sort((a, b) => a - b);
  const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2]
    : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
  console.log(JSON.stringify({ ms, median_ms: median, chars: last.chars, estimate: last.estimate }));
}

main();
