"""The one per-message memo: what a step computes from one message alone, kept for the next step
(docs/design.md §10).

An agent resends its whole history every step; only the newest messages are new. Whatever
depends only on one message and on a few settings (its conversion from protobuf, its lowering to
a wire format's elements with their JSON and lengths, prune's scan of its tool outputs, its
validation, Compact's size of it, the offline summarizer's facts) is kept under the digest of the
message's wire bytes (conversation.Message.digest, set by conversion) and those settings, so a
step pays for the new messages only. A message without a digest (built or changed in the core)
is computed every time.

One store, one bound: each entry is charged what its Python objects really take
(`resident_size`, a walk with sys.getsizeof) plus its key and bookkeeping; least recently used
go first. Values are never mutated once stored, so threads share them safely. Every answer is
the same with the memo on or off: it only skips recomputing a pure function of a message.

Keys are tuples whose first item names the kind of entry (MESSAGE, LOWERED, MERGED, or the
kind a caller of `each` gives), so kinds never collide.
"""
from __future__ import annotations

import hashlib
import operator
import sys
import time
from collections import OrderedDict, deque
from threading import Lock, current_thread, local

from . import native

# What one entry costs besides its key and value: the (value, size) tuple (56 bytes) and its
# int (28), and the OrderedDict's hash slot, index and link node (about 100, amortized over the
# table's growth), rounded up
ENTRY_OVERHEAD = 240

MESSAGE = "message"  # (MESSAGE, digest) -> the converted conversation.Message
# (CONVERTED, session id, digest of the first message's bytes) -> the last steps of the
# sessions under that key, each with its messages converted and their bytes (rpc.earlier_step):
# a session's next step, which resends them, converts after them
CONVERTED = "converted"
LOWERED = "lowered"  # (LOWERED, digest, settings) -> what the message lowers to alone (step.pieces)
MERGED = "merged"  # (MERGED, settings, piece keys) -> JSON text and lengths of a merged element
SCHEMA = "schema"  # (SCHEMA, JSON text, depth limit) -> a tool's input schema parsed (rpc.conversion)
# (TOOLS, the bytes of the request's tool entries, or each tool's (name, description, schema
# text) when they are not written back to back, depth limit) -> the tool definitions converted
# (rpc.conversion.tools)
TOOLS = "tools"
# (CALLS, digest, places) -> a copy of the message whose tool parts at those places (among its
# tool parts) carry call ids of their own: their ids were used before (step.call_ids)
CALLS = "calls"
# (TOOL_TEXT, (), id of each tool definition) -> the JSON text the figures count the definitions
# as and its calibrated figures (step.figures; Memo.for_objects): serialized and profiled once
TOOL_TEXT = "tool text"
# (TOOL_JSON, (provider, model id, tools disabled), id of each tool definition) -> the JSON text and
# UTF-8 length of each element of the body's tool list they lower to, before any marker
# (step.request; Memo.for_objects): the prefix hashing, the body and its size read them
TOOL_JSON = "tool json"
# (VALID_TOOLS, (provider,), id of each tool definition) -> the definitions passed validate.tools
# for that provider's names (Memo.for_objects)
VALID_TOOLS = "valid tools"
# (GUARD, digest of the first k messages' digests, gates) -> what the payload guard's prune found
# for those messages and the copies it marked (step.guard): the same conversation again, or one
# grown by messages the prune passes over, is not pruned again; the session's next step's entry
# takes this one's place
GUARD = "guard"
# (GUARDED, pruned_digest) -> the copy of a message the payload guard's prune marked (step.guard)
GUARDED = "guarded"
# (OVER_GUARD, session id, digest of the first message) -> True: a step of the conversation was
# over the payload guard (step.guard): its next Measure looks for its GUARD entry first (step.run).
# Its first message tells apart conversations that share a session id, and names one without
OVER_GUARD = "over guard"
# (REBASED, digest of the changed messages' digests now and as counted, settings) -> the change
# their figures make to the baseline's (step.baseline, step.figures)
REBASED = "rebased"
# (IMAGE_SIDES, format name, digest) -> the longer side of each image the message holds that the
# format takes (step.many_images)
IMAGE_SIDES = "image sides"
# (PREFIX, digest of the first k messages' digests, settings) -> the elements lowered from them,
# put together (step.pieces): the next step of the session, which resends them, starts after
# them, and its own entry takes this one's place (Memo.supersede)
PREFIX = "prefix"
# (SYSTEM, the shape of a system element: keys in order, values with their types) -> its
# element_entry: JSON text, lengths and text profile (step.request._system_entry): the same
# system prompt at every step is measured once
SYSTEM = "system"
# (HEAD, JSON text of each tool and system element) -> the prefix hashing of those elements
# (prefix.prefix_hashes): the same tools and system at every step are hashed once
HEAD = "head"
# (CHAIN, digest of the tools and system, PREFIX key) -> the prefix hashing after those messages'
# elements (prefix.prefix_hashes): the next step of the session hashes only what it adds, and
# its own entry takes this one's place
CHAIN = "chain"
# (BODY, PREFIX key) -> the UTF-8 bytes of the element list of the body Assemble built from
# those messages, with the element texts they were encoded from (step.request.Request.body_json):
# the next step copies the elements whose text is the very same object rather than encoding them,
# and its own entry takes this one's place (Memo.supersede)
BODY = "body"
# (PROFILES, PREFIX key) -> the text profiles of the message elements of the request a step
# built from those messages, and their sum (step.figures): the next step adds only the profiles
# that are not the very same ones, and its own entry takes this one's place (Memo.supersede)
PROFILES = "profiles"
# (STRIPPED, JSON text of a model's message element, format name) -> the element without the
# reasoning its provider strips from earlier turns, that reasoning, and (text profile, UTF-8 less
# UTF-16 length) of the element without it (step.request._strip_earlier_reasoning)
STRIPPED = "stripped"
# (SCRIPT, encoding, element JSON) -> what the exact count of an element of mostly non-Latin,
# non-CJK text adds to its calibrated figure and to its decision figure (step.figures)
SCRIPT = "script"
# (VALIDATED, conversation.Lineage.digest) -> the message ids and part ids of a conversation
# whose checks passed (validate): the step that continues it checks only its new messages
VALIDATED = "validated"


# how many messages back from the end a step looks for what an earlier step of its session kept
# of its first messages (PREFIX, GUARD, CONVERTED): a step adds an answer and a user message, a few
# more when the caller batches them
RESUME_WITHIN = 16
# a session's kept entries are touched once every this many messages it adds (Memo.touch_held)
TOUCH_EVERY = 16


def prefix_digests(data, ends: list, domain: bytes) -> list:
    """(k, digest of data[:ends[k - 1]]) for k from len(ends) down to RESUME_WITHIN back: the
    keys of a request's first k messages, longest first. One SHA-256 pass over data (hardware
    accelerated), copied at each end, rather than one hash per k; domain keeps each kind's
    digests apart."""
    view = memoryview(data)
    first = max(1, len(ends) - RESUME_WITHIN + 1)
    h = hashlib.sha256(domain + b"\x00")
    done = 0
    out = []
    for k in range(first, len(ends) + 1):
        h.update(view[done:ends[k - 1]])
        done = ends[k - 1]
        out.append((k, h.copy().digest()[:16]))
    return out[::-1]


# the length of every message digest (digests, pruned_digest)
MESSAGE_DIGEST_BYTES = 16


def digests(wire: bytes, spans: list) -> list:
    """The digest of each message whose bytes are wire[start:end] for (start, end) in spans
    (conversation.Message.digest): the key of everything kept for it. Slices of a view: no copy."""
    view, blake2b = memoryview(wire), hashlib.blake2b
    return [blake2b(view[start:end], digest_size=MESSAGE_DIGEST_BYTES).digest() for start, end in spans]


def joined_digests(messages: list) -> bytes:
    """The digests of messages joined, as far as every message has one (Message.digest: each
    MESSAGE_DIGEST_BYTES long, or b"")."""
    kept = list(map(_DIGEST, messages))
    if b"" in kept:
        del kept[kept.index(b""):]
    return b"".join(kept)


def message_prefix_digests(messages: list, joined: bytes | None = None) -> list:
    """(k, digest of the first k messages' digests), longest first (prefix_digests), as far as
    every message has a digest: what message_prefix_keys are made of, the same for every kind.
    joined: joined_digests(messages), when the caller has it (conversation.Scanned)."""
    if joined is None:
        joined = joined_digests(messages)
    size = MESSAGE_DIGEST_BYTES  # every digest's: the ends need no pass over the lengths
    return prefix_digests(joined, range(size, len(joined) + 1, size), _MESSAGES_DOMAIN)


_MESSAGES_DOMAIN = b"messages"


def message_prefix_keys(messages: list, kind: str, settings, digests: list | None = None) -> list:
    """(k, (kind, digest of the first k messages' digests, settings)), longest first, as far as
    every message has a digest: the keys of what a step keeps of a conversation's first messages
    for the session's next step. digests: message_prefix_digests(messages), when the caller has
    them (a step reads the keys of two kinds of its messages: a pass over a thousand saved)."""
    if digests is None:
        digests = message_prefix_digests(messages)
    return [(k, (kind, key, settings)) for k, key in digests]


_DIGEST = operator.attrgetter("digest")


def pruned_digest(message_digest: bytes, part_ids) -> bytes:
    """The digest of a copy of a message with the parts part_ids marked compacted (the payload
    guard's prune): the copy lowers as its original with those parts compacted, whenever that
    was, so its key is the original's digest and the ids (the compaction time differs from step
    to step; every per-message entry reads only whether a part is compacted)."""
    return _copy_digest(message_digest, "\x00".join(part_ids), b"pruned")


def injected_digest(message_digest: bytes, parts: list) -> bytes:
    """The digest of a copy of a message with parts appended (step.inject: a plan reminder, an
    environment block its client passed back): a function of the original and the parts (their
    repr holds every field), as the copy is, so a session whose last user message gets the same
    ones at every step keeps and resumes its steps past it."""
    return _copy_digest(message_digest, repr(parts), b"injected")


def renamed_digest(message_digest: bytes, places: tuple) -> bytes:
    """The digest of a copy of a message whose tool parts at places carry call ids of their own
    (step.call_ids): a function of the original and the places, as the copy is."""
    return _copy_digest(message_digest, ",".join(map(str, places)), b"calls")


def _copy_digest(message_digest: bytes, change: str, kind: bytes) -> bytes:
    """A copy's digest: of its original's and the text of what the copy changed, each kind of
    change apart (BLAKE2b's personalization)."""
    return hashlib.blake2b(message_digest + change.encode("utf-8", "surrogatepass"),
                           digest_size=MESSAGE_DIGEST_BYTES, person=kind).digest()


def resident_size(obj) -> int:
    """Bytes the Python objects reachable from obj take: sys.getsizeof of each, walking
    dataclasses with slots, lists, tuples and dicts without recursion (native.resident_size: a
    step puts a dozen entries). Objects every message shares (None, booleans, small ints, the
    empty string) are free; a converted message is a tree, so nothing else is counted twice
    (and a shared constant counted twice only errs high)."""
    return native.resident_size(obj, _values_of)


def _values_of(t):
    """The function giving the attribute values of an object of type t that resident_size walks."""
    fields = _FIELDS.get(t)
    if fields is None:
        fields = _FIELDS[t] = _fields_of(t)
    return fields


_FIELDS: dict = {}  # type -> a function giving the tuple of its attribute values


# A message's `digest` is in the entry's key, charged there; its `_compaction` is one of its parts'.
_NOT_WALKED = ("__weakref__", "__dict__", "digest", "_compaction")


def _fields_of(t):
    names = [n for c in t.__mro__ for n in getattr(c, "__slots__", ()) if n not in _NOT_WALKED]
    getter = operator.attrgetter(*names) if names else None

    def values(x):
        out = () if getter is None else (getter(x) if len(names) > 1 else (getter(x),))
        d = getattr(x, "__dict__", None)
        return out + (d,) if d is not None else out
    return values


class _Fence:
    """Where a step began in the LRU order (Memo.begin_step): a key of its own, charged nothing."""

    __slots__ = ()


class _Mark:
    """A time in the LRU order (Memo.begin_step): every entry after it was used at or after it."""

    __slots__ = ("time",)

    def __init__(self, at: float):
        self.time = at


# a step marks the time in the LRU order when the newest mark is at least this old
MARK_EVERY_SECONDS = 1.0


class _Tally:
    """One thread's lookups (Memo.hits, Memo.misses): counted by that thread alone, without a
    lock, and summed when read."""

    __slots__ = ("hits", "misses", "thread")

    def __init__(self, thread):
        self.hits = self.misses = 0
        self.thread = thread


class Memo:
    """An LRU whose bound is the real size of what it holds (resident_size of key and value).

    Two things are never evicted to make room, so that what outgrows the bound degrades the hit
    ratio instead of ending it (a plain LRU read in a cycle evicts each entry just before it is
    asked for again, and keeps none):
    - what the step putting an entry has itself used or kept (begin_step): a conversation whose
      entries outgrow the bound keeps the first that fit, and its next step is served those
      (40,000 short messages: every step computed everything, seconds each);
    - what any step used within hold_seconds: sessions that together outgrow the bound, stepped
      in turn, keep those that fit instead of each evicting the next one's entries (16 sessions of
      330 KB at 96 MiB: a hit ratio of 0.02, 52 ms a step). A session idle longer gives way.
    An entry that would need either is not kept (refused).

    Lookups take no lock: each of their changes to the order is one call on the OrderedDict,
    which the interpreter lock makes atomic as long as keys are plain data (tuples of str, bytes,
    numbers and types: their hash and equality run no Python code), and a thread counts its own
    (_Tally). Changes that span several calls (keeping, evicting, the steps' marks) take the
    lock. A lock taken at every lookup was a convoy: a thread that lost the interpreter lock
    while holding it stalled every other step at its next lookup, and 16 concurrent steps cost
    1.6-1.9x the CPU of one at a time (`bench/memo_threads.py`)."""

    def __init__(self, max_bytes: int, hold_seconds: float = 0.0, clock=time.monotonic):
        self._max = max_bytes
        self._hold = hold_seconds
        self._clock = clock
        # key -> (value, charged bytes); and the steps' _Fence and _Mark keys, charged nothing
        self._items = OrderedDict()
        self._bytes = 0
        self._lock = Lock()
        self._fences = 0  # _Fence keys in _items
        self._marks: deque = deque()  # the _Mark keys in _items, oldest first
        # .fence: the _Fence of the step this thread runs; .refused: bytes; .tally: its _Tally
        self._step = local()
        self._tallies: list = []  # the _Tally of each live thread that looked up
        self._ended = [0, 0]  # hits and misses of the threads that have ended
        self.refused = 0  # entries not kept: keeping them would have evicted a held one

    def begin_step(self) -> None:
        """Marks where this thread's step begins: what the step then gets or puts is newer than the
        mark, and its puts evict only older entries (_add). Past that, the step's further puts are
        not kept, and what they would have been charged is added to the entries the step puts for
        the session's next step (supersede), which may hold them (a prefix entry holds every
        message's pieces). Another step's puts evict a mark like any older entry (that step is
        then a plain LRU's); the thread's next step moves it to the back (no lock: one call on
        the order), or replaces it when it was evicted or a time mark is due."""
        step = self._step
        step.refused = 0
        fence = getattr(step, "fence", None)
        if fence is not None and not self._mark_due(self._clock()):
            try:
                self._items.move_to_end(fence)
                return
            except KeyError:  # another step's put evicted it
                pass
        fence = _Fence()
        with self._lock:
            old = getattr(step, "fence", None)
            if old is not None and self._items.pop(old, None) is not None:
                self._fences -= 1
            self._mark_time()
            self._items[fence] = (None, 0)
            self._fences += 1
        step.fence = fence

    def _mark_due(self, now: float) -> bool:
        """Whether a step at now adds a time mark: with a hold, when the newest mark is
        MARK_EVERY_SECONDS old (or there is none)."""
        if not self._hold:
            return False
        try:
            return now - self._marks[-1].time >= MARK_EVERY_SECONDS
        except IndexError:
            return True

    def _mark_time(self) -> None:
        """A _Mark of now at the back when one is due (_mark_due); marks past the hold dropped
        (at most hold / MARK_EVERY_SECONDS of them are kept)."""
        now, marks = self._clock(), self._marks
        if not self._mark_due(now):
            return
        mark = _Mark(now)
        self._items[mark] = (None, 0)
        marks.append(mark)
        while len(marks) > 1 and marks[0].time < now - self._hold:
            self._items.pop(marks.popleft(), None)

    def get(self, key):
        item = self._items.get(key)
        tally = self._tally()
        if item is None:
            tally.misses += 1
            return None
        self._to_end(key)
        tally.hits += 1
        return item[0]

    def get_many(self, keys: list, counted: bool = True) -> list:
        """[get(key) for key in keys]; a None key gives None and counts as nothing.
        counted=False: not counted as hits or misses (longest)."""
        out = [None] * len(keys)
        found = asked = 0
        get, touch = self._items.get, self._items.move_to_end
        for i, key in enumerate(keys):
            if key is None:
                continue
            asked += 1
            item = get(key)
            if item is not None:
                try:
                    touch(key)
                except KeyError:  # evicted since it was read (_to_end)
                    pass
                out[i] = item[0]
                found += 1
        if counted:
            tally = self._tally()
            tally.hits += found
            tally.misses += asked - found
        return out

    def _to_end(self, key) -> None:
        """key's entry is the most recently used; one evicted since it was read stays evicted."""
        try:
            self._items.move_to_end(key)
        except KeyError:
            pass

    def _tally(self) -> _Tally:
        try:
            return self._step.tally
        except AttributeError:
            pass
        tally = self._step.tally = _Tally(current_thread())
        with self._lock:
            for t in [t for t in self._tallies if not t.thread.is_alive()]:
                self._tallies.remove(t)
                self._ended[0] += t.hits
                self._ended[1] += t.misses
            self._tallies.append(tally)
        return tally

    @property
    def hits(self) -> int:
        with self._lock:
            return self._ended[0] + sum(t.hits for t in self._tallies)

    @property
    def misses(self) -> int:
        with self._lock:
            return self._ended[1] + sum(t.misses for t in self._tallies)

    def longest(self, candidates: list) -> tuple:
        """(k, value) of the first of candidates, (k, key) longest first, that is kept (now the
        most recently used); (0, None) when none is. Looked up one by one up to that one: a
        session's step usually finds its earlier step's within the first few of sixteen. Looking
        is not counted as hits or misses: what the value serves is (touch)."""
        get = self._items.get
        for k, key in candidates:
            item = get(key)
            if item is not None:
                self._to_end(key)
                return k, item[0]
        return 0, None

    def for_objects(self, kind: str, objects: list, settings: tuple, compute):
        """compute() -> (value, charged bytes), kept for these very objects and settings (a
        session's tool definitions: the same objects at every step while TOOLS keeps them).
        Keyed by their ids, and holding them: while the entry is kept no other object can have
        one of those ids, so a hit is for the very objects."""
        key = (kind, settings, tuple(map(id, objects)))
        kept = self.get(key)
        if kept is not None:
            return kept[1]
        value, size = compute()
        held = tuple(objects)
        self.put_charged(key, (held, value), size + sys.getsizeof(held))
        return value

    def put(self, key, value, wire_size: int = 0) -> None:
        """Charged the key's and the value's real size; wire_size, when known, skips what cannot
        fit (Python text takes at least half its UTF-8 size)."""
        if wire_size > 2 * self._max:
            return
        size = resident_size(key) + resident_size(value) + ENTRY_OVERHEAD
        with self._lock:
            kept = self._add(key, value, size)
        if not kept and getattr(self._step, "fence", None) is not None:
            self._step.refused += size  # what this step computed and could not keep

    def put_charged(self, key, value, size: int) -> None:
        """put, charged size (plus the key and bookkeeping) instead of the value's walked size:
        for a value whose parts other entries hold and are charged for."""
        with self._lock:
            self._add(key, value, resident_size(key) + size + ENTRY_OVERHEAD)

    def replace(self, key, value, size: int) -> None:
        """put_charged, in place of what key held (a session's newer step)."""
        self.supersede(key, key, value, size)

    def supersede(self, old, key, value, size: int) -> None:
        """put_charged under key, dropping what old held: a session's step whose entry serves only
        the step after it (PREFIX, CHAIN, GUARD, BODY, PROFILES), which keeps its own, would
        otherwise stay until the LRU reached it, a megabyte at every step of a megabyte session,
        crowding out every other entry. A client going back to an earlier step (a regenerated
        answer) then builds that step afresh from the messages' own entries. VALIDATED is not
        kept so: the conversion resumes from any of a session's last steps (rpc.earlier_step).
        A new entry that replaces a kept one takes its place past the hold (it grows the
        session's share by their difference alone); it is charged too what this step could not
        keep (begin_step), which it may hold (a prefix holds every message's pieces) and no other
        entry is charged for. When it is not kept, the old one stays."""
        self._supersede(old, key, lambda _: (value, size))

    def merge(self, key, merged) -> None:
        """replace(key, value, size) for (value, size) = merged(what key holds, or None), read and
        replaced in one hold of the lock: steps merging into one key at once each find the
        others' values there (rpc.earlier_step keeps several sessions' last steps under one key;
        read and replaced apart, the later step would drop what the earlier one kept). merged
        runs under the lock: plain work on the value, no call of the memo."""
        self._supersede(key, key, merged)

    def _supersede(self, old, key, make) -> None:
        """supersede of (value, size) = make(what old holds, or None), made under the lock."""
        overhead = resident_size(key) + ENTRY_OVERHEAD + getattr(self._step, "refused", 0)
        with self._lock:
            item = self._items.pop(old, None)
            if item is not None:
                self._bytes -= item[1]
            value, size = make(None if item is None else item[0])
            if not self._add(key, value, overhead + size, replacing=item is not None) and item is not None \
                    and old not in self._items:
                self._items[old] = item
                self._bytes += item[1]

    def touch_held(self, keys: list, earlier: int, now: int) -> None:
        """touch(keys) of the entries a prefix entry of `earlier` messages serves to a step of
        `now`, once every TOUCH_EVERY messages the session adds rather than at every step: on a
        megabyte history touching a thousand entries is a tenth of a step. Between touches they
        may drift towards the front; one evicted meanwhile stays alive through the prefix entry,
        uncharged, as it would if evicted between two steps. Each counts as a hit either way."""
        if earlier // TOUCH_EVERY != now // TOUCH_EVERY:
            self.touch(keys)
        else:
            self._tally().hits += len(keys)  # served all the same

    def touch(self, keys: list) -> None:
        """Marks the entries of keys (None: none) as just used, each counted as a hit: entries a
        step is served through another entry that holds their values (PREFIX, CONVERTED)."""
        tally = self._tally()
        touch = self._items.move_to_end
        try:  # the usual case, every entry still kept: one C loop
            deque(map(touch, keys), maxlen=0)
            tally.hits += len(keys)
            return
        except (KeyError, TypeError):  # one is gone (or None): each on its own
            pass
        items = self._items
        for key in keys:
            if key is not None and key in items:
                self._to_end(key)
                tally.hits += 1

    def each(self, kind: str, messages: list, settings: tuple, compute) -> list:
        """[compute(msg) for msg in messages], each kept under (kind, msg.digest, *settings): the
        lookups at once (get_many), then the misses computed. compute never answers None: that is
        how get_many says a value is not kept."""
        keys = [(kind, msg.digest, *settings) if msg.digest else None for msg in messages]
        out = self.get_many(keys)
        for i, value in enumerate(out):
            if value is None:
                out[i] = value = compute(messages[i])
                if keys[i] is not None:
                    self.put(keys[i], value)
        return out

    def _add(self, key, value, size: int, replacing: bool = False) -> bool:
        """Keeps key (under the lock), evicting the least recently used as far as this step's
        mark and the hold allow (replacing: past the hold); whether it is kept."""
        if size > self._max:
            self.refused += 1
            return False
        items = self._items
        if key in items:
            return True
        fence = getattr(self._step, "fence", None)
        items[key] = (value, size)
        self._bytes += size
        while self._bytes > self._max:
            old, (_, gone) = items.popitem(last=False)
            kind = type(old)
            if kind is _Fence and old is not fence:
                self._fences -= 1  # another step's: its entries are older ones to it
                continue
            if kind is _Mark and (replacing or old.time < self._clock() - self._hold):
                self._marks.popleft()  # marks are in time order: it is the oldest
                continue
            if kind is _Fence or kind is _Mark:
                # what is left, this step used or kept, or a step used within the hold: key is
                # not kept
                items[old] = (None, 0)
                items.move_to_end(old, last=False)
                del items[key]
                self._bytes -= size
                self.refused += 1
                return False
            self._bytes -= gone
        return True

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self._fences = 0
            self._marks.clear()

    def keys(self) -> list:
        """The keys of the entries kept, least recently used first."""
        return [k for k in list(self._items) if type(k) is tuple]  # list(): a copy no lookup interrupts

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items) - self._fences - len(self._marks)


def each(memo: Memo | None, kind: str, messages: list, settings: tuple, compute) -> list:
    """[compute(msg) for msg in messages], through memo when there is one (Memo.each)."""
    if memo is None:
        return [compute(x) for x in messages]
    return memo.each(kind, messages, settings, compute)
