// Applying Compact, Prune and Assemble (persist) results to the caller's stored conversation, and
// turning a model's tool call name back into the caller's (clientToolName), over the plain objects
// @grpc/proto-loader produces with client.js's options (keepCase, oneofs: a oneof's name holds
// the field set, e.g. `edit: "insert"`, `kind: "tool"`).
//
//   const r = await client.Compact({ conversation: { messages }, model, auto: true });
//   messages = applyCompaction(messages, r, { dropOmittable: true });
//
// Each returns a new array; a message they change is a copy (the parts along the changed path are
// copied too), the others are the caller's own objects. An unknown id throws an Error naming the
// field, as the Python helper's ValueError does.
"use strict";

const EDIT_KINDS = ["insert", "set_tail_start", "mark_compacted", "replace_output"];

// The oneof member set on `obj`: the name field when the loader filled it, else the member present.
function oneof(obj, name, members) {
  if (obj[name]) return obj[name];
  return members.find((m) => obj[m] !== undefined && obj[m] !== null);
}

const PART_KINDS = ["text", "reasoning", "file", "tool", "step_start", "step_finish", "compaction", "subtask",
  "agent", "retry", "snapshot", "patch", "provider_compaction"];

const partKind = (part) => oneof(part, "kind", PART_KINDS);

function cloneMessage(message) {
  // structuredClone keeps Buffers as Uint8Array, which protobufjs accepts for bytes fields
  return structuredClone(message);
}

function indexOf(messages) {
  const index = new Map();
  messages.forEach((m, i) => index.set(m.id, i));
  return index;
}

function mark(messages, partIds, stamp, field) {
  const wanted = new Set(partIds);
  if (wanted.size === 0) return messages;
  const found = new Set();
  const out = messages.map((msg) => {
    if (!(msg.parts || []).some((p) => wanted.has(p.id))) return msg;
    const parts = msg.parts.map((p) => {
      if (!wanted.has(p.id)) return p;
      if (partKind(p) !== "tool") throw new Error(`${field}: '${p.id}' is not a tool part`);
      found.add(p.id);
      const state = { ...(p.tool.state || {}), time_compacted_ms: stamp };
      return { ...p, tool: { ...p.tool, state } };
    });
    return { ...msg, parts };
  });
  const missing = [...wanted].filter((id) => !found.has(id)).sort();
  if (missing.length) throw new Error(`${field}: no tool part '${missing[0]}'`);
  return out;
}

// The messages with tool part partId's output replaced by output (the part copied).
function replaceOutput(messages, partId, output, field) {
  const at = messages.findIndex((msg) => (msg.parts || []).some((p) => p.id === partId));
  if (at < 0) throw new Error(`${field}: no tool part '${partId}'`);
  const msg = messages[at];
  const parts = msg.parts.map((p) => {
    if (p.id !== partId) return p;
    if (partKind(p) !== "tool") throw new Error(`${field}: '${partId}' is not a tool part`);
    return { ...p, tool: { ...p.tool, state: { ...(p.tool.state || {}), output } } };
  });
  const out = [...messages];
  out[at] = { ...msg, parts };
  return out;
}

// The conversation after response.edits, applied in order. dropOmittable also leaves out the
// messages in response.omittable_ids. After it, a Measure of the new list (same model, tools,
// system and compaction settings) has decision.tokens === response.tokens_after.
function applyCompaction(messages, response, { dropOmittable = false } = {}) {
  let out = [...messages];
  let index = indexOf(out);
  (response.edits || []).forEach((edit, n) => {
    const kind = oneof(edit, "edit", EDIT_KINDS);
    if (kind === "insert") {
      const { after_id: afterId, message } = edit.insert;
      const at = index.get(afterId);
      if (at === undefined) throw new Error(`edits[${n}].insert.after_id: no message '${afterId}'`);
      if (index.has(message.id)) {
        throw new Error(`edits[${n}].insert.message.id: '${message.id}' is already in the conversation`);
      }
      out.splice(at + 1, 0, cloneMessage(message));
      index = indexOf(out);
    } else if (kind === "set_tail_start") {
      const { message_id: id, tail_start_id: tail } = edit.set_tail_start;
      const at = index.get(id);
      if (at === undefined) throw new Error(`edits[${n}].set_tail_start.message_id: no message '${id}'`);
      const msg = out[at];
      const j = (msg.parts || []).findIndex((p) => partKind(p) === "compaction");
      if (j < 0) throw new Error(`edits[${n}].set_tail_start.message_id: '${id}' has no compaction part`);
      const parts = [...msg.parts];
      parts[j] = { ...parts[j], compaction: { ...parts[j].compaction, tail_start_id: tail } };
      out[at] = { ...msg, parts };
    } else if (kind === "mark_compacted") {
      const { part_ids: ids, time_compacted_ms: stamp } = edit.mark_compacted;
      out = mark(out, ids || [], stamp, `edits[${n}].mark_compacted.part_ids`);
    } else if (kind === "replace_output") {
      const { part_id: id, output } = edit.replace_output;
      out = replaceOutput(out, id, output, `edits[${n}].replace_output.part_id`);
    } else {
      throw new Error(`edits[${n}]: no edit set (a newer proto than this helper?)`);
    }
  });
  const omit = response.omittable_ids || [];
  if (dropOmittable && omit.length) {
    const drop = new Set(omit);
    const missing = [...drop].filter((id) => !index.has(id)).sort();
    if (missing.length) throw new Error(`omittable_ids: no message '${missing[0]}'`);
    out = out.filter((m) => !drop.has(m.id));
  }
  return out;
}

// The conversation with response.part_ids marked compacted at nowMs (default Date.now()).
function applyPrune(messages, response, nowMs = Date.now()) {
  const ids = response.part_ids || [];
  if (!ids.length) return [...messages];
  return mark([...messages], ids, nowMs, "part_ids");
}

// The conversation with an AssembleResponse's persist parts stored (the `<environment_details>`
// block of a user message, a mid-run message's `<system-reminder>` wrapping): each replaces the
// part with the same id in its message, or is appended to the message when it has none. Store
// them before the next request, so the cached prefix stays the same.
function applyPersist(messages, response) {
  const items = response.persist || [];
  const out = [...messages];
  if (!items.length) return out;
  const index = indexOf(out);
  items.forEach((item, n) => {
    const at = index.get(item.message_id);
    if (at === undefined) throw new Error(`persist[${n}].message_id: no message '${item.message_id}'`);
    const msg = out[at];
    const parts = [...(msg.parts || [])];
    const j = parts.findIndex((p) => p.id === item.part.id);
    const part = structuredClone(item.part);
    if (j >= 0) parts[j] = part;
    else parts.push(part);
    out[at] = { ...msg, parts };
  });
  return out;
}

// The request's name of the tool a model's call names wireName (as the AssembleResponse's body
// wrote it, e.g. a mapped `github_create_issue_...`): its tool_names entry, else wireName itself.
// Everything an Assemble asks the client to store before it sends the body: the persist parts
// (applyPersist) and the tool parts the payload guard marked compacted in the body
// (pruned_part_ids, at nowMs). Storing both keeps the next body's history as this one sent it.
function applyAssemble(messages, response, nowMs = Date.now()) {
  const out = applyPersist(messages, response);
  const ids = response.pruned_part_ids || [];
  return ids.length ? mark(out, ids, nowMs, "pruned_part_ids") : out;
}

function clientToolName(response, wireName) {
  const names = response.tool_names || {};
  return Object.hasOwn(names, wireName) ? names[wireName] : wireName;
}

module.exports = { applyCompaction, applyPrune, applyPersist, applyAssemble, clientToolName };
