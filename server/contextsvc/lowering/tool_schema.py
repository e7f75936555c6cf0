"""A tool's input schema as a provider takes it.

OpenAI refuses a function whose schema has an array without `items`, strict mode or not:
"Invalid schema for function 'x': In context=('properties', 'paths'), array schema missing
items." MCP servers write such schemas (an array of anything), and the request is refused as long
as the server's tools are loaded. `items: {}` says the same: an array of any items.
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
