"""Would Amazon Bedrock Converse (POST /model/{modelId}/converse) accept this body?

Shape: botocore's own `bedrock-runtime` service model, the `Converse` input shape. The body is
the REST JSON of that shape without `modelId`, which travels in the URL. Blobs arrive as base64
strings and are decoded to bytes first (invalid base64 is a problem of its own), then
`botocore.validate.ParamValidator` checks types, required members and unions; it leaves out
`max`, `pattern` and `enum`, so a walk over the same shapes checks `min`, `max`, `pattern` (as a
full match) and `enum`. Then the rules Converse documents beyond the model.
"""
from __future__ import annotations

import base64
import binascii
import functools
import re

import botocore.session
from botocore.validate import ParamValidator

from ._common import (MAX_MARKERS, PREFILL_REFUSED, Problems, claude_generation, image_pixels, image_problem,
                      refuses_prefill, schema_draft_problem, schema_root_problem)

# DocumentBlock.name: "alphanumeric characters, whitespace characters (no more than one in a row),
# hyphens, parentheses, and square brackets" (Converse API reference).
DOCUMENT_NAME = re.compile(r"[A-Za-z0-9\-()\[\]]+(\s[A-Za-z0-9\-()\[\]]+)*")
DOCUMENT_NAME_MAX = 200
# ImageBlock: "The maximum image size is 3.75 MB" and 8,000 px a side (Converse API reference)
MAX_IMAGE_BYTES = 5 * 2**20 * 3 // 4
MAX_IMAGE_SIDE = 8000
# "Each document's size must be no more than 4.5 MB" (the Message type's documentation)
MAX_DOCUMENT_BYTES = 4_500_000
# Claude behind Converse: "image exceed max allowed size for many-image requests: 2000 pixels"
MANY_IMAGES, MANY_IMAGES_SIDE = 20, 2000


@functools.lru_cache(maxsize=None)
def _input_shape():
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    return model.operation_model("Converse").input_shape


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _decode_blobs(shape, value, where: str, p: Problems):
    """value with every blob member base64-decoded to bytes, following the shape."""
    kind = shape.type_name
    if kind == "blob":
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                p.add("base64", where, "blob is not valid base64")
        return value
    if kind == "structure" and isinstance(value, dict):
        return {k: (_decode_blobs(shape.members[k], v, _at(where, k), p) if k in shape.members else v)
                for k, v in value.items()}
    if kind == "list" and isinstance(value, list):
        return [_decode_blobs(shape.member, v, f"{where}[{i}]", p) for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        return {k: _decode_blobs(shape.value, v, _at(where, k), p) for k, v in value.items()}
    return value


def _constraints(shape, value, where: str, p: Problems) -> None:
    """min/max/pattern/enum over the shapes, which ParamValidator does not (fully) check."""
    meta = shape.metadata
    kind = shape.type_name
    if kind == "string" and isinstance(value, str):
        if "enum" in meta and value not in meta["enum"]:
            p.add("enum", where, f"{value!r} is not one of {meta['enum']}")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            p.add("pattern", where, f"{value[:60]!r} does not match {meta['pattern']}")
    if kind in ("string", "list", "map", "blob") and isinstance(value, (str, list, dict, bytes)):
        if len(value) < meta.get("min", 0):
            p.add("length", where, f"length {len(value)} is under the minimum {meta['min']}")
        if "max" in meta and len(value) > meta["max"]:
            p.add("length", where, f"length {len(value)} is over the maximum {meta['max']}")
    if kind in ("integer", "long", "float", "double") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        if "min" in meta and value < meta["min"]:
            p.add("range", where, f"{value} is under the minimum {meta['min']}")
        if "max" in meta and value > meta["max"]:
            p.add("range", where, f"{value} is over the maximum {meta['max']}")
    if kind == "structure" and isinstance(value, dict):
        for k, v in value.items():
            if k in shape.members:
                _constraints(shape.members[k], v, _at(where, k), p)
    elif kind == "list" and isinstance(value, list):
        for i, v in enumerate(value):
            _constraints(shape.member, v, f"{where}[{i}]", p)
    elif kind == "map" and isinstance(value, dict):
        for k, v in value.items():
            _constraints(shape.key, k, _at(where, k), p)
            _constraints(shape.value, v, _at(where, k), p)


def _content_rules(blocks: list, where: str, p: Problems, names: dict) -> None:
    for k, b in enumerate(blocks):
        if not isinstance(b, dict):
            continue
        here = f"{where}[{k}]"
        if isinstance(b.get("text"), str) and not b["text"].strip():
            p.add("blank-text", here, "The text field in the ContentBlock object is blank")
        image = b.get("image")
        if isinstance(image, dict) and isinstance((image.get("source") or {}).get("bytes"), str):
            declared = "image/" + str(image.get("format"))
            problem = image_problem(image["source"]["bytes"], declared.replace("jpg", "jpeg"),
                                    MAX_IMAGE_BYTES, MAX_IMAGE_SIDE)
            if problem:
                p.add("image", here, problem)
        doc = b.get("document")
        data = ((doc or {}).get("source") or {}).get("bytes") if isinstance(doc, dict) else None
        if isinstance(data, str) and len(base64.b64decode(data)) > MAX_DOCUMENT_BYTES:
            p.add("document", here, f"over the {MAX_DOCUMENT_BYTES:,} bytes a document may have")
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            name = doc["name"]
            if name in names:
                p.add("document-name-unique", here, f"document name {name!r} is also used at {names[name]}")
            names.setdefault(name, here)
            if len(name) > DOCUMENT_NAME_MAX or not DOCUMENT_NAME.fullmatch(name):
                p.add("document-name", here, f"{name[:60]!r} is not a valid document name (letters, digits, "
                                             f"single spaces, - ( ) [ ], at most {DOCUMENT_NAME_MAX})")
        result = b.get("toolResult")
        if isinstance(result, dict) and isinstance(result.get("content"), list):
            _content_rules(result["content"], f"{here}.toolResult.content", p, names)


# Claude up to Sonnet 4 behind Converse: "too many images and documents: 21 + 0 > 20" (cline #1844,
# Sonnet 3.5/3.7), "19 + 5 > 20" (boto3 #4632, Sonnet 4). Sonnet 5 was measured taking 29.
MAX_MEDIA_OLD_CLAUDE = 20


def old_claude(model_id: str) -> bool:
    """A Claude of generation 4.0 or before (Claude 2 and Instant included)."""
    generation = claude_generation(model_id)
    return generation is not None and generation <= (4, 0)


def _many_images(body: dict, p: Problems, model_id: str = "") -> None:
    """A request of more than MANY_IMAGES images takes none over MANY_IMAGES_SIDE on a side; to
    Claude up to Sonnet 4, a request holds at most MAX_MEDIA_OLD_CLAUDE images and documents."""
    found = []  # (where, pixels) of each image block, tool results' included
    documents = []

    def visit(blocks, where):
        for k, b in enumerate(blocks if isinstance(blocks, list) else []):
            if not isinstance(b, dict):
                continue
            image = b.get("image")
            if isinstance(image, dict) and isinstance((image.get("source") or {}).get("bytes"), str):
                found.append((f"{where}[{k}]", image_pixels(image["source"]["bytes"])))
            if isinstance(b.get("document"), dict):
                documents.append(f"{where}[{k}]")
            if isinstance(b.get("toolResult"), dict):
                visit(b["toolResult"].get("content"), f"{where}[{k}].toolResult.content")

    for i, msg in enumerate(body.get("messages") or []):
        if isinstance(msg, dict):
            visit(msg.get("content"), f"messages[{i}].content")
    if old_claude(model_id) and len(found) + len(documents) > MAX_MEDIA_OLD_CLAUDE:
        p.add("too-many-media", "messages", f"too many images and documents: {len(found)} + {len(documents)} > "
                                            f"{MAX_MEDIA_OLD_CLAUDE}")
    if len(found) > MANY_IMAGES:
        for where, pixels in found:
            if pixels is not None and max(pixels) > MANY_IMAGES_SIDE:
                p.add("image", where, f"{pixels[0]}x{pixels[1]} px, over {MANY_IMAGES_SIDE} on a side in a request "
                                      f"of {len(found)} images")


# Bedrock model ids of vendors whose models Bedrock caches nothing for
_UNCACHED_VENDORS = re.compile(r"(?:^|/)(?:(?:us|eu|apac|global|jp|au|ca|us-gov)\.)?(?:meta|mistral|deepseek|qwen|cohere|"
                               r"ai21|writer|openai|google|minimax|moonshot|moonshotai|nvidia|amazon\.titan)[.-]")


def _cache_point_problem(body: dict, model_id: str, p: Problems) -> None:
    """Bedrock caches for Claude from 3.7 Sonnet and 3.5 Haiku on and for Nova, whose tools take
    no checkpoint; any other model refuses a cachePoint."""
    mid = str(model_id or "").lower()
    tools = ((body.get("toolConfig") or {}).get("tools") or []) if isinstance(body.get("toolConfig"), dict) else []
    if "nova" in mid:
        for i, t in enumerate(tools):
            if isinstance(t, dict) and "cachePoint" in t:
                p.add("cache-point", f"toolConfig.tools[{i}]", "extraneous key [cachePoint] is not permitted")
        for i, msg in enumerate(body.get("messages") or []):
            blocks = [b for b in (msg.get("content") or []) if isinstance(b, dict)] if isinstance(msg, dict) else []
            for k in range(1, len(blocks)):  # aws-samples/bedrock-engineer #71: not right after a tool result
                if "cachePoint" in blocks[k] and "toolResult" in blocks[k - 1]:
                    p.add("cache-point", f"messages[{i}].content[{k}]", "Nova takes no cachePoint right after a toolResult")
        return
    if "claude" in mid:
        generation = claude_generation(mid)
        caches = generation is None or generation >= (3, 7) or (generation == (3, 5) and "haiku" in mid)
    else:
        caches = not _UNCACHED_VENDORS.search(mid)
    if not caches and _count_cache_points(body):
        p.add("cache-point", "body", "You invoked an unsupported model or your request did not allow prompt caching")


def _mixed_turns(messages: list, model_id: str, p: Problems) -> None:
    """Bedrock's models but Claude from 3.5 refuse a turn of tool results and other blocks
    (Llama 4, Claude 3 Opus); given no model, nothing is told."""
    mid = str(model_id or "").lower()
    if not mid:
        return
    if "claude" in mid:
        generation = claude_generation(mid)
        if generation is None or generation >= (3, 5):
            return
    elif not ("nova" in mid or _UNCACHED_VENDORS.search(mid)):
        return
    for i, msg in enumerate(messages):
        blocks = [b for b in msg.get("content") or [] if isinstance(b, dict)]
        results = [("toolResult" in b) for b in blocks if "cachePoint" not in b]  # a cachePoint is no content
        if any(results) and not all(results):
            p.add("mixed-turn", f"messages[{i}].content",
                  "Conversation blocks and tool result blocks cannot be provided in the same turn.")


def _media_in_results(messages: list, model_id: str, p: Problems) -> None:
    """Converse takes images and documents inside a toolResult for Claude, Nova and Llama 4
    alone ("only supported by Amazon Nova and Anthropic Claude 3 and 4 models"; Llama 4 measured);
    given no model, or one naming no vendor, nothing is told."""
    mid = str(model_id or "").lower()
    if not mid or "claude" in mid or "nova" in mid or "llama4" in mid or not _UNCACHED_VENDORS.search(mid):
        return
    for i, msg in enumerate(messages):
        for j, b in enumerate(msg.get("content") or []):
            inner = (b.get("toolResult") or {}).get("content") if isinstance(b, dict) else None
            if any(isinstance(x, dict) and ("image" in x or "document" in x) for x in inner or []):
                p.add("tool-result-media", f"messages[{i}].content[{j}]",
                      "This model doesn't support the image field for user messages. Remove image and try again.")


def _count_cache_points(body: dict) -> int:
    n = 0
    for b in body.get("system") or []:
        n += isinstance(b, dict) and "cachePoint" in b
    for msg in body.get("messages") or []:
        for b in (msg or {}).get("content") or [] if isinstance(msg, dict) else []:
            n += isinstance(b, dict) and "cachePoint" in b
    for t in ((body.get("toolConfig") or {}).get("tools") or []) if isinstance(body.get("toolConfig"), dict) else []:
        n += isinstance(t, dict) and "cachePoint" in t
    return n


def judge(body: dict, model_id: str = "") -> list:
    """model_id: the model the body is sent to (Converse takes it in the URL), for the rules of
    that model alone."""
    p = Problems()
    if not isinstance(body, dict):
        p.add("schema", "body", "not a JSON object")
        return p
    if "modelId" in body:
        p.add("schema", "modelId", "modelId travels in the URL, not the body")
    shape = _input_shape()
    params = {"modelId": "model", **{k: v for k, v in body.items() if k != "modelId"}}
    params = _decode_blobs(shape, params, "", p)
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        for line in report.generate_report().splitlines():
            p.add("schema", "body", line.strip())
    _constraints(shape, params, "", p)
    _many_images(body, p, model_id)

    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    # `messages` is optional in the model only for a Prompt management prompt (its ARN as the
    # model id, which the body never names); a model itself needs a conversation to answer
    if not messages:
        p.add("messages-empty", "messages", "A conversation must start with a user message")
    elif messages[0].get("role") != "user":
        p.add("first-user", "messages[0]", "A conversation must start with a user message")
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant" and refuses_prefill(model_id):
        p.add("prefill", f"messages[{len(messages) - 1}]", PREFILL_REFUSED)
    if last.get("role") == "assistant" and any(isinstance(b, dict) and "reasoningContent" in b
                                               for b in last.get("content") or []):
        # Claude behind Converse, thinking off (additionalModelRequestFields, never set here)
        p.add("final-thinking", f"messages[{len(messages) - 1}]",
              "When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`")
    texts = [b["text"] for b in last.get("content") or [] if isinstance(b, dict) and isinstance(b.get("text"), str)]
    if last.get("role") == "assistant" and texts and texts[-1] != texts[-1].rstrip():
        # Claude behind Converse: "The model returned the following errors: messages: final
        # assistant content cannot end with trailing whitespace"
        p.add("trailing-whitespace", f"messages[{len(messages) - 1}]",
              "final assistant content cannot end with trailing whitespace")
    names = {}
    tool_blocks = False
    _content_rules(body.get("system") or [], "system", p, names)
    for i, msg in enumerate(messages):
        blocks = [b for b in msg.get("content") or [] if isinstance(b, dict)]
        _content_rules(msg.get("content") or [], f"messages[{i}].content", p, names)
        if any("document" in b for b in blocks) and not any("text" in b for b in blocks):
            p.add("document-needs-text", f"messages[{i}]", "a message with a document must also have a text block")
        tool_blocks = tool_blocks or any("toolUse" in b or "toolResult" in b for b in blocks)
        if i > 0 and messages[i - 1].get("role") == msg.get("role"):
            p.add("alternate", f"messages[{i}]", "roles must alternate between user and assistant")
    for k, t in enumerate(((body.get("toolConfig") or {}).get("tools") or []) if isinstance(body.get("toolConfig"), dict) else []):
        if isinstance(t, dict) and isinstance(t.get("toolSpec"), dict):
            schema_root_problem(((t["toolSpec"].get("inputSchema") or {}).get("json")),
                                f"toolConfig.tools.{k}.toolSpec.inputSchema.json", p)
            if "claude" in model_id.lower():  # Anthropic's own validation, behind Bedrock
                schema_draft_problem(((t["toolSpec"].get("inputSchema") or {}).get("json")),
                                     f"toolConfig.tools.{k}.toolSpec.inputSchema.json", p)
    if tool_blocks and not (body.get("toolConfig") or {}).get("tools"):
        p.add("tools-defined", "toolConfig", "The toolConfig field must be defined when using toolUse and toolResult content blocks")
    _cache_point_problem(body, model_id, p)
    _mixed_turns(messages, model_id, p)
    _media_in_results(messages, model_id, p)
    n = _count_cache_points(body)
    if n > MAX_MARKERS:
        p.add("marker-count", "body", f"{n} cachePoint blocks; at most {MAX_MARKERS} are accepted")

    for i, msg in enumerate(messages):
        blocks = [b for b in msg.get("content") or [] if isinstance(b, dict)]
        if msg.get("role") == "assistant":
            uses = [b["toolUse"].get("toolUseId") for b in blocks if isinstance(b.get("toolUse"), dict)]
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = {b["toolResult"].get("toolUseId") for b in (nxt or {}).get("content") or []
                        if isinstance(b, dict) and isinstance(b.get("toolResult"), dict)}
            for u in uses:
                if u not in answered:
                    p.add("tool-pairing", f"messages[{i}]", f"toolUse {u!r} has no toolResult in the next message")
        else:
            prev = messages[i - 1] if i > 0 else {}
            asked = {b["toolUse"].get("toolUseId") for b in prev.get("content") or []
                     if isinstance(b, dict) and isinstance(b.get("toolUse"), dict)} if prev.get("role") == "assistant" else set()
            for b in blocks:
                if isinstance(b.get("toolResult"), dict) and b["toolResult"].get("toolUseId") not in asked:
                    p.add("tool-pairing", f"messages[{i}]",
                          f"toolResult {b['toolResult'].get('toolUseId')!r} answers no toolUse of the previous message")
    return p
