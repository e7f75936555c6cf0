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
  OpenAI likewise. The branches' properties join the root's (its own first; one that branches
  give differently, as an `action` constant of each, takes any of theirs: anyOf of them, allOf
  of allOf's); their required ones stay required where every branch applies (allOf), and where
  every branch of an anyOf or oneOf requires them; the others go, so the model may send an input
  the tool refuses, which the tool's error tells it (object_root).
- A root that is a reference (`{"$ref": "#/definitions/Args", "definitions": {...}}`, as
  zod-to-json-schema writes a named schema): no `type` there, so the one added would sit beside
  the reference and OpenAI's `properties: {}` tell the model the tool takes nothing. The root is
  the schema it names, with what the root says beside the reference joined to it (a `required`
  list, a keyword the target does not hold): as written where the two disagree (object_root).
- Moonshot's endpoint, for Kimi: "tools.function.parameters is not a valid moonshot flavored json
  schema. At path 'properties.strokeHex.$ref': references must start with #/$defs/" (an MCP
  server's Zod schema used twice, which zod-to-json-schema writes as `#/properties/fillHex`; and
  `#/definitions/X`, its draft-07 form). For Kimi every reference is moved under `$defs`
  (with_refs_under_defs); others take the schema as written (a hoisted `#` would double it).
  The same validator (Moonshot Flavoured JSON Schema) refuses more that JSON Schema allows, each
  written for Kimi as it takes it (moonshot_flavoured): `type` beside an `anyOf` ("when using
  anyOf, type should be defined in anyOf items instead of the parent schema": into each branch);
  a tuple `items` ("items must be an object": 2020-12's `prefixItems`, and no `items: false`); an
  object without `required` ("required must be an array": `required: []`, the same); a `$ref`
  with keywords beside it (a property's description: the reference alone); a list of types (one
  type a schema: the others as `anyOf` alternatives); `null` among an enum's values or a type's,
  and `nullable` (values that are strings or numbers: the model does not send null, which the
  tool takes or not).
- Anthropic, for every Claude model there and on Bedrock: "tools.18.custom.input_schema: JSON
  schema is invalid. It must match JSON Schema draft 2020-12" (Dokploy's MCP server, fastapi_mcp,
  Claude Code #586), at every request, compaction included, from an MCP server's schema written
  to an older draft: `exclusiveMinimum: true` beside `minimum` (draft 4), `required: true` on a
  property (draft 3), `items` as a list of schemas (before 2020-12's `prefixItems`). Each is
  written as 2020-12 says the same (as_2020_12). OpenAI validates its functions' parameters
  against 2020-12 too ("Invalid schema for function 'x': True is not of type 'array'" for a
  property's `required: true`; "[] is not of type 'object', 'boolean'" for a list as `items`),
  on Chat Completions and Responses, and so does Mistral's API ("Invalid tool schema: {...
  'exclusiveMinimum': True, 'minimum': 0 ...} is not valid under any of the given schemas"):
  their models get the same rewriting.
- Mistral's API refuses `$id` and `$schema` in a function's parameters ("Grammar error: at
  3(11): failed to compile JSON schema", since August 2025): its models get the schema without
  them at the root (without_schema_ids).
Each a function of the schema alone, copy on write: the request's own schema stays as it is, and
the very object comes back where nothing changes.
"""
from __future__ import annotations

def claude_schema(schema):
    """A schema as Anthropic takes it, for Claude wherever it is served: an object root, written
    to JSON Schema 2020-12."""
    return as_2020_12(object_root(schema))


def as_taken(tool, key: tuple, make):
    """make(tool.input_schema): tool's schema as the format named by key takes it (key holds every
    setting make reads), made once for the tool object (ToolDefinition.taken). The functions here
    never change a schema in place, nor may what reads their result."""
    found = tool.taken.get(key)
    if found is None:
        found = tool.taken[key] = make(tool.input_schema)
    return found


# the keywords whose value is one schema (items also a list of them: its tuple form), and those
# whose value is a list or a map of them
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
        "additionalItems", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _with_subschemas(schema: dict, change) -> dict:
    """schema with change(x) in place of each schema x it holds where a schema goes (not inside
    const, enum, default or examples, whose values are data): the very object where change
    returns each as it is, else a copy (the request's own stays as it is)."""
    out = schema
    for key in _ONE + _LIST + _MAP:
        value = schema.get(key)
        if isinstance(value, dict) and key in _MAP:
            new = {k: change(v) if isinstance(v, dict) else v for k, v in value.items()}
            new = value if all(new[k] is v for k, v in value.items()) else new
        elif isinstance(value, dict):
            new = change(value)
        elif isinstance(value, list) and (key in _LIST or key == "items"):
            new = [change(x) if isinstance(x, dict) else x for x in value]
            new = value if all(a is b for a, b in zip(new, value)) else new
        else:
            continue
        if new is not value:
            out = out if out is not schema else dict(schema)
            out[key] = new
    return out


def _subschemas(schema: dict):
    """The schemas schema holds where a schema goes (_with_subschemas)."""
    found = []
    _with_subschemas(schema, lambda x: found.append(x) or x)
    return found


def with_array_items(schema):
    """schema, every array in it given `items: {}` where it has none; the very object where
    none lacks them (a copy of what changed otherwise: the request's own stays as it is)."""
    if not isinstance(schema, dict):
        return schema
    out = _with_subschemas(schema, with_array_items)
    if _is_array(schema) and "items" not in schema and "prefixItems" not in schema:
        out = {**out, "items": {}}
    return out


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
    out = schema = _root_resolved(schema)
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
    own = dict(properties)
    required = list(out.get("required") or []) if isinstance(out.get("required"), list) else []
    given = {}  # property -> the schemas the branches give it, one list per keyword that gives it
    for key in _ROOT_CHOICES:
        branches = schema.get(key)
        if not isinstance(branches, list):
            continue
        every = None  # of anyOf and oneOf: the names every branch requires
        for branch in branches:
            if branch is False:
                continue  # no input matches it: it requires nothing of the others
            branch = _reference_resolved(branch, schema)
            if not isinstance(branch, dict):
                every = []
                continue
            for name, value in (branch.get("properties") or {}).items() if isinstance(branch.get("properties"), dict) else ():
                if name not in own or key == "allOf":  # the root's own holds for anyOf's and oneOf's
                    found = given.setdefault(name, {}).setdefault(key, [own[name]] if name in own else [])
                    if value not in found:
                        found.append(value)
            named = branch["required"] if isinstance(branch.get("required"), list) else []
            if key == "allOf":
                required += [x for x in named if x not in required]
            else:
                every = [x for x in (named if every is None else every) if x in named]
        required += [x for x in every or () if x not in required]
    for name, by_key in given.items():
        properties[name] = _joined(by_key)
    if properties or "properties" in out:
        out["properties"] = properties
    if required or "required" in out:
        out["required"] = required
    return out


def _joined(by_key: dict):
    """One property's schema from the different ones the root's branches give it (the root's own
    first among allOf's): those of one anyOf or oneOf as its alternatives (a property each
    branch gives a constant of its own takes any of them, not the first branch's alone), those of
    allOf all at once."""
    parts = list(by_key.get("allOf", ()))
    for key in ("anyOf", "oneOf"):
        found = by_key.get(key)
        if found:
            parts.append(found[0] if len(found) == 1 else {"anyOf": found})
    return parts[0] if len(parts) == 1 else {"allOf": parts}


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


# keywords beside a reference that say nothing of the input: where its target has its own, that
# one stands (under JSON Schema 2020-12 the others apply beside the reference: _beside_joined)
_SAYS_NOTHING = frozenset(("$schema", "$id", "$comment", "title", "description"))


def _root_resolved(schema: dict) -> dict:
    """A root that is a local reference as the schema it names, the root's definitions joined to
    the target's (its own references name them), and what the root says beside the reference
    joined to it (_beside_joined). As it is where the two cannot be joined."""
    return _reference_resolved(schema, None)


def _reference_resolved(node, root: dict | None):
    """node, a local reference (its chain followed), as the schema it names in root (None: node
    is the root) with what node says beside the reference joined to it (_beside_joined); as it is
    where they cannot be joined, or the reference leads nowhere or round."""
    for _ in range(8):
        target = _resolved(node, node if root is None else root)
        if target is node or not isinstance(target, dict):
            return node
        out = _beside_joined(node, target)
        if out is None:
            return node
        node = out
    return node


# the keywords that bound which properties an object may hold: a schema's own properties are the
# ones they leave out, so two schemas' properties join only where neither holds one
_PROPERTY_BOUNDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")


def _beside_joined(node: dict, target: dict) -> dict | None:
    """target with what node says beside its reference, the same constraints as both (2020-12
    applies both): its required names joined to the target's, its properties and definitions to
    the target's where none is both's, any other keyword the target does not hold; a title or
    description the target has stands. None where they say different things of one keyword, or
    where properties would join under a bound on which properties an object may hold."""
    out = dict(target)
    for key, value in node.items():
        its = target.get(key)
        if key == "$ref" or value == its or (key in target and key in _SAYS_NOTHING):
            continue
        if key in ("$defs", "definitions", "properties") and isinstance(value, dict) and isinstance(its, dict):
            if any(k in value and value[k] != v for k, v in its.items()):
                return None
            out[key] = {**value, **its}
        elif key == "required" and isinstance(value, list) and isinstance(its, list):
            out[key] = its + [x for x in value if x not in its]
        elif key in target:
            return None
        else:
            out[key] = value
    if _bounded(node) and target.get("properties") or _bounded(target) and node.get("properties"):
        return None
    return out


def _bounded(schema: dict) -> bool:
    return any(schema.get(k) not in (None, True, {}) for k in _PROPERTY_BOUNDS)


_DEFS = "#/$defs/"


def moonshot_flavoured(schema, root: bool = True):
    """schema as Moonshot's validator takes it (the module's doc), after with_refs_under_defs and
    as_2020_12; the very object where nothing changes."""
    if not isinstance(schema, dict):
        return schema
    out = _with_subschemas(schema, lambda x: moonshot_flavoured(x, False))
    if not root and isinstance(out.get("$ref"), str) and len(out) > 1:  # the root keeps its object type
        return {"$ref": out["$ref"]}
    changed = {}
    kind = out.get("type")
    if isinstance(kind, list):
        kept = [k for k in kind if k != "null"]
        if len(kept) == 1:
            changed["type"] = kind = kept[0]
        elif kept and "anyOf" not in out:  # one type a schema: the others as alternatives, the same
            changed["type"], kind = None, None
            changed["anyOf"] = [{"type": k} for k in kept]
    if isinstance(out.get("enum"), list) and None in out["enum"] and len(out["enum"]) > 1:
        changed["enum"] = [v for v in out["enum"] if v is not None]
    if out.get("items") is False:
        changed["items"] = None
    if "nullable" in out:
        changed["nullable"] = None
    if not root and kind is not None and isinstance(out.get("anyOf"), list):
        changed["type"] = None
        changed["anyOf"] = [{**b, "type": kind} if isinstance(b, dict) and "type" not in b and "$ref" not in b else b
                            for b in out["anyOf"]]
    if (kind == "object" or isinstance(out.get("properties"), dict)) and not isinstance(out.get("required"), list):
        changed["required"] = []
    if not changed:
        return out
    out = dict(out)
    for key, value in changed.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def with_refs_under_defs(schema):
    """schema with every local reference under #/$defs/ (the module's doc): a draft-07
    `definitions` map joins `$defs` (a name both hold, differently, is copied under a name of its
    own), and any other subschema referenced (#/properties/x, # itself) is copied into `$defs`
    under a name made of its path. The very object where every reference is there already, or
    where one leads nowhere (left for the provider to name)."""
    if not isinstance(schema, dict):
        return schema
    refs = sorted({r for r in _refs(schema) if not r.startswith(_DEFS)})
    if not refs:
        return schema
    defs = dict(schema["$defs"]) if isinstance(schema.get("$defs"), dict) else {}
    old = schema.get("definitions") if isinstance(schema.get("definitions"), dict) else {}
    moved = {}  # a definitions name -> its name under $defs
    for name, value in old.items():
        if defs.get(name, value) == value:
            defs[name] = value
            moved[name] = name
    mapping = {}
    for ref in refs:
        if ref.startswith("#/definitions/"):
            name, _, rest = ref[len("#/definitions/"):].partition("/")
            if _pointer_key(name) in moved:
                mapping[ref] = _DEFS + _pointer_name(moved[_pointer_key(name)]) + ("/" + rest if rest else "")
                continue
        target = _resolved({"$ref": ref}, schema) if ref != "#" else schema
        if target is None or (isinstance(target, dict) and target.get("$ref") == ref and ref != "#"):
            return schema
        name = _free_name("".join(c if c.isalnum() or c in "_-." else "_" for c in ref[2:]) or "root", defs)
        defs[name] = {k: v for k, v in target.items() if k not in ("$defs", "definitions")} \
            if target is schema else target
        mapping[ref] = _DEFS + name
    out = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    if old and len(moved) < len(old):  # names both maps held differently stay where they were
        out["definitions"] = {k: v for k, v in old.items() if k not in moved}
    out["$defs"] = defs
    return _repointed(out, mapping)


def _refs(schema: dict):
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        yield ref
    for sub in _subschemas(schema):
        yield from _refs(sub)


def _repointed(schema: dict, mapping: dict) -> dict:
    """schema, each reference in a schema position it holds pointed as mapping says."""
    out = _with_subschemas(schema, lambda x: _repointed(x, mapping))
    ref = schema.get("$ref")
    return {**out, "$ref": mapping[ref]} if isinstance(ref, str) and ref in mapping else out


def _pointer_key(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def _pointer_name(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _free_name(name: str, taken: dict) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    return out


def as_2020_12(schema):
    """schema with what older drafts wrote and JSON Schema 2020-12 writes otherwise rewritten, the
    same constraints (the module's doc): `exclusiveMinimum: true` with `minimum: x` becomes
    `exclusiveMinimum: x` (false, or true without a bound, says nothing), likewise for the
    maximum; a property's `required: true` joins its object's `required` list; `items: [..]`
    becomes `prefixItems`, and `additionalItems` then `items`; a `$schema` naming an older draft
    then names 2020-12. The very object where nothing changes."""
    if not isinstance(schema, dict):
        return schema
    out = _node_2020_12(_with_subschemas(schema, as_2020_12), schema)
    if out is not schema and isinstance(out.get("$schema"), str) and "2020-12" not in out["$schema"]:
        # what it now holds is 2020-12's, invalid under the older draft it named (a validator
        # that honours $schema would refuse it)
        out = {**out, "$schema": DRAFT_2020_12}
    return out


DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def without_schema_ids(schema):
    """schema without `$id` and `$schema` at its root (Mistral's API: the module's doc)."""
    if not isinstance(schema, dict) or not ("$id" in schema or "$schema" in schema):
        return schema
    return {k: v for k, v in schema.items() if k not in ("$id", "$schema")}


def _node_2020_12(node: dict, given: dict) -> dict:
    """node (given, its subschemas rewritten) itself as 2020-12 writes it; a copy where it changes
    (given is the request's own). A property's `required: true` is read from given's properties:
    their rewriting took it off."""
    props = given.get("properties") if isinstance(given.get("properties"), dict) else {}
    named = [k for k, v in props.items() if isinstance(v, dict) and v.get("required") is True]
    if not (named or isinstance(node.get("items"), list)
            or any(isinstance(node.get(k), bool) for k in ("exclusiveMinimum", "exclusiveMaximum", "required"))):
        return node
    out = dict(node) if node is given else node
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(exclusive)
        if isinstance(flag, bool):
            del out[exclusive]
            limit = out.get(bound)
            if flag and isinstance(limit, (int, float)) and not isinstance(limit, bool):
                out[exclusive] = out.pop(bound)
    if isinstance(out.get("required"), bool):  # a property's: said on its object (named)
        del out["required"]
    if named:
        required = list(out["required"]) if isinstance(out.get("required"), list) else []
        out["required"] = required + [k for k in named if k not in required]
    if isinstance(out.get("items"), list):
        tuple_items = out.pop("items")
        if tuple_items:  # an empty tuple bounds nothing (2020-12 refuses an empty prefixItems)
            out.setdefault("prefixItems", tuple_items)
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    return out
