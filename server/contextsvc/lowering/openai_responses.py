"""OpenAI Responses body (POST /v1/responses), stateless: `store: false`, the whole history sent
as `input` items every step, no `previous_response_id`.

The system prompt goes as leading `developer` messages of `input`, one per block: what OpenAI
documents `instructions` to be ("a system (or developer) message inserted into the model's
context"), kept as elements of the one list every figure, digest and splice reads
(lowered.Lowered); `instructions` is a single string outside it.
"""
from __future__ import annotations

from .. import conversation as m, native
from ..deadline import NO_DEADLINE, Deadline
from . import media
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .neutral import (
    LEAD_USER_TEXT, MMedia, MProviderCompaction, MReasoning, MSpacer, MText, MToolCall, MToolResult,
)
from .openai_chat import OPENAI_MAX_TOOLS, cache_key
from .tool_ids import WORD, id_rule, wire_id, wire_name
from .tool_schema import as_2020_12, as_taken, object_root, with_array_items
from .wire_format import WireFormat


def _media(x: MMedia, ledger: MediaLedger) -> dict:
    src = media.source(FORMAT, x, ledger)
    if isinstance(src, str):  # the attachment note
        return {"type": "input_text", "text": src}
    if src.kind == media.DOCUMENT:
        part = {"type": "input_file", "filename": x.filename or "file.pdf"}
        if src.url:
            part["file_url"] = src.web_url(ledger)
        else:
            part["file_data"] = src.data_url(ledger)
        return part
    url = src.web_url(ledger) if src.url else src.data_url(ledger)
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _content(parts: list, ledger: MediaLedger, deadline: Deadline) -> list:
    out = []
    for c in parts:
        deadline.count("lowering")
        out.append({"type": "input_text", "text": c.text} if isinstance(c, MText) else _media(c, ledger))
    return out


def _reasoning(c: MReasoning, ledger: MediaLedger):
    """The reasoning item, carrying its encrypted state (ReasoningPart.redacted_data) back to the
    provider that wrote it; None for reasoning without one, which a stateless request cannot
    resume (and whose id OpenAI would look up and not find). No item id goes: with `store: false`
    an id is looked up in the provider's store and the request refused."""
    if not c.redacted:
        return None
    summary = [{"type": "summary_text", "text": c.text}] if c.text else []
    return {"type": "reasoning", "summary": summary, "encrypted_content": ledger.opaque(c.redacted)}


def _output(r: MToolResult, ledger: MediaLedger):
    """function_call_output.output: the text, or with the tool's media a list of parts."""
    if not r.media:
        return r.text
    parts = [{"type": "input_text", "text": r.text}] if r.text else []
    return parts + [_media(x, ledger) for x in r.media]


def _assistant_items(msg, ledger: MediaLedger, deadline: Deadline) -> list:
    """One item per piece, in order: reasoning, the text (consecutive text joined into one
    message), function calls."""
    items, text = [], []
    for c in msg.content:
        deadline.count("lowering")
        if isinstance(c, MSpacer):
            continue  # the spacer between signed reasoning blocks is Anthropic's
        if isinstance(c, MText):
            text.append(c.text)
            continue
        if text:
            items.append({"role": "assistant", "content": "".join(text)})
            text = []
        if isinstance(c, MReasoning):
            item = _reasoning(c, ledger)
            if item is not None:
                items.append(item)
        elif isinstance(c, MProviderCompaction):
            # verbatim, and counted as the text it is: it stands for the history the provider
            # compacted, which its window holds in some form (no id: store false refuses it)
            items.append({"type": "compaction", "encrypted_content": c.encrypted_content})
        elif isinstance(c, MToolCall):
            # arguments as JSON.stringify writes them
            items.append({"type": "function_call", "call_id": wire_id(FORMAT, c.call_id),
                          "name": wire_name(FORMAT, c.name), "arguments": native.json_text(c.input)})
    if text:
        items.append({"role": "assistant", "content": "".join(text)})
    return items


def _responses_schema(schema):
    """As OpenAI validates a function's parameters: arrays with items, an object root with
    properties, JSON Schema 2020-12 (tool_schema's doc)."""
    return as_2020_12(with_array_items(object_root(schema, properties=True)))


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False, deadline: Deadline = NO_DEADLINE) -> Lowered:
    system_items = [{"role": "developer", "content": s} for s in system]
    wire, roles, sources = [], [], []
    for msg in messages:
        if msg.role == "user":
            items = [("user", {"role": "user", "content": _content(msg.content, ledger, deadline)})]
        elif msg.role == "assistant":
            items = [("assistant", item) for item in _assistant_items(msg, ledger, deadline)]
        else:
            items = [("tool", {"type": "function_call_output", "call_id": wire_id(FORMAT, r.call_id),
                               "output": _output(r, ledger)})
                     for r in msg.content]
        for role, item in items:
            deadline.count("lowering")
            ledger.claim(item)
            wire.append(item)
            roles.append(role)
            sources.append([msg.source_id])
    open_with_user(wire, roles, sources, {"role": "user", "content": [{"type": "input_text", "text": LEAD_USER_TEXT}]})
    out = {"model": model_id, "input": system_items + wire, "max_output_tokens": max_output, "store": False}
    if tools:
        # strict: false, since OpenAI's default (true) refuses any schema with an optional property
        out["tools"] = [{"type": "function", "name": wire_name(FORMAT, t.name), "description": t.description,
                         "parameters": as_taken(t, ("responses",), _responses_schema), "strict": False}
                        for t in tools]
        if tools_disabled:
            out[FORMAT.tool_choice_key] = "none"  # tools stay defined (history may hold calls), none is called
    if session_id:
        out["prompt_cache_key"] = cache_key(session_id)  # routes the session to a warm cache
    return Lowered(out, system_items, wire, roles, sources, [(out, "input")], (out, "max_output_tokens"))


class Responses(WireFormat):
    """Caching is implicit (no markers); prompt_cache_key routes a session to a warm cache."""

    name = m.OPENAI_RESPONSES
    body = staticmethod(body)
    # call_id: 1 to 64 characters ("string_above_max_length" past 64), any visible ASCII
    ids = id_rule("!-~", 64)
    names = WORD  # function names: ^[a-zA-Z0-9_-]{1,64}$
    tool_choice_key = "tool_choice"
    max_tools = OPENAI_MAX_TOOLS
    accepted = {**media.WEB_IMAGES, "application/pdf": media.DOCUMENT}  # PDF as input_file
    fetched = frozenset(accepted)  # input_image.image_url and input_file.file_url take http(s) URLs
    implicit_cache = True
    compaction_items = True  # its server-side compaction's items go back in `input`
    # "In turn 2, any reasoning items from turn 1 are ignored and removed" (OpenAI's cookbook,
    # reasoning_items): a turn's encrypted reasoning is counted within it, then dropped
    drops_earlier_turns_reasoning = True
    context_strategy = "compaction"

    def opens_user_turn(self, messages: list, roles: list, i: int) -> bool:
        """Any user message: a tool's media go inside its function_call_output, so one after the
        outputs is typed (mid-run, or the "Continue" after a compaction), and OpenAI's turn is
        what follows the last user message ("include all reasoning items between the function
        call and the last user message"): the reasoning before it is dropped."""
        return roles[i] == "user"

    def turn_start(self, messages: list, roles: list, end: int) -> int:
        """After the last user message up to end, found in C (a turn of 600 steps is scanned at
        every step)."""
        if end < 0:
            return 0
        try:
            return end - roles[end::-1].index("user") + 1
        except ValueError:
            return 0

    def reasoning_items(self, messages: list, start: int, end: int) -> list:
        """As WireFormat's, by the items' types read in one pass."""
        types = [e.get("type") for e in messages[start:end + 1]]
        if "compaction" in types:
            cut = len(types) - types[::-1].index("compaction")
            types, start = types[cut:], start + cut
        return [start + k for k, kind in enumerate(types) if kind == "reasoning"]

    def is_compaction_item(self, element: dict) -> bool:
        return element.get("type") == "compaction"

    def carries_reasoning(self, element: dict) -> bool:
        """A reasoning item (its encrypted state)."""
        return element.get("type") == "reasoning"

    def context_management(self, mg, wire_names: dict) -> tuple:
        """Server-side compaction past the threshold (guides/compaction); no header needed."""
        return {"context_management": [{"type": mg.strategy, "compact_threshold": mg.trigger}]}, {}


FORMAT = Responses()
