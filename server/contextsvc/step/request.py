"""The request (docs/design.md §6): the lowered pieces put together with their system blocks,
lead message and cache markers; every element's lengths; the prefix digests; the body's exact
size without building it, and its JSON when asked (Assemble). Measure and Assemble read the same
Request, so the bytes Measure reports are the bytes Assemble emits.
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import secrets
import sys
from array import array
from dataclasses import dataclass

from .. import breakpoints, conversation as m, model_ids, native, prefix, projection, provider_management
from ..deadline import NO_DEADLINE, Deadline
from ..errors import BadInput
from ..lowering import MediaLedger
from ..lowering.lowered import Lowered, copied
from ..lowering.registry import FORMATS
from ..memo import BODY, STRIPPED, SYSTEM, TOOL_JSON, Memo
from ..positions import positions
from .pieces import Columns, element_entry, lower_request
from .plan import Plan


_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


@dataclass(slots=True)
class Request:
    """The request as it would be sent: the lowered body with its markers, every element's
    lengths, and (when hashed) its prefix digests and what changed since the previous request.

    Each system and message element's entry: (JSON text, (utf8 bytes, utf16 units), text
    profile), the memo's pieces.element_entry (a tuple) or a list of this build's, its lengths
    measured and its text and profile None until asked."""
    lowered: Lowered
    ledger: MediaLedger
    message_entries: list  # the entry of each element of lowered.messages, in order
    system_entries: dict  # id(element) -> the entry of each element of lowered.system
    breakpoints: list  # breakpoints.Breakpoint, with prefix hashes
    prefix_chain: prefix.Chain | None = None  # the prefix digest at every element, when hashed
    digests: prefix.Digests | None = None  # when hashed
    # the same request with media and opaque state as their placeholders (what the calibrated and
    # exact figures read), when it differs from lowered and a figure reads it
    estimated: Lowered | None = None
    change: prefix.Change | None = None  # since the previous request's digests, when given
    # body_bytes less its output-token cap's: fixed once built, while the cap may change
    _fixed_bytes: int | None = None
    # where the body's element list of an earlier step of the session is kept, and where this
    # one's goes (BODY): the PREFIX keys of the lowering's Resume, with the memo holding them
    memo: Memo | None = None
    resume: prefix.Resume | None = None
    # id(element) -> (JSON text, UTF-8 bytes) of each element of the body's tool list as the memo
    # keeps it (_tool_json), those a marker changed left out; and (dict, key) of that list
    tool_json: dict = dataclasses.field(default_factory=dict)
    tools_at: tuple = ()
    # the stored index of the last completed compaction's summary in the conversation it was built
    # from (projection.last_compaction), or -1: found once for every stage that reads it
    last_compaction: int = -1
    # with the memo: message_entries with their columns, the lowering's (step.pieces.Columns: the
    # texts and profiles of the entries this build made are filled in as they are made)
    columns: Columns | None = None
    # with the columns: the message elements this build made an entry for (the only ones whose
    # text or profile may be missing)
    _made: list | None = None
    _message_lengths: list | None = None  # without the columns: utf8_lengths of the messages, once read

    def _entries(self, elements: list) -> list:
        """The entries of a list of the body's elements: its messages, its system, or (Chat
        Completions) the one list holding both."""
        low = self.lowered
        if elements is low.messages:
            return self.message_entries
        n_system = len(low.system)
        system = list(map(self.system_entries.__getitem__, map(id, elements[:n_system])))
        if elements is low.system:
            return system
        assert len(elements) == n_system + len(low.messages) and (not low.messages or elements[n_system] is low.messages[0])
        return system + self.message_entries

    def utf8_lengths(self, elements: list) -> list | array:
        """UTF-8 bytes of each element's JSON (the body's messages, system, or both); the
        messages' read once per build (the body's size and Assemble's BODY entry read them), a
        list or array the caller leaves as it is."""
        if elements is not self.lowered.messages:
            return list(map(_FIRST, map(_SECOND, self._entries(elements))))
        if self.columns is not None:
            return self.columns.lengths
        if self._message_lengths is None:
            self._message_lengths = list(map(_FIRST, map(_SECOND, self.message_entries)))
        return self._message_lengths

    def wide(self, elements: list, indices: list | None = None) -> list:
        """UTF-8 bytes over UTF-16 units of each element's JSON (the body's messages, system, or
        both), or of those at indices: 0 for ASCII, one a character of Greek or Cyrillic, two of
        Devanagari, Thai, CJK or an emoji (step.scripts)."""
        lengths = self.utf8_lengths(elements)
        if elements is self.lowered.messages and self.columns is not None:
            units = self.columns.units
        else:
            units = list(map(_SECOND, map(_SECOND, self._entries(elements))))
        if indices is None:
            return list(map(operator.sub, lengths, units))
        return [lengths[i] - units[i] for i in indices]

    def units(self, elements: list) -> array:
        """UTF-16 units of each element (the body's messages, system, or both), media and opaque
        values counted as placeholders; an array the caller leaves as it is."""
        saved = self.ledger.saved_by
        if not saved and elements is self.lowered.messages and self.columns is not None:
            return self.columns.units
        units = list(map(_SECOND, map(_SECOND, self._entries(elements))))
        if saved:
            units = [u - saved.get(id(e), 0) for u, e in zip(units, elements)]
        return array("q", units)

    def body_bytes(self) -> int:
        """Exact UTF-8 size of the body JSON, reusing the per-element walk. After the build the
        body changes only in its output-token cap (set_max_output: a step sizes it at two caps
        and at its own): the rest is walked once."""
        parent, key = self.lowered.max_output_at
        if self._fixed_bytes is None:
            held = []
            for lists, name in self._held_lists():
                held.append((lists, name, lists[name]))
                lists[name] = []
            try:
                skeleton = native.json_size(self.lowered.body)
            finally:
                for lists, name, items in held:
                    lists[name] = items
            tools = self.tools_at[0][self.tools_at[1]] if self.tools_at else None
            elements = sum(sum(self._tool_lengths(items) if items is tools else self.utf8_lengths(items))
                           + len(items) - 1 for _, _, items in held if items)
            self._fixed_bytes = skeleton + elements - native.json_size(parent[key])
        return self._fixed_bytes + native.json_size(parent[key])

    def _held_lists(self) -> list:
        """(dict, key) of the element lists the body's size and JSON are put together from: the
        lowering's lists, then the tool list when the memo keeps its elements' JSON (tool_json)."""
        return [*self.lowered.lists, self.tools_at] if self.tools_at else self.lowered.lists

    def _tool_texts(self, tools: list) -> list:
        return [prefix.tool_text(e, self.tool_json) for e in tools]

    def _tool_lengths(self, tools: list) -> list:
        kept = self.tool_json
        return [kept[id(e)][1] if id(e) in kept else native.json_lengths(e)[0] for e in tools]

    def texts(self, elements: list) -> list:
        """The JSON text of each element (the body's messages, system, or both), serialized once
        per build; a list the caller leaves as it is."""
        entries = self._entries(elements)
        messages = elements is self.lowered.messages and self.columns is not None
        out = self.columns.texts if messages else list(map(_FIRST, entries))
        for i in self._missing(out, messages):
            out[i] = entries[i][0] = native.json_text(elements[i])  # a list of this build's
        return out

    def _missing(self, column: list, messages: bool) -> list:
        """The positions of None in a column of the entries: among those this build made, for
        the message elements' columns."""
        if not messages:
            return positions(column, None)
        return [i for i in self._made if column[i] is None]

    def profiles(self, elements: list) -> list:
        """native.text_profile of each element's text (the body's messages, system, or both):
        the memo's where it holds the element; a list the caller leaves as it is."""
        entries = self._entries(elements)
        messages = elements is self.lowered.messages and self.columns is not None
        out = self.columns.profiles if messages else list(map(_THIRD, entries))
        for i in self._missing(out, messages):
            entry = entries[i]  # a list of this build's
            if entry[0] is None:
                entry[0] = native.json_text(elements[i])
                if messages:
                    self.columns.texts[i] = entry[0]
            out[i] = entry[2] = native.text_profile(entry[0])
        return out

    def body_json(self) -> bytes:
        """The body's JSON; element lists are spliced in from texts(), so the elements the
        prefix hashing serialized are not serialized again. Each element is encoded alone and the
        bytes put together in one join: a megabyte history makes every copy count, and one astral
        character would make a joined text four bytes a character to copy and encode."""
        body = self.lowered.body
        held = []
        for n, (parent, key) in enumerate(self._held_lists()):
            held.append((parent, key, parent[key]))
            parent[key] = f"\x00{_SPLICE_TAG}{n}"  # no other string of the skeleton holds a NUL + tag
        try:
            skeleton = native.json_text(body)
        finally:
            for parent, key, items in held:
                parent[key] = items
        markers = [native.json_text(f"\x00{_SPLICE_TAG}{n}") for n in range(len(held))]
        n_lists = len(self.lowered.lists)  # the tool list, held after them, is no history
        longest = max(range(n_lists), key=lambda n: len(held[n][2]), default=-1)  # the history's
        pieces, done, history = [], 0, None
        for start, n in sorted((skeleton.index(marker), n) for n, marker in enumerate(markers)):
            pieces.append(skeleton[done:start].encode())
            items = held[n][2]
            texts = self.texts(items) if n < n_lists else self._tool_texts(items)
            if n == longest:
                history = (items, texts, sum(map(len, pieces)) + 1)  # ..., where its first element starts
                pieces += array_parts(self._list_pieces(texts), b"[", b",", b"]")
            else:
                pieces += array_parts(list(map(str.encode, texts)), b"[", b",", b"]")
            done = start + len(markers[n])
        pieces.append(skeleton[done:].encode())
        body = b"".join(pieces)
        if history is not None:
            self._keep_list(body, *history)
        return body

    def _list_pieces(self, texts: list) -> list:
        """Pieces whose join by commas is the UTF-8 of these element texts joined by commas. The
        elements whose text is the very object an earlier step of the session encoded into its
        body (BODY) are views of that body, a run of them one piece with its commas, rather than
        encoded again: most of a step's history."""
        earlier = self.resume.earlier(self.memo, BODY) if self.resume is not None else None
        if earlier is None:
            return list(map(str.encode, texts))
        k = min(len(texts), len(earlier.texts))
        view, lengths, pieces = memoryview(earlier.body), earlier.lengths, []
        run, at = 0, earlier.origin  # the first element of the run, where it starts in the earlier body
        for changed in itertools.chain(positions(list(map(operator.is_, texts[:k], earlier.texts)), False), (k,)):
            if changed > run:  # elements run..changed-1, and the commas between them
                end = at + sum(lengths[run:changed]) + changed - run - 1
                pieces.append(view[at:end])
                at = end + 1
            if changed < k:
                pieces.append(texts[changed].encode())
                at += lengths[changed] + 1
            run = changed + 1
        return pieces + list(map(str.encode, texts[k:]))

    def _keep_list(self, body: bytes, elements: list, texts: list, origin: int) -> None:
        """Keeps body's element list for the session's next step (BODY): the texts it was encoded
        from, where the first starts in body and each one's UTF-8 length (their entries')."""
        if self.resume is None or not self.resume.keeps(self.memo):
            return
        lengths = self.utf8_lengths(elements)
        end = origin + sum(lengths) + len(lengths) - 1  # where the list's closing bracket is
        if body[end:end + 1] != b"]":  # lengths that do not add up are never trusted with offsets
            return
        kept = _ListBytes(body, origin, lengths if isinstance(lengths, array) else array("q", lengths), texts)
        self.resume.keep(self.memo, BODY, kept, kept.charge())


def array_parts(texts: list, opening="[", comma=",", closing="]") -> list:
    """The pieces of the JSON array of these element texts (str, or their UTF-8 bytes with
    bytes punctuation): "[", e0, ",", e1, ..., "]". One join of them copies each text once: a
    step's history is megabytes."""
    if not texts:
        return [opening + closing]
    parts = [comma] * (2 * len(texts) + 1)
    parts[1::2] = texts
    parts[0], parts[-1] = opening, closing
    return parts


def array_text(texts: list) -> str:
    """The JSON array of these element texts, "[e0,e1,...]"."""
    return "".join(array_parts(texts))


@dataclass(frozen=True, slots=True)
class _ListBytes:
    """The element list of a body Assemble built (the BODY entry): its first element starts at
    body[origin], each is lengths[i] UTF-8 bytes and a comma apart from the next; texts are the
    str objects they were encoded from."""
    body: bytes
    origin: int
    lengths: array
    texts: list

    def charge(self) -> int:
        # the texts are the memo's own entries' (or this step's): only the containers are charged
        return sys.getsizeof(self.body) + sys.getsizeof(self.lengths) + sys.getsizeof(self.texts)


# marks where body_json splices each element list into the serialized skeleton
_SPLICE_TAG = secrets.token_hex(8)


def _replace_element(lowered: Lowered, index: int, element) -> None:
    """Puts element in place of message element index, in every list of the body that holds it."""
    old = lowered.messages[index]
    lowered.messages[index] = element
    for parent, key in lowered.lists:
        items = parent[key]
        if items is not lowered.messages and items is not lowered.system:
            items[len(lowered.system) + index] = element
    return old


def place(lowered: Lowered, ledger: MediaLedger, provider: str, chosen: list, memoized: bool) -> list:
    """breakpoints.place; with memoized elements (shared with the memo and other requests, never
    to be changed), each message element a marker goes on is first replaced by a copy."""
    if memoized:
        for b in chosen:
            if b.kind != "message":
                continue
            old = lowered.messages[b.index]
            new = copied(old)
            _replace_element(lowered, b.index, new)
            units = ledger.saved_by.pop(id(old), 0)
            if units:
                ledger.saved_by[id(new)] = units
    return breakpoints.place(lowered, provider, chosen)


def build(conv: m.Conversation, plan: Plan, memo: Memo | None = None,
          deadline: Deadline = NO_DEADLINE, points: list | None = None, digests: list | None = None) -> Request:
    """Lowers the request (step.pieces) and places its cache breakpoints (the auto policy unless
    hinted); with plan.hashes, also the prefix digest at every element (a serialization pass)
    and, with plan.previous, what changed since. deadline: checked between stages and every
    CHECK_EVERY elements of the loops here. points: projection.compaction_points(conv.messages),
    and digests: memo.message_prefix_digests(conv.messages), when the caller has them."""
    mdl = plan.model
    deadline.check("lowering")
    if points is None:
        points = projection.compaction_points(conv.messages)
    pieces = lower_request(conv, plan, memo, deadline, points, digests)
    lowered, ledger = pieces.lowered, pieces.ledger
    lowered.body.update(provider_management.body_fields(plan.management, plan.fmt, plan.tools)[0])
    if not lowered.messages:  # every provider refuses a request without a message
        raise BadInput("conversation.messages", "nothing to send: every message lowers to no content "
                                                "(ignored or blank text, dropped errored replies)")
    deadline.check("lowering")
    chosen = _choose(lowered, plan, conv)
    # the memo's entries of the message elements, None for the others (measured below)
    columns = pieces.columns
    entries = columns.entries if columns is not None else [None] * len(lowered.messages)
    hashed = {}  # id(element) -> JSON text the prefix hashing made, of elements without an entry
    tool_json, tools_at = _tool_json(lowered, plan, memo)
    previous = plan.previous  # its last element may come back with blocks appended (prefix.compare)
    extend = (previous.elements - 1, previous.last_blocks) if previous is not None and previous.last_blocks else None
    chain = prefix.prefix_hashes(lowered, mdl.provider, chosen, entries, hashed, deadline, memo, pieces.resume,
                                 tool_json, extend) if plan.hashes else None
    for element in place(lowered, ledger, mdl.provider, chosen, pieces.shared):
        hashed.pop(id(element), None)  # a marker changed it
    for b in chosen:
        if b.kind == "tools" and tool_json:  # a marker changed it, or follows it (Bedrock's own block)
            tool_json.pop(id(tools_at[0][tools_at[1]][b.index]), None)
        if b.kind == "message":  # a marker changed it (or a copy with the marker replaced it)
            if columns is not None:
                columns.set(b.index, None)
            else:
                entries[b.index] = None
    made = columns.missing() if columns is not None else positions(entries, None)
    json_lengths = native.json_lengths
    for n, i in enumerate(made):
        deadline.tick(n, "sizing the body")
        e = lowered.messages[i]
        entry = [hashed.get(id(e)), json_lengths(e), None]
        if columns is not None:
            columns.set(i, entry)
        else:
            entries[i] = entry
    system = {id(e): _system_entry(e, hashed, memo) for e in lowered.system}
    request = Request(lowered, ledger, entries, system, chosen, chain, memo=memo, resume=pieces.resume,
                      last_compaction=projection.last_compaction(conv.messages, points, deadline), columns=columns,
                      _made=made if columns is not None else None, tool_json=tool_json, tools_at=tools_at)
    mc = plan.cfg.measure
    if (mc.calibrated_figures or plan.exact) and (ledger.media_count or ledger.saved_units or ledger.extra):
        request.estimated = estimate_lowered(conv, plan, memo, points)
    deadline.check("measure")
    if plan.hashes:
        request.digests = prefix.digests(lowered, chain, conv.messages, plan.fmt, request.last_compaction,
                                         pieces.pruned, prefix.model_digest(plan.model.provider, plan.model.id))
        if plan.previous is not None:
            request.change = prefix.compare(plan.previous, request.digests)
    return request


def _system_entry(element: dict, hashed: dict, memo: Memo | None) -> list:
    """A system element's entry (a list of this build's; see Request): with the memo, whole and
    kept (SYSTEM) under the element's shape (_shape: a system prompt of many kilobytes, the same
    at every step, its marker included); else its lengths, the rest left for when it is asked."""
    shape = _shape(element) if memo is not None else None
    if shape is None:
        return [hashed.get(id(element)), native.json_lengths(element), None]
    key = (SYSTEM, shape)
    kept = memo.get(key)
    if kept is None:
        kept = element_entry(element)
        memo.put(key, kept)
    return list(kept)


def _shape(value, depth: int = 0):
    """A hashable value equal for two JSON values exactly when their JSON texts are equal (keys
    in their order, each scalar with its type: true is not 1), for the few small dicts and lists
    of a system element; None for anything else."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return (kind, value)
    if depth > 4:
        return None
    if kind is dict or kind is list:
        parts = tuple(_shape(v, depth + 1) for v in value.values()) if kind is dict else \
            tuple(_shape(v, depth + 1) for v in value)
        if None in parts:
            return None
        return (kind, tuple(value) if kind is dict else len(value), parts)
    return None


def _tool_json(lowered: Lowered, plan: Plan, memo: Memo | None) -> tuple[dict, tuple]:
    """({id(element): (JSON text, UTF-8 bytes)} of the body's tool list, (dict, key) of that list)
    before the markers are placed, from the memo for the same definitions lowered for the same
    provider and model, disabled or not (Memo.for_objects); ({}, ()) without the memo or tools."""
    if memo is None or not plan.tools:
        return {}, ()
    body = lowered.body
    tools = FORMATS[plan.model.provider].tool_list(body)
    at = next(((parent, key) for parent in (body, *(v for v in body.values() if isinstance(v, dict)))  # Bedrock's
               for key, value in parent.items() if value is tools), None)  # toolConfig.tools
    if at is None or not tools:
        return {}, ()

    def compute() -> tuple:
        json = tuple((native.json_text(e), native.json_lengths(e)[0]) for e in tools)
        return json, sum(sys.getsizeof(text) + 100 for text, _ in json)

    json = memo.for_objects(TOOL_JSON, plan.tools, (plan.model.provider, plan.model.id, plan.tools_disabled), compute)
    if len(json) != len(tools):  # never, as the lowering goes: the same definitions, the same list
        json = compute()[0]
    return dict(zip(map(id, tools), json)), at


def _choose(lowered: Lowered, plan: Plan, conv: m.Conversation) -> list:
    a = plan.cfg.assemble
    # where a hint on a message sent as nothing finds its neighbours; read only for such hints
    message_ids = [x.id for x in conv.messages] if any(h.message_id for h in plan.policy.hints) else []
    return breakpoints.choose(lowered, plan.model.provider, plan.tools, plan.policy, a.anthropic_max_breakpoints,
                              a.anthropic_auto_breakpoints, plan.model.id, a.marker_models, message_ids)


def estimate_text(conv: m.Conversation, plan: Plan, memo: Memo | None = None) -> str:
    """The text the estimate stands for: system and messages as sent (cache markers included)
    with media and opaque state as placeholders, then the tool definitions."""
    lowered = estimate_lowered(conv, plan, memo)
    text = native.json_text(lowered.system + lowered.messages)
    if plan.tools:
        text += native.json_text(tool_schema_list(plan.tools))
    return text


def estimate_lowered(conv: m.Conversation, plan: Plan, memo: Memo | None = None,
                     points: list | None = None) -> Lowered:
    """The lowered request whose elements estimate_text serializes (media as placeholders);
    points: projection.compaction_points(conv.messages), when the caller has them."""
    pieces = lower_request(conv, dataclasses.replace(plan, placeholders=True), memo, points=points)
    chosen = _choose(pieces.lowered, plan, conv)
    place(pieces.lowered, pieces.ledger, plan.model.provider, chosen, pieces.shared)
    lowered, columns = pieces.lowered, pieces.columns
    if columns is not None:  # what the memo kept of each element, but those a marker changed
        lowered.known = [None if p is None else (p, b - u)
                         for p, b, u in zip(columns.profiles, columns.lengths, columns.units)]
        for b in chosen:
            if b.kind == "message":
                lowered.known[b.index] = None
    if model_ids.strips_earlier_thinking(plan.model.id):
        _strip_earlier_reasoning(lowered, plan.fmt, columns.texts if columns is not None else None, memo)
    return lowered


def _strip_earlier_reasoning(lowered: Lowered, fmt, texts: list | None = None, memo: Memo | None = None) -> None:
    """The model's reasoning before the last user turn taken out, as its provider takes it out of
    the request it counts (model_ids.strips_earlier_thinking): Claude Sonnet 4.5's thinking of
    earlier turns, figured as sent, read a session's requests at three times what Anthropic
    counted and compacted them at a third of their window. The elements changed are copies, in a
    list of the figures' own (the body's, and a memo's, stay as they are); with the memo and each
    element's JSON text (texts: the pieces' column), each element's copy and its profile are kept
    (STRIPPED) and found again by the very same text at the next step."""
    messages, roles = lowered.messages, lowered.roles
    last = fmt.turn_start(messages, roles, len(messages) - 1) - 1  # the last user turn's message, -1: none
    if last <= 0:
        return
    known = lowered.known
    out = None
    for i in range(last):
        if roles[i] != "assistant" or not fmt.holds_reasoning(messages[i]):
            continue
        # the very element the memo kept (not one a marker changed): its text names it
        as_kept = texts is not None and memo is not None and known is not None and known[i] is not None
        key = (STRIPPED, texts[i], fmt.name) if as_kept and texts[i] is not None else None
        found = memo.get(key) if key is not None else None
        if found is None:
            element, reasoning = fmt.without_reasoning(messages[i])
            utf8, utf16 = native.json_lengths(element)
            found = (element, reasoning, (native.json_profile(element), utf8 - utf16))
            if key is not None:  # the blocks are the piece's, charged there: their references here
                refs = sum(len(v) for v in element.values() if isinstance(v, list))
                memo.put_charged(key, found, STRIPPED_CHARGE + 8 * (refs + len(element)))
        if out is None:
            out = list(messages)
        out[i], lowered.stripped[i] = found[0], found[1]
        if known is not None:
            known[i] = found[2]
    if out is not None:
        lowered.messages = out


# what a STRIPPED entry is charged beside its key and its references: the element's own dict and
# list, the tuples, the profile
STRIPPED_CHARGE = 1024


def tool_schema_list(tools: list) -> list:
    """What tool definitions count as: the JSON of [{name, description, inputSchema}]."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in tools]
