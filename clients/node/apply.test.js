// Unit tests of apply.js on hand-built responses shaped as proto-loader decodes them.
// Run: node --test apply.test.js
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { applyCompaction, applyPrune, applyPersist, applyAssemble, clientToolName } = require("./apply");

const tool = (id, callId, output) => ({ id, kind: "tool",
  tool: { call_id: callId, tool: "read", state: { status: "TOOL_STATUS_COMPLETED", output, time_compacted_ms: 0 } } });
const text = (id, s) => ({ id, kind: "text", text: { text: s } });
const history = () => [
  { id: "u1", role: "ROLE_USER", parts: [text("p1", "Fix tests/test_app.py")] },
  { id: "a1", role: "ROLE_ASSISTANT", parts: [tool("t1", "c1", "x"), tool("t2", "c2", "y")] },
  { id: "u2", role: "ROLE_USER", parts: [text("p2", "go on")] },
  { id: "a2", role: "ROLE_ASSISTANT", parts: [tool("t3", "c3", "z")] },
];
const marker = (id, tail = "") => ({ id, role: "ROLE_USER",
  parts: [{ id: `${id}-p`, kind: "compaction", compaction: { auto: true, overflow: false, tail_start_id: tail } }] });
const summary = (id) => ({ id, role: "ROLE_ASSISTANT", summary: true, parts: [text(`${id}-p`, "## Goal")] });
const insert = (after, message) => ({ edit: "insert", insert: { after_id: after, message } });

test("inserts chain on ids inserted by earlier edits, in order", () => {
  const before = history();
  const r = { edits: [insert("a2", marker("m", "u2")), insert("m", summary("s")),
    insert("s", { id: "c", role: "ROLE_USER", parts: [text("c-p", "Continue")] })] };
  const after = applyCompaction(before, r);
  assert.deepEqual(after.map((m) => m.id), ["u1", "a1", "u2", "a2", "m", "s", "c"]);
  assert.deepEqual(before.map((m) => m.id), ["u1", "a1", "u2", "a2"]);
  assert.equal(after[0], before[0]);
  after[5].parts[0].text.text = "changed";
  assert.equal(r.edits[1].insert.message.parts[0].text.text, "## Goal", "inserted messages are copies");
});

test("set_tail_start updates a copy of the caller's marker", () => {
  const before = [...history(), marker("m0")];
  const after = applyCompaction(before, { edits: [
    { edit: "set_tail_start", set_tail_start: { message_id: "m0", tail_start_id: "u2" } }] });
  assert.equal(after[4].parts[0].compaction.tail_start_id, "u2");
  assert.equal(before[4].parts[0].compaction.tail_start_id, "");
});

test("mark_compacted and omittable ids", () => {
  const before = history();
  const r = { edits: [{ edit: "mark_compacted", mark_compacted: { part_ids: ["t1", "t3"], time_compacted_ms: 7 } }],
    omittable_ids: ["u1"] };
  const kept = applyCompaction(before, r);
  assert.equal(kept.length, 4);
  assert.equal(kept[1].parts[0].tool.state.time_compacted_ms, 7);
  assert.equal(kept[1].parts[1].tool.state.time_compacted_ms, 0);
  assert.equal(before[1].parts[0].tool.state.time_compacted_ms, 0);
  assert.deepEqual(applyCompaction(before, r, { dropOmittable: true }).map((m) => m.id), ["a1", "u2", "a2"]);
});

test("replace_output stores the cut output on a copy of the tool part", () => {
  const before = history();
  const cut = "x\n[Tool output truncated for compaction: omitted 1 chars]\n";
  const edit = { edit: "replace_output", replace_output: { part_id: "t3", output: cut } };
  const after = applyCompaction(before, { edits: [edit] });
  assert.equal(after[3].parts[0].tool.state.output, cut);
  assert.equal(after[3].parts[0].tool.state.status, "TOOL_STATUS_COMPLETED");
  assert.equal(before[3].parts[0].tool.state.output, "z", "the caller's part is untouched");
  assert.equal(after[1], before[1]);
  const bare = applyCompaction(before, { edits: [{ replace_output: { part_id: "t1", output: "" } }] });
  assert.equal(bare[1].parts[0].tool.state.output, "");
  assert.equal(bare[1].parts[1].tool.state.output, "y");
});

test("the oneof is found without the loader's name field too", () => {
  const after = applyCompaction(history(), { edits: [{ insert: { after_id: "u1", message: marker("m") } }] });
  assert.deepEqual(after.map((m) => m.id), ["u1", "m", "a1", "u2", "a2"]);
});

test("unknown ids throw with the field path", () => {
  const bad = (edit) => () => applyCompaction(history(), { edits: [edit] });
  assert.throws(bad(insert("nope", marker("m"))), /edits\[0\]\.insert\.after_id: no message 'nope'/);
  assert.throws(bad(insert("a2", marker("u1"))), /'u1' is already in the conversation/);
  assert.throws(bad({ edit: "set_tail_start", set_tail_start: { message_id: "zz", tail_start_id: "" } }),
    /set_tail_start\.message_id: no message 'zz'/);
  assert.throws(bad({ edit: "set_tail_start", set_tail_start: { message_id: "u1", tail_start_id: "" } }),
    /has no compaction part/);
  assert.throws(bad({ edit: "mark_compacted", mark_compacted: { part_ids: ["t9"], time_compacted_ms: 1 } }),
    /no tool part 't9'/);
  assert.throws(bad({ edit: "mark_compacted", mark_compacted: { part_ids: ["p1"], time_compacted_ms: 1 } }),
    /'p1' is not a tool part/);
  assert.throws(bad({ edit: "replace_output", replace_output: { part_id: "t9", output: "" } }),
    /edits\[0\]\.replace_output\.part_id: no tool part 't9'/);
  assert.throws(bad({ edit: "replace_output", replace_output: { part_id: "p1", output: "" } }),
    /'p1' is not a tool part/);
  assert.throws(bad({}), /no edit set/);
  assert.throws(() => applyCompaction(history(), { omittable_ids: ["zz"] }, { dropOmittable: true }),
    /omittable_ids: no message 'zz'/);
});

test("applyPrune marks parts at the given time and checks ids", () => {
  const before = history();
  const after = applyPrune(before, { part_ids: ["t2"], acted: true }, 99);
  assert.equal(after[1].parts[1].tool.state.time_compacted_ms, 99);
  assert.equal(before[1].parts[1].tool.state.time_compacted_ms, 0);
  assert.equal(after[3], before[3]);
  assert.ok(applyPrune(before, { part_ids: ["t1"] })[1].parts[0].tool.state.time_compacted_ms > 1.6e12);
  assert.deepEqual(applyPrune(before, { part_ids: [] }), before);
  assert.throws(() => applyPrune(before, { part_ids: ["nope"] }), /part_ids: no tool part 'nope'/);
});

test("applyPersist replaces a part by id or appends it, on copies", () => {
  const before = history();
  const r = { persist: [
    { message_id: "u1", part: text("p1", "<system-reminder>\nwrapped") },
    { message_id: "u1", part: { id: "u1~environment", kind: "text", text: { text: "\n\nblock", synthetic: true } } },
  ] };
  const after = applyPersist(before, r);
  assert.deepEqual(after[0].parts.map((p) => p.text.text), ["<system-reminder>\nwrapped", "\n\nblock"]);
  assert.equal(before[0].parts.length, 1);
  assert.equal(before[0].parts[0].text.text, "Fix tests/test_app.py", "the caller's message is untouched");
  assert.equal(after[1], before[1]);
  after[0].parts[1].text.text = "changed";
  assert.equal(r.persist[1].part.text.text, "\n\nblock", "stored parts are copies");
  // applied twice (the same block returned again), it is still stored once
  assert.equal(applyPersist(after, r)[0].parts.length, 2);
});

test("applyAssemble stores the persist parts and the payload guard's prune", () => {
  const before = history();
  const r = { persist: [{ message_id: "u1", part: { id: "u1~environment", kind: "text", text: { text: "\n\nblock", synthetic: true } } }],
    pruned_part_ids: ["t1"] };
  const after = applyAssemble(before, r, 77);
  assert.equal(after[0].parts.at(-1).text.text, "\n\nblock");
  assert.equal(after[1].parts[0].tool.state.time_compacted_ms, 77);
  assert.equal(before[1].parts[0].tool.state.time_compacted_ms, 0, "the caller's message is untouched");
  assert.throws(() => applyAssemble(before, { pruned_part_ids: ["nope"] }), /pruned_part_ids/);
});

test("applyPersist without parts returns an equal new array, and checks ids", () => {
  const before = history();
  const same = applyPersist(before, { persist: [] });
  assert.deepEqual(same, before);
  assert.notEqual(same, before);
  assert.deepEqual(applyPersist(before, {}), before);
  assert.throws(() => applyPersist(before, { persist: [{ message_id: "nope", part: text("x", "y") }] }),
    /persist\[0\]\.message_id: no message 'nope'/);
});

test("clientToolName turns a mapped name back and keeps any other", () => {
  const a = { tool_names: { github_create_issue_3f2a9c1b7d4e: "github.create_issue" } };
  assert.equal(clientToolName(a, "github_create_issue_3f2a9c1b7d4e"), "github.create_issue");
  assert.equal(clientToolName(a, "read"), "read");
  assert.equal(clientToolName(a, "constructor"), "constructor", "not a property of Object.prototype");
  assert.equal(clientToolName({}, "read"), "read");
});
