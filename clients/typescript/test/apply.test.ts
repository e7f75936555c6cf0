// Unit tests of apply.ts on responses built from the generated types, as the client decodes them.
// Run: npm run build && npm test
import test from "node:test";
import assert from "node:assert/strict";
import { applyAssemble, applyCompaction, applyPersist, applyPrune, clientToolName } from "../src/apply";
import {
  AssembleResponse, CompactEdit, CompactResponse, DeepPartial, Message, Part, PruneResponse, Role, ToolStatus,
} from "../src/gen/contextsvc/v1/context";

const tool = (id: string, callId: string, output: string): DeepPartial<Part> => ({ id,
  tool: { callId, tool: "read", state: { status: ToolStatus.TOOL_STATUS_COMPLETED, output } } });
const text = (id: string, s: string): DeepPartial<Part> => ({ id, text: { text: s } });
const message = (id: string, role: Role, parts: DeepPartial<Part>[], extra: DeepPartial<Message> = {}) =>
  Message.fromPartial({ id, role, parts, ...extra });
const history = () => [
  message("u1", Role.ROLE_USER, [text("p1", "Fix tests/test_app.py")]),
  message("a1", Role.ROLE_ASSISTANT, [tool("t1", "c1", "x"), tool("t2", "c2", "y")]),
  message("u2", Role.ROLE_USER, [text("p2", "go on")]),
  message("a2", Role.ROLE_ASSISTANT, [tool("t3", "c3", "z")]),
];
const marker = (id: string, tail = "") => message(id, Role.ROLE_USER,
  [{ id: `${id}-p`, compaction: { auto: true, overflow: false, tailStartId: tail } }]);
const summary = (id: string) => message(id, Role.ROLE_ASSISTANT, [text(`${id}-p`, "## Goal")], { summary: true });
const insert = (afterId: string, m: Message): DeepPartial<CompactEdit> => ({ insert: { afterId, message: m } });
const compacted = (edits: DeepPartial<CompactEdit>[], omittableIds: string[] = []) =>
  CompactResponse.fromPartial({ edits, omittableIds });
const stamp = (messages: Message[], i: number, j: number) => messages[i].parts[j].tool!.state!.timeCompactedMs;

test("inserts chain on ids inserted by earlier edits, in order", () => {
  const before = history();
  const r = compacted([insert("a2", marker("m", "u2")), insert("m", summary("s")),
    insert("s", message("c", Role.ROLE_USER, [text("c-p", "Continue")]))]);
  const after = applyCompaction(before, r);
  assert.deepEqual(after.map((m) => m.id), ["u1", "a1", "u2", "a2", "m", "s", "c"]);
  assert.deepEqual(before.map((m) => m.id), ["u1", "a1", "u2", "a2"]);
  assert.equal(after[0], before[0]);
  after[5].parts[0].text!.text = "changed";
  assert.equal(r.edits[1].insert!.message!.parts[0].text!.text, "## Goal", "inserted messages are copies");
});

test("setTailStart updates a copy of the caller's marker", () => {
  const before = [...history(), marker("m0")];
  const after = applyCompaction(before, compacted([{ setTailStart: { messageId: "m0", tailStartId: "u2" } }]));
  assert.equal(after[4].parts[0].compaction!.tailStartId, "u2");
  assert.equal(before[4].parts[0].compaction!.tailStartId, "");
});

test("markCompacted and omittable ids", () => {
  const before = history();
  const r = compacted([{ markCompacted: { partIds: ["t1", "t3"], timeCompactedMs: 7 } }], ["u1"]);
  const kept = applyCompaction(before, r);
  assert.equal(kept.length, 4);
  assert.equal(stamp(kept, 1, 0), 7);
  assert.equal(stamp(kept, 1, 1), 0);
  assert.equal(stamp(before, 1, 0), 0);
  assert.deepEqual(applyCompaction(before, r, { dropOmittable: true }).map((m) => m.id), ["a1", "u2", "a2"]);
});

test("a response decoded from the wire applies as the one built", () => {
  const r = compacted([insert("u1", marker("m"))]);
  const decoded = CompactResponse.decode(CompactResponse.encode(r).finish());
  assert.deepEqual(applyCompaction(history(), decoded).map((m) => m.id), ["u1", "m", "a1", "u2", "a2"]);
});

test("unknown ids throw with the field path", () => {
  const bad = (edit: DeepPartial<CompactEdit>) => () => applyCompaction(history(), compacted([edit]));
  assert.throws(bad(insert("nope", marker("m"))), /edits\[0\]\.insert\.afterId: no message 'nope'/);
  assert.throws(bad(insert("a2", marker("u1"))), /'u1' is already in the conversation/);
  assert.throws(bad({ setTailStart: { messageId: "zz" } }), /setTailStart\.messageId: no message 'zz'/);
  assert.throws(bad({ setTailStart: { messageId: "u1" } }), /has no compaction part/);
  assert.throws(bad({ markCompacted: { partIds: ["t9"], timeCompactedMs: 1 } }), /no tool part 't9'/);
  assert.throws(bad({ markCompacted: { partIds: ["p1"], timeCompactedMs: 1 } }), /'p1' is not a tool part/);
  assert.throws(bad({}), /no edit set/);
  assert.throws(() => applyCompaction(history(), compacted([], ["zz"]), { dropOmittable: true }),
    /omittableIds: no message 'zz'/);
});

test("applyPrune marks parts at the given time and checks ids", () => {
  const before = history();
  const after = applyPrune(before, PruneResponse.fromPartial({ partIds: ["t2"], acted: true }), 99);
  assert.equal(stamp(after, 1, 1), 99);
  assert.equal(stamp(before, 1, 1), 0);
  assert.equal(after[3], before[3]);
  assert.ok(stamp(applyPrune(before, { partIds: ["t1"] }), 1, 0) > 1.6e12);
  assert.deepEqual(applyPrune(before, { partIds: [] }), before);
  assert.throws(() => applyPrune(before, { partIds: ["nope"] }), /partIds: no tool part 'nope'/);
});

test("applyPersist replaces a part by id or appends it, on copies", () => {
  const before = history();
  const r = AssembleResponse.fromPartial({ persist: [
    { messageId: "u1", part: text("p1", "<system-reminder>\nwrapped") },
    { messageId: "u1", part: { id: "u1~environment", text: { text: "\n\nblock", synthetic: true } } },
  ] });
  const after = applyPersist(before, r);
  assert.deepEqual(after[0].parts.map((p) => p.text!.text), ["<system-reminder>\nwrapped", "\n\nblock"]);
  assert.equal(before[0].parts.length, 1);
  assert.equal(before[0].parts[0].text!.text, "Fix tests/test_app.py", "the caller's message is untouched");
  assert.equal(after[1], before[1]);
  after[0].parts[1].text!.text = "changed";
  assert.equal(r.persist[1].part!.text!.text, "\n\nblock", "stored parts are copies");
  // applied twice (the same block returned again), it is still stored once
  assert.equal(applyPersist(after, r)[0].parts.length, 2);
});

test("applyPersist without parts returns an equal new array, and checks ids", () => {
  const before = history();
  const same = applyPersist(before, { persist: [] });
  assert.deepEqual(same, before);
  assert.notEqual(same, before);
  assert.throws(() => applyPersist(before, { persist: [{ messageId: "nope", part: Part.fromPartial(text("x", "y")) }] }),
    /persist\[0\]\.messageId: no message 'nope'/);
});

test("clientToolName turns a mapped name back and keeps any other", () => {
  const a = AssembleResponse.fromPartial({ toolNames: { github_create_issue_3f2a9c1b7d4e: "github.create_issue" } });
  assert.equal(clientToolName(a, "github_create_issue_3f2a9c1b7d4e"), "github.create_issue");
  assert.equal(clientToolName(a, "read"), "read");
  assert.equal(clientToolName(a, "constructor"), "constructor", "not a property of Object.prototype");
  assert.equal(clientToolName(AssembleResponse.fromPartial({}), "read"), "read");
});

test("replaceOutput stores the kept tail's cut output on a copy, and checks the part", () => {
  const before = history();
  const after = applyCompaction(before, compacted([{ replaceOutput: { partId: "t3", output: "cut" } }]));
  assert.equal(after[3].parts[0].tool!.state!.output, "cut");
  assert.equal(before[3].parts[0].tool!.state!.output, "z", "the caller's message is untouched");
  assert.throws(() => applyCompaction(before, compacted([{ replaceOutput: { partId: "p1", output: "x" } }])),
    /replaceOutput.partId: 'p1' is not a tool part/);
  assert.throws(() => applyCompaction(before, compacted([{ replaceOutput: { partId: "nope", output: "x" } }])),
    /replaceOutput.partId: no tool part 'nope'/);
});

test("applyAssemble stores the persist parts and the payload guard's prune", () => {
  const before = history();
  const r = AssembleResponse.fromPartial({ persist: [{ messageId: "u1", part: text("u1~environment", "\n\nblock") }],
    prunedPartIds: ["t1"] });
  const after = applyAssemble(before, r, 77);
  assert.equal(after[0].parts.at(-1)!.text!.text, "\n\nblock");
  assert.equal(stamp(after, 1, 0), 77);
  assert.equal(stamp(before, 1, 0), 0, "the caller's message is untouched");
  assert.throws(() => applyAssemble(before, AssembleResponse.fromPartial({ prunedPartIds: ["nope"] })), /prunedPartIds/);
});
