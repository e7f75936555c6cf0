"""Would the Anthropic Messages API (POST /v1/messages) accept this body?

Shape: the `anthropic` SDK's own request type, `MessageCreateParamsNonStreaming`, validated
strictly (unknown keys refused at every depth, JSON types not coerced, lazy iterables forced).
`cache_control` is part of that type, so markers are shape-checked there and counted below.
Context editing (`context_management`) is a beta: the field is checked with the SDK's beta type
(`BetaContextManagementConfigParam`), the rest of the body with the one above, and the request
must name the beta in its `anthropic-beta` header (judge's `headers`).
Then the rules the API documents and enforces beyond the shape.
"""
from __future__ import annotations

import base64
import io

import pikepdf
from anthropic.types.beta.beta_context_management_config_param import BetaContextManagementConfigParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from ._common import (ANTHROPIC_ID, MAX_MARKERS, PREFILL_REFUSED, Problems, b64_ok, image_pixels, image_problem,
                      is_http_url, refuses_prefill, schema_draft_problem, schema_root_problem, strict_validator, tool_name_problem,
                      validate)

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
THINKING = ("thinking", "redacted_thinking")
# "image exceeds 5 MB maximum: N bytes > 5242880 bytes", counted on the base64 text: 3.75 MB raw;
# "At least one of the image dimensions exceed max allowed size: 8000 pixels"
MAX_IMAGE_BYTES = 5 * 2**20 * 3 // 4
MAX_IMAGE_SIDE = 8000
# "At least one of the image dimensions exceed max allowed size for many-image requests: 2000
# pixels": a request of more than 20 images (the vision docs)
MANY_IMAGES, MANY_IMAGES_SIDE = 20, 2000
# "Too much media: 0 document pages + 102 images > 100": images and PDF pages of one request, up to
# 100 for a model of a 200K-token window, 600 for the longer ones (the vision docs)
MAX_MEDIA = 100
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"


def _blocks(message) -> list:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _merged(messages: list) -> list:
    """(role, [(index, block)]) turns: the API combines consecutive same-role messages."""
    turns = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            continue
        blocks = [(i, b) for b in _blocks(msg) if isinstance(b, dict)]
        if turns and turns[-1][0] == msg.get("role"):
            turns[-1][1].extend(blocks)
        else:
            turns.append((msg.get("role"), blocks))
    return turns


def _pdf_pages(data: str) -> int:
    """The pages of a base64 PDF, as qpdf reads them (0 where it cannot)."""
    try:
        with pikepdf.open(io.BytesIO(base64.b64decode(data))) as pdf:
            return len(pdf.pages)
    except Exception:  # noqa: BLE001 - a PDF the API could not read either
        return 0


def _media(block: dict, where: str, p: Problems, images: list, pages: list | None = None) -> None:
    """images: (where, pixels or None) of each image, pages: each inline PDF's pages, added to."""
    source = block.get("source") or {}
    kind = source.get("type")
    if block.get("type") == "image":
        images.append((where, image_pixels(source["data"]) if kind == "base64" and b64_ok(source.get("data"))
                       else None))
        if kind == "base64":
            if source.get("media_type") not in IMAGE_TYPES:
                p.add("image-media-type", where, f"{source.get('media_type')!r} is not one of "
                                                 f"{', '.join(sorted(IMAGE_TYPES))}")
            if not b64_ok(source.get("data")):
                p.add("base64", where, "source.data is not valid base64")
            elif problem := image_problem(source["data"], source.get("media_type"), MAX_IMAGE_BYTES, MAX_IMAGE_SIDE):
                p.add("image", where, problem)
        elif kind == "url" and not is_http_url(source.get("url")):
            p.add("media-url", where, f"URL source must be http(s), got {str(source.get('url'))[:40]!r}")
    elif block.get("type") == "document":
        if kind == "base64":
            if source.get("media_type") != "application/pdf":
                p.add("document-media-type", where, f"{source.get('media_type')!r} is not application/pdf")
            if not b64_ok(source.get("data")):
                p.add("base64", where, "source.data is not valid base64")
            elif pages is not None:
                pages.append(_pdf_pages(source["data"]))
        elif kind == "url" and not is_http_url(source.get("url")):
            p.add("media-url", where, f"URL source must be http(s), got {str(source.get('url'))[:40]!r}")


def _texts(blocks, where: str, p: Problems, message_has_other: bool) -> None:
    for k, b in blocks:
        if b.get("type") != "text" or not isinstance(b.get("text"), str):
            continue
        if b["text"] == "":
            p.add("empty-text", f"{where}[{k}]", "text content blocks must be non-empty")
        elif not b["text"].strip() and not message_has_other:
            p.add("blank-text", f"{where}[{k}]", "text content blocks must contain non-whitespace text")


def _markers(body: dict, p: Problems) -> None:
    """Counts cache_control in prefix order (tools, system, messages) and checks where it sits."""
    found = []  # (where, ttl)

    def visit(block, where):
        if not isinstance(block, dict):
            return
        if "cache_control" in block:
            cc = block["cache_control"] or {}
            found.append((where, cc.get("ttl", "5m") if isinstance(cc, dict) else "5m"))
            if block.get("type") in THINKING:
                p.add("marker-on-thinking", where, f"cache_control is not allowed on a {block['type']} block")
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            for k, inner in enumerate(block["content"]):
                visit(inner, f"{where}.content[{k}]")

    for i, tool in enumerate(body.get("tools") or []):
        visit(tool, f"tools[{i}]")
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else []):
        visit(block, f"system[{i}]")
    for i, msg in enumerate(body.get("messages") or []):
        if isinstance(msg, dict):
            if "cache_control" in msg:
                p.add("marker-place", f"messages[{i}]", "cache_control goes on a content block, not the message")
            for k, block in enumerate(_blocks(msg)):
                visit(block, f"messages[{i}].content[{k}]")
    if len(found) > MAX_MARKERS:
        p.add("marker-count", "body", f"{len(found)} cache_control markers; at most {MAX_MARKERS} are accepted")
    seen_5m = None
    for where, ttl in found:
        if ttl == "1h" and seen_5m is not None:
            p.add("marker-ttl-order", where, f"a 1h cache_control follows a 5m one at {seen_5m}")
        if ttl != "1h" and seen_5m is None:
            seen_5m = where


def _context_management(body: dict, headers: dict, p: Problems) -> dict:
    """The body without context_management, after checking the field and its beta header."""
    if "context_management" not in body:
        return body
    body = dict(body)
    config = body.pop("context_management")
    validate(strict_validator(BetaContextManagementConfigParam), config, p, "schema", "context_management")
    betas = {b.strip() for b in (headers or {}).get("anthropic-beta", "").split(",")}
    if CONTEXT_MANAGEMENT_BETA not in betas:
        p.add("beta-header", "context_management", f"sent without the {CONTEXT_MANAGEMENT_BETA} beta "
                                                   "in the anthropic-beta header")
    return body


def judge(body: dict, headers: dict | None = None, max_media: int = MAX_MEDIA) -> list:
    """headers: the HTTP headers sent with the body (the beta a body feature needs); max_media:
    the images and PDF pages the model takes in one request (600 for a window over 200K)."""
    p = Problems()
    if not isinstance(body, dict):
        p.add("schema", "body", "not a JSON object")
        return p
    body = _context_management(body, headers, p)
    validate(strict_validator(MessageCreateParamsNonStreaming), body, p, "schema")
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not messages:
        p.add("messages-empty", "messages", "at least one message is required")
        return p
    if messages[0].get("role") != "user":
        p.add("first-user", "messages[0]", f"the first message must be a user message, not {messages[0].get('role')!r}")
    system = body.get("system")
    if isinstance(system, list):  # text blocks there are text blocks as in a message
        _texts([(k, b) for k, b in enumerate(system) if isinstance(b, dict)], "system", p, False)
    if messages[-1].get("role") == "assistant" and refuses_prefill(body.get("model")):
        p.add("prefill", f"messages[{len(messages) - 1}]", PREFILL_REFUSED)
    final = messages[-1].get("content") if messages[-1].get("role") == "assistant" else None
    if isinstance(final, list) and any(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")
                                       for b in final):
        # thinking off: refused outright; on: the turn must open with it, and thinking is on only
        # with the body's own `thinking` field, which these bodies never set
        if not (isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
                and isinstance(final[0], dict) and final[0].get("type") in ("thinking", "redacted_thinking")):
            p.add("final-thinking", f"messages[{len(messages) - 1}]",
                  "When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`")

    tool_blocks = False
    ids_seen = set()
    images, pages = [], []
    for i, msg in enumerate(messages):
        blocks = [(k, b) for k, b in enumerate(_blocks(msg)) if isinstance(b, dict)]
        if isinstance(msg.get("content"), list) and not msg["content"]:
            p.add("empty-content", f"messages[{i}]", "content must not be empty")
        has_other = any(b.get("type") != "text" or (isinstance(b.get("text"), str) and b["text"].strip())
                        for _, b in blocks)
        _texts(blocks, f"messages[{i}].content", p, has_other)
        for k, b in blocks:
            where = f"messages[{i}].content[{k}]"
            kind = b.get("type")
            if kind in ("image", "document"):
                _media(b, where, p, images, pages)
            if kind == "tool_use":
                tool_blocks = True
                tool_name_problem(b.get("name"), f"{where}.name", p)
                if not ANTHROPIC_ID.fullmatch(str(b.get("id", ""))):
                    p.add("tool-id", where, f"tool_use.id {b.get('id')!r} does not match ^[a-zA-Z0-9_-]+$")
                if b.get("id") in ids_seen:
                    p.add("tool-id-unique", where, f"tool_use id {b.get('id')!r} is used twice")
                ids_seen.add(b.get("id"))
            if kind == "tool_result":
                tool_blocks = True
                if not ANTHROPIC_ID.fullmatch(str(b.get("tool_use_id", ""))):
                    p.add("tool-id", where, f"tool_use_id {b.get('tool_use_id')!r} does not match ^[a-zA-Z0-9_-]+$")
                inner = b.get("content")
                if b.get("is_error") and not inner:
                    p.add("tool-result-empty", where, "content cannot be empty if `is_error` is true")
                if isinstance(inner, list):
                    inner_blocks = [(j, x) for j, x in enumerate(inner) if isinstance(x, dict)]
                    # Whitespace-only text is documented as refused in message content; inside a
                    # tool_result it is reported refused too (a shell's "\r\n": hermes-agent,
                    # claude-code #23440)
                    _texts(inner_blocks, f"{where}.content", p, False)
                    for j, x in inner_blocks:
                        if x.get("type") in ("image", "document"):
                            _media(x, f"{where}.content[{j}]", p, images, pages)
    if len(images) + sum(pages) > max_media:
        p.add("too-much-media", "messages", f"Too much media: {sum(pages)} document pages + {len(images)} images "
                                            f"> {max_media}")
    if len(images) > MANY_IMAGES:
        for where, pixels in images:
            if pixels is not None and max(pixels) > MANY_IMAGES_SIDE:
                p.add("image", where, f"{pixels[0]}x{pixels[1]} px, over {MANY_IMAGES_SIDE} on a side in a request "
                                      f"of {len(images)} images (more than {MANY_IMAGES})")
    for k, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict):
            tool_name_problem(tool.get("name"), f"tools[{k}].name", p)
            if tool.get("type") in (None, "custom"):  # a client tool (server tools have no schema)
                schema_root_problem(tool.get("input_schema"), f"tools.{k}.custom.input_schema", p)
                schema_draft_problem(tool.get("input_schema"), f"tools.{k}.custom.input_schema", p)
    if tool_blocks and not body.get("tools"):
        p.add("tools-defined", "tools", "requests which include tool_use or tool_result blocks must define tools")

    turns = _merged(messages)
    for t, (role, blocks) in enumerate(turns):
        if role == "assistant":
            uses = [b.get("id") for _, b in blocks if b.get("type") == "tool_use"]
            if not uses:
                continue
            nxt = turns[t + 1] if t + 1 < len(turns) else None
            answered = {b.get("tool_use_id") for _, b in nxt[1] if b.get("type") == "tool_result"} if nxt else set()
            for u in uses:
                if u not in answered:
                    p.add("tool-pairing", f"tool_use {u!r}",
                          "tool_use ids were found without tool_result blocks immediately after")
        elif role == "user":
            prev = turns[t - 1] if t > 0 else None
            asked = {b.get("id") for _, b in prev[1] if b.get("type") == "tool_use"} if prev else set()
            results_done = False
            for i, b in blocks:
                if b.get("type") == "tool_result":
                    if results_done:
                        p.add("tool-result-first", f"messages[{i}]",
                              f"tool_result {b.get('tool_use_id')!r} follows other content; tool_result blocks come first")
                    if b.get("tool_use_id") not in asked:
                        p.add("tool-pairing", f"messages[{i}]",
                              f"tool_result {b.get('tool_use_id')!r} has no tool_use in the previous assistant message")
                else:
                    results_done = True

    last = messages[-1]
    if last.get("role") == "assistant":
        texts = [b for b in _blocks(last) if isinstance(b, dict) and b.get("type") == "text"]
        if texts and isinstance(texts[-1].get("text"), str) and texts[-1]["text"] != texts[-1]["text"].rstrip():
            p.add("trailing-whitespace", f"messages[{len(messages) - 1}]",
                  "final assistant content cannot end with trailing whitespace")
    _markers(body, p)
    return p
