"""A tool's input schema as a provider takes it.

MCP servers write schemas that JSON Schema allows and the providers refuse, and the request is
refused for as long as the server's tools are loaded (every request of the session):
- OpenAI refuses an array without `items`, strict mode or not: "Invalid schema for function 'x':
  In context=('properties', 'paths'), array schema missing items". `items: {}` says the same: an
  array of any items (with_array_items).
- A root without `type`: Anthropic "tools.0.custom.input_schema.type: Field required", Bedrock
  "inputSchema.json.type must be one of the following: object", OpenAI "schema must be a JSON
  Schema of 'type: "object"', got 'type: "None"'". A tool's input is an object: `type: "object"`
  says so (object_root).
- An object root without `properties` (a tool that takes no arguments): OpenAI "Invalid schema for
  function 'namespaces_list': In context=(), object schema missing properties", on Chat
  Completions and Responses alike. `properties: {}` says the same (object_root's properties).
- `anyOf`, `oneOf` or `allOf` at the root (Notion's remote MCP server, August 2026): Anthropic
  and Claude on Bedrock "input_schema does not support oneOf, allOf, or anyOf at the top level",
  OpenAI likewise. The branches' properties join the root's (its own first); their required
  ones stay required where every branch applies (allOf), and go where one of them does: the
  model may then send an input the tool refuses, which it is told (object_root).
Each a function of the schema alone, copy on write: the request's own schema stays as it is, and
the very object comes back where nothing changes.
"""
from __future__ import annotations

# the keywords whose value is one schema, and those whose value is a list or a map of them
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions")


def with_array_items(schema):
    """schema, every array in it given `items: {}` where it has none; the very object where
    none lacks them (a copy of what changed otherwise: the request's own stays as it is)."""
    if not isinstance(schema, dict):
        return schema
    out = schema
    if _is_array(schema) and "items" not in schema and "prefixItems" not in schema:
        out = {**schema, "items": {}}
    for key in _ONE:
        value = schema.get(key)
        new = _each(value) if isinstance(value, list) else with_array_items(value)  # items: [..] (tuple form)
        if new is not value:
            out = out if out is not schema else dict(schema)
            out[key] = new
    for key in _LIST:
        value = schema.get(key)
        if isinstance(value, list):
            new = [with_array_items(x) for x in value]
            if any(a is not b for a, b in zip(new, value)):
                out = out if out is not schema else dict(schema)
                out[key] = new
    for key in _MAP:
        value = schema.get(key)
        if isinstance(value, dict):
            new = {k: with_array_items(v) for k, v in value.items()}
            if any(new[k] is not v for k, v in value.items()):
                out = out if out is not schema else dict(schema)
                out[key] = new
    return out


def _each(schemas: list) -> list:
    new = [with_array_items(x) for x in schemas]
    return schemas if all(a is b for a, b in zip(new, schemas)) else new


def _is_array(schema: dict) -> bool:
    kind = schema.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind)


_ROOT_CHOICES = ("anyOf", "oneOf", "allOf")


def object_root(schema, fold_choices: bool = True, properties: bool = False):
    """schema with an object root: `type: "object"` where it has no type, with fold_choices the
    branches of a root anyOf, oneOf or allOf folded into the root, and with properties an
    object root given `properties: {}` where it has none (the module's doc); the very object
    where nothing changes. None or {} is the empty object schema."""
    if not schema:
        return {"type": "object", "properties": {}} if properties else {"type": "object"}
    if not isinstance(schema, dict):
        return schema
    out = schema
    kind = schema.get("type")
    if kind is None:
        out = {"type": "object", **schema}
    elif isinstance(kind, list) and "object" in kind:  # ["object", "null"]: the input is an object
        out = {**schema, "type": "object"}
    if fold_choices and any(k in schema for k in _ROOT_CHOICES):
        out = _folded(out)
    if properties and out.get("type") == "object" and "properties" not in out:
        out = {**out, "properties": {}}
    return out


def _folded(schema: dict) -> dict:
    """schema (a copy) with its root anyOf, oneOf and allOf folded in."""
    out = {k: v for k, v in schema.items() if k not in _ROOT_CHOICES}
    properties = dict(out.get("properties") or {}) if isinstance(out.get("properties"), dict) else {}
    required = list(out.get("required") or []) if isinstance(out.get("required"), list) else []
    for key in _ROOT_CHOICES:
        branches = schema.get(key)
        if not isinstance(branches, list):
            continue
        for branch in branches:
            branch = _resolved(branch, schema)
            if not isinstance(branch, dict):
                continue
            for name, value in (branch.get("properties") or {}).items() if isinstance(branch.get("properties"), dict) else ():
                properties.setdefault(name, value)
            if key == "allOf" and isinstance(branch.get("required"), list):
                required += [x for x in branch["required"] if x not in required]
    if properties or "properties" in out:
        out["properties"] = properties
    if required or "required" in out:
        out["required"] = required
    return out


def _resolved(branch, root: dict):
    """A branch that is a local reference ("$ref": "#/$defs/Args") as the schema it names in root;
    any other as it is."""
    if not isinstance(branch, dict) or not isinstance(branch.get("$ref"), str) or not branch["$ref"].startswith("#/"):
        return branch
    target = root
    for key in branch["$ref"][2:].split("/"):
        key = key.replace("~1", "/").replace("~0", "~")
        target = target.get(key) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else branch
