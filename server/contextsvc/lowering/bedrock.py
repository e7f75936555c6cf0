"""Amazon Bedrock Converse body (POST /model/{modelId}/converse; the model id is in the path)."""
from __future__ import annotations

import re

from .. import model as m
from .lowered import Lowered
from .media import MediaLedger, base64_size, split_data_url
from .neutral import MMedia, MReasoning, MText, MToolCall, MToolResult, attachment_note
from .tool_ids import wire_id

_DOC_FORMATS = {"application/pdf": "pdf"}
# Converse accepts document names of letters, digits, single spaces, hyphens, parentheses and
# square brackets; anything else fails the whole request.
_NAME_DISALLOWED = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")


def document_name(filename: str) -> str:
    stem = (filename or "").rsplit(".", 1)[0]
    name = " ".join(_NAME_DISALLOWED.sub("-", stem).split())
    return name if any(ch.isalnum() for ch in name) else "document"


def _media(x: MMedia, ledger: MediaLedger) -> dict:
    if x.data is not None:
        data = ledger.binary(x.data)
        mime = x.mime
    else:
        parsed = split_data_url(x.url)
        if not parsed:  # Converse takes bytes (or S3), not web URLs
            return {"text": attachment_note(x)}
        mime, payload = parsed
        data = ledger.encoded(payload, base64_size(payload))
    if mime in _DOC_FORMATS:
        return {"document": {"format": _DOC_FORMATS[mime], "name": document_name(x.filename),
                             "source": {"bytes": data}}}
    return {"image": {"format": mime.split("/", 1)[1], "source": {"bytes": data}}}


def _block(c, ledger: MediaLedger):
    if isinstance(c, MText):
        return {"text": c.text}
    if isinstance(c, MMedia):
        return _media(c, ledger)
    if isinstance(c, MReasoning):
        if c.redacted:
            return {"reasoningContent": {"redactedContent": ledger.opaque(c.redacted)}}
        if not c.signature:
            return None  # Converse rejects unsigned reasoning, as the Messages API does
        return {"reasoningContent": {"reasoningText": {"text": c.text, "signature": ledger.opaque(c.signature)}}}
    if isinstance(c, MToolCall):
        return {"toolUse": {"toolUseId": wire_id(m.BEDROCK, c.call_id), "name": c.name, "input": c.input}}
    if isinstance(c, MToolResult):
        content = [{"text": c.text}] if c.text else []
        content.extend(_media(x, ledger) for x in c.media)
        return {"toolResult": {"toolUseId": wire_id(m.BEDROCK, c.call_id), "content": content,
                               "status": "error" if c.is_error else "success"}}
    raise TypeError(type(c).__name__)


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False) -> Lowered:
    # Converse's toolChoice has no "none": with tools disabled the tool definitions stay (history
    # may hold tool blocks) and the last-step message is what keeps the model from calling them.
    wire, roles, sources = [], [], []
    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = [b for b in (_block(c, ledger) for c in msg.content) if b is not None]
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)  # Converse wants alternating roles
            ledger.claim(wire[-1])
            sources[-1].append(msg.source_id)
            continue
        wire.append({"role": role, "content": blocks})
        ledger.claim(wire[-1])
        roles.append(role)
        sources.append([msg.source_id])
    system_blocks = [{"text": s} for s in system]
    out = {"messages": wire}
    lists = [(out, "messages")]
    if system_blocks:
        out["system"] = system_blocks
        lists.append((out, "system"))
    out["inferenceConfig"] = {"maxTokens": max_output}
    if tools:
        out["toolConfig"] = {"tools": [
            {"toolSpec": {"name": t.name, "description": t.description or t.name,
                          "inputSchema": {"json": t.input_schema or {"type": "object"}}}}
            for t in tools
        ]}
    return Lowered(out, system_blocks, wire, roles, sources, lists, (out["inferenceConfig"], "maxTokens"))
