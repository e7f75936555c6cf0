"""Anthropic Messages API body (POST /v1/messages)."""
from __future__ import annotations

from .. import conversation as m
from . import media
from .tool_schema import as_taken, claude_schema
from ..deadline import NO_DEADLINE, Deadline
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .neutral import LEAD_USER_TEXT, MMedia, MReasoning, MText, MToolCall, MToolResult
from .tool_ids import WORD, wire_id, wire_name
from .wire_format import TTL_1H, WireFormat

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
NO_TOOL_USE = {"type": "none"}  # tools stay defined (history may hold tool blocks), none is called


def _media(x: MMedia, ledger: MediaLedger) -> dict:
    src = media.source(FORMAT, x, ledger)
    if isinstance(src, str):  # the attachment note
        return {"type": "text", "text": src}
    if src.url:
        source = {"type": "url", "url": src.web_url(ledger)}
    else:
        source = {"type": "base64", "media_type": src.mime, "data": src.base64(ledger)}
    return {"type": "document" if src.kind == media.DOCUMENT else "image", "source": source}


def _block(c, ledger: MediaLedger, deadline: Deadline):
    deadline.count("lowering")
    if isinstance(c, MText):
        return {"type": "text", "text": c.text}
    if isinstance(c, MMedia):
        return _media(c, ledger)
    if isinstance(c, MReasoning):
        if c.redacted:
            return {"type": "redacted_thinking", "data": ledger.opaque(c.redacted)}
        if c.signature:
            return {"type": "thinking", "thinking": c.text, "signature": ledger.opaque(c.signature)}
        return None  # unsigned reasoning is rejected by the API: the model never sees it again
    if isinstance(c, MToolCall):
        return {"type": "tool_use", "id": wire_id(FORMAT, c.call_id), "name": wire_name(FORMAT, c.name),
                "input": c.input}
    if isinstance(c, MToolResult):
        # no text block of whitespace alone ("\r\n" from a shell): refused as in message content
        content = [{"type": "text", "text": c.text}] if c.text.strip() else []
        content.extend(_media(x, ledger) for x in c.media)
        block = {"type": "tool_result", "tool_use_id": wire_id(FORMAT, c.call_id), "content": content}
        if c.is_error:
            block["is_error"] = True
        return block
    raise TypeError(type(c).__name__)


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False, deadline: Deadline = NO_DEADLINE) -> Lowered:
    wire, roles, sources = [], [], []
    run = None  # joins the messages that follow into wire[-1], of their role
    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        ledger.source_id = msg.source_id  # whose media the blocks below lower (MediaLedger.leaves_out)
        blocks = [b for b in (_block(c, ledger, deadline) for c in msg.content) if b is not None]
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:  # the API wants alternating roles
            if run is None:
                run = FORMAT.run(wire[-1]["content"])
            run.add(blocks)
            ledger.claim(wire[-1])
            sources[-1].append(msg.source_id)
            continue
        run = None
        wire.append({"role": role, "content": blocks})
        ledger.claim(wire[-1])
        roles.append(role)
        sources.append([msg.source_id])
    open_with_user(wire, roles, sources, {"role": "user", "content": [{"type": "text", "text": LEAD_USER_TEXT}]})
    system_blocks = [{"type": "text", "text": s} for s in system]
    out = {"model": model_id, "max_tokens": max_output}
    lists = []
    if system_blocks:
        out["system"] = system_blocks
        lists.append((out, "system"))
    out["messages"] = wire
    lists.append((out, "messages"))
    if tools:
        out["tools"] = [
            {"name": wire_name(FORMAT, t.name), "description": t.description,
             "input_schema": as_taken(t, ("anthropic",), claude_schema)}
            for t in tools
        ]
        if tools_disabled:
            out[FORMAT.tool_choice_key] = NO_TOOL_USE
    return Lowered(out, system_blocks, wire, roles, sources, lists, (out, "max_tokens"))


# Anthropic refuses cache_control on these blocks.
_UNMARKABLE = ("thinking", "redacted_thinking")


class Anthropic(WireFormat):
    name = m.ANTHROPIC
    body = staticmethod(body)
    merged_key = "content"
    trims_final_text = True
    ids = WORD
    names = WORD  # tools[].name and tool_use.name: ^[a-zA-Z0-9_-]{1,64}$
    tool_choice_key = "tool_choice"
    # "Changes to tool_choice ... only affect message blocks" (build-with-claude/prompt-caching,
    # what invalidates the cache): the messages are written again, tools and system are read
    tool_choice_breaks_cache = True
    accepted = {**media.WEB_IMAGES, "application/pdf": media.DOCUMENT}
    fetched = frozenset(accepted)  # URL image and URL PDF sources
    # 5 MB of base64 per image (its raw bytes: 3.75 MB), 8000 px per side (the Messages API docs)
    max_image_bytes = 3 * 2**20 * 5 // 4
    max_image_side = 8000
    # "At least one of the image dimensions exceed max allowed size for many-image requests: 2000
    # pixels": the vision docs' limit for a request of more than 20 images
    many_images = 20
    many_images_side = 2000
    # "Too much media: 0 document pages + 102 images > 100": up to 600 images a request, 100 for a
    # model of a 200K-token context window (the vision docs); PDF pages count with them. Claude
    # Code sessions that met it could not go on, nor compact
    max_media, max_media_long, max_media_window = 100, 600, 200_000
    max_request_bytes = 32_000_000  # "request_too_large": 32 MB (the smaller reading of MB)
    native_auto = True
    longer_ttls_first = True  # the Messages API rejects a 1-hour entry placed after a 5-minute one
    context_strategy = "clear_tool_uses_20250919"

    def context_management(self, mg, wire_names: dict) -> tuple:
        """Tool-result clearing (build-with-claude/context-editing), a beta: the request names it
        in the anthropic-beta header. Thinking clearing is left out: it needs extended thinking
        on, which the body does not set."""
        edit = {"type": mg.strategy, "trigger": {"type": "input_tokens", "value": mg.trigger},
                "keep": {"type": "tool_uses", "value": mg.keep}}
        if mg.clear_at_least:
            edit["clear_at_least"] = {"type": "input_tokens", "value": mg.clear_at_least}
        if mg.exclude:
            edit["exclude_tools"] = [wire_names[name] for name in mg.exclude]
        return {"context_management": {"edits": [edit]}}, {"anthropic-beta": CONTEXT_MANAGEMENT_BETA}

    def marker(self, ttl: str) -> tuple:
        value = {"type": "ephemeral"}
        if ttl == TTL_1H:
            value["ttl"] = "1h"
        return "cache_control", value

    def opens_turn(self, block: dict) -> bool:
        return block.get("type") in _UNMARKABLE

    def opens_user_turn(self, messages: list, roles: list, i: int) -> bool:
        content = messages[i].get("content")
        return roles[i] == "user" and (isinstance(content, str) or all(b.get("type") != "tool_result" for b in content))

    def markable(self, element: dict) -> bool:
        return any(b.get("type") not in _UNMARKABLE for b in element.get("content"))

    def place(self, lowered, kind: str, index: int, key: str, value: dict):
        if kind == "tools":
            lowered.body["tools"][index][key] = value
            return None
        element = (lowered.system if kind == "system" else lowered.messages)[index]
        if kind == "system":
            element[key] = value
        else:  # the last block that is not reasoning
            next(b for b in reversed(element["content"]) if b.get("type") not in _UNMARKABLE)[key] = value
        return element


FORMAT = Anthropic()
