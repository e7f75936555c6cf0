"""The providers' own context management as the fake provider applies it before counting.

Anthropic's tool-result clearing (`context_management.edits`, clear_tool_uses_20250919, the
context-management-2025-06-27 beta; build-with-claude/context-editing): once the input exceeds the
trigger, the API clears the oldest tool results in chronological order, keeping the newest `keep`
tool uses and never touching the uses of `exclude_tools`, replaces each cleared result with
placeholder text, and applies the edit only when it frees at least `clear_at_least` tokens. The
model reads the edited prompt, so the window and the reported usage count it; the response's
`context_management.applied_edits` says what was cleared (the SDK's
BetaContextManagementResponse). The client's history is unchanged: it sends everything again and
the API clears again on the next request.

What the fake does not emulate it refuses, so no session passes on behaviour nobody applied:
the other edits (thinking clearing, server-side compaction), clear_tool_inputs, and OpenAI
Responses' server-side compaction past its threshold (what its opaque item leaves cannot be
counted honestly; below the threshold nothing is compacted and the request is counted whole).
"""
from __future__ import annotations

import copy
from typing import Callable, Optional

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
PLACEHOLDER = "[tool result cleared by context management]"  # the fake's wording: the API's is not published
DEFAULTS = {"trigger": {"type": "input_tokens", "value": 100_000}, "keep": {"type": "tool_uses", "value": 3}}


class Unemulated(Exception):
    """A context_management setting the fake provider does not apply."""


def config(provider: str, body: dict):
    """The body's context_management, or None."""
    return body.get("context_management") if provider in ("anthropic", "openai-responses") else None


def prompt(body: dict) -> dict:
    """What the model reads of a body: everything but the context_management configuration."""
    return {k: v for k, v in body.items() if k != "context_management"}


def apply(provider: str, body: dict, count: Callable[[dict], int]) -> tuple[dict, Optional[dict]]:
    """(the prompt the model reads, the response's context_management or None when the body has
    none). count: tokens of a prompt, as the fake model counts them. Raises Unemulated."""
    cm = config(provider, body)
    if cm is None:
        return prompt(body), None
    if provider == "openai-responses":
        threshold = min((e.get("compact_threshold") or 0) for e in cm)
        if count(prompt(body)) > threshold:
            raise Unemulated(f"server-side compaction past compact_threshold {threshold}: what the compaction "
                             "item leaves cannot be counted")
        return prompt(body), None
    seen, applied = prompt(body), []
    for edit in cm.get("edits") or []:
        if edit.get("type") != CLEAR_TOOL_USES:
            raise Unemulated(f"context_management edit {edit.get('type')!r}")
        if edit.get("clear_tool_inputs"):
            raise Unemulated("clear_tool_inputs")
        seen, done = clear_tool_uses(seen, edit, count)
        if done:
            applied.append(done)
    return seen, {"applied_edits": applied}


def tool_uses(messages: list) -> list:
    """(tool_use id, tool name) of every tool use, in send order."""
    return [(b["id"], b["name"]) for msg in messages if msg.get("role") == "assistant"
            for b in _blocks(msg) if b.get("type") == "tool_use"]


def clear_tool_uses(seen: dict, edit: dict, count: Callable[[dict], int]) -> tuple[dict, Optional[dict]]:
    """(prompt after the edit, its applied_edits entry or None when it did not apply)."""
    trigger, keep = edit.get("trigger") or DEFAULTS["trigger"], (edit.get("keep") or DEFAULTS["keep"])["value"]
    at_least = (edit.get("clear_at_least") or {}).get("value") or 0
    excluded = set(edit.get("exclude_tools") or ())
    uses = tool_uses(seen.get("messages") or [])
    before = count(seen)
    reached = len(uses) if trigger["type"] == "tool_uses" else before
    if reached <= trigger["value"]:
        return seen, None
    older = uses[:max(0, len(uses) - keep)]
    clear = {use_id for use_id, name in older if name not in excluded}
    if not clear:
        return seen, None
    after = copy.deepcopy(seen)
    for msg in after.get("messages") or []:
        for block in _blocks(msg):
            if block.get("type") == "tool_result" and block.get("tool_use_id") in clear:
                block["content"] = [{"type": "text", "text": PLACEHOLDER}]
    freed = before - count(after)
    if freed < at_least:
        return seen, None
    return after, {"type": CLEAR_TOOL_USES, "cleared_tool_uses": len(clear), "cleared_input_tokens": max(0, freed)}


def _blocks(msg: dict) -> list:
    content = msg.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
