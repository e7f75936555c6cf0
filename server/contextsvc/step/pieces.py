"""Pieces (docs/design.md §6 "Lowering", §10): each message of the history as sent, lowered to
its wire format's elements, with each element's JSON text and UTF-8 and UTF-16 lengths; memoized
per message (memo.py), so a step lowers only the messages it has not seen.

A message lowers alone as it does in the whole request (but media on Bedrock, whose document
names are made distinct across the request); what depends on position is put together here
every step: which consecutive messages merge into one element, the lead user message, the
closing user message for a model that refuses to go on from its own turn, or from one holding
reasoning (lowered.close_with_user), else the final assistant text's trailing whitespace
(lowered.trim_final_text).
"""
from __future__ import annotations

import functools
import itertools
import operator
import sys
from array import array
from dataclasses import dataclass
from typing import Optional

from .. import conversation as m, native, projection, system_prompt
from ..deadline import NO_DEADLINE, Deadline
from ..lowering import MediaLedger, lower, to_model_messages
from ..lowering.lowered import Lowered, close_with_user, copied, open_with_user, trim_final_text
from ..lowering.neutral import CLOSING_USER_TEXT, MMessage, MText, closing_between_replies
from ..lowering.registry import FORMATS
from ..memo import LOWERED, MERGED, PREFIX, Memo, message_prefix_keys
from ..positions import positions
from ..prefix import Resume
from .plan import Plan


@dataclass(slots=True)
class Pieces:
    """The lowered request (body without markers or output cap yet) and its media ledger."""
    lowered: Lowered
    ledger: MediaLedger
    # the message elements are the memo's own objects, shared with other requests: a marker
    # goes on a copy (step.request.place)
    shared: bool
    # what the prefix hashing may resume from and keep (prefix.prefix_hashes), with the memo
    resume: Optional[Resume] = None
    # with the memo: the entry of each element of lowered.messages the memo holds, and its
    # columns (Columns)
    columns: Optional["Columns"] = None
    # with the memo: of each element of lowered.messages, the compacted tool outputs of the
    # messages it holds (Message.compacted_outputs summed over its sources: the cache state's)
    pruned: Optional[list] = None


_LENGTH = "q"  # the array type of the elements' lengths


@dataclass(slots=True)
class Columns:
    """The entries of a list of elements (element_entry, a tuple, or a build's list of the same
    three), None for an element without one yet, and their columns: each one's JSON text, UTF-8
    length, UTF-16 units and text profile, None or -1 without one. A build reads the columns
    without reading a thousand entries scattered through the memo (the lengths as arrays,
    summed in C); -1 among the lengths marks the elements without an entry."""
    entries: list
    texts: list
    lengths: array
    units: array
    profiles: list

    @classmethod
    def empty(cls) -> "Columns":
        return cls([], [], array(_LENGTH), array(_LENGTH), [])

    def copy(self) -> "Columns":
        return Columns(list(self.entries), list(self.texts), array(_LENGTH, self.lengths),
                       array(_LENGTH, self.units), list(self.profiles))

    def sizes(self) -> int:
        """sys.getsizeof of its lists and arrays (the entries are charged where they are kept)."""
        return sum(map(sys.getsizeof, (self.entries, self.texts, self.lengths, self.units, self.profiles)))

    def truncate(self, n: int) -> None:
        for column in (self.entries, self.texts, self.lengths, self.units, self.profiles):
            del column[n:]

    def append(self, entry) -> None:
        self.entries.append(entry)
        self.lengths.append(-1)
        self.units.append(-1)
        self.texts.append(None)
        self.profiles.append(None)
        if entry is not None:
            self.set(len(self.entries) - 1, entry)

    def insert_missing(self, i: int) -> None:
        """An element without an entry, put in at i."""
        self.entries.insert(i, None)
        self.texts.insert(i, None)
        self.lengths.insert(i, -1)
        self.units.insert(i, -1)
        self.profiles.insert(i, None)

    def set(self, i: int, entry) -> None:
        """Element i's entry (None: it has none, until its build makes one)."""
        self.entries[i] = entry
        if entry is None:
            self.texts[i] = self.profiles[i] = None
            self.lengths[i] = self.units[i] = -1
        else:
            self.texts[i], (self.lengths[i], self.units[i]), self.profiles[i] = entry

    def missing(self) -> list:
        """The positions of the elements without an entry (searched among the lengths, in C)."""
        return positions(self.lengths, -1)


def lower_request(conv: m.Conversation, plan: Plan, memo: Memo | None = None,
                  deadline: Deadline = NO_DEADLINE, points: list | None = None,
                  digests: list | None = None) -> Pieces:
    """The lowered request (the history as sent: projection.project) and its media ledger. With
    the memo, each message's lowering is taken from it when seen before (by Message.digest), with
    the element_entry of each element it holds (Pieces.columns). deadline: counted per part and
    per element (Deadline.count). points: projection.compaction_points(conv.messages), and
    digests: memo.message_prefix_digests(conv.messages), when the caller has them."""
    mdl, tools, system = plan.model, plan.tools, plan.system
    prompt_dir, tools_disabled = plan.cfg.assemble.prompt_dir, plan.tools_disabled
    projected = projection.project(conv.messages, points, deadline)
    if memo is not None and memoizable(projected, mdl):
        if digests is not None and not _same(projected, conv.messages):  # history was cut
            digests = None
        lowered, ledger, resume, prefix = _lower_memoized(projected, memo, conv, plan, deadline, digests)
        return Pieces(lowered, ledger, True, resume, prefix.columns, prefix.pruned)
    messages = to_model_messages(projected, mdl, deadline)
    between = len(messages)
    alone = _alone(plan)
    messages = closing_between_replies(messages, _summary_ids(projected), lambda msg: any(alone(msg).sources),
                                       lambda msg: _closes_reply(alone(msg), plan))
    ledger = _ledger(plan)
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
        deadline=deadline,
    )
    if len(messages) != between:  # the closing messages between replies stand for no stored message
        lowered.sources[:] = [ids if ids != [""] else [] for ids in lowered.sources]
    if _closes(plan, lowered.roles, lowered.messages):
        closing = _closing(mdl.provider)
        lowered.closed = close_with_user(lowered.messages, lowered.roles, lowered.sources, closing)
        _attach(lowered, [closing], messages=False)  # the body's other list of them (Chat Completions)
    elif plan.fmt.trims_final_text:
        trim_final_text(lowered.messages, lowered.roles, plan.fmt.merged_key)
    return Pieces(lowered, ledger, False)


def _alone(plan: Plan):
    """What a neutral message lowers to alone (its media ledger's totals aside), worked out once a
    message: asked whether the format sends a reply as something (a reply of reasoning cut off
    before its signature is sent as nothing) and whether it holds reasoning."""
    done: dict = {}

    def lowered(msg: MMessage):
        low = done.get(id(msg))
        if low is None:
            low = done[id(msg)] = lower(plan.model.provider, model_id=plan.model.id, system=[], messages=[msg],
                                        tools=[], max_output=0, ledger=MediaLedger())
        return low
    return lowered


def _closes_reply(low, plan: Plan) -> bool:
    """Whether a body ending with a turn holding this reply (lowered alone) is closed (_closes)."""
    return plan.closes_with_user or any(role == "assistant" and plan.fmt.holds_reasoning(e)
                                        for role, e in zip(low.roles, low.messages))


def _summary_ids(messages: list):
    """Whether a message id is a summary's, of messages (worked out at the first question)."""
    @functools.lru_cache(maxsize=1)
    def ids() -> frozenset:
        return frozenset(msg.id for msg in messages if msg.summary)
    return lambda message_id: message_id in ids()


def _same(a: list, b: list) -> bool:
    """Whether two lists hold the very same objects, compared in C."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def memoizable(messages: list, model: m.Model) -> bool:
    """Whether each message lowers alone as it does in the whole request. Not so for media on
    Bedrock (its document names are made distinct across the request), nor for a model whose
    format lowers its requests whole (WireFormat.lowers_whole: Mistral's)."""
    if FORMATS[model.provider].lowers_whole(model.id):
        return False
    return model.provider != m.BEDROCK or not any(map(m.HAS_MEDIA, messages))


def _piece(msg: m.Message, plan: Plan, deadline: Deadline = NO_DEADLINE) -> tuple:
    """What one stored message lowers to alone (the memo's LOWERED entry): (elements, media_count, extra,
    saved_units, texts), elements a tuple of (role, element, saved units inside it), texts the
    element_entry of each element. The lead user message a format puts first stands for
    no stored message and is left out."""
    mdl = plan.model
    ledger = _ledger(plan)
    low = lower(mdl.provider, model_id=mdl.id, system=[], messages=to_model_messages([msg], mdl, deadline),
                tools=[], max_output=0, ledger=ledger, deadline=deadline)
    saved = ledger.saved_by
    elements = tuple((role, e, saved.get(id(e), 0))
                     for role, e, ids in zip(low.roles, low.messages, low.sources) if ids)
    texts = tuple(element_entry(e) for _, e, _ in elements)
    return elements, ledger.media_count, ledger.extra, ledger.saved_units, texts


def element_entry(element) -> tuple:
    """(JSON text, lengths, text profile) of an element: what the body's bytes and the
    calibrated figures read of it, kept with the memo's pieces so a step profiles only what is
    new (the figures add the profiles up: step.figures)."""
    text = native.json_text(element)
    return text, native.json_lengths(element), native.text_profile(text)


@dataclass(slots=True)
class MessagePiece:
    """What one stored message lowers to alone."""
    elements: tuple  # (role, element, saved units inside it) of each element
    media_count: int
    extra: int
    saved_units: int
    texts: tuple  # element_entry of each element: JSON text, (UTF-8 bytes, UTF-16 units), text profile


def _ledger(plan: Plan) -> MediaLedger:
    """The media ledger of a lowering under plan: its placeholders and the request's image rules."""
    return MediaLedger(plan.placeholders, plan.image_side, plan.images_left_out, plan.image_pixels,
                       plan.media_left_out, plan.media_refused)


def _piece_key(msg: m.Message, plan: Plan, settings: tuple | None = None) -> tuple | None:
    """The memo's key of msg lowered alone: its digest and what changes its lowering
    (Plan.lowering_settings, the caller's when it has them; Plan.left_out); None for a message
    without a digest (built or changed in the core), lowered afresh every time."""
    if not msg.digest:
        return None
    return LOWERED, msg.digest, settings or plan.lowering_settings, plan.left_out(msg)


def message_piece(msg: m.Message, plan: Plan, memo: Memo | None = None) -> MessagePiece:
    """msg lowered alone under plan (its memo entry when seen before)."""
    key = _piece_key(msg, plan) if memo is not None else None
    piece = memo.get(key) if key is not None else None
    if piece is None:
        piece = _piece(msg, plan)
        if key is not None:
            memo.put(key, piece)
    return MessagePiece(*piece)


@functools.lru_cache(maxsize=None)
def _constant_element(provider: str, closing: bool) -> dict:
    """The format's lead user message (lowered.open_with_user: what it opens a body starting with
    the model's turn with), or its closing one (lowered.close_with_user), lowered once per
    provider: neither depends on the request."""
    if closing:
        low = lower(provider, model_id="", system=[], messages=[MMessage("user", [MText(CLOSING_USER_TEXT)], "x")],
                    tools=[], max_output=0, ledger=MediaLedger())
        assert low.roles == ["user"], "the closing message lowers to one user element"
        return low.messages[0]
    low = lower(provider, model_id="", system=[], messages=[MMessage("assistant", [MText("x")], "x")],
                tools=[], max_output=0, ledger=MediaLedger())
    assert low.sources[0] == [], "a body starting with the model's turn opens with the lead"
    return low.messages[0]


def _lead(provider: str) -> dict:
    """The format's lead user message, a fresh copy (a marker may go in it)."""
    return copied(_constant_element(provider, False))


def _closing(provider: str) -> dict:
    """The format's closing user message, a fresh copy."""
    return copied(_constant_element(provider, True))


@dataclass(slots=True)
class _Prefix:
    """The message elements of the first messages of a request, put together (merged where the
    format merges them; no lead message, no trimming yet), with each element's memo entry
    (element_entry, None where none is kept), the media ledger's totals, and its messages'
    LOWERED keys."""
    elements: list
    roles: list
    sources: list
    keys: list  # per element: the (digest, index) of each piece element in it, None when unkeyed
    saved: list
    found: list  # per element: its piece's element_entry when it is one piece's element as it stands
    columns: Columns  # per element: its element_entry when the memo keeps one (found, or MERGED)
    piece_keys: list  # per message: its LOWERED key
    pruned: list  # per element: the compacted tool outputs of its messages (Pieces.pruned)
    media_count: int = 0
    extra: int = 0
    saved_units: int = 0
    merged: int = 0  # _merged_charge of its elements but the last (which may merge further)
    ends_with_summary: bool = False  # its last element's last message is a summary

    def copy(self, lists: bool = True) -> "_Prefix":
        """A copy with its own columns (the one part a build changes once the memo keeps the
        prefix) and, with lists, its own other lists (shared without)."""
        own = list if lists else _shared
        return _Prefix(own(self.elements), own(self.roles), own(self.sources), own(self.keys), own(self.saved),
                       own(self.found), self.columns.copy(), own(self.piece_keys), own(self.pruned),
                       self.media_count, self.extra, self.saved_units, self.merged, self.ends_with_summary)

    def charge(self) -> int:
        """What it holds beyond the memo's other entries: its lists, and the elements it merged
        itself."""
        lists = sum(sys.getsizeof(x) for x in (self.elements, self.roles, self.sources, self.keys,
                                               self.saved, self.found, self.piece_keys, self.pruned))
        lists += self.columns.sizes()
        last = _merged_charge(self.found[-1:], self.columns.entries[-1:])
        return lists + 64 * len(self.sources) + self.merged + last


def _shared(x):
    return x


def _merged_charge(found: list, entries: list) -> int:
    """What the elements merged in a prefix (found None, entry kept) take: about three times
    their JSON text's UTF-8 size as Python objects."""
    return sum(3 * e[1][0] + 500 for f, e in zip(found, entries) if f is None and e is not None)


def _lower_memoized(projected: list, memo, conv: m.Conversation, plan: Plan, deadline: Deadline,
                    digests: list | None) -> tuple[Lowered, MediaLedger, Resume, "_Prefix"]:
    """lower_request from memoized pieces: each message lowered alone (or taken from the memo),
    consecutive elements of one role joined where the format joins them, then the lead user
    message; the same body as lowering the whole request at once. The elements put together
    from a session's earlier step (PREFIX) are taken as they are, so a step puts together only
    the messages it adds; the prefix hashing resumes after them too (Resume). What a step keeps
    for the next is its messages up to the first one without a digest (a copy an injection made
    that the client stores: the next step sends that message as stored, and starts there)."""
    mdl, settings = plan.model, plan.lowering_settings
    ledger = _ledger(plan)
    system = system_prompt.blocks(plan.system, mdl, plan.cfg.assemble.prompt_dir)
    lowered = lower(mdl.provider, model_id=mdl.id, system=system, messages=[], tools=plan.tools, max_output=0,
                    ledger=ledger, session_id=conv.session_id, tools_disabled=plan.tools_disabled)
    fmt = FORMATS[mdl.provider]
    candidates = message_prefix_keys(projected, PREFIX, settings, digests)
    start, kept = memo.longest(candidates)
    if kept is None:
        prefix = _Prefix([], [], [], [], [], [], Columns.empty(), [], [])
    else:
        prefix = kept.copy()  # the kept one is shared: never changed
        memo.touch_held(kept.piece_keys, start, len(projected))  # their elements are the prefix's: kept while used
    resolved_up_to = max(0, len(prefix.elements) - 1)  # the last element may merge with what follows
    # the messages named by a digest, from the first on, and the key of them all
    keyed, key = candidates[0] if candidates else (0, None)
    _put_together(prefix, projected[start:keyed], fmt, plan, memo, deadline, resolved_up_to)
    kept_elements = len(prefix.elements)
    earlier = dict(candidates).get(start) if kept is not None else None  # the entry this step resumed
    if key is not None and start < keyed:
        # in place of the entry it resumed: each serves the session's next step (a step looks for
        # one RESUME_WITHIN messages back), and they would otherwise pile up until the LRU reached
        # them, each charged its history's elements, crowding out every other entry
        memo.supersede(earlier, key, prefix, prefix.charge())
        # the memo's from here on, never to change: the build goes on with copies of what it
        # changes, the columns (the request fills in its markers' and new elements' entries),
        # and everything else too for messages past the keyed ones, a lead message or a trimmed
        # final text (the keyed ones are all the messages then: their roles are the body's)
        prefix = prefix.copy(lists=keyed < len(projected) or _leads(prefix.roles) or _trims(fmt, prefix.roles)
                             or _closes(plan, prefix.roles, prefix.elements))
    if keyed < len(projected):
        _put_together(prefix, projected[keyed:], fmt, plan, memo, deadline,
                      max(0, len(prefix.elements) - 1))
    elements, roles, sources, keys, found, saved = (prefix.elements, prefix.roles, prefix.sources, prefix.keys,
                                                    prefix.found, prefix.saved)
    columns, pruned = prefix.columns, prefix.pruned
    leads, closes = _leads(roles), _closes(plan, roles, elements)
    trims = not closes and _trims(fmt, roles)
    lead = 1 if leads else 0
    # the kept elements but the last stand as they were, and so will these for the next step
    resume = Resume(earlier if resolved_up_to else None, lead + resolved_up_to, key, lead + max(0, kept_elements - 1))
    ledger.media_count += prefix.media_count
    ledger.extra += prefix.extra
    ledger.saved_units += prefix.saved_units
    if leads:
        open_with_user(elements, roles, sources, _lead(mdl.provider))
        keys.insert(0, None)
        found.insert(0, None)
        saved.insert(0, 0)
        columns.insert_missing(0)
        pruned.insert(0, 0)
    if closes:
        close_with_user(elements, roles, sources, _closing(mdl.provider))
        keys.append(None)
        found.append(None)
        saved.append(0)
        columns.append(None)
        pruned.append(0)
    if trims:
        elements[-1] = dict(elements[-1])  # the memo's element stays as it is
        if trim_final_text(elements, roles, fmt.merged_key):
            found[-1] = keys[-1] = None
            columns.set(len(elements) - 1, None)
    if any(saved):
        ledger.saved_by.update(_where(elements, saved))
    _attach(lowered, elements)
    lowered.closed = closes
    lowered.roles[:] = roles
    lowered.sources[:] = sources
    return lowered, ledger, resume, prefix


def _leads(roles: list) -> bool:
    """Whether a lead user message goes first: the body's first element is not the user's."""
    return bool(roles) and roles[0] != "user"


def _closes(plan: Plan, roles: list, elements: list) -> bool:
    """Whether the closing user message goes last: the body ends with the model's turn (elements:
    the message elements) and the model refuses to go on from it, or that turn holds reasoning,
    which Claude refuses there ("When thinking is disabled, an `assistant` message in the final
    position cannot contain `thinking`"; with it on, the turn must open with it)."""
    if not roles or roles[-1] != "assistant":
        return False
    return plan.closes_with_user or plan.fmt.holds_reasoning(elements[-1])


def _trims(fmt, roles: list) -> bool:
    """Whether the final text's trailing whitespace is trimmed: the format trims it and the body
    ends with the model's turn."""
    return fmt.trims_final_text and bool(roles) and roles[-1] == "assistant"


def _append_closing(prefix: _Prefix, provider: str) -> None:
    """The closing user message after prefix's last element, standing for no stored message."""
    prefix.elements.append(_closing(provider))
    prefix.roles.append("user")
    prefix.sources.append([])
    prefix.pruned.append(0)
    prefix.keys.append(None)
    prefix.found.append(None)
    prefix.saved.append(0)


def _put_together(prefix: _Prefix, messages: list, fmt, plan: Plan, memo: Memo, deadline: Deadline,
                  resolved_up_to: int) -> None:
    """Adds messages' elements to prefix (each message's piece from the memo, or lowered and
    kept), merged where the format merges consecutive elements of one role, then the entry of
    each element from resolved_up_to on (the merged ones' kept as MERGED entries)."""
    joined = fmt.merged_key
    elements, roles, sources, keys, saved, found, pruned = (prefix.elements, prefix.roles, prefix.sources,
                                                            prefix.keys, prefix.saved, prefix.found, prefix.pruned)
    settings = plan.lowering_settings
    piece_keys = [_piece_key(msg, plan, settings) for msg in messages]
    prefix.piece_keys += piece_keys
    # what merges into the last element goes into a copy of it and of its sources and keys, made at
    # its first merge here (the pieces' elements and a kept prefix's are the memo's, never changed),
    # then added to in place: a copy at every merge made a run of k messages of one role cost k²
    run, run_keys = None, None
    # the closing message between two replies, as closing_between_replies puts it in the whole
    # request's lowering: always for a model that refuses its own turn last, else after reasoning
    closes_all = plan.closes_with_user
    for msg, pkey, piece in zip(messages, piece_keys, memo.get_many(piece_keys)):
        if piece is None:
            piece = _piece(msg, plan, deadline)
            if pkey is not None:
                memo.put(pkey, piece)
        parts, media_count, extra, saved_units, texts = piece
        prefix.media_count += media_count
        prefix.extra += extra
        prefix.saved_units += saved_units
        if (parts and parts[0][0] == "assistant" and roles and roles[-1] == "assistant"
                and not prefix.ends_with_summary and (closes_all or fmt.holds_reasoning(elements[-1]))):
            if run is not None:
                keys[-1] = None if run_keys is None else tuple(run_keys)
                run, run_keys = None, None
            _append_closing(prefix, plan.model.provider)
        if parts:
            prefix.ends_with_summary = msg.summary
        for j, (role, element, units) in enumerate(parts):
            deadline.count("lowering")
            # the message's own left-out flag too: MERGED keys are made of these, and the settings
            # tuple holds only how many messages are left out
            key = (msg.digest, j, pkey[3]) if pkey is not None else None
            if joined and elements and elements[-1]["role"] == element["role"]:
                if run is None:
                    last = elements[-1] = dict(elements[-1])
                    run = fmt.run(list(last[joined]), plan.model.id)
                    last[joined] = run.blocks
                    sources[-1] = list(sources[-1])
                    run_keys = None if keys[-1] is None else list(keys[-1])
                run.add(element[joined])
                sources[-1].append(msg.id)
                pruned[-1] += msg.compacted_outputs
                if run_keys is not None and key is not None:
                    run_keys.append(key)
                else:
                    run_keys = None
                found[-1] = None
                saved[-1] += units
                continue
            if run is not None:
                keys[-1] = None if run_keys is None else tuple(run_keys)
                run, run_keys = None, None
            elements.append(element)
            roles.append(role)
            sources.append([msg.id])
            pruned.append(msg.compacted_outputs)
            keys.append((key,) if key is not None else None)
            found.append(texts[j])
            saved.append(units)
    if run is not None:
        keys[-1] = None if run_keys is None else tuple(run_keys)
    columns = prefix.columns
    columns.truncate(resolved_up_to)
    for e, text, key in zip(elements[resolved_up_to:], found[resolved_up_to:], keys[resolved_up_to:]):
        if text is None and key is not None:
            ekey = (MERGED, settings, key)
            text = memo.get(ekey)
            if text is None:
                text = element_entry(e)
                memo.put(ekey, text)
        columns.append(text)
    prefix.merged += _merged_charge(found[resolved_up_to:-1], columns.entries[resolved_up_to:-1])


def _where(elements: list, values: list):
    """(id(element), value) of each element whose value is not None or 0 (loops in C: a step's
    history is a thousand elements)."""
    kept = list(map(bool, values))
    return zip(itertools.compress(map(id, elements), kept), itertools.compress(values, kept))


def _attach(lowered: Lowered, elements: list, messages: bool = True) -> None:
    """Puts the message elements at the end of a body's messages: into its messages list (unless
    messages is False: put there already), and a list that holds the system elements and then
    the messages (Chat Completions) too."""
    if messages:
        lowered.messages.extend(elements)
    for parent, key in lowered.lists:
        items = parent[key]
        if items is not lowered.messages and items is not lowered.system:
            items.extend(elements)


