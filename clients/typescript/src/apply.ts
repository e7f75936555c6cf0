// Applying Compact, Prune and Assemble (persist) results to the caller's stored conversation, and
// turning a model's tool call name back into the caller's (clientToolName), over the generated
// types: the same rules as clients/node/apply.js and the Python contextsvc_client.
//
//   const r = await client.compact({ conversation: { messages }, model, auto: true });
//   messages = applyCompaction(messages, r, { dropOmittable: true });
//
// Each returns a new array; a message they change is a copy (the parts along the changed path are
// copied too), the others are the caller's own objects. An unknown id throws an Error naming the
// field, as the Python helper's ValueError does.
import { AssembleResponse, CompactResponse, Message, Part, PruneResponse, ToolState } from "./gen/contextsvc/v1/context";

function indexOf(messages: readonly Message[]): Map<string, number> {
  const index = new Map<string, number>();
  messages.forEach((m, i) => index.set(m.id, i));
  return index;
}

function mark(messages: Message[], partIds: readonly string[], stamp: number, field: string): Message[] {
  const wanted = new Set(partIds);
  if (wanted.size === 0) return messages;
  const found = new Set<string>();
  const out = messages.map((msg) => {
    if (!msg.parts.some((p) => wanted.has(p.id))) return msg;
    const parts = msg.parts.map((p) => {
      if (!wanted.has(p.id)) return p;
      if (!p.tool) throw new Error(`${field}: '${p.id}' is not a tool part`);
      found.add(p.id);
      const state = ToolState.fromPartial({ ...p.tool.state, timeCompactedMs: stamp });
      return { ...p, tool: { ...p.tool, state } };
    });
    return { ...msg, parts };
  });
  const missing = [...wanted].filter((id) => !found.has(id)).sort();
  if (missing.length) throw new Error(`${field}: no tool part '${missing[0]}'`);
  return out;
}

function replaceOutput(messages: Message[], partId: string, output: string, field: string): Message[] {
  const at = messages.findIndex((msg) => msg.parts.some((p) => p.id === partId));
  if (at < 0) throw new Error(`${field}: no tool part '${partId}'`);
  const msg = messages[at];
  const parts = msg.parts.map((p) => {
    if (p.id !== partId) return p;
    if (!p.tool) throw new Error(`${field}: '${partId}' is not a tool part`);
    return { ...p, tool: { ...p.tool, state: ToolState.fromPartial({ ...p.tool.state, output }) } };
  });
  const out = [...messages];
  out[at] = { ...msg, parts };
  return out;
}

// The conversation after response.edits, applied in order. dropOmittable also leaves out the
// messages in response.omittableIds. After it, a Measure of the new list (same model, tools,
// system and compaction settings) has decision.tokens === response.tokensAfter.
export function applyCompaction(messages: readonly Message[],
  response: Pick<CompactResponse, "edits" | "omittableIds">, { dropOmittable = false } = {}): Message[] {
  let out = [...messages];
  let index = indexOf(out);
  response.edits.forEach((edit, n) => {
    if (edit.insert) {
      const { afterId, message } = edit.insert;
      const at = index.get(afterId);
      if (at === undefined) throw new Error(`edits[${n}].insert.afterId: no message '${afterId}'`);
      if (!message) throw new Error(`edits[${n}].insert.message: missing`);
      if (index.has(message.id)) {
        throw new Error(`edits[${n}].insert.message.id: '${message.id}' is already in the conversation`);
      }
      out.splice(at + 1, 0, Message.fromPartial(message));  // a deep copy
      index = indexOf(out);
    } else if (edit.setTailStart) {
      const { messageId: id, tailStartId: tail } = edit.setTailStart;
      const at = index.get(id);
      if (at === undefined) throw new Error(`edits[${n}].setTailStart.messageId: no message '${id}'`);
      const msg = out[at];
      const j = msg.parts.findIndex((p) => p.compaction);
      if (j < 0) throw new Error(`edits[${n}].setTailStart.messageId: '${id}' has no compaction part`);
      const parts = [...msg.parts];
      parts[j] = { ...parts[j], compaction: { ...parts[j].compaction!, tailStartId: tail } };
      out[at] = { ...msg, parts };
    } else if (edit.markCompacted) {
      const { partIds, timeCompactedMs } = edit.markCompacted;
      out = mark(out, partIds, timeCompactedMs, `edits[${n}].markCompacted.partIds`);
    } else if (edit.replaceOutput) {
      const { partId, output } = edit.replaceOutput;
      out = replaceOutput(out, partId, output, `edits[${n}].replaceOutput.partId`);
    } else {
      throw new Error(`edits[${n}]: no edit set (a newer proto than this helper?)`);
    }
  });
  const omit = response.omittableIds;
  if (dropOmittable && omit.length) {
    const drop = new Set(omit);
    const missing = [...drop].filter((id) => !index.has(id)).sort();
    if (missing.length) throw new Error(`omittableIds: no message '${missing[0]}'`);
    out = out.filter((m) => !drop.has(m.id));
  }
  return out;
}

// The conversation with response.partIds marked compacted at nowMs (default Date.now()).
export function applyPrune(messages: readonly Message[], response: Pick<PruneResponse, "partIds">,
  nowMs: number = Date.now()): Message[] {
  return mark([...messages], response.partIds, nowMs, "partIds");
}

// The conversation with an AssembleResponse's persist parts stored (the `<environment_details>`
// block of a user message, a mid-run message's `<system-reminder>` wrapping): each replaces the
// part with the same id in its message, or is appended to the message when it has none. Store
// them before the next request, so the cached prefix stays the same.
export function applyPersist(messages: readonly Message[], response: Pick<AssembleResponse, "persist">): Message[] {
  const out = [...messages];
  if (!response.persist.length) return out;
  const index = indexOf(out);
  response.persist.forEach((item, n) => {
    const at = index.get(item.messageId);
    if (at === undefined) throw new Error(`persist[${n}].messageId: no message '${item.messageId}'`);
    if (!item.part) throw new Error(`persist[${n}].part: missing`);
    const msg = out[at];
    const parts = [...msg.parts];
    const part = Part.fromPartial(item.part);  // a deep copy
    const j = parts.findIndex((p) => p.id === part.id);
    if (j >= 0) parts[j] = part;
    else parts.push(part);
    out[at] = { ...msg, parts };
  });
  return out;
}

// Everything an Assemble asks the client to store before it sends the body: the persist parts
// (applyPersist) and the tool parts the payload guard marked compacted in the body
// (prunedPartIds, at nowMs). Storing both keeps the next body's history as this one sent it.
export function applyAssemble(messages: readonly Message[],
  response: Pick<AssembleResponse, "persist" | "prunedPartIds">, nowMs: number = Date.now()): Message[] {
  const out = applyPersist(messages, response);
  return response.prunedPartIds.length ? mark(out, response.prunedPartIds, nowMs, "prunedPartIds") : out;
}

// The request's name of the tool a model's call names wireName (as the AssembleResponse's body
// wrote it, e.g. a mapped `github_create_issue_...`): its toolNames entry, else wireName itself.
export function clientToolName(response: Pick<AssembleResponse, "toolNames">, wireName: string): string {
  return Object.hasOwn(response.toolNames, wireName) ? response.toolNames[wireName] : wireName;
}
