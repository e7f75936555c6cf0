"""Protobuf <-> core types: each request checked and converted into the core's input, each core
result built into its response. The only module besides the servicer that knows the wire schema.

Conversion checks what only the wire can get wrong (missing fields, unknown enum numbers, a part
with no kind, tool arguments that are not JSON, negative sizes) and names the offending field in
proto paths.
"""
from __future__ import annotations

import json
import math
import sys
from typing import NamedTuple

from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from .. import assemble, compact, native, truncation
from .. import conversation as m
from ..config import ServerConfig
from ..errors import BadInput
from ..deadline import NO_DEADLINE, Deadline
from ..lowering import registry
from ..memo import MESSAGE, SCHEMA, TOOLS, Memo
from ..prefix import varint_bytes
from ..v1 import context_pb2 as pb
from . import earlier_step
from .message_keys import PREFIX_FROM_MESSAGES, message_keys, message_spans

_ROLES = {pb.ROLE_USER: m.USER, pb.ROLE_ASSISTANT: m.ASSISTANT}
_STATUSES = {
    pb.TOOL_STATUS_PENDING: m.PENDING,
    pb.TOOL_STATUS_RUNNING: m.RUNNING,
    pb.TOOL_STATUS_COMPLETED: m.COMPLETED,
    pb.TOOL_STATUS_ERROR: m.ERROR,
}
# From the registry of wire formats, by name: PROVIDER_OPENAI_COMPATIBLE is "openai-compatible".
_PROVIDERS = {pb.Provider.Value(registry.enum_name(p)): p for p in registry.PROVIDERS}
PROVIDER_TO_PB = {v: k for k, v in _PROVIDERS.items()}
_PRUNE_REASONS = {
    pb.PRUNE_REASON_NORMAL: "normal",
    pb.PRUNE_REASON_PAYLOAD_LIMIT: "payload-limit",
    pb.PRUNE_REASON_POST_COMPACTION: "post-compaction",
}


def _enum(table, value, field, enum_type):
    try:
        return table[value]
    except KeyError:
        names = ", ".join(enum_type.Name(k) for k in table)
        if value == 0:
            raise BadInput(field, f"is required (one of {names})") from None
        raise BadInput(field, f"unknown value {value} (expected one of {names})") from None


# JSON nesting accepted by default in tool inputs and schemas (server.max_json_depth)
JSON_DEPTH = ServerConfig.max_json_depth


def _json_object(text: str, path, suffix: str = "", max_depth: int = JSON_DEPTH):
    """Parses a JSON object; path is the field path, or a callable building its prefix.

    Nesting deeper than max_depth is refused here, once, so that no later stage (lowering,
    serialization, compaction) recurses anywhere near Python's recursion limit. The parser
    itself stops cleanly (RecursionError) on absurd depths before the walk below sees them."""
    if not text:
        return {}
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadInput(_path(path, suffix), f"JSON nested too deeply (at most {max_depth} levels)") from None
    except ValueError as e:
        raise BadInput(_path(path, suffix), _not_json(text, e)) from None
    if not isinstance(value, dict):
        raise BadInput(_path(path, suffix), f"must be a JSON object, got {type(value).__name__}")
    # fewer brackets than the limit cannot nest past it; a \uD800-style escape decodes to a lone
    # surrogate, which no UTF-8 body can carry
    deep = text.count("[") + text.count("{") > max_depth
    surrogates = "\\u" in text
    if deep or surrogates:
        problem = _walk(value, max_depth if deep else 0, surrogates)
        if problem:
            raise BadInput(_path(path, suffix), problem)
    return value


_TOO_MANY_DIGITS = "has an integer of"  # how the refusal of a too long integer begins


def _not_json(text: str, e: ValueError) -> str:
    """Why json.loads refused text: an integer too long to keep exactly, by its length (Python's
    own words point at sys.set_int_max_str_digits), or the parser's reason. The second parse, which
    tells an integer's error from the other hooks', runs on refusals only: a parse_int hook would
    slow every integer of every accepted input."""
    if not isinstance(e, json.JSONDecodeError):  # a hook's or the int conversion's
        try:
            json.loads(text, parse_int=_exact_int, parse_constant=_reject_constant, parse_float=_finite_float)
        except _TooManyDigits as too_long:
            return str(too_long)
        except (ValueError, RecursionError):
            pass
    return f"not valid JSON ({e})"


class _TooManyDigits(ValueError):
    """A JSON integer longer than Python converts (sys.get_int_max_str_digits)."""


def _exact_int(literal: str) -> int:
    """A JSON integer as an int, written back exactly as it came; refused past the digits Python
    converts (4300 by default: the conversion, in and out, takes time quadratic in them)."""
    try:
        return int(literal)
    except ValueError:
        digits = len(literal.lstrip("-"))
        raise _TooManyDigits(f"{_TOO_MANY_DIGITS} {digits} digits; integers are kept exactly as written "
                             f"up to {sys.get_int_max_str_digits()} digits") from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(literal: str) -> float:
    """A JSON number with a fraction or exponent; one beyond the double range (1e400) would be
    Infinity, which no JSON body can carry. (Integers stay exact ints: _exact_int.)"""
    x = float(literal)
    if not math.isfinite(x):
        raise ValueError(f"the number {literal} is out of range of a double")
    return x


def _walk(value, max_depth: int, surrogates: bool) -> str:
    """Why a parsed JSON value is refused ("" when it is not): nesting deeper than max_depth
    (0 = not checked) or a string holding a lone surrogate. Iterative: no recursion on depth."""
    stack = [(value, 1)]
    while stack:
        x, depth = stack.pop()
        if max_depth and depth > max_depth:
            return f"JSON nested too deeply (at most {max_depth} levels)"
        if isinstance(x, dict):
            for k, v in x.items():
                if surrogates and _has_surrogate(k):
                    return "not valid JSON (contains a lone UTF-16 surrogate)"
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
                elif surrogates and isinstance(v, str) and _has_surrogate(v):
                    return "not valid JSON (contains a lone UTF-16 surrogate)"
        elif isinstance(x, list):
            for v in x:
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
                elif surrogates and isinstance(v, str) and _has_surrogate(v):
                    return "not valid JSON (contains a lone UTF-16 surrogate)"
    return ""


def _has_surrogate(s: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in s)


def _path(path, suffix: str) -> str:
    return (path() if callable(path) else path) + suffix


def require(request, *fields) -> None:
    """Top-level message fields that must be present, checked in the order given."""
    for name in fields:
        if not request.HasField(name):
            raise BadInput(name, "is required")


def _usage(u) -> m.Usage:
    return m.Usage(u.input, u.output, u.reasoning, u.cache_read, u.cache_write, u.total, u.cleared)


def _file(f) -> m.File:
    source = f.WhichOneof("source")
    return m.File(
        mime=f.mime,
        filename=f.filename,
        url=f.url if source == "url" else "",
        data=f.data if source == "data" else None,
    )


# why a failed call's arguments are sent as {}: a model wrote them malformed (cut at its output
# limit, say) or with a number no body can carry exactly, the tool refused them, and the error
# says so
_MALFORMED = ("not valid JSON", "must be a JSON object", _TOO_MANY_DIGITS)


def _call_input(text: str, status: str, path, depth: int) -> dict:
    """A tool call's arguments. Those of a call that failed may be malformed JSON, as a model wrote
    them: they go as {} (every provider wants an object there), where they refused every later
    request of the session. Any other call's must be a JSON object; nesting and lone surrogates
    are refused for every call."""
    try:
        return _json_object(text, path, ".tool.state.input_json", max_depth=depth)
    except BadInput as e:
        if status == m.ERROR and e.why.startswith(_MALFORMED):
            return {}
        raise


def _tool(t, path, depth: int = JSON_DEPTH) -> m.Tool:
    s = t.state
    status = _STATUSES.get(s.status)
    if status is None:
        _enum(_STATUSES, s.status, f"{path()}.tool.state.status", pb.ToolStatus)
    return m.Tool(
        call_id=t.call_id,
        tool=t.tool,
        status=status,
        input=_call_input(s.input_json, status, path, depth),
        output=s.output,
        error=s.error,
        title=s.title,
        attachments=[_file(a) for a in s.attachments],
        time_start_ms=s.time_start_ms,
        time_end_ms=s.time_end_ms,
        time_compacted_ms=s.time_compacted_ms,
    )


def _step_finish(s, path, depth):
    return m.StepFinish(s.reason, _usage(s.tokens), s.cost)


# Part kind -> builder(field message, lazy path, JSON depth limit) -> core content.
_PART_BUILDERS = {
    "text": lambda t, path, depth: m.Text(t.text, t.synthetic, t.ignored),
    "tool": _tool,
    "reasoning": lambda r, path, depth: m.Reasoning(r.text, r.signature, r.redacted_data),
    "file": lambda f, path, depth: _file(f),
    "step_start": lambda s, path, depth: m.StepStart(s.snapshot),
    "step_finish": _step_finish,
    "compaction": lambda c, path, depth: m.Compaction(c.auto, c.overflow, c.tail_start_id),
    "subtask": lambda s, path, depth: m.Subtask(s.prompt, s.description, s.agent),
    "agent": lambda a, path, depth: m.Agent(a.name),
    "retry": lambda r, path, depth: m.Retry(r.attempt, r.error),
    "snapshot": lambda s, path, depth: m.Snapshot(s.snapshot),
    "patch": lambda p, path, depth: m.Patch(p.hash, list(p.files)),
    "provider_compaction": lambda c, path, depth: m.ProviderCompaction(c.provider_id, c.encrypted_content),
}


def conversation(c, path: str = "conversation", memo: Memo | None = None, max_json_depth: int = JSON_DEPTH,
                 deadline: Deadline = NO_DEADLINE, wire: bytes | None = None, at: int = 0,
                 resumed: earlier_step.Resumed | None = None) -> m.Conversation:
    """wire: the bytes c was parsed from, c itself (at=0) or a request holding it at field `at`
    (c serialized when not given). Each message's key is the digest of its bytes in wire
    (message_keys); with the memo, a message seen before is taken from it without being touched
    (never converted, re-serialized or re-validated), and the messages of the session's earlier
    step this one starts with (earlier_step) are not even scanned or hashed. resumed: that step,
    found when the request was parsed, c then holding only the messages after its (parser). Only
    messages that converted cleanly are kept, so a refused message is refused every time. Field
    paths are built only when something is wrong: this runs for every message. Every message
    carries its key (Message.digest)."""
    if wire is None:
        wire, at = c.SerializeToString(), 0
    left_out = resumed.found.kept if resumed is not None else 0  # the first messages c does not hold
    n = left_out + len(c.messages)
    if resumed is not None:
        where, found = resumed.where, resumed.found
    else:
        where = earlier_step.locate(wire, at, c.session_id) if memo is not None and n >= PREFIX_FROM_MESSAGES \
            else None
        found = earlier_step.find(memo, wire, where) if where is not None else None
    if found is None:
        start, spans, messages, kept_keys, kept_ends = 0, message_spans(wire, at), [], (), ()
        contiguous = where is not None
    else:
        start, earlier = found.kept, found.converted
        offset = where.origin + earlier.ends[start - 1]
        # what follows is a conversation of its own on the wire
        spans = [(offset + a, offset + b) for a, b in message_spans(wire[offset:where.end])]
        messages, kept_keys, kept_ends = list(earlier.messages[:start]), earlier.keys[:start], earlier.ends[:start]
        memo.touch_held(kept_keys, start, n)  # the entries it holds stay in use
        contiguous = earlier.contiguous
    if contiguous:  # the region holds the messages alone
        contiguous = earlier_step.back_to_back(spans, where.origin + (kept_ends[-1] if kept_ends else 0))
    if start + len(spans) != n:  # the scanner and the parser disagree: never key a message wrongly
        raise RuntimeError(f"the wire scanner found {start + len(spans)} messages where the parser found {n}")
    keys, sizes = message_keys(wire, spans)
    # one lock for every lookup; the misses are converted outside it
    messages += memo.get_many([(MESSAGE, k) for k in keys]) if memo is not None else [None] * len(keys)
    converted = 0
    for i in range(start, n):
        if messages[i] is None:
            deadline.tick(converted, "conversion")  # counted over the misses: hits may fall on every check
            converted += 1
            core = messages[i] = _message(c.messages[i - left_out], i, path, max_json_depth, deadline)
            core.digest = keys[i - start]  # every per-message entry of the memo keys on it
            if memo is not None:
                memo.put((MESSAGE, core.digest), core, sizes[i - start])
    out = m.Conversation(messages=messages, session_id=c.session_id)
    out.scanned = (found.converted.scanned if found is not None else m.NOTHING_SCANNED).extended(start, messages)
    if where is not None:
        whole = found is not None and found.whole
        if start < n or not whole:  # kept for the session's next step
            ends = kept_ends + tuple(e - where.origin for _, e in spans)
            token = earlier_step.keep(memo, wire, where, ends, messages, kept_keys + tuple((MESSAGE, k) for k in keys),
                                      found, contiguous, out.scanned).token
        else:
            token = found.converted.token  # the same conversation again
        out.lineage = m.Lineage(start, found.converted.token, token, found.converted.messages[start:]) \
            if found is not None else m.Lineage(0, b"", token)
    return out


def _message(msg, i: int, path: str, depth: int, deadline: Deadline) -> m.Message:
    builders = _PART_BUILDERS
    role = _ROLES.get(msg.role)
    if role is None:
        _enum(_ROLES, msg.role, f"{path}.messages[{i}].role", pb.Role)
    parts = []
    for j, p in enumerate(msg.parts):
        deadline.count("conversion")
        kind = p.WhichOneof("kind")
        builder = builders.get(kind)
        if builder is None:
            raise BadInput(f"{path}.messages[{i}].parts[{j}].kind",
                           "no part kind set (or a kind this service does not know)")
        where = lambda i=i, j=j: f"{path}.messages[{i}].parts[{j}]"  # noqa: E731
        parts.append(m.Part(p.id, builder(getattr(p, kind), where, depth)))
    error = m.MessageError(msg.error.name, msg.error.message) if msg.HasField("error") else None
    return m.Message(
        id=msg.id,
        role=role,
        parts=parts,
        time_created_ms=msg.time_created_ms,
        time_completed_ms=msg.time_completed_ms,
        usage=_usage(msg.usage) if msg.HasField("usage") else m.Usage(),
        model_id=msg.model_id,
        provider_id=msg.provider_id,
        error=error,
        summary=msg.summary,
        parent_id=msg.parent_id,
        agent=msg.agent,
    )


def request_conversation(request, memo: Memo | None = None, max_json_depth: int = JSON_DEPTH,
                         deadline: Deadline = NO_DEADLINE, wire: bytes | None = None,
                         resumed: earlier_step.Resumed | None = None) -> m.Conversation:
    """The conversation of a request; wire is the request's bytes, resumed what its parse left
    out (conversation)."""
    at = request.DESCRIPTOR.fields_by_name["conversation"].number if wire is not None else 0
    return conversation(request.conversation, memo=memo, max_json_depth=max_json_depth, deadline=deadline,
                        wire=wire, at=at, resumed=resumed)


class Received(NamedTuple):
    """A request and the bytes it was parsed from: each message's memo key is the digest of its
    own bytes in them (message_keys). resumed: the earlier step whose messages the parse left
    out of message's conversation (parser)."""
    message: object
    wire: bytes
    resumed: earlier_step.Resumed | None = None


def parser(message_type, memo: Memo | None = None):
    """calls.py's parse function for a method taking message_type: a Received when the request
    carries a conversation, the bare message otherwise. With the memo, a request continuing an
    earlier step of its session is parsed without that step's messages (earlier_step.skeleton),
    when it is large enough for that to pay (SKELETON_FROM_BYTES), the session id the skeleton
    was found by is the parse's and the conversation is one the memo resumes
    (PREFIX_FROM_MESSAGES); any other is parsed whole, so every refusal is the whole parse's."""
    whole = _naming_bad_utf8(message_type)
    if "conversation" not in message_type.DESCRIPTOR.fields_by_name:
        return whole
    if memo is None:
        return lambda data: Received(whole(data), data)
    at = message_type.DESCRIPTOR.fields_by_name["conversation"].number

    def parse(data: bytes) -> Received:
        memo.begin_step()  # the call's step, on this thread, begins with its parse
        skeleton = earlier_step.skeleton(memo, data, at) if len(data) >= earlier_step.SKELETON_FROM_BYTES else None
        if skeleton is not None:
            rest, resumed = skeleton
            try:
                message = message_type.FromString(rest)
            except Exception:  # noqa: BLE001 - the whole parse below refuses it with its own error
                message = None
            if message is not None:
                c = message.conversation
                if c.session_id == resumed.where.session_id and \
                        resumed.found.kept + len(c.messages) >= PREFIX_FROM_MESSAGES:
                    return Received(message, data, resumed)
        return Received(whole(data), data)

    return parse


def _naming_bad_utf8(message_type):
    """message_type.FromString, whose refusal of a string that is not UTF-8 names the field (the
    parser's own words do not)."""
    def parse(data: bytes):
        try:
            return message_type.FromString(data)
        except DecodeError as e:
            field = _bad_utf8_field(message_type.DESCRIPTOR, data) if "utf-8" in str(e).lower() else ""
            if not field:
                raise
        raise DecodeError(f"{field}: not valid UTF-8, which every string field must be")

    return parse


def _bad_utf8_field(descriptor, data: bytes) -> str:
    """The path of the first string field in data (a message of descriptor) that is not UTF-8;
    "" when there is none, or data is not wire format. For refused parses only: each level's
    fields are listed by the wire scanner and parsed one by one (C code both), and only the entry
    that fails is entered, so the walk costs about one parse per level of nesting."""
    path, start, end = "", 0, len(data)
    while True:
        seen: dict[int, int] = {}
        try:
            entries = native.wire_entries(data, start, end)
        except ValueError:
            return ""
        for number, wire_type, _, value, after in entries:
            index = seen[number] = seen.get(number, -1) + 1
            field = descriptor.fields_by_number.get(number)
            if field is None or wire_type != native.WIRE_LEN:
                continue
            name = path + field.name + (f"[{index}]" if field.is_repeated else "")
            if field.type == field.TYPE_STRING:
                try:
                    data[value:after].decode("utf-8")
                except UnicodeDecodeError:
                    return name
            elif field.type == field.TYPE_MESSAGE and not _parses(field.message_type, data[value:after]):
                descriptor, path, start, end = field.message_type, name + ".", value, after
                break
        else:
            return ""


def _parses(descriptor, data: bytes) -> bool:
    try:
        GetMessageClass(descriptor).FromString(data)
        return True
    except DecodeError:
        return False


def received(request) -> Received:
    """A servicer method's request as a Received: as parser made it, or (a direct call with a
    message) with the message's own serialization."""
    return request if isinstance(request, Received) else Received(request, request.SerializeToString())


def session_id(c, limit: int, path: str = "conversation.session_id") -> None:
    """Refuses a session id over limit UTF-8 bytes (server.max_session_id_bytes)."""
    n = len(c.session_id.encode("utf-8", "surrogatepass")) if len(c.session_id) * 4 > limit else 0
    if n > limit:
        raise BadInput(path, f"is {n} bytes, more than {limit} (server.max_session_id_bytes): "
                       "a session id names the session, use a UUID or a digest")


def shared_fields(request, memo: Memo | None = None, max_json_depth: int = JSON_DEPTH,
                  deadline: Deadline = NO_DEADLINE, wire: bytes | None = None,
                  resumed: earlier_step.Resumed | None = None) -> dict:
    """The core fields of Measure, Compact and Assemble requests, which share these five; wire is
    the request's bytes, resumed what its parse left out (conversation)."""
    return {
        "conversation": request_conversation(request, memo, max_json_depth, deadline, wire, resumed),
        "model": model(request.model),
        "tools": tools(request.tools, max_json_depth=max_json_depth, memo=memo, wire=wire),
        "system": system(request.system),
        "compaction": compaction_settings(request.compaction),
    }


def prune_reason(value: int) -> str:
    return _enum(_PRUNE_REASONS, value, "reason", pb.PruneReason)


def model(x, path: str = "model") -> m.Model:
    return m.Model(
        id=x.id,
        provider=_enum(_PROVIDERS, x.provider, f"{path}.provider", pb.Provider),
        limits=m.ModelLimits(x.limits.context, x.limits.input, x.limits.output),
        prompt=x.prompt,
        media_in_tool_results=x.media_in_tool_results,
    )


def tools(xs, path: str = "tools", max_json_depth: int = JSON_DEPTH, memo: Memo | None = None,
          wire: bytes | None = None) -> list:
    """The tool definitions; with the memo, the same tools (an agent sends them at every step)
    are converted once while the memo keeps them, and a tool's input schema is parsed once,
    keyed by its text, when others change. Only tools that converted cleanly are kept, so a
    refused schema is refused every time. With the request's bytes (wire), the tools are known
    by the bytes of their entries (_tool_entries): equal bytes parse to equal definitions, and
    one hash of them costs less than reading every definition's strings out of the message."""
    if memo is None or not xs:
        return _tools(xs, path, max_json_depth, None)
    written = _tool_entries(wire, len(xs)) if wire is not None else None
    if written is not None:
        key, size = (TOOLS, written, max_json_depth), len(written)
    else:
        strings = tuple((t.name, t.description, t.input_schema_json) for t in xs)
        key, size = (TOOLS, strings, max_json_depth), sum(len(a) + len(b) + len(c) for a, b, c in strings)
    found = memo.get(key)
    if found is None:
        found = tuple(_tools(xs, path, max_json_depth, memo))
        memo.put(key, found, size)
    return list(found)  # the caller's own list: the definitions are shared, never changed


_TOOLS_FIELD = pb.MeasureRequest.TOOLS_FIELD_NUMBER  # the same in every request with tools


def _tool_entries(wire: bytes, count: int) -> bytes | None:
    """The bytes of a request's `count` tool entries when they are written back to back, as
    encoders write a repeated field; None when they are not, or the request's fields are not
    read here (the parse has accepted them; a miss only costs the strings' key)."""
    try:
        entries = [e for e in native.wire_entries(wire, 0, len(wire), 0, earlier_step.MAX_ENTRIES)
                   if e[0] == _TOOLS_FIELD]
    except ValueError:
        return None
    if len(entries) != count or any(a[4] != b[2] for a, b in zip(entries, entries[1:])):
        return None
    return bytes(wire[entries[0][2]:entries[-1][4]])


def _tools(xs, path: str, max_json_depth: int, memo: Memo | None) -> list:
    out = []
    for i, t in enumerate(xs):
        text = t.input_schema_json
        key = (SCHEMA, text, max_json_depth) if memo is not None and text else None
        schema = memo.get(key) if key is not None else None
        if schema is None:
            schema = _json_object(text, f"{path}[{i}].input_schema_json", max_depth=max_json_depth)
            if key is not None:
                memo.put(key, schema, len(text))
        out.append(m.ToolDefinition(t.name, t.description, schema))
    return out


def system(s) -> m.SystemPrompt:
    env = None
    if s.HasField("env"):
        e = s.env
        env = m.EnvInfo(e.working_directory, e.is_git_repo, e.platform, e.date, e.config_dir, e.shell,
                        e.facts_only)
    return m.SystemPrompt(
        soul=s.soul,
        agent_prompt=s.agent_prompt,
        env=env,
        instructions=[m.Instruction(i.path, i.content) for i in s.instructions],
        skills=[m.Skill(k.name, k.description) for k in s.skills],
    )


def _optional(msg, *names) -> dict:
    """{name: value} of proto3 `optional` fields, None where the caller left a field unset."""
    return {n: getattr(msg, n) if msg.HasField(n) else None for n in names}


def compaction_settings(c) -> m.CompactionSettings:
    return m.CompactionSettings(
        **_optional(c, "auto", "threshold_percent", "reserved", "prune", "tail_turns",
                    "preserve_recent_tokens", "max_attempts", "provider_managed", "request_prune_bytes"),
        prune_settings=prune_settings(c.prune_settings),
    )


def prune_settings(p) -> m.PruneSettings:
    return m.PruneSettings(
        **_optional(p, "protect", "protected_results", "protected_turns", "protect_tokens", "minimum_tokens"),
        protected_tools=tuple(p.protected_tools) if p.protected_tools_set else None,
    )


_TTLS = {pb.CACHE_TTL_UNSPECIFIED: "", pb.CACHE_TTL_5M: "", pb.CACHE_TTL_1H: "1h"}



_INT32_MAX = 2**31 - 1  # a response's int32 fields

def cache_policy(hints, ttl: int, path: str = "cache_hints"):
    from .. import breakpoints

    if ttl not in _TTLS:
        raise BadInput("cache_ttl", f"unknown value {ttl}")
    out = []
    for i, h in enumerate(hints):
        target = h.WhichOneof("target")
        if target is None:
            raise BadInput(f"{path}[{i}].target", "set one of system_block, message_id, last_tool")
        if h.ttl not in _TTLS:
            raise BadInput(f"{path}[{i}].ttl", f"unknown value {h.ttl}")
        out.append(breakpoints.Hint(system_block=h.system_block if target == "system_block" else -1,
                              message_id=h.message_id if target == "message_id" else "",
                              last_tool=target == "last_tool" and h.last_tool,
                              ttl=_TTLS[h.ttl] or _TTLS[ttl]))
        if target == "last_tool" and not h.last_tool:
            raise BadInput(f"{path}[{i}].last_tool", "must be true when it is the target")
    return breakpoints.Policy(hints=out, ttl=_TTLS[ttl])


def editor(e) -> assemble.Editor:
    return assemble.Editor(e.current_time, e.working_directory, e.workspace_root, e.active_file,
                           list(e.visible_files), list(e.open_tabs), e.environment_details)


# ---- requests -> core input ------------------------------------------------------------------
# Checked in the order the fields are read, so that a request with several faults is always
# refused for the same one.

def step_input(request, max_session_id_bytes: int, memo: Memo | None = None, max_json_depth: int = JSON_DEPTH,
               deadline: Deadline = NO_DEADLINE, wire: bytes | None = None,
               resumed: earlier_step.Resumed | None = None) -> assemble.AssembleInput:
    """The step a Measure or Assemble request describes: both take the same per-step fields;
    wire is the request's bytes, resumed what its parse left out (conversation)."""
    require(request, "conversation", "model")
    session_id(request.conversation, max_session_id_bytes)
    return assemble.AssembleInput(
        **shared_fields(request, memo, max_json_depth, deadline, wire, resumed),
        editor=editor(request.editor) if request.HasField("editor") else None,
        step=request.step,
        max_steps=request.max_steps,
        plan_reminder=request.plan_reminder,
        policy=cache_policy(request.cache_hints, request.cache_ttl),
        configured_output_tokens=request.configured_output_tokens,
        tools_disabled=request.tools_disabled,
        exact=request.exact,
        previous_cache_state=request.previous_cache_state,
    )


def compact_input(request, max_session_id_bytes: int, memo: Memo | None = None,
                  max_json_depth: int = JSON_DEPTH, deadline: Deadline = NO_DEADLINE,
                  wire: bytes | None = None, resumed: earlier_step.Resumed | None = None) -> compact.CompactInput:
    require(request, "conversation", "model")
    session_id(request.conversation, max_session_id_bytes)
    return compact.CompactInput(
        **shared_fields(request, memo, max_json_depth, deadline, wire, resumed),
        overflow=request.overflow,
        auto=request.auto,
        attempts=request.attempts,
        id_prefix=request.id_prefix,
        previous_cache_state=request.previous_cache_state,
    )


def prune_input(request, max_session_id_bytes: int, memo: Memo | None = None,
                max_json_depth: int = JSON_DEPTH) -> tuple:
    """A Prune request's (reason, model or None, tokens_needed, tools, system), after their
    checks. Its conversation and compaction settings are converted after these, as the arguments
    of the prune itself. tokens_needed at most 0 is none (a request over its limit by the last
    answer's usage alone has projected - limit + 1 below it); the tools and system are read only
    for it."""
    require(request, "conversation")
    session_id(request.conversation, max_session_id_bytes)
    reason = prune_reason(request.reason)
    mdl = model(request.model) if request.HasField("model") else None
    needed = max(0, request.tokens_needed) if mdl is not None else 0
    if not needed:
        return reason, mdl, 0, [], None
    return (reason, mdl, needed, tools(request.tools, max_json_depth=max_json_depth, memo=memo),
            system(request.system))


_DIRECTIONS = {pb.TRUNCATE_DIRECTION_UNSPECIFIED: truncation.HEAD,
               pb.TRUNCATE_DIRECTION_HEAD: truncation.HEAD,
               pb.TRUNCATE_DIRECTION_TAIL: truncation.TAIL}


def truncate_input(request) -> str:
    """A TruncateToolOutput request's direction (truncation.HEAD or TAIL), after its checks;
    its max_lines and max_bytes are 0 for the configured defaults."""
    for name in ("max_lines", "max_bytes"):
        if getattr(request, name) < 0:
            raise BadInput(name, "must not be negative (0 means the configured default)")
    if request.direction not in _DIRECTIONS:
        raise BadInput("direction", f"unknown value {request.direction}")
    if request.hint and truncation.OUTPUT_ID not in request.hint:
        raise BadInput("hint", f"must hold {truncation.OUTPUT_ID}, where the stored output's id goes "
                               "(or be empty for the configured hint)")
    return _DIRECTIONS[request.direction]


def check_read(request) -> None:
    """Refuses a ReadTruncated request without an output id or with a negative offset or limit."""
    if not request.output_id:
        raise BadInput("output_id", "is required")
    for name in ("offset", "limit"):
        if getattr(request, name) < 0:
            raise BadInput(name, "must not be negative")


# A ReadTruncatedResponse's fields besides the text's bytes (text tag and length, three int64
# varints, eof) take at most 41 bytes; a read returns at most max_response_bytes less this.
_READ_RESPONSE_OVERHEAD = 64


def read_text_bytes(max_response_bytes: int) -> int:
    """The most text one ReadTruncated response can carry within max_response_bytes; 0 (for
    either) = no limit."""
    return max(1, max_response_bytes - _READ_RESPONSE_OVERHEAD) if max_response_bytes > 0 else 0


# ---- core -> protobuf ------------------------------------------------------------------------

_ROLE_TO_PB = {v: k for k, v in _ROLES.items()}
_STATUS_TO_PB = {v: k for k, v in _STATUSES.items()}


def _pb_usage(u: m.Usage) -> pb.Usage:
    return pb.Usage(input=u.input, output=u.output, reasoning=u.reasoning, cache_read=u.cache_read,
                    cache_write=u.cache_write, total=u.total, cleared=u.cleared)


def _pb_file(f: m.File) -> pb.FilePart:
    if f.data is not None:
        return pb.FilePart(mime=f.mime, filename=f.filename, data=f.data)
    return pb.FilePart(mime=f.mime, filename=f.filename, url=f.url)


def _pb_part(part: m.Part) -> pb.Part:
    c = part.content
    if isinstance(c, m.Text):
        return pb.Part(id=part.id, text=pb.TextPart(text=c.text, synthetic=c.synthetic, ignored=c.ignored))
    if isinstance(c, m.File):
        return pb.Part(id=part.id, file=_pb_file(c))
    if isinstance(c, m.Reasoning):
        return pb.Part(id=part.id, reasoning=pb.ReasoningPart(text=c.text, signature=c.signature,
                                                              redacted_data=c.redacted_data))
    if isinstance(c, m.Compaction):
        return pb.Part(id=part.id, compaction=pb.CompactionPart(auto=c.auto, overflow=c.overflow,
                                                                tail_start_id=c.tail_start_id))
    if isinstance(c, m.Tool):
        return pb.Part(id=part.id, tool=pb.ToolPart(call_id=c.call_id, tool=c.tool, state=pb.ToolState(
            status=_STATUS_TO_PB[c.status], input_json=json.dumps(c.input, ensure_ascii=False),
            output=c.output, error=c.error, title=c.title, attachments=[_pb_file(a) for a in c.attachments],
            time_start_ms=c.time_start_ms, time_end_ms=c.time_end_ms, time_compacted_ms=c.time_compacted_ms)))
    if isinstance(c, m.StepStart):
        return pb.Part(id=part.id, step_start=pb.StepStartPart(snapshot=c.snapshot))
    if isinstance(c, m.StepFinish):
        return pb.Part(id=part.id, step_finish=pb.StepFinishPart(reason=c.reason, tokens=_pb_usage(c.tokens),
                                                                 cost=c.cost))
    if isinstance(c, m.Subtask):  # replayed by Compact's continue message after an overflow
        return pb.Part(id=part.id, subtask=pb.SubtaskPart(prompt=c.prompt, description=c.description,
                                                          agent=c.agent))
    if isinstance(c, m.Agent):
        return pb.Part(id=part.id, agent=pb.AgentPart(name=c.name))
    raise TypeError(f"no wire form for {type(c).__name__}")  # the core only creates the kinds above


def persist_part(p) -> pb.PersistPart:
    """An assemble.Persist as the response's PersistPart."""
    return pb.PersistPart(message_id=p.message_id, part=_pb_part(p.part))


def message_to_pb(msg: m.Message) -> pb.Message:
    out = pb.Message(
        id=msg.id, role=_ROLE_TO_PB[msg.role], parts=[_pb_part(p) for p in msg.parts],
        time_created_ms=msg.time_created_ms, time_completed_ms=msg.time_completed_ms,
        usage=_pb_usage(msg.usage), model_id=msg.model_id, provider_id=msg.provider_id,
        summary=msg.summary, parent_id=msg.parent_id, agent=msg.agent,
    )
    if msg.error is not None:
        out.error.name, out.error.message = msg.error.name, msg.error.message
    return out


def token_count(pair) -> pb.TokenCount:
    tokens, method = pair
    return pb.TokenCount(tokens=tokens, method=method)


def compact_edit(edit) -> pb.CompactEdit:
    from ..compact import edits as ed

    if isinstance(edit, ed.InsertMessage):
        return pb.CompactEdit(insert=pb.InsertMessage(after_id=edit.after_id, message=message_to_pb(edit.message)))
    if isinstance(edit, ed.SetTailStart):
        return pb.CompactEdit(set_tail_start=pb.SetTailStart(message_id=edit.message_id,
                                                             tail_start_id=edit.tail_start_id))
    if isinstance(edit, ed.ReplaceToolOutput):
        return pb.CompactEdit(replace_output=pb.ReplaceToolOutput(part_id=edit.part_id, output=edit.output))
    return pb.CompactEdit(mark_compacted=pb.MarkCompacted(part_ids=edit.part_ids,
                                                          time_compacted_ms=edit.time_compacted_ms))


def figures(r) -> dict:
    """A measure.Measurement as the fields of Figures, which MeasureResponse shares."""
    return dict(
        body_bytes=r.body_bytes,
        estimate=token_count(r.estimate),
        normalized=token_count(r.normalized),
        raw=token_count(r.raw),
        extra=r.extra,
        tools=r.tools,
        tail=r.tail,
        overhead=r.overhead,
        exact=token_count(r.exact) if r.exact else None,
        exact_for_model=r.exact_for_model,
        usable=r.usable,
        limit=r.limit,
        reported=r.reported,
        overflow=r.overflow,
        has_baseline=r.has_baseline,
        projected=r.projected,
        mid_tool_round_trip=r.mid_tool_round_trip,
        should_compact=r.should_compact,
        max_output_tokens=r.max_output_tokens,
        output_tokens=r.output_tokens,
        media_count=min(r.media_count, _INT32_MAX),  # 200,000 PDFs of 10,000 pages overflowed it
        calibrated=token_count(r.calibrated),
        self_calibrated=token_count(r.self_calibrated),
        calibration_factor=r.calibration_factor,
        calibration_anchor=r.calibration_anchor,
        projected_calibrated=r.projected_calibrated,
        projected_self_calibrated=r.projected_self_calibrated,
        projected_exact=r.projected_exact,
        compaction_figure=r.compaction_figure,
        decision=token_count(r.decision),
        provider_management=_provider_management(r.provider_management),
    )


def _provider_management(o) -> pb.ProviderManagement | None:
    """A provider_management.Outlook; None (the field unset) when the option is off."""
    if not o.strategy:
        return None
    return pb.ProviderManagement(strategy=o.strategy, trigger=o.trigger, clears=o.clears, relied_on=o.relied_on)


def cache_report(r) -> pb.CacheReport | None:
    """An assemble.Report; None (the field unset) when nothing was compared."""
    if r is None:
        return None
    return pb.CacheReport(compared=True, prefix_kept=r.prefix_kept, segment=r.segment, index=r.index,
                          cause=r.cause, rewrite=token_count(r.rewrite), reused_elements=r.reused_elements,
                          resolution=r.resolution)


# ---- core results -> responses ---------------------------------------------------------------

def measure_response(r: assemble.Assembled) -> pb.MeasureResponse:
    """A step evaluated without its body's JSON."""
    return pb.MeasureResponse(**figures(r.measurement), cache_state=r.cache_state,
                              cache_report=cache_report(r.report))


def assemble_wire(r: assemble.Assembled) -> bytes:
    """assemble_response(r).SerializeToString(), the body copied once. The body is field 1, which
    the encoder writes first: its entry, then the other fields' serialization, are the same
    bytes (an empty body has no entry)."""
    rest = assemble_response(r, with_body=False).SerializeToString()
    if not r.body:
        return rest
    return b"".join((_BODY_KEY, varint_bytes(len(r.body)), r.body, rest))


_BODY_KEY = varint_bytes(pb.AssembleResponse.BODY_FIELD_NUMBER << 3 | native.WIRE_LEN)  # the body entry's tag


def assemble_response(r: assemble.Assembled, with_body: bool = True) -> pb.AssembleResponse:
    measured = r.measurement
    return pb.AssembleResponse(
        body=r.body if with_body else b"",
        body_bytes=measured.body_bytes,
        estimate=token_count(measured.estimate),
        breakpoints=[pb.Breakpoint(location=b.location, segment=b.segment, prefix_bytes=b.prefix_bytes,
                                   prefix_sha256=b.prefix_sha256) for b in r.breakpoints],
        pruned_part_ids=r.pruned_part_ids,
        media_stripped=r.media_stripped,
        injected=r.injected,
        over_payload_limit=r.over_payload_limit,
        guard_tripped=r.guard_tripped,
        environment_details=r.environment_details,
        output_tokens=measured.output_tokens,
        figures=pb.Figures(**figures(measured)),
        cache_state=r.cache_state,
        cache_report=cache_report(r.report),
        persist=[persist_part(p) for p in r.persist],
        tool_names=r.tool_names,
        headers=r.headers,
    )


_OUTCOMES = {
    compact.COMPACTED: pb.COMPACT_OUTCOME_COMPACTED,
    compact.INSUFFICIENT: pb.COMPACT_OUTCOME_INSUFFICIENT,
    compact.CONTEXT_OVERFLOW: pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW,
    compact.NOTHING_TO_DO: pb.COMPACT_OUTCOME_NOTHING_TO_DO,
}


def compact_response(r: compact.CompactResult) -> pb.CompactResponse:
    out = pb.CompactResponse(
        outcome=_OUTCOMES[r.outcome], tail_start_id=r.tail_start_id or "",
        summarized_ids=r.summarized_ids, pruned_part_ids=r.pruned_part_ids,
        under_limit=r.under_limit, tokens_before=r.tokens_before, tokens_after=r.tokens_after,
        limit=r.limit, attempts=r.attempts, backend=r.backend or "", fell_back=r.fell_back,
        fallback_reason=r.fallback_reason or "", chunked=r.chunked,
        edits=[compact_edit(e) for e in r.edits], omittable_ids=r.omittable_ids,
        decision_method=r.decision_method,
    )
    if r.summary is not None:
        out.summary.CopyFrom(message_to_pb(r.summary))
    if r.continue_message is not None:
        out.continue_message.CopyFrom(message_to_pb(r.continue_message))
    if r.retention is not None:
        out.retention.CopyFrom(pb.Retention(items=r.retention.items, retained=r.retention.retained,
                                            ratio=r.retention.ratio, carried=r.retention.carried,
                                            carried_kept=r.retention.carried_kept))
    return out


def prune_response(r, reason: int) -> pb.PruneResponse:
    """A prune.PruneResult; reason is the request's PruneReason, echoed as it came."""
    return pb.PruneResponse(part_ids=r.part_ids, tokens_freed=r.tokens_freed, acted=r.acted,
                            stopped_by=r.stopped_by, reason=reason, tokens_scanned=r.tokens_scanned, fits=r.fits)


def truncate_response(r: truncation.TruncationResult) -> pb.TruncateToolOutputResponse:
    return pb.TruncateToolOutputResponse(
        content=r.content, truncated=r.truncated, output_id=r.output_id or "",
        removed_lines=r.removed_lines, removed_bytes=r.removed_bytes, cut_by=r.cut_by or "")


def read_response(r: truncation.ReadResult) -> pb.ReadTruncatedResponse:
    return pb.ReadTruncatedResponse(text=r.text, total_lines=r.total_lines, offset=r.offset,
                                    lines=r.lines, eof=r.eof)
