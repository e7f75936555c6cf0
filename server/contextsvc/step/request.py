"""The request (docs/design.md §6): the lowered pieces put together with their system blocks,
lead message and cache markers; every element's lengths; the prefix digests; the body's exact
size without building it, and its JSON when asked (Assemble). Measure and Assemble read the same
Request, so the bytes Measure reports are the bytes Assemble emits.
"""
from __future__ import annotations

import copy
import dataclasses
import operator
import secrets
from dataclasses import dataclass

from .. import breakpoints, conversation as m, native, prefix, provider_management
from ..deadline import NO_DEADLINE, Deadline
from ..errors import BadInput
from ..lowering import MediaLedger
from ..lowering.lowered import Lowered
from ..memo import Memo
from .pieces import lower_request
from .plan import Plan


_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


@dataclass(slots=True)
class Request:
    """The request as it would be sent: the lowered body with its markers, every element's
    lengths, and (when hashed) its prefix digests and what changed since the previous request."""
    lowered: Lowered
    ledger: MediaLedger
    # id(element) -> (JSON text, (utf8 bytes, utf16 units), text profile) of each system and
    # message element: the memo's pieces.element_entry (a tuple), or a list of this build's with
    # the lengths measured and the text and profile None until asked
    entries: dict
    breakpoints: list  # breakpoints.Breakpoint, with prefix hashes
    prefix_chain: prefix.Chain | None = None  # the prefix digest at every element, when hashed
    digests: prefix.Digests | None = None  # when hashed
    # the same request with media and opaque state as their placeholders (what the calibrated and
    # exact figures read), when it differs from lowered and a figure reads it
    estimated: Lowered | None = None
    change: prefix.Change | None = None  # since the previous request's digests, when given
    # UTF-8 bytes of the element lists' contents (elements and their commas): fixed once built,
    # while the rest of the body (the output cap) may change
    _lists_bytes: int | None = None

    def _lengths(self, elements: list):
        return map(_SECOND, map(self.entries.__getitem__, map(id, elements)))

    def units(self, elements: list) -> list:
        """UTF-16 units of each element, media and opaque values counted as placeholders."""
        saved = self.ledger.saved_by
        units = list(map(_SECOND, self._lengths(elements)))
        if saved:
            units = [u - saved.get(id(e), 0) for u, e in zip(units, elements)]
        return units

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
        if self._lists_bytes is None:
            self._lists_bytes = sum(sum(map(_FIRST, self._lengths(items))) + len(items) - 1
                                    for _, _, items in held if items)
        return total + self._lists_bytes

    def element_text(self, element) -> str:
        """The JSON text of a system or message element, serialized once per build."""
        entry = self.entries.get(id(element))
        if entry is None:
            return native.json_text(element)
        text = entry[0]
        if text is None:
            text = entry[0] = native.json_text(element)  # a list of this build's
        return text

    def element_profiles(self, elements: list) -> list:
        """native.text_profile of each element's text: the memo's where it holds the element."""
        out = list(map(_THIRD, map(self.entries.__getitem__, map(id, elements))))
        i = -1
        try:
            while True:
                i = out.index(None, i + 1)
                e = elements[i]
                out[i] = self.entries[id(e)][2] = native.text_profile(self.element_text(e))
        except ValueError:
            return out

    def body_json(self) -> bytes:
        """The body's JSON; element lists are spliced in from element_text, so the elements the
        prefix hashing serialized are not serialized again. Each element is encoded alone and the
        bytes put together in one join: a megabyte history makes every copy count, and one astral
        character would make a joined text four bytes a character to copy and encode."""
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
            pieces.append(skeleton[done:start].encode())
            pieces += array_parts(list(map(str.encode, map(self.element_text, held[n][2]))), b"[", b",", b"]")
            done = start + len(markers[n])
        pieces.append(skeleton[done:].encode())
        return b"".join(pieces)


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


def build(conv: m.Conversation, plan: Plan, memo: Memo | None = None,
          deadline: Deadline = NO_DEADLINE) -> Request:
    """Lowers the request (step.pieces) and places its cache breakpoints (the auto policy unless
    hinted); with plan.hashes, also the prefix digest at every element (a serialization pass)
    and, with plan.previous, what changed since. deadline: checked between stages and every
    CHECK_EVERY elements of the loops here."""
    mdl = plan.model
    deadline.check("lowering")
    entries = {}  # Request.entries: the memo's (lower_request), then this build's
    pieces = lower_request(conv, plan, memo, entries, deadline)
    lowered, ledger = pieces.lowered, pieces.ledger
    lowered.body.update(provider_management.body_fields(plan.management, plan.fmt, plan.tools)[0])
    if not lowered.messages:  # every provider refuses a request without a message
        raise BadInput("conversation.messages", "nothing to send: every message lowers to no content "
                                                "(ignored or blank text, dropped errored replies)")
    deadline.check("lowering")
    chosen = _choose(lowered, plan, conv)
    hashed = {}  # id(element) -> JSON text the prefix hashing made, of elements without an entry
    chain = prefix.prefix_hashes(lowered, mdl.provider, chosen, entries, hashed, deadline, memo, pieces.resume) \
        if plan.hashes else None
    for element in place(lowered, ledger, mdl.provider, chosen, pieces.shared, (entries,)):
        hashed.pop(id(element), None)  # a marker changed it
    # the memo's elements (place() dropped those it replaced) have their entries; the others are
    # measured (with the text the prefix hashing made, if it did)
    json_lengths = native.json_lengths
    for parent, key in lowered.lists:
        items = parent[key]
        found = list(map(entries.get, map(id, items)))
        i = -1
        try:
            while True:
                i = found.index(None, i + 1)
                deadline.tick(i, "sizing the body")
                e = items[i]
                entries[id(e)] = found[i] = [hashed.get(id(e)), json_lengths(e), None]
        except ValueError:
            pass
    request = Request(lowered, ledger, entries, chosen, chain)
    mc = plan.cfg.measure
    if (mc.calibrated_figures or plan.exact) and (ledger.media_count or ledger.saved_units or ledger.extra):
        request.estimated = estimate_lowered(conv, plan, memo)
    deadline.check("measure")
    if plan.hashes:
        request.digests = prefix.digests(lowered, chain, conv.messages, plan.fmt)
        if plan.previous is not None:
            request.change = prefix.compare(plan.previous, request.digests)
    return request


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


def estimate_lowered(conv: m.Conversation, plan: Plan, memo: Memo | None = None) -> Lowered:
    """The lowered request whose elements estimate_text serializes (media as placeholders)."""
    pieces = lower_request(conv, dataclasses.replace(plan, placeholders=True), memo)
    place(pieces.lowered, pieces.ledger, plan.model.provider, _choose(pieces.lowered, plan, conv), pieces.shared)
    return pieces.lowered


def tool_schema_list(tools: list) -> list:
    """What tool definitions count as: the JSON of [{name, description, inputSchema}]."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in tools]
