"""Builds a provider request from a conversation: shared by Measure and Assemble, so the bytes
Measure reports are the bytes Assemble emits."""
from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field

from . import breakpoints, history, model as m, native, prefix, prune, system_prompt
from .config import Config
from .limits import NO_DEADLINE, Deadline
from .lowering import MediaLedger, lower, to_model_messages
from .lowering.lowered import Lowered
from .lowering.neutral import attachment_note


@dataclass(slots=True)
class Guard:
    """What the payload guard did to a request (docs/design.md §6, "Payload guard")."""
    tripped: bool = False  # the body as first built exceeded REQUEST_PRUNE_BYTES
    pruned_part_ids: list = field(default_factory=list)  # the payload-limit prune's parts
    media_stripped: int = 0  # historical media turned into attachment notes
    conversation: m.Conversation | None = None  # what is sent instead, when anything changed


@dataclass(slots=True)
class Built:
    lowered: Lowered
    ledger: MediaLedger
    lengths: dict  # id(element) -> (utf8 bytes, utf16 units) of each system/message element
    breakpoints: list  # breakpoints.Breakpoint, with prefix hashes
    prefix_chain: dict = None  # (kind, index) -> prefix digest at every element, when hashed
    # id(element) -> JSON text of system/message elements already serialized (by the prefix
    # hashing; elements a marker changed afterwards are left out)
    texts: dict = field(default_factory=dict)
    guard: Guard = field(default_factory=Guard)  # set by measure.evaluate
    digests: prefix.Digests | None = None  # set by measure.evaluate when hashed
    change: prefix.Change | None = None  # since the previous request's digests, when given

    def units(self, elements: list) -> list:
        """UTF-16 units of each element, media and opaque values counted as placeholders."""
        saved = self.ledger.saved_by
        return [self.lengths[id(e)][1] - saved.get(id(e), 0) for e in elements]

    def body_bytes(self) -> int:
        """Exact UTF-8 size of the body JSON, reusing the per-element walk."""
        body = self.lowered.body
        held = []
        for parent, key in self.lowered.lists:
            held.append((parent, key, parent[key]))
            parent[key] = []
        try:
            total = native.json_size(body)
        finally:
            for parent, key, items in held:
                parent[key] = items
        for _, _, items in held:
            if items:
                total += sum(self.lengths[id(e)][0] for e in items) + len(items) - 1
        return total

    def element_text(self, element) -> str:
        """The JSON text of a system or message element, serialized once per build."""
        text = self.texts.get(id(element))
        if text is None:
            text = self.texts[id(element)] = native.json_text(element)
        return text

    def body_json(self) -> bytes:
        """The body's JSON; element lists are spliced in from element_text, so the elements the
        prefix hashing serialized are not serialized again."""
        body = self.lowered.body
        held = []
        for n, (parent, key) in enumerate(self.lowered.lists):
            held.append((parent, key, parent[key]))
            parent[key] = f"\x00{_SPLICE_TAG}{n}"  # no other string of the skeleton holds a NUL + tag
        try:
            text = native.json_text(body)
        finally:
            for parent, key, items in held:
                parent[key] = items
        for n, (_, _, items) in enumerate(held):
            spliced = "[" + ",".join(self.element_text(e) for e in items) + "]"
            text = text.replace(native.json_text(f"\x00{_SPLICE_TAG}{n}"), spliced, 1)
        return text.encode()


# marks where body_json splices each element list into the serialized skeleton
_SPLICE_TAG = secrets.token_hex(8)


def strip_historical_media(messages: list) -> tuple:
    """Media before the last user message with a real part become notes, once a summary exists."""
    if not any(x.role == m.ASSISTANT and x.summary and x.finished for x in messages):
        return messages, 0
    cut = history.last_index(messages, lambda x: x.role == m.USER and any(
        not (isinstance(p.content, m.Text) and p.content.synthetic) for p in x.parts))
    sent = {x.id for x in history.project(messages)}  # what is not sent needs no stripping
    stripped, out = 0, []
    for i, msg in enumerate(messages):
        if i >= cut or msg.id not in sent:
            out.append(msg)
            continue
        parts, changed = [], False
        for p in msg.parts:
            c = p.content
            if isinstance(c, m.File) and c.is_media:
                parts.append(m.Part(p.id, m.Text(attachment_note(c), synthetic=True)))
                stripped += 1
                changed = True
            elif isinstance(c, m.Tool) and any(a.is_media for a in c.attachments):
                stripped += sum(a.is_media for a in c.attachments)
                parts.append(m.Part(p.id, dataclasses.replace(
                    c, attachments=[a for a in c.attachments if not a.is_media])))
                changed = True
            else:
                parts.append(p)
        out.append(dataclasses.replace(msg, parts=parts) if changed else msg)
    return out, stripped


def payload_guard(conv: m.Conversation, body_bytes: int, settings: m.CompactionSettings, cfg: Config,
                  now_ms: int = 0, model: m.Model | None = None, deadline: Deadline = NO_DEADLINE) -> Guard:
    """The payload guard, one step of every RPC that sizes a body (Measure, Assemble): a body
    over REQUEST_PRUNE_BYTES runs the payload-limit prune (parts marked compacted at now_ms,
    default now) and strips historical media; Guard.conversation is then what to build
    instead. A body still over is sent anyway (the caller says so)."""
    if body_bytes <= cfg.assemble.request_prune_bytes:
        return Guard()
    pruned = prune.prune(conv, prune.PAYLOAD_LIMIT, settings, cfg, model=model, deadline=deadline).part_ids
    shrunk = prune.apply(conv, pruned, now_ms or time.time_ns() // 1_000_000) if pruned else conv
    messages, stripped = strip_historical_media(shrunk.messages)
    if not (pruned or stripped):
        return Guard(tripped=True)
    return Guard(True, pruned, stripped, dataclasses.replace(shrunk, messages=messages))


def lower_request(conv: m.Conversation, mdl: m.Model, tools: list, system: m.SystemPrompt,
                  prompt_dir: str, placeholders: bool = False,
                  tools_disabled: bool = False) -> tuple[Lowered, MediaLedger]:
    messages = to_model_messages(history.project(conv.messages), mdl)
    ledger = MediaLedger(placeholders=placeholders)
    lowered = lower(
        mdl.provider,
        model_id=mdl.id,
        system=system_prompt.blocks(system, mdl, prompt_dir),
        messages=messages,
        tools=tools,
        max_output=0,
        ledger=ledger,
        session_id=conv.session_id,
        tools_disabled=tools_disabled,
    )
    return lowered, ledger


def build(conv: m.Conversation, mdl: m.Model, tools: list, system: m.SystemPrompt,
          prompt_dir: str = "", policy: breakpoints.Policy | None = None, max_markers: int = 4,
          auto_markers: int = 3, hashes: bool = False, tools_disabled: bool = False,
          marker_models: tuple = breakpoints.MARKER_MODELS, deadline: Deadline = NO_DEADLINE) -> Built:
    """Lowers the request and places its cache breakpoints (the auto policy unless hinted);
    with hashes, also the prefix hash at each breakpoint (costs a serialization pass).
    tools_disabled: the tools stay defined and the provider's "no tool use" choice is set.
    marker_models: the model ids (substrings) that take markers behind a gateway.
    deadline: checked between stages and every CHECK_EVERY elements of the loops here."""
    deadline.check("lowering")
    lowered, ledger = lower_request(conv, mdl, tools, system, prompt_dir, tools_disabled=tools_disabled)
    deadline.check("lowering")
    chosen = breakpoints.choose(lowered, mdl.provider, tools, policy or breakpoints.Policy(), max_markers,
                                auto_markers, mdl.id, marker_models)
    texts = {}
    chain = prefix.prefix_hashes(lowered, mdl.provider, chosen, texts, deadline) if hashes else None
    for element in breakpoints.place(lowered, mdl.provider, chosen):
        texts.pop(id(element), None)
    lengths = {}
    json_lengths = native.json_lengths
    for parent, key in lowered.lists:
        for i, e in enumerate(parent[key]):
            deadline.tick(i, "sizing the body")
            lengths[id(e)] = json_lengths(e)
    return Built(lowered, ledger, lengths, chosen, chain, texts)


def estimate_text(conv: m.Conversation, mdl: m.Model, tools: list, system: m.SystemPrompt,
                  prompt_dir: str = "", policy: breakpoints.Policy | None = None, max_markers: int = 4,
                  auto_markers: int = 3, marker_models: tuple = breakpoints.MARKER_MODELS) -> str:
    """The text the estimate stands for: system and messages as sent (cache markers included)
    with media and opaque state as placeholders, then the tool definitions."""
    lowered = estimate_lowered(conv, mdl, tools, system, prompt_dir, policy, max_markers, auto_markers,
                               marker_models)
    text = native.json_text(lowered.system + lowered.messages)
    if tools:
        text += native.json_text(tool_schema_list(tools))
    return text


def estimate_lowered(conv: m.Conversation, mdl: m.Model, tools: list, system: m.SystemPrompt,
                     prompt_dir: str = "", policy: breakpoints.Policy | None = None, max_markers: int = 4,
                     auto_markers: int = 3, marker_models: tuple = breakpoints.MARKER_MODELS) -> Lowered:
    """The lowered request whose elements estimate_text serializes (media as placeholders)."""
    lowered, _ = lower_request(conv, mdl, tools, system, prompt_dir, placeholders=True)
    breakpoints.place(lowered, mdl.provider, breakpoints.choose(lowered, mdl.provider, tools,
                                                                policy or breakpoints.Policy(),
                                                                max_markers, auto_markers, mdl.id, marker_models))
    return lowered


def tool_schema_list(tools: list) -> list:
    """What tool definitions count as: the JSON of [{name, description, inputSchema}]."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in tools]
