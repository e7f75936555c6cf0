"""Semantic checks of a request, in core types. Each failure names the field and why."""
from __future__ import annotations

import math

from . import model as m
from .errors import BadInput


def conversation(conv: m.Conversation, path: str = "conversation") -> None:
    if not conv.messages:
        raise BadInput(f"{path}.messages", "must hold at least one message")
    previous = None
    part_ids = {}
    for i, msg in enumerate(conv.messages):
        mp = f"{path}.messages[{i}]"
        if not msg.id:
            raise BadInput(f"{mp}.id", "is required")
        if previous is not None and msg.id <= previous:
            what = "duplicates" if msg.id == previous else "is not greater than"
            raise BadInput(f"{mp}.id", f"{msg.id!r} {what} the previous id {previous!r}; "
                           "ids must be unique and strictly increasing")
        previous = msg.id
        for name in ("time_created_ms", "time_completed_ms"):
            if getattr(msg, name) < 0:
                raise BadInput(f"{mp}.{name}", "must not be negative")
        _usage(msg.usage, f"{mp}.usage")
        for j, part in enumerate(msg.parts):
            pp = f"{mp}.parts[{j}]"
            if part.id:
                if part.id in part_ids:
                    raise BadInput(f"{pp}.id", f"{part.id!r} duplicates {part_ids[part.id]}.id")
                part_ids[part.id] = pp
            c = part.content
            if isinstance(c, m.Tool):
                if not c.call_id:
                    raise BadInput(f"{pp}.tool.call_id", "is required on a tool part")
                if not c.tool:
                    raise BadInput(f"{pp}.tool.tool", "is required (the tool name)")
                if msg.role != m.ASSISTANT:
                    raise BadInput(f"{pp}.tool", "tool calls belong to assistant messages")
                if c.time_compacted_ms < 0:
                    raise BadInput(f"{pp}.tool.state.time_compacted_ms", "must not be negative")
            elif isinstance(c, m.StepFinish):
                _usage(c.tokens, f"{pp}.step_finish.tokens")


def _usage(u: m.Usage, path: str) -> None:
    for name in ("input", "output", "reasoning", "cache_read", "cache_write", "total"):
        if getattr(u, name) < 0:
            raise BadInput(f"{path}.{name}", "must not be negative")


def model(x: m.Model, path: str = "model") -> None:
    if not x.id:
        raise BadInput(f"{path}.id", "is required")
    for name in ("context", "input", "output"):
        if getattr(x.limits, name) < 0:
            raise BadInput(f"{path}.limits.{name}", "must not be negative")


def tools(xs: list, path: str = "tools") -> None:
    seen = set()
    for i, t in enumerate(xs):
        if not t.name:
            raise BadInput(f"{path}[{i}].name", "is required")
        if t.name in seen:
            raise BadInput(f"{path}[{i}].name", f"{t.name!r} is defined twice")
        seen.add(t.name)


def compaction_settings(s: m.CompactionSettings, path: str = "compaction") -> None:
    if s.threshold_percent is not None:
        p = s.threshold_percent
        if not math.isfinite(p) or p <= 0 or p > 100:
            raise BadInput(f"{path}.threshold_percent", f"must be in (0, 100], got {p}")
    for name in ("reserved", "tail_turns", "preserve_recent_tokens"):
        v = getattr(s, name)
        if v is not None and v < 0:
            raise BadInput(f"{path}.{name}", "must not be negative")
