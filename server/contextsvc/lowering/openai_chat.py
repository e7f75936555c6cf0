"""OpenAI Chat Completions body (POST /v1/chat/completions), and gateways speaking it."""
from __future__ import annotations


from .. import model as m, native
from . import media
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .neutral import LEAD_USER_TEXT, MMedia, MSpacer, MText, MToolCall, MToolResult, attachment_note
from .tool_ids import wire_id


def _media(provider: str, x: MMedia, ledger: MediaLedger) -> dict:
    src = media.source(provider, x.mime, x.data, x.url)
    if src is None:  # includes a PDF by web URL: file_data takes a base64 data: URL only
        return {"type": "text", "text": attachment_note(x)}
    if src.kind == media.DOCUMENT:
        return {"type": "file", "file": {"filename": x.filename or "file.pdf", "file_data": src.data_url(ledger)}}
    url = src.web_url(ledger) if src.url else src.data_url(ledger)
    return {"type": "image_url", "image_url": {"url": url}}


def _user_content(provider: str, parts: list, ledger: MediaLedger):
    blocks = [{"type": "text", "text": c.text} if isinstance(c, MText) else _media(provider, c, ledger)
              for c in parts]
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return blocks[0]["text"]  # a lone text goes as a plain string
    return blocks


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False) -> Lowered:
    system_msgs = [{"role": "system", "content": s} for s in system]
    wire, roles, sources = [], [], []
    for msg in messages:
        if msg.role == "user":
            wire.append({"role": "user", "content": _user_content(provider, msg.content, ledger)})
            ledger.claim(wire[-1])
            roles.append("user")
            sources.append([msg.source_id])
        elif msg.role == "assistant":
            text = "".join(c.text for c in msg.content if isinstance(c, MText) and not isinstance(c, MSpacer))
            calls = [
                {"id": wire_id(provider, c.call_id), "type": "function",
                 "function": {"name": c.name, "arguments": native.json_text(c.input)}}  # as JSON.stringify writes it
                for c in msg.content if isinstance(c, MToolCall)
            ]
            if not text and not calls:
                continue  # reasoning alone has no place in this format
            out_msg = {"role": "assistant", "content": text or None}
            if calls:
                out_msg["tool_calls"] = calls
            wire.append(out_msg)
            roles.append("assistant")
            sources.append([msg.source_id])
        else:
            moved = []
            for r in msg.content:
                assert isinstance(r, MToolResult)
                wire.append({"role": "tool", "tool_call_id": wire_id(provider, r.call_id), "content": r.text})
                roles.append("tool")
                sources.append([msg.source_id])
                moved.extend(r.media)
            if moved:  # tool messages carry text only: media follows as a user message
                wire.append({"role": "user", "content": [_media(provider, x, ledger) for x in moved]})
                ledger.claim(wire[-1])
                roles.append("user")
                sources.append([msg.source_id])
    open_with_user(wire, roles, sources, {"role": "user", "content": LEAD_USER_TEXT})  # after the system messages
    all_msgs = system_msgs + wire
    token_field = "max_completion_tokens" if provider == m.OPENAI else "max_tokens"
    out = {"model": model_id, "messages": all_msgs, token_field: max_output}
    if tools:
        out["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema or {"type": "object"}}}
            for t in tools
        ]
        if tools_disabled:
            out["tool_choice"] = "none"  # tools stay defined (history may hold tool calls), none is called
    if session_id and provider in (m.OPENAI, m.OPENROUTER):
        out["prompt_cache_key"] = session_id  # routes the session to a warm cache
    return Lowered(out, system_msgs, wire, roles, sources, [(out, "messages")], (out, token_field))
