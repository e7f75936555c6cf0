"""Pieces every judge uses: strict validators built from SDK types, base64 and data-URL checks,
and the problem list a judge returns.

A problem is one string, "<rule>: <where>: <what>", so a test failure names the rule first and
tests can group refusals by rule.
"""
from __future__ import annotations

import base64
import binascii
import copy
import functools
import io
import re

import PIL.Image

from pydantic import TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

# Tool ids of the Anthropic Messages API (tool_use.id, tool_result.tool_use_id).
ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
# Tool names of the Anthropic Messages API and OpenAI Chat Completions (tools and calls alike):
# ^[a-zA-Z0-9_-]{1,64}$; the whole request is refused for one outside it.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# OpenAI Chat Completions refuses longer tool call ids ("string too long ... maximum length 40").
OPENAI_ID_MAX = 40
# The most cache markers any marker-taking provider accepts in one request (Anthropic, Bedrock).
MAX_MARKERS = 4
# Claude from Opus 4.6 and Sonnet 4.6 on (Opus 4.7, Sonnet 5, ...) refuses a request that ends with
# its own turn, on Anthropic, Bedrock, Vertex and behind the gateways: "This model does not support
# assistant message prefill. The conversation must end with a user message." (Anthropic's
# "prefill removal"; reported by opencode #13768 and #29760, vercel/ai #12296). Earlier ones take
# the turn as the start of their answer. The generation as an id writes it: claude-sonnet-4-6,
# anthropic.claude-opus-4-6-v1:0, anthropic/claude-sonnet-4.6, claude-sonnet-5.
_CLAUDE_GENERATION = re.compile(r"claude-(?:(?:opus|sonnet|haiku)-)?(\d+)(?:[-.](\d)(?!\d))?")
# Claude 1 and 2 as Bedrock names them, and Claude Instant: anthropic.claude-v2:1, claude-instant-1.2
_CLAUDE_1_AND_2 = re.compile(r"claude-(?:instant|v(\d))")
PREFILL_REFUSED = "This model does not support assistant message prefill. The conversation must end with a user message."


def claude_generation(model_id) -> tuple | None:
    """(major, minor) of the Claude generation a model id names; None where none can be read."""
    model_id = str(model_id or "").lower()
    found = _CLAUDE_GENERATION.search(model_id)
    if found is not None:
        return int(found.group(1)), int(found.group(2) or 0)
    legacy = _CLAUDE_1_AND_2.search(model_id)
    return (int(legacy.group(1) or 1), 0) if legacy else None


def refuses_prefill(model_id) -> bool:
    """Whether the model a body names refuses a last message of its own: Claude 4.6 and later
    (a Claude id whose generation cannot be read is taken to be a new one)."""
    if "claude" not in str(model_id or "").lower():
        return False
    generation = claude_generation(model_id)
    return generation is None or generation >= (4, 6)


# OpenAI's reasoning models refuse the output cap as max_tokens, wherever they are served (OpenAI,
# GitHub Copilot, Azure): o1, o3, o4-mini, gpt-5 and its variants, codex-mini
_OPENAI_REASONING_IDS = re.compile(r"(?:^|[/:.])(?:o[1-9](?:-|$)|gpt-5|codex)")
MAX_TOKENS_REFUSED = "Unsupported parameter: 'max_tokens' is not supported with this model. " \
                     "Use 'max_completion_tokens' instead."


def refuses_max_tokens(model_id) -> bool:
    """Whether the model a Chat body names is an OpenAI reasoning model (max_completion_tokens only)."""
    return _OPENAI_REASONING_IDS.search(str(model_id or "").lower()) is not None


OPENAI_MAX_TOOLS = 128


def openai_tool_problems(tools: list, schema_of, p) -> None:
    """OpenAI's rules of a request's function definitions (its models, wherever served): at most
    OPENAI_MAX_TOOLS, no array schema without items, an object root with properties (a tool
    taking no arguments: "object schema missing properties"), and a schema JSON Schema 2020-12
    takes: "Invalid schema for function 'x': True is not of type 'array'" (a property's draft-3
    `required: true`), "[] is not of type 'object', 'boolean'" (a list where 2020-12's `items` is
    one schema). schema_of: a definition's parameters."""
    if len(tools) > OPENAI_MAX_TOOLS:
        p.add("tools-count", "tools", f"Invalid 'tools': array too long. Expected an array with maximum length "
                                      f"{OPENAI_MAX_TOOLS}, but got an array with length {len(tools)} instead.")
    for i, t in enumerate(tools):
        schema = schema_of(t) if isinstance(t, dict) else None
        where = _array_without_items(schema, ())
        if where is not None:
            p.add("tool-schema", f"tools[{i}]", f"Invalid schema: In context={where}, array schema missing items.")
        if isinstance(schema, dict) and schema.get("type") == "object" and "properties" not in schema:
            p.add("tool-schema", f"tools[{i}]", "Invalid schema: In context=(), object schema missing properties.")
        if isinstance(schema, dict):
            schema_draft_problem(schema, f"tools[{i}]", p)


def schema_ref_problems(schema, where: str, p, defs_only: bool = False) -> None:
    """Every local reference in a tool's schema must name a subschema of it (OpenAI: "reference
    can't be resolved"); with defs_only, one under #/$defs/ (Moonshot, for Kimi: "references must
    start with #/$defs/")."""
    def refs(value, path):
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str) and value["$ref"].startswith("#"):
                yield value["$ref"], path
            for k, v in value.items():
                yield from refs(v, path + (k,))
        elif isinstance(value, list):
            for k, v in enumerate(value):
                yield from refs(v, path + (k,))

    for ref, path in refs(schema, ()):
        at = ".".join(map(str, path + ("$ref",)))
        target = schema
        for key in ref[2:].split("/") if ref != "#" else ():
            key = key.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, dict) else (
                target[int(key)] if isinstance(target, list) and key.isdigit() and int(key) < len(target) else None)
        if not isinstance(target, (dict, bool)):
            p.add("tool-schema", where, f"At path '{at}': reference {ref!r} can't be resolved")
        elif defs_only and not ref.startswith("#/$defs/"):
            p.add("tool-schema", where, f"is not a valid moonshot flavored json schema. At path '{at}': "
                                        "references must start with #/$defs/")


def schema_draft_problem(schema, where: str, p) -> None:
    """Anthropic validates a tool's input schema against JSON Schema draft 2020-12 (every Claude
    model, on Bedrock too): "tools.18.custom.input_schema: JSON schema is invalid. It must match
    JSON Schema draft 2020-12"; so do OpenAI and Mistral (openai_tool_problems, mistral_tool_problems)."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        p.add("tool-schema", where, f"JSON schema is invalid. It must match JSON Schema draft 2020-12 ({e.message})")


def mistral_tool_problems(tools: list, schema_of, p) -> None:
    """Mistral's API validates a function's parameters as JSON Schema 2020-12 ("Invalid tool
    schema: {... 'exclusiveMinimum': True, 'minimum': 0 ...} is not valid under any of the given
    schemas") and refuses `$id` and `$schema` in it ("Grammar error: at 3(11): failed to compile
    JSON schema")."""
    for i, t in enumerate(tools):
        schema = schema_of(t) if isinstance(t, dict) else None
        if isinstance(schema, dict):
            schema_draft_problem(schema, f"tools[{i}]", p)
            for key in ("$id", "$schema"):
                if key in schema:
                    p.add("tool-schema", f"tools[{i}]", f"Grammar error: failed to compile JSON schema ({key})")


_ONE_SCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def moonshot_schema_problems(schema, where: str, p, root: bool = True) -> None:
    """Moonshot Flavoured JSON Schema, which Kimi's endpoint validates a function's parameters
    against ("tools.function.parameters is not a valid moonshot flavored json schema, details:
    <At path ...: ...>"): a `$ref` alone, `type` in an anyOf's items rather than beside it, `items`
    one schema (not a tuple, not false), every object's `required` a list, one type and no null
    among an enum's values (vercel/ai #18921, probing the live validator; hermes-agent #27104,
    #68154)."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$ref"), str) and len(schema) > 1:
        p.add("tool-schema", where, "$ref must stand alone (its siblings are refused)")
    if not root and "type" in schema and "anyOf" in schema:
        p.add("tool-schema", where, "when using anyOf, type should be defined in anyOf items instead of the parent schema")
    if isinstance(schema.get("items"), list) or schema.get("items") is False:
        p.add("tool-schema", where, "items must be an object")
    if (schema.get("type") == "object" or isinstance(schema.get("properties"), dict)) \
            and not isinstance(schema.get("required"), list) and "$ref" not in schema:
        p.add("tool-schema", where, "required must be an array")
    if isinstance(schema.get("type"), list) or "nullable" in schema:
        p.add("tool-schema", where, "type must be one type")
    if isinstance(schema.get("enum"), list) and None in schema["enum"]:
        p.add("tool-schema", where, "enum values must be strings or numbers")
    for key in _ONE_SCHEMA:
        moonshot_schema_problems(schema.get(key), f"{where}.{key}", p, False)
    for key in _SCHEMA_LISTS:
        for i, x in enumerate(schema.get(key) if isinstance(schema.get(key), list) else ()):
            moonshot_schema_problems(x, f"{where}.{key}[{i}]", p, False)
    for key in _SCHEMA_MAPS:
        for name, x in (schema.get(key) if isinstance(schema.get(key), dict) else {}).items():
            moonshot_schema_problems(x, f"{where}.{key}.{name}", p, False)


def schema_root_problem(schema, where: str, p) -> None:
    """A tool's input schema must be an object at its root, without anyOf, oneOf or allOf there:
    Anthropic ("input_schema.type: Field required"; "input_schema does not support oneOf, allOf,
    or anyOf at the top level"), Bedrock ("inputSchema.json.type must be one of the following:
    object") and OpenAI ("schema must be a JSON Schema of 'type: \"object\"'") alike."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        kind = schema.get("type") if isinstance(schema, dict) else None
        p.add("tool-schema", where, f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{kind}\"'")
        return
    for key in ("oneOf", "allOf", "anyOf"):
        if key in schema:
            p.add("tool-schema", where, "input_schema does not support oneOf, allOf, or anyOf at the top level")
            return


def _array_without_items(schema, path: tuple):
    if isinstance(schema, list):
        for k, x in enumerate(schema):
            found = _array_without_items(x, path + (k,))
            if found is not None:
                return found
        return None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in schema \
            and "prefixItems" not in schema:
        return path
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            for name, sub in value.items():
                found = _array_without_items(sub, path + (key, name))
                if found is not None:
                    return found
        elif key in ("items", "anyOf", "allOf", "oneOf", "additionalProperties", "not", "prefixItems"):
            found = _array_without_items(value, path + (key,))
            if found is not None:
                return found
    return None


class Problems(list):
    """The list a judge returns; add() formats one problem."""

    def add(self, rule: str, where: str, what: str) -> None:
        self.append(f"{rule}: {where}: {what}")


def _strict(schema):
    """The core schema with extra keys forbidden in every typed dict and model at every depth,
    and lazy iterables (which pydantic validates only when consumed) validated as lists."""
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    kind = out.get("type")
    if kind == "typed-dict":
        out["extra_behavior"] = "forbid"
    elif kind == "model-fields":
        out["extra_behavior"] = "forbid"
    elif kind == "generator":
        out = {"type": "list", "items_schema": out.get("items_schema", {"type": "any"})}
    return out


@functools.lru_cache(maxsize=None)
def strict_validator(tp) -> SchemaValidator:
    """A validator of tp that refuses unknown keys at every depth and forces lazy iterables."""
    schema = _strict(copy.deepcopy(TypeAdapter(tp).core_schema))
    return SchemaValidator(schema)


def validate(validator: SchemaValidator, value, problems: Problems, rule: str, prefix: str = "") -> None:
    """Strict validation; each pydantic error becomes one problem.

    The SDK unions are not tagged, so pydantic reports every branch; errors inside a branch
    whose own `type` (or `role`) literal did not match are dropped, leaving those of the branch
    the body meant; a value that no branch's tag matches is reported once, where it sits."""
    try:
        validator.validate_python(value, strict=True)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        wrong = set()
        for err in errors:
            loc = err["loc"]
            if loc and _is_branch(loc[-1]):
                wrong.add(loc)  # the value is not even of this branch's type
            elif (err["type"] == "literal_error" and loc[-1:] in (("type",), ("role",))
                  and len(loc) >= 2 and _is_branch(loc[-2])):
                wrong.add(loc[:-1])  # this branch's tag does not match
        kept = [err for err in errors if not any(err["loc"][:len(w)] == w for w in wrong)]
        seen = set()
        for err in kept:
            where = _where(prefix, err["loc"])
            if (where, err["msg"]) not in seen:
                seen.add((where, err["msg"]))
                problems.add(rule, where, err["msg"])
        # A place where every branch of a union was the wrong one: nothing above reports it.
        outermost = [w for w in wrong if not any(o != w and w[:len(o)] == o for o in wrong)]
        tags = {}
        for err in errors:
            loc = err["loc"]
            for w in outermost:
                if loc[:len(w)] == w:
                    site = _where(prefix, w[:-1])
                    tags.setdefault(site, set())
                    if loc in (w + ("type",), w + ("role",)) and isinstance(err.get("input"), str):
                        tags[site].add(f"{loc[-1]} {err['input']!r}")
        kept_places = {w for w, _ in seen}
        failed = [site for site in tags
                  if not any(k == site or k.startswith(site + ".") or k.startswith(site + "[") for k in kept_places)]
        for site in failed:
            if any(o != site and (o.startswith(site + ".") or o.startswith(site + "[")) for o in failed):
                continue
            tag = ", ".join(sorted(tags[site]))
            problems.add(rule, site, "matches none of the accepted shapes" + (f" ({tag})" if tag else ""))


def _where(prefix: str, loc) -> str:
    where = prefix + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc if not _is_branch(x))
    return where.lstrip(".") or "body"


def _is_branch(loc) -> bool:
    """Union branch labels pydantic puts in locations: class names, 'list[...]', 'str'."""
    return isinstance(loc, str) and (loc[:1].isupper() or "[" in loc or loc in _SCALAR_BRANCHES)


_SCALAR_BRANCHES = frozenset({"str", "int", "float", "bool", "none", "dict", "list"})


def tool_name_problem(name, where: str, p: Problems) -> None:
    """A tool name outside TOOL_NAME, as a `tool-name` problem."""
    if isinstance(name, str) and not TOOL_NAME.fullmatch(name):
        p.add("tool-name", where, f"{name[:80]!r} is outside ^[a-zA-Z0-9_-]{{1,64}}$")


def b64_ok(data) -> bool:
    """True for a non-empty, correctly padded standard base64 string."""
    if not isinstance(data, str) or not data:
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


WEB_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def image_signed(raw: bytes) -> bool:
    """The bytes start with the signature of a PNG, JPEG, GIF or WebP, as every such file does:
    else the provider cannot read them as an image ("Could not process image"; OpenAI: "The image
    data you provided does not represent a valid image")."""
    return raw.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")) or \
        (raw[:4] == b"RIFF" and raw[8:12] == b"WEBP")


def image_problem(data: str, declared: str, max_bytes: int, max_side: int) -> str:
    """What the provider refuses in an inline image (base64 data declared as `declared`): bytes
    of another type than declared ("Image does not match the provided media type"), more than
    max_bytes raw bytes, more than max_side pixels on a side, bytes that are no image at all
    (image_signed); "" when none, or when the bytes start as an image but Pillow reads no more of
    them (a test's stand-in bytes: only the provider could tell)."""
    raw = base64.b64decode(data)
    if len(raw) > max_bytes:
        return f"{len(raw):,} bytes, over the {max_bytes:,} taken per image"
    if declared in WEB_IMAGE_TYPES and not image_signed(raw):
        return "Could not process image: the bytes start with no image signature"
    try:
        with PIL.Image.open(io.BytesIO(raw)) as image:  # reads the header, decodes no pixels
            real, (w, h) = image.get_format_mimetype() or "", image.size
    except (PIL.UnidentifiedImageError, OSError, ValueError):
        return ""
    if real and real != declared:
        return f"the bytes are {real}, declared {declared}"
    if max(w, h) > max_side:
        return f"{w}x{h} px, over {max_side} on a side"
    return ""


def image_pixels(data: str) -> tuple[int, int] | None:
    """(width, height) of the image in base64 data as Pillow reads it; None when it reads none."""
    try:
        with PIL.Image.open(io.BytesIO(base64.b64decode(data))) as image:
            return image.size
    except (PIL.UnidentifiedImageError, OSError, ValueError):
        return None


def parse_data_url(url: str):
    """RFC 2397: (media type without parameters, is_base64, payload) of a data: URL, else None.

    `data:image/png;name=a.png;base64,xxx` gives ("image/png", True, "xxx")."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, payload = url[5:].partition(",")
    if not sep:
        return None
    params = head.split(";")
    is_b64 = params[-1].strip().lower() == "base64"
    if is_b64:
        params = params[:-1]
    mime = (params[0].strip().lower() if params else "") or "text/plain"
    return mime, is_b64, payload


def data_url_problem(url: str, allowed_mimes) -> str:
    """Why a data: URL would be refused as media of allowed_mimes, or "" when it is fine."""
    parsed = parse_data_url(url)
    if parsed is None:
        if is_http_url(url):
            return "an http(s) URL where only a base64 data: URL is taken"
        return "not a well-formed data: URL"
    mime, is_b64, payload = parsed
    head = url[5:].partition(",")[0]
    if not is_b64:
        return "data: URL is not base64 (providers take only ;base64 data URLs)"
    if head.split(";")[0].lower() != head[: -len(";base64")].lower():
        return f"data: URL carries parameters ({head!r}); the media type must be bare"
    if mime not in allowed_mimes:
        return f"media type {mime!r} not accepted (accepted: {', '.join(sorted(allowed_mimes))})"
    if not b64_ok(payload):
        return "data: URL payload is not valid base64"
    if mime in WEB_IMAGE_TYPES and not image_signed(base64.b64decode(payload[:64])):
        return "The image data you provided does not represent a valid image"
    return ""


def is_http_url(url) -> bool:
    return isinstance(url, str) and re.match(r"https?://[^\s/]+", url) is not None
