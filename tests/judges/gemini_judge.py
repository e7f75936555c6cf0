"""Would the Gemini API (POST /v1beta/models/{model}:generateContent) accept this body?

Shape: the `google-genai` SDK's own pydantic types for each member of the REST request
(`contents` as Content, `systemInstruction` as Content, `tools` as Tool, `toolConfig` as
ToolConfig, `generationConfig` as GenerationConfig, `safetySettings` as SafetySetting), read
from the JSON text as the REST API reads it (camelCase names, base64 bytes); the SDK types
refuse unknown keys at every depth. Then the rules the API enforces beyond the shape.
"""
from __future__ import annotations

import functools
import json
import re

from google.genai import types
from pydantic import TypeAdapter, ValidationError

from ._common import Problems, b64_ok

# Members of the REST GenerateContentRequest body and the SDK type of each.
MEMBERS = {
    "contents": list[types.Content],
    "systemInstruction": types.Content,
    "tools": list[types.Tool],
    "toolConfig": types.ToolConfig,
    "generationConfig": types.GenerationConfig,
    "safetySettings": list[types.SafetySetting],
    "cachedContent": str,
}
# Inline data the Gemini API documents: images, documents, audio, video.
INLINE_TYPES = frozenset({
    "image/png", "image/jpeg", "image/webp", "image/heic", "image/heif",
    "application/pdf", "text/plain",
    "audio/wav", "audio/mp3", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac",
    "video/mp4", "video/mpeg", "video/mov", "video/avi", "video/x-flv", "video/mpg", "video/webm",
    "video/wmv", "video/3gpp",
})
# FunctionDeclaration.parameters is the API's Schema, an OpenAPI subset: these keys only (raw
# JSON Schema goes to parametersJsonSchema instead).
SCHEMA_KEYS = frozenset({
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems", "properties",
    "required", "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "example", "anyOf",
    "propertyOrdering", "default", "items", "minimum", "maximum",
})
# Function names: a letter or underscore first, then letters, digits, _ . : -, 64 at most.
FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")


@functools.lru_cache(maxsize=None)
def _adapter(tp) -> TypeAdapter:
    return TypeAdapter(tp)


def _schema_keys(schema, where: str, p: Problems) -> None:
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key not in SCHEMA_KEYS:
            p.add("openapi-schema", f"{where}.{key}", "not a field of the API's Schema (an OpenAPI subset); "
                                                     "raw JSON Schema belongs in parametersJsonSchema")
    for key, value in (schema.get("properties") or {}).items() if isinstance(schema.get("properties"), dict) else ():
        _schema_keys(value, f"{where}.properties.{key}", p)
    if isinstance(schema.get("items"), dict):
        _schema_keys(schema["items"], f"{where}.items", p)
    for k, sub in enumerate(schema.get("anyOf") or [] if isinstance(schema.get("anyOf"), list) else []):
        _schema_keys(sub, f"{where}.anyOf[{k}]", p)


def _parts(content: dict) -> list:
    return [x for x in content.get("parts") or [] if isinstance(x, dict)]


# Gemini from 3.5 Flash-Lite and 3.6 Flash on, and every later release (an alias of the newest
# too: gemini-flash-latest), refuses a request that ends with its own turn
_GEMINI_VERSION = re.compile(r"gemini-(?:live-)?(\d+)(?:\.(\d+))?")
MODEL_TURN_REFUSED = "Requests ending with a model turn are not supported unless the last part is a function response."


def _from(model_id, generation: tuple) -> bool:
    """The body goes to a Gemini of this generation or later (an id naming none: the newest)."""
    mid = str(model_id or "").lower()
    if "gemini" not in mid:
        return False
    found = _GEMINI_VERSION.search(mid)
    return found is None or (int(found.group(1)), int(found.group(2) or 0)) >= generation


def refuses_model_turn(model_id) -> bool:
    """3.5 Flash-Lite, 3.6 Flash and later (3.5 Flash measured taking it)."""
    mid = str(model_id or "").lower()
    return _from(mid, (3, 6)) or (_from(mid, (3, 5)) and "lite" in mid)


def _before(model_id, generation: tuple) -> bool:
    """The body goes to a Gemini whose id names a generation before this one."""
    found = _GEMINI_VERSION.search(str(model_id or "").lower())
    return found is not None and (int(found.group(1)), int(found.group(2) or 0)) < generation


def judge(body: dict, model_id: str = "") -> list:
    """model_id: the model the body is sent to (the URL names it), for the rules of that model alone."""
    p = Problems()
    if not isinstance(body, dict):
        p.add("schema", "body", "not a JSON object")
        return p
    for key, value in body.items():
        if key not in MEMBERS:
            p.add("schema", key, "not a field of the GenerateContent request body")
            continue
        try:
            _adapter(MEMBERS[key]).validate_json(json.dumps(value), strict=True)
        except ValidationError as e:
            for err in e.errors(include_url=False):
                where = key + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
                p.add("schema", where, err["msg"])

    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    if not contents:
        p.add("contents-empty", "contents", "contents must not be empty")
        return p
    if contents[0].get("role") != "user":
        p.add("first-user", "contents[0]", f"the first content must be the user's, not {contents[0].get('role')!r}")
    tool_history = False
    system = body.get("systemInstruction")
    for k, part in enumerate(_parts(system) if isinstance(system, dict) else []):
        if part.get("text") == "":
            p.add("empty-text", f"systemInstruction.parts[{k}]", "empty text part")
    declared = sum(len(t.get("functionDeclarations") or []) for t in body.get("tools") or [] if isinstance(t, dict))
    if declared > 512:
        p.add("tools-count", "tools", "At most 512 function declarations can be specified.")
    if contents[-1].get("role") == "model" and refuses_model_turn(model_id) and not any(
            "functionResponse" in x for x in _parts(contents[-1])[-1:]):
        p.add("model-turn-last", f"contents[{len(contents) - 1}]", MODEL_TURN_REFUSED)
    for i, c in enumerate(contents):
        where = f"contents[{i}]"
        parts = _parts(c)
        first = next((k for k, x in enumerate(parts) if "functionResponse" in x), None)
        if c.get("role") == "user" and first is not None and any("text" in x for x in parts[first:]) \
                and _from(model_id, (3, 0)):
            # Gemini 3 Flash (a reminder after tool results, on Vertex too); text before the
            # responses is taken by every model
            p.add("text-after-function-response", where,
                  "Requests ending with a model turn are not supported. (text after the function responses)")
        if c.get("role") not in ("user", "model"):
            p.add("role", where, f"role must be user or model, not {c.get('role')!r}")
        if not parts:
            p.add("empty-parts", where, "a content must have at least one part")
        for k, part in enumerate(parts):
            here = f"{where}.parts[{k}]"
            if part.get("text") == "":
                p.add("empty-text", here, "empty text part")
            uri = (part.get("fileData") or {}).get("fileUri") if isinstance(part.get("fileData"), dict) else None
            if isinstance(uri, str) and uri.startswith(("http://", "https://")) and (
                    not uri.startswith("https://") or (_before(model_id, (2, 5)) and not uri.startswith(
                        ("https://generativelanguage.googleapis.com/", "https://www.youtube.com/", "https://youtu.be/")))):
                p.add("file-uri", here, "Unsupported file uri")
            blob = part.get("inlineData")
            if isinstance(blob, dict):
                if blob.get("mimeType") not in INLINE_TYPES:
                    p.add("inline-media-type", here, f"{blob.get('mimeType')!r} is not a media type Gemini accepts")
                if not b64_ok(blob.get("data")):
                    p.add("base64", here, "inlineData.data is not valid base64")
            if "functionCall" in part or "functionResponse" in part:
                tool_history = True
        calls = [(k, x) for k, x in enumerate(parts) if isinstance(x.get("functionCall"), dict)]
        if c.get("role") == "model" and calls and any("thoughtSignature" in x for x in parts) \
                and "thoughtSignature" not in calls[0][1]:
            p.add("thought-signature", f"{where}.parts[{calls[0][0]}]",
                  "the first functionCall of a step must carry the step's thoughtSignature")
        if c.get("role") == "model" and calls:
            nxt = contents[i + 1] if i + 1 < len(contents) else None
            answers = [x["functionResponse"].get("name") for x in _parts(nxt or {})
                       if isinstance(x.get("functionResponse"), dict)] if nxt and nxt.get("role") == "user" else []
            asked = [x["functionCall"].get("name") for _, x in calls]
            if sorted(map(str, answers)) != sorted(map(str, asked)):
                p.add("tool-pairing", where, f"function calls {asked} are answered by function responses {answers}; "
                                             "the counts and names must match")
        if c.get("role") == "user" and any(isinstance(x.get("functionResponse"), dict) for x in parts):
            prev = contents[i - 1] if i > 0 else {}
            if prev.get("role") != "model" or not any(isinstance(x.get("functionCall"), dict) for x in _parts(prev)):
                p.add("tool-pairing", where, "functionResponse parts answer no functionCall of the previous model turn")

    declared = False
    for t, tool in enumerate(body.get("tools") or []):
        for d, decl in enumerate((tool or {}).get("functionDeclarations") or [] if isinstance(tool, dict) else []):
            if not isinstance(decl, dict):
                continue
            declared = True
            where = f"tools[{t}].functionDeclarations[{d}]"
            if not FUNCTION_NAME.fullmatch(str(decl.get("name", ""))):
                p.add("function-name", f"{where}.name", f"{decl.get('name')!r} is not a valid function name")
            if "parameters" in decl:
                _schema_keys(decl["parameters"], f"{where}.parameters", p)
                if "parametersJsonSchema" in decl:
                    p.add("openapi-schema", where, "parameters and parametersJsonSchema are exclusive")
    if tool_history and not declared:
        p.add("tools-defined", "tools", "history holds function calls but no functions are declared (design.md §6: tools stay)")
    return p
