"""The changes a compaction asks of the client's stored conversation, and how they apply.

The client owns the history (docs/design.md §5): Compact answers with edits, in order, and the
client applies them. Compact applies the same edits itself to measure what the next request
holds, so `tokens_after` is, by construction, what Measure says of the edited conversation.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Union

from .. import conversation as m


@dataclass(slots=True)
class InsertMessage:
    after_id: str  # an existing id, or one inserted by an earlier edit
    message: m.Message


@dataclass(slots=True)
class SetTailStart:
    message_id: str  # the compaction marker the caller sent
    tail_start_id: str  # "" = nothing kept


@dataclass(slots=True)
class MarkCompacted:
    part_ids: list = field(default_factory=list)
    time_compacted_ms: int = 0


@dataclass(slots=True)
class ReplaceToolOutput:
    part_id: str  # a completed tool part of the kept tail
    output: str  # what the part holds from now on (its output cut to the preserve budget)


Edit = Union[InsertMessage, SetTailStart, MarkCompacted, ReplaceToolOutput]


def apply(messages: list, edits: list) -> list:
    """A new message list with the edits applied in order; the input is left untouched."""
    out = list(messages)
    for k, edit in enumerate(edits):
        if isinstance(edit, InsertMessage):
            at = _index(out, edit.after_id)
            out.insert(at + 1, edit.message)
        elif isinstance(edit, SetTailStart):
            at = _index(out, edit.message_id)
            msg = out[at]
            parts = [m.Part(p.id, dataclasses.replace(p.content, tail_start_id=edit.tail_start_id))
                     if isinstance(p.content, m.Compaction) else p for p in msg.parts]
            out[at] = dataclasses.replace(msg, parts=parts)
        elif isinstance(edit, ReplaceToolOutput):
            if k and isinstance(edits[k - 1], ReplaceToolOutput):
                continue  # applied with the first of its run
            run = itertools.takewhile(lambda e: isinstance(e, ReplaceToolOutput), edits[k:])
            out = _replace_outputs(out, {e.part_id: e.output for e in run})
        else:
            out = _mark(out, set(edit.part_ids), edit.time_compacted_ms)
    return out


def _index(messages: list, message_id: str) -> int:
    for i, msg in enumerate(messages):
        if msg.id == message_id:
            return i
    raise KeyError(f"no message {message_id!r} to edit")


def _mark(messages: list, wanted: set, now_ms: int) -> list:
    out = []
    for msg in messages:
        if not any(p.id in wanted for p in msg.parts):
            out.append(msg)
            continue
        parts = [m.Part(p.id, dataclasses.replace(p.content, time_compacted_ms=now_ms))
                 if p.id in wanted and isinstance(p.content, m.Tool) and not p.content.compacted else p
                 for p in msg.parts]
        out.append(dataclasses.replace(msg, parts=parts))
    return out


def _replace_outputs(messages: list, outputs: dict) -> list:
    """messages with the parts of outputs' ids holding those outputs, in one pass (the parallel
    calls of a kept tail's newest message are cut together)."""
    out, left = list(messages), set(outputs)
    for i, msg in enumerate(messages):
        if left and not left.isdisjoint(p.id for p in msg.parts):
            out[i] = dataclasses.replace(msg, parts=[
                m.Part(p.id, dataclasses.replace(p.content, output=outputs[p.id])) if p.id in outputs else p
                for p in msg.parts])
            left.difference_update(p.id for p in msg.parts)
    if left:
        raise KeyError(f"no part {sorted(left)[0]!r} to edit")
    return out


class IdMaker:
    """Ids for the messages Compact creates: the caller's prefix, the kind, and a digest of the
    conversation's ids, so a retried call gives the same ids; checked against every id present
    (a clash takes a counter), so they never collide with the caller's."""

    def __init__(self, messages: list, prefix: str = ""):
        self._taken = {x.id for x in messages}
        self._prefix = prefix
        self._digest = hashlib.sha256("\x00".join(x.id for x in messages).encode()).hexdigest()[:12]

    def make(self, kind: str) -> str:
        base = f"{self._prefix}{kind}-{self._digest}"
        candidate, n = base, 1
        while candidate in self._taken:
            n += 1
            candidate = f"{base}-{n}"
        self._taken.add(candidate)
        return candidate
