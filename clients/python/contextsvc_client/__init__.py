"""Applying Compact, Prune and Assemble results to the caller's stored conversation, and
turning a model's tool call name back into the caller's.

The service is stateless: the client owns the history, and a CompactResponse or PruneResponse
says what to change in it. These helpers make those changes on a plain list of
`contextsvc.v1.context_pb2.Message`, returning a new list (the messages they change are copies;
the others are the caller's own objects). They need no channel and no grpc import.

    r = stub.Compact(pb.CompactRequest(conversation=..., model=..., auto=True))
    messages = apply_compaction(messages, r, drop_omittable=True)

After apply_compaction, a Measure of the new list (same model, tools, system and compaction
settings) has decision.tokens == r.tokens_after.

An AssembleResponse's persist parts (a user message's `<environment_details>` block, a mid-run
message's wrapping) go into the history the same way, before the next request:

    a = stub.Assemble(pb.AssembleRequest(conversation=..., model=..., editor=..., step=step))
    messages = apply_persist(messages, a)

The model calls a tool by the name the body gave it, which for a name the provider refuses
(`github.create_issue` on Anthropic or OpenAI) is a mapped one; client_tool_name turns it back:

    tool = tools_by_name[client_tool_name(a, call.name)]

The answer's usage, as the provider reported it, is stored as usage_from makes it (each provider
splits its count its own way: usage.py):

    answer_message.usage.CopyFrom(usage_from(model.provider, response.usage))
"""
from __future__ import annotations

import time
from typing import Iterable, Sequence

from contextsvc.v1 import context_pb2 as pb

from .usage import usage_from

__all__ = ["apply_assemble", "apply_compaction", "apply_persist", "apply_prune", "client_tool_name", "usage_from"]


def apply_compaction(messages: Sequence[pb.Message], response: pb.CompactResponse,
                     drop_omittable: bool = False) -> list[pb.Message]:
    """The conversation after the response's edits, applied in order.

    drop_omittable: also leave out the messages listed in response.omittable_ids (the service
    no longer needs them; keep them if the client shows the full history to a person).
    Raises ValueError when an edit names an id the conversation does not hold, or inserts a
    message whose id is already there.
    """
    out = list(messages)
    index = _index(out)
    for n, edit in enumerate(response.edits):
        kind = edit.WhichOneof("edit")
        if kind == "insert":
            ins = edit.insert
            at = index.get(ins.after_id)
            if at is None:
                raise ValueError(f"edits[{n}].insert.after_id: no message {ins.after_id!r}")
            if ins.message.id in index:
                raise ValueError(f"edits[{n}].insert.message.id: {ins.message.id!r} is already in the conversation")
            new = pb.Message()
            new.CopyFrom(ins.message)
            out.insert(at + 1, new)
            index = _index(out)
        elif kind == "set_tail_start":
            st = edit.set_tail_start
            at = index.get(st.message_id)
            if at is None:
                raise ValueError(f"edits[{n}].set_tail_start.message_id: no message {st.message_id!r}")
            msg = _copy(out[at])
            marker = next((p.compaction for p in msg.parts if p.WhichOneof("kind") == "compaction"), None)
            if marker is None:
                raise ValueError(f"edits[{n}].set_tail_start.message_id: {st.message_id!r} has no compaction part")
            marker.tail_start_id = st.tail_start_id
            out[at] = msg
        elif kind == "mark_compacted":
            mc = edit.mark_compacted
            out = _mark(out, mc.part_ids, mc.time_compacted_ms, f"edits[{n}].mark_compacted.part_ids")
        elif kind == "replace_output":
            ro = edit.replace_output
            out = _replace_output(out, ro.part_id, ro.output, f"edits[{n}].replace_output.part_id")
        else:
            raise ValueError(f"edits[{n}]: no edit set (a newer proto than this helper?)")
    if drop_omittable and response.omittable_ids:
        drop = set(response.omittable_ids)
        missing = drop.difference(index)
        if missing:
            raise ValueError(f"omittable_ids: no message {sorted(missing)[0]!r}")
        out = [m for m in out if m.id not in drop]
    return out


def apply_prune(messages: Sequence[pb.Message], response: pb.PruneResponse,
                now_ms: int | None = None) -> list[pb.Message]:
    """The conversation with the response's tool parts marked compacted at now_ms (default: now).

    Raises ValueError when a part id is not a tool part of the conversation.
    """
    if not response.part_ids:
        return list(messages)
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    return _mark(list(messages), response.part_ids, stamp, "part_ids")


def apply_persist(messages: Sequence[pb.Message], response: pb.AssembleResponse) -> list[pb.Message]:
    """The conversation with the response's persist parts stored: each replaces the part with
    the same id in its message, or is appended to the message when it has none.

    Raises ValueError when a part names a message the conversation does not hold.
    """
    out = list(messages)
    if not response.persist:
        return out
    index = _index(out)
    for n, item in enumerate(response.persist):
        at = index.get(item.message_id)
        if at is None:
            raise ValueError(f"persist[{n}].message_id: no message {item.message_id!r}")
        msg = _copy(out[at])
        same = next((p for p in msg.parts if p.id == item.part.id), None)
        if same is not None:
            same.CopyFrom(item.part)
        else:
            msg.parts.append(item.part)
        out[at] = msg
    return out


def apply_assemble(messages: Sequence[pb.Message], response: pb.AssembleResponse,
                   now_ms: int | None = None) -> list[pb.Message]:
    """Everything an Assemble asks the client to store before it sends the body: the persist
    parts (apply_persist) and the tool parts the payload guard marked compacted in the body
    (pruned_part_ids, at now_ms, default now). Storing both keeps the next body's history as this
    one sent it; a guard that must strip media again does so from the stored history.

    Raises ValueError as apply_persist and apply_prune do.
    """
    out = apply_persist(messages, response)
    if response.pruned_part_ids:
        stamp = int(time.time() * 1000) if now_ms is None else now_ms
        out = _mark(out, response.pruned_part_ids, stamp, "pruned_part_ids")
    return out


def client_tool_name(response: pb.AssembleResponse, wire_name: str) -> str:
    """The request's name of the tool a model's call names wire_name (as the response's body
    wrote it): the response's tool_names entry, else wire_name itself (a name the body kept)."""
    return response.tool_names.get(wire_name, wire_name)


def _index(messages: Sequence[pb.Message]) -> dict[str, int]:
    return {m.id: i for i, m in enumerate(messages)}


def _copy(message: pb.Message) -> pb.Message:
    new = pb.Message()
    new.CopyFrom(message)
    return new


def _mark(messages: list[pb.Message], part_ids: Iterable[str], stamp: int, field: str) -> list[pb.Message]:
    wanted = set(part_ids)
    if not wanted:
        return messages
    found: set[str] = set()
    for i, msg in enumerate(messages):
        hits = [j for j, p in enumerate(msg.parts) if p.id in wanted]
        if not hits:
            continue
        msg = _copy(msg)
        for j in hits:
            part = msg.parts[j]
            if part.WhichOneof("kind") != "tool":
                raise ValueError(f"{field}: {part.id!r} is not a tool part")
            part.tool.state.time_compacted_ms = stamp
            found.add(part.id)
        messages[i] = msg
    missing = wanted - found
    if missing:
        raise ValueError(f"{field}: no tool part {sorted(missing)[0]!r}")
    return messages


def _replace_output(messages: list[pb.Message], part_id: str, output: str, field: str) -> list[pb.Message]:
    for i, msg in enumerate(messages):
        j = next((j for j, p in enumerate(msg.parts) if p.id == part_id), None)
        if j is None:
            continue
        if msg.parts[j].WhichOneof("kind") != "tool":
            raise ValueError(f"{field}: {part_id!r} is not a tool part")
        msg = _copy(msg)
        msg.parts[j].tool.state.output = output
        return messages[:i] + [msg] + messages[i + 1:]
    raise ValueError(f"{field}: no tool part {part_id!r}")
