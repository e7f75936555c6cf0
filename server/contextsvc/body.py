"""Builds a provider request from a conversation: shared by Measure and Assemble, so the bytes
Measure reports are the bytes Assemble emits."""
from __future__ import annotations

import copy
import dataclasses
import secrets
import time
from dataclasses import dataclass, field

from . import breakpoints, projection, conversation as m, native, prefix, prune, system_prompt
from .config import Config
from .deadline import NO_DEADLINE, Deadline
from .lowering import MediaLedger, lower, to_model_messages
from .lowering.lowered import Lowered, open_with_user
from .lowering.neutral import MMessage, MText, attachment_note
from .lowering.registry import FORMATS
from .lowering_memo import pruned_digest


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
        prefix hashing serialized are not serialized again, and the text is put together in one
        join (a megabyte history makes every copy count)."""
        body = self.lowered.body
        held = []
        for n, (parent, key) in enumerate(self.lowered.lists):
            held.append((parent, key, parent[key]))
            parent[key] = f"\x00{_SPLICE_TAG}{n}"  # no other string of the skeleton holds a NUL + tag
        try:
            skeleton = native.json_text(body)
        finally:
            for parent, key, items in held:
                parent[key] = items
        markers = [native.json_text(f"\x00{_SPLICE_TAG}{n}") for n in range(len(held))]
        pieces, done = [], 0
        for start, n in sorted((skeleton.index(marker), n) for n, marker in enumerate(markers)):
            pieces.append(skeleton[done:start])
            pieces += array_parts([self.element_text(e) for e in held[n][2]])
            done = start + len(markers[n])
        pieces.append(skeleton[done:])
        return "".join(pieces).encode()


def array_parts(texts: list) -> list:
    """The pieces of the JSON array of these element texts: "[", e0, ",", e1, ..., "]". One
    join of them copies each text once: a step's history is megabytes, and one astral character
    anywhere makes the whole text four bytes a character."""
    if not texts:
        return ["[]"]
    parts = [","] * (2 * len(texts) + 1)
    parts[1::2] = texts
    parts[0], parts[-1] = "[", "]"
    return parts


def array_text(texts: list) -> str:
    """The JSON array of these element texts, "[e0,e1,...]"."""
    return "".join(array_parts(texts))


# marks where body_json splices each element list into the serialized skeleton
_SPLICE_TAG = secrets.token_hex(8)


def strip_historical_media(messages: list) -> tuple:
    """Media before the last user message with a real part become notes, once a summary exists."""
    if not any(x.role == m.ASSISTANT and x.summary and x.finished for x in messages):
        return messages, 0
    cut = projection.last_index(messages, lambda x: x.role == m.USER and any(
        not (isinstance(p.content, m.Text) and p.content.synthetic) for p in x.parts))
    sent = {x.id for x in projection.project(messages)}  # what is not sent needs no stripping
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
                  now_ms: int = 0, model: m.Model | None = None, deadline: Deadline = NO_DEADLINE,
                  memo=None) -> Guard:
    """The payload guard, one step of every RPC that sizes a body (Measure, Assemble): a body
    over REQUEST_PRUNE_BYTES runs the payload-limit prune (parts marked compacted at now_ms,
    default now) and strips historical media; Guard.conversation is then what to build
    instead. A body still over is sent anyway (the caller says so). memo (memo.StepMemo): the
    prune's per-message validation and scans, as the Prune RPC keeps them."""
    if body_bytes <= cfg.assemble.request_prune_bytes:
        return Guard()
    pruned = prune.prune(conv, prune.PAYLOAD_LIMIT, settings, cfg, model=model, memo=memo,
                         deadline=deadline).part_ids
    shrunk = prune.apply(conv, pruned, now_ms or time.time_ns() // 1_000_000) if pruned else conv
    messages, stripped = strip_historical_media(shrunk.messages)
    if not (pruned or stripped):
        return Guard(tripped=True)
    if pruned:
        _keep_digests(conv.messages, shrunk.messages, pruned)
    return Guard(True, pruned, stripped, dataclasses.replace(shrunk, messages=messages,
                                                             lowering_memo=conv.lowering_memo))


def _keep_digests(before: list, after: list, part_ids) -> None:
    """Gives each message of after (prune.apply's copy of before) that prune copied the digest
    lowering_memo.pruned_digest derives from its original's, so the lowering memo still serves
    it from one step to the next. A message media stripping then changes is a new copy, with
    none."""
    wanted = set(part_ids)
    for old, new in zip(before, after):
        if new is not old and old.digest:
            new.digest = pruned_digest(old.digest, [p.id for p in new.parts if p.id in wanted])


def lower_request(conv: m.Conversation, mdl: m.Model, tools: list, system: m.SystemPrompt,
                  prompt_dir: str, placeholders: bool = False,
                  tools_disabled: bool = False, known: dict | None = None) -> tuple[Lowered, MediaLedger]:
    """The lowered request and its media ledger. With the lowering memo (conv.lowering_memo),
    each message's lowering is taken from the memo when seen before (by Message.digest), and
    known receives the (JSON text, lengths) of every element the memo holds, by id(element)."""
    projected = projection.project(conv.messages)
    memo = conv.lowering_memo
    if memo is not None and _memoizable(projected, mdl.provider):
        return _lower_memoized(projected, memo, conv, mdl, tools, system, prompt_dir, placeholders,
                               tools_disabled, known)
    messages = to_model_messages(projected, mdl)
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


def _memoizable(messages: list, provider: str) -> bool:
    """Whether each message lowers alone as it does in the whole request. Not so for media on
    Bedrock: its document names are made distinct across the request."""
    if provider != m.BEDROCK:
        return True
    for msg in messages:
        for p in msg.parts:
            c = p.content
            if (isinstance(c, m.File) and c.is_media) or (
                    isinstance(c, m.Tool) and any(a.is_media for a in c.attachments)):
                return False
    return True


def _piece(msg: m.Message, mdl: m.Model, placeholders: bool) -> tuple:
    """What one stored message lowers to alone (lowering_memo's piece): (elements, media_count, extra,
    saved_units, texts), elements a tuple of (role, element, saved units inside it), texts the
    (JSON text, lengths) of each element. The lead user message a format puts first stands for
    no stored message and is left out."""
    ledger = MediaLedger(placeholders=placeholders)
    low = lower(mdl.provider, model_id=mdl.id, system=[], messages=to_model_messages([msg], mdl), tools=[],
                max_output=0, ledger=ledger)
    saved = ledger.saved_by
    elements = tuple((role, e, saved.get(id(e), 0))
                     for role, e, ids in zip(low.roles, low.messages, low.sources) if ids)
    texts = tuple((native.json_text(e), native.json_lengths(e)) for _, e, _ in elements)
    return elements, ledger.media_count, ledger.extra, ledger.saved_units, texts


_LEADS: dict = {}  # provider -> the lead user message of its format (lowered.open_with_user)


def _lead(provider: str) -> dict:
    """The format's lead user message, a fresh copy."""
    lead = _LEADS.get(provider)
    if lead is None:
        low = lower(provider, model_id="", system=[], messages=[MMessage("assistant", [MText("x")], "x")],
                    tools=[], max_output=0, ledger=MediaLedger())
        assert low.sources[0] == [], "a body starting with the model's turn opens with the lead"
        lead = _LEADS[provider] = low.messages[0]
    return copy.deepcopy(lead)


def _lower_memoized(projected: list, memo, conv: m.Conversation, mdl: m.Model, tools: list,
                    system: m.SystemPrompt, prompt_dir: str, placeholders: bool, tools_disabled: bool,
                    known: dict | None) -> tuple[Lowered, MediaLedger]:
    """lower_request from memoized pieces: each message lowered alone (or taken from the memo),
    consecutive elements of one role joined where the format joins them, then the lead user
    message; the same body as lowering the whole request at once."""
    settings = (mdl.provider, mdl.id, placeholders)
    ledger = MediaLedger(placeholders=placeholders)
    lowered = lower(mdl.provider, model_id=mdl.id, system=system_prompt.blocks(system, mdl, prompt_dir),
                    messages=[], tools=tools, max_output=0, ledger=ledger, session_id=conv.session_id,
                    tools_disabled=tools_disabled)
    joined = FORMATS[mdl.provider].merged_key
    piece_keys = [(msg.digest, settings) if msg.digest else None for msg in projected]
    pieces = memo.get_many(piece_keys)
    # per element: its (JSON text, lengths) when it is one piece's element as it stands, or the
    # piece keys of the elements merged into it (their joined JSON is a memo entry of its own)
    elements, roles, sources, keys, saved, found = [], [], [], [], [], []
    for msg, pkey, piece in zip(projected, piece_keys, pieces):
        if piece is None:
            piece = _piece(msg, mdl, placeholders)
            if pkey is not None:
                memo.put(pkey, piece)
        parts, media_count, extra, saved_units, texts = piece
        ledger.media_count += media_count
        ledger.extra += extra
        ledger.saved_units += saved_units
        for j, (role, element, units) in enumerate(parts):
            key = (msg.digest, j) if pkey is not None else None
            if joined and elements and elements[-1]["role"] == element["role"]:
                last = elements[-1] = dict(elements[-1])
                last[joined] = last[joined] + element[joined]
                sources[-1] = sources[-1] + [msg.id]
                keys[-1] = keys[-1] + (key,) if keys[-1] is not None and key is not None else None
                found[-1] = None
                saved[-1] += units
                continue
            elements.append(element)
            roles.append(role)
            sources.append([msg.id])
            keys.append((key,) if key is not None else None)
            found.append(texts[j])
            saved.append(units)
    if roles and roles[0] != "user":
        open_with_user(elements, roles, sources, _lead(mdl.provider))
        keys.insert(0, None)
        found.insert(0, None)
        saved.insert(0, 0)
    for e, units in zip(elements, saved):
        if units:
            ledger.saved_by[id(e)] = units
    _attach(lowered, elements)
    lowered.roles[:] = roles
    lowered.sources[:] = sources
    if known is not None:
        merged = [(settings, key) if text is None and key is not None else None for text, key in zip(found, keys)]
        json_text, json_lengths = native.json_text, native.json_lengths
        for e, text, ekey, entry in zip(elements, found, merged, memo.get_many(merged)):
            if text is None and ekey is not None:
                text = entry
                if text is None:
                    text = (json_text(e), json_lengths(e))
                    memo.put(ekey, text)
            if text is not None:
                known[id(e)] = text
    return lowered, ledger


def _attach(lowered: Lowered, elements: list) -> None:
    """Puts the message elements into a body lowered without messages: its messages list, and a
    list that holds the system elements and then the messages (Chat Completions) too."""
    lowered.messages.extend(elements)
    for parent, key in lowered.lists:
        items = parent[key]
        if items is not lowered.messages and items is not lowered.system:
            items.extend(elements)


def _replace_element(lowered: Lowered, index: int, element) -> None:
    """Puts element in place of message element index, in every list of the body that holds it."""
    old = lowered.messages[index]
    lowered.messages[index] = element
    for parent, key in lowered.lists:
        items = parent[key]
        if items is not lowered.messages and items is not lowered.system:
            items[len(lowered.system) + index] = element
    return old


def place(lowered: Lowered, ledger: MediaLedger, provider: str, chosen: list, memoized: bool,
          forget: tuple = ()) -> list:
    """breakpoints.place; with memoized elements (shared with the memo and other requests, never
    to be changed), each message element a marker goes on is first replaced by a copy, and the
    replaced one's id is dropped from the dicts in forget (keyed by id(element)) while it is
    alive: a later object could take its id."""
    if memoized:
        for b in chosen:
            if b.kind != "message":
                continue
            old = lowered.messages[b.index]
            new = copy.deepcopy(old)
            _replace_element(lowered, b.index, new)
            units = ledger.saved_by.pop(id(old), 0)
            if units:
                ledger.saved_by[id(new)] = units
            for d in forget:
                d.pop(id(old), None)
    return breakpoints.place(lowered, provider, chosen)


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
    known = {}  # id(element) -> (JSON text, lengths) of the elements the lowering memo holds
    lowered, ledger = lower_request(conv, mdl, tools, system, prompt_dir, tools_disabled=tools_disabled,
                                    known=known)
    deadline.check("lowering")
    chosen = breakpoints.choose(lowered, mdl.provider, tools, policy or breakpoints.Policy(), max_markers,
                                auto_markers, mdl.id, marker_models)
    texts = {k: v[0] for k, v in known.items()}
    chain = prefix.prefix_hashes(lowered, mdl.provider, chosen, texts, deadline) if hashes else None
    for element in place(lowered, ledger, mdl.provider, chosen, conv.lowering_memo is not None, (known, texts)):
        texts.pop(id(element), None)
    lengths = {}
    json_lengths = native.json_lengths
    for parent, key in lowered.lists:
        for i, e in enumerate(parent[key]):
            deadline.tick(i, "sizing the body")
            found = known.get(id(e))
            lengths[id(e)] = found[1] if found is not None else json_lengths(e)
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
    lowered, ledger = lower_request(conv, mdl, tools, system, prompt_dir, placeholders=True)
    place(lowered, ledger, mdl.provider, breakpoints.choose(lowered, mdl.provider, tools,
                                                            policy or breakpoints.Policy(),
                                                            max_markers, auto_markers, mdl.id, marker_models),
          conv.lowering_memo is not None)
    return lowered


def tool_schema_list(tools: list) -> list:
    """What tool definitions count as: the JSON of [{name, description, inputSchema}]."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in tools]
