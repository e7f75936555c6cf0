"""A body's elements as its provider's cache reads them, markers removed."""
from __future__ import annotations

from contextsvc import conversation as m


MARKER_KEYS = ("cache_control", "copilot_cache_control", "cachePoint")


def unmarked(value):
    """The value without cache markers (keys, and Bedrock's cachePoint blocks)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k not in MARKER_KEYS}
    if isinstance(value, list):
        return [unmarked(v) for v in value if not (isinstance(v, dict) and set(v) == {"cachePoint"})]
    return value


def cache_order(provider: str, body: dict) -> dict:
    """tools, system and messages of a body as its provider's cache reads them."""
    if provider == m.BEDROCK:
        tools, system, messages = body.get("toolConfig", {}).get("tools", []), body["system"], body["messages"]
    elif provider == m.ANTHROPIC:
        tools, system, messages = body.get("tools", []), body["system"], body["messages"]
    elif provider == m.GEMINI:
        tools, system, messages = body.get("tools", []), body["systemInstruction"]["parts"], body["contents"]
    elif provider == m.OPENAI_RESPONSES:  # developer messages lead the input items
        tools = body.get("tools", [])
        system = [x for x in body["input"] if x.get("role") == "developer"]
        messages = [x for x in body["input"] if x.get("role") != "developer"]
    else:  # the Chat Completions family: system messages lead the message list
        tools = body.get("tools", [])
        # a string content and one text part are the same to the gateways' upstream caches (a
        # marker turns the one into the other: design.md §6)
        listed = [{**x, "content": [{"type": "text", "text": x["content"]}]} if isinstance(x.get("content"), str)
                  else x for x in body["messages"]]
        system = [x for x in listed if x["role"] == "system"]
        messages = [x for x in listed if x["role"] != "system"]
    return {"tools": unmarked(tools), "system": unmarked(system), "messages": unmarked(messages)}
