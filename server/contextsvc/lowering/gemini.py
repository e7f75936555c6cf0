"""Google Gemini generateContent body (POST /v1beta/models/{model}:generateContent)."""
from __future__ import annotations

from .lowered import Lowered
from .media import MediaLedger, base64_size, split_data_url
from .neutral import MMedia, MReasoning, MSpacer, MText, MToolCall, MToolResult, attachment_note


def _media(x: MMedia, ledger: MediaLedger) -> dict:
    if x.data is not None:
        return {"inlineData": {"mimeType": x.mime, "data": ledger.binary(x.data)}}
    parsed = split_data_url(x.url)
    if parsed:
        mime, payload = parsed
        return {"inlineData": {"mimeType": mime, "data": ledger.encoded(payload, base64_size(payload))}}
    if x.url:
        return {"fileData": {"mimeType": x.mime, "fileUri": ledger.url(x.url)}}
    return {"text": attachment_note(x)}


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False) -> Lowered:
    wire, roles, sources = [], [], []
    for msg in messages:
        role = "model" if msg.role == "assistant" else "user"
        parts, moved, signature = [], [], ""
        for c in msg.content:
            if isinstance(c, MSpacer):
                continue  # reasoning is not replayed here, so neither is its spacer
            if isinstance(c, MReasoning):
                # Gemini returns a thought's signature on the part after it (a function call
                # above all) and wants it back there; the thought text itself is not replayed.
                signature = c.signature or signature
                continue
            if isinstance(c, MText):
                parts.append({"text": c.text})
            elif isinstance(c, MMedia):
                parts.append(_media(c, ledger))
            elif isinstance(c, MToolCall):
                parts.append({"functionCall": {"name": c.name, "args": c.input}})
            elif isinstance(c, MToolResult):
                parts.append({"functionResponse": {"name": c.name,
                                                   "response": {"name": c.name, "content": c.text}}})
                moved.extend(c.media)  # function responses carry text: media follows as parts
            if signature and parts:
                parts[-1]["thoughtSignature"] = ledger.opaque(signature)
                signature = ""
        parts.extend(_media(x, ledger) for x in moved)
        if not parts:
            continue  # reasoning alone is not replayed to Gemini
        if wire and wire[-1]["role"] == role:
            wire[-1]["parts"].extend(parts)
            ledger.claim(wire[-1])
            sources[-1].append(msg.source_id)
            continue
        wire.append({"role": role, "parts": parts})
        ledger.claim(wire[-1])
        roles.append("assistant" if role == "model" else "user")
        sources.append([msg.source_id])
    out = {"contents": wire}
    lists = [(out, "contents")]
    system_parts = [{"text": s} for s in system]
    if system_parts:
        out["systemInstruction"] = {"parts": system_parts}
        lists.append((out["systemInstruction"], "parts"))
    if tools:
        out["tools"] = [{"functionDeclarations": [
            {"name": t.name, "description": t.description, "parameters": t.input_schema or {"type": "object"}}
            for t in tools
        ]}]
        if tools_disabled:  # the definitions stay (history may hold calls); none is called
            out["toolConfig"] = {"functionCallingConfig": {"mode": "NONE"}}
    out["generationConfig"] = {"maxOutputTokens": max_output}
    return Lowered(out, system_parts, wire, roles, sources, lists, (out["generationConfig"], "maxOutputTokens"))
