"""Prefix digests (docs/design.md §6, "Prefix reuse"): hashes of the body prefix up to each
breakpoint, and the per-response cache state that tells the next request what changed."""
from __future__ import annotations

import collections
import hashlib
import itertools
import json
import operator
import sys
from dataclasses import dataclass

from . import native
from .config import CACHE_STATE_VERSIONS
from .deadline import NO_DEADLINE, Deadline
from .memo import CHAIN, HEAD, Memo
from .lowering.registry import FORMATS


@dataclass(frozen=True, slots=True)
class Resume:
    """What the prefix hashing of a body lowered from the memo may resume from (step.pieces):
    its first `kept` message elements are those of an earlier step's request, lowered under
    the PREFIX key `kept_key`; its own first `elements` message elements stand for the next
    step, kept under `key` (None: not kept)."""
    kept_key: tuple | None
    kept: int
    key: tuple | None
    elements: int

    def earlier(self, memo: Memo | None, kind: str):
        """What the session's previous step kept of kind (BODY, PROFILES) for this one, or None."""
        return memo.get((kind, self.kept_key)) if memo is not None and self.kept_key is not None else None

    def keeps(self, memo: Memo | None) -> bool:
        """Whether what this step keeps for the next (keep) has a key."""
        return memo is not None and self.key is not None

    def keep(self, memo: Memo, kind: str, value, size: int) -> None:
        """Keeps value of kind for the session's next step, in place of the previous step's
        (Memo.supersede): each serves only the step after it."""
        memo.supersede((kind, self.kept_key), (kind, self.key), value, size)


@dataclass(slots=True)
class Chain:
    """The prefix digest (SHA-256, before any marker) at every element of a body, in cache
    order: tools, then system, then messages."""
    counts: tuple  # elements per segment: (tools, system, messages)
    digests: list
    short: list  # each digest's first DIGEST_BYTES (the cache state's)
    # the short prefix digest at the element prefix_hashes was asked to extend (extend), that
    # element cut to as many blocks as the previous request's last element had; None: not asked,
    # or the element holds no more blocks
    extended: bytes | None = None
    # the blocks (the format's merged_key list, before any marker) of its last two message
    # elements, 0 for one that holds none: what Digests.last_blocks reads
    tail_blocks: tuple = (0, 0)


@dataclass(frozen=True, slots=True)
class _Hashed:
    """The hashing after a request's first message elements (CHAIN): resumed by the next step."""
    state: object  # the SHA-256 object after them (copied before use)
    digests: tuple  # the prefix digest at each of them
    short: tuple  # their first DIGEST_BYTES
    sizes: tuple  # the prefix's UTF-8 bytes at each of them, counted from the first message element


def prefix_hashes(lowered, provider: str, breakpoints: list, entries: list | None = None,
                  made: dict | None = None, deadline: Deadline = NO_DEADLINE, memo: Memo | None = None,
                  resume: Resume | None = None, tool_json: dict | None = None,
                  extend: tuple | None = None) -> Chain:
    """Fills prefix_bytes/prefix_sha256: the canonical JSON of the elements the cache covers,
    in prefix order (tools, then system, then messages), up to and including each marked one.
    Returns the prefix digest at every element: the next request of the session checks its old
    breakpoints against it, wherever the markers have moved since.

    Runs before the markers are placed: a marker moving along the history is not a change of
    the cached content. entries: per message element, its entry (step.request.Request) where
    one is known, its JSON text first; made, when given, receives the system and message
    elements' texts it serializes, by id(element), for the body to reuse. With the memo and
    resume, the message elements
    an earlier step of the session hashed after the same tools and system are not hashed again
    (CHAIN, under the digest of tools and system and the PREFIX key of those messages).
    tool_json: id(element) -> (JSON text, UTF-8 bytes) of tool definitions the memo keeps.
    extend: (index in cache order, blocks): Chain.extended is asked for that element, cut to that
    many blocks of the format's merged_key list (the previous request's last element, which this
    one may hold with blocks appended: compare).
    """
    body = lowered.body
    tools = FORMATS[provider].tool_list(body)
    wanted = {}
    for b in breakpoints:
        wanted.setdefault((b.kind, b.index), []).append(b)
    texts = [tool_text(element, tool_json) for element in tools] + [_text(e, None, made) for e in lowered.system]
    hashed = _head(texts, memo)
    h, out, short = hashed.state.copy(), list(hashed.digests), list(hashed.short)
    heads = [("tools", i) for i in range(len(tools))] + [("system", i) for i in range(len(lowered.system))]
    for j, at in enumerate(heads):
        _mark(wanted.get(at), hashed.sizes[j], out[j].hex)
    head, head_size = h.digest(), hashed.sizes[-1] if texts else 0
    size = head_size
    messages, sizes, start, found = lowered.messages, [], 0, None
    if memo is not None and resume is not None and resume.kept_key is not None:
        found = memo.get((CHAIN, head, resume.kept_key))
        if found is not None and len(found.digests) == resume.kept <= len(messages):
            h, start = found.state.copy(), resume.kept
            out += found.digests
            short += found.short
            sizes += found.sizes
            size = head_size + sizes[-1]
            for b in breakpoints:
                if b.kind == "message" and b.index < start:
                    b.prefix_bytes, b.prefix_sha256 = head_size + sizes[b.index], found.digests[b.index].hex()
    keep = resume.elements if memo is not None and resume is not None and resume.key is not None else -1
    kept = None
    key = FORMATS[provider].merged_key
    extended, cut_at = None, extend[0] - len(heads) if extend is not None else -1
    for i in range(start, len(messages)):
        deadline.tick(i - start, "prefix hashing")
        if i == cut_at:
            extended = _cut_digest(h, messages[i], extend[1], key)
        chunk = _text(messages[i], entries[i] if entries is not None else None, made).encode()
        h.update(chunk)
        size += len(chunk)
        out.append(h.digest())
        short.append(out[-1][:DIGEST_BYTES])
        sizes.append(size - head_size)
        _mark(wanted.get(("message", i)), size, h.hexdigest)
        if i + 1 == keep:
            kept = h.copy()
    if 0 <= cut_at < start:  # the hashing resumed past it: hashed again up to it, as without the memo
        again = hashed.state.copy()
        for i in range(cut_at):
            again.update(_text(messages[i], entries[i] if entries is not None else None, made).encode())
        extended = _cut_digest(again, messages[cut_at], extend[1], key)
    if kept is not None:
        at = len(out) - len(messages)
        kept = _Hashed(kept, tuple(out[at:at + keep]), tuple(short[at:at + keep]), tuple(sizes[:keep]))
    elif start and keep == start:  # what it resumed from is all it keeps
        kept = found
    if kept is not None:  # in place of the one it resumed from: each serves the session's next step
        memo.supersede((CHAIN, head, resume.kept_key), (CHAIN, head, resume.key), kept, keep * _HASHED_PER_ELEMENT)
    tail_blocks = tuple(len(x) if isinstance(x, list) else 0
                        for x in ((e.get(key) if key else None) for e in [{}, {}, *messages[-2:]][-2:]))
    return Chain((len(tools), len(lowered.system), len(messages)), out, short, extended, tail_blocks)


def grown_blocks(element: dict, key: str, blocks: int) -> list | None:
    """The element's list of blocks (key: the format's merged_key) where it holds more than
    `blocks` of them: an element that may have grown from one of that many; None otherwise."""
    held = element.get(key) if key else None
    return held if isinstance(held, list) and len(held) > blocks else None


def _cut_digest(h, element: dict, blocks: int, key: str) -> bytes | None:
    """The short prefix digest after element cut to its first `blocks` blocks (h: the hashing
    before it, not changed); None where it holds no more than that many."""
    held = grown_blocks(element, key, blocks)
    if held is None:
        return None
    cut = h.copy()
    cut.update(native.json_text({**element, key: held[:blocks]}).encode())
    return cut.digest()[:DIGEST_BYTES]


# what CHAIN keeps per element: a 32-byte digest (65 bytes as a Python object), its first
# DIGEST_BYTES (41), a size (32) and three tuple slots
_HASHED_PER_ELEMENT = 65 + 41 + 32 + 24


def tool_text(element, tool_json: dict | None) -> str:
    """A tool definition's JSON text: the memo's (tool_json: id(element) -> (JSON text, UTF-8
    bytes), step.request), or serialized."""
    kept = tool_json.get(id(element)) if tool_json else None
    return kept[0] if kept is not None else native.json_text(element)


def _head(texts: list, memo: Memo | None) -> _Hashed:
    """The hashing of the tool and system elements whose JSON texts these are, the same at every
    step of a session as a rule: with the memo, kept under the texts themselves (HEAD; the tools'
    are the memo's own objects, TOOL_JSON, whose hashes Python keeps)."""
    key = (HEAD, tuple(texts)) if memo is not None else None
    kept = memo.get(key) if key is not None else None
    if kept is not None:
        return kept
    h = hashlib.sha256()
    digests, sizes, size = [], [], 0
    for text in texts:
        chunk = text.encode()
        h.update(chunk)
        size += len(chunk)
        digests.append(h.digest())
        sizes.append(size)
    kept = _Hashed(h, tuple(digests), tuple(d[:DIGEST_BYTES] for d in digests), tuple(sizes))
    if key is not None:
        memo.put_charged(key, kept, sum(map(sys.getsizeof, texts)) + len(texts) * _HASHED_PER_ELEMENT)
    return kept


def _text(element, entry, made: dict | None) -> str:
    """The element's JSON text: its entry's, or serialized (and kept in made)."""
    text = entry[0] if entry is not None else None
    if text is None:
        text = native.json_text(element)  # the body's own text: the prefix is what is sent
        if made is not None:
            made[id(element)] = text
    return text


def _mark(marked, size: int, hexdigest) -> None:
    for b in marked or ():
        b.prefix_bytes = size
        b.prefix_sha256 = hexdigest()


# ---- the per-response cache state and what changed since the previous one --------------------
#
# Stateless by design (design.md §6 "Prefix reuse", design.md §11): each response carries the digests of its
# prefix, the client passes them back with its next request, and whichever replica answers tells
# what changed. No session table: it would be wrong with several processes or behind a proxy.

# 8 bytes of SHA-256 per digest: two different prefixes match by accident once in 2^64, and a
# 60-step session's state stays near 2 KB.
DIGEST_BYTES = 8
# Format of cache_state; a state of another version is refused (the client sends none then).
# Version 2 adds the tool choice's digest; a version 1 state (a server before it) is still read,
# its choice unknown. Version 3 adds the figures of the body's tools and system (Overhead); a
# state before it is read with them unknown. Version 4 adds the digest of the provider and model
# the body was sent to (a provider caches per model: another model reads none of it). Version 5
# adds the blocks of the last message element (Digests.last_blocks).
STATE_VERSION = CACHE_STATE_VERSIONS[-1]
_READ_VERSIONS = (1, *CACHE_STATE_VERSIONS)
_MAGIC = b"CX"
# Trailing check bytes (SHA-256 of the rest): a truncated or altered state is refused, not
# misread as a break.
_CHECK_BYTES = 4
# Bounds on a state a client sends back, whatever this server's configuration: parsing it costs
# at most this many digests.
_MAX_STATE_GROUPS = 65_536
_MAX_STATE_ELEMENTS = 1 << 30

STATE_FIELD = "previous_cache_state"

TOOLS, SYSTEM, MESSAGES = "tools", "system", "messages"
COMPACTION, PRUNE, NEW_TURN, OTHER = "compaction", "prune", "new_turn", "other"
# the body's tool choice changed where that invalidates the provider's cached messages
# (WireFormat.tool_choice_breaks_cache): the messages are written again, tools and system read
TOOL_CHOICE = "tool_choice"
NO_CHOICE = bytes(DIGEST_BYTES)  # the choice digest of a format whose choice costs no cache
# the body goes to another provider or model than the previous request's: its cache serves none
MODEL = "model"


@dataclass(slots=True)
class Digests:
    """A body's prefix, element by element in cache order (tools, system, messages), markers
    removed."""
    counts: tuple  # elements per segment: (tools, system, messages)
    chain: list  # the prefix digest (DIGEST_BYTES) at every element
    pruned: list  # tool outputs marked compacted among each element's source messages
    compaction: bytes  # digest of the last completed compaction's summary id; zeros without one
    choice: bytes = NO_CHOICE  # digest of the tool choice, where changing it costs the cache
    model: bytes = bytes(DIGEST_BYTES)  # digest of the provider and model (model_digest)
    # the blocks of its last message element, where the format joins blocks in one (merged_key);
    # 0 otherwise: the next request may hold that element with blocks appended (compare)
    last_blocks: int = 0
    extended: bytes | None = None  # Chain.extended


def model_digest(provider: str, model_id: str) -> bytes:
    """The digest of what a provider keeps a cache per: the model, as the request names it."""
    return _short(f"{provider}\x00{model_id}".encode())


@dataclass(frozen=True, slots=True)
class Overhead:
    """Our figures of a body's tool definitions and system elements, as the decision took them
    (step.figures): the calibrated figure and the decision stretch's (with its margins), whole
    tokens. Carried in its cache_state, so the next request can take out of the provider's count
    what that body sent of them, where they changed since (step.decision)."""
    calibrated: int
    decision: int


@dataclass(slots=True)
class State:
    """A previous response's digests, decoded: one digest per group of `group` elements."""
    counts: tuple
    group: int
    ends: list  # the prefix digest at the last element of each group
    pruned: list  # per group
    compaction: bytes
    choice: bytes | None  # None: not recorded (a version 1 state)
    overhead: Overhead | None = None  # not figured (the calibrated figures off), or before version 3
    model: bytes | None = None  # None: not recorded (before version 4)
    last_blocks: int = 0  # Digests.last_blocks; 0 before version 5

    @property
    def elements(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class Change:
    """The first element that differs from the previous request's."""
    segment: str  # TOOLS, SYSTEM or MESSAGES
    index: int  # within the segment, in this body
    flat: int  # in cache order, in this body
    cause: str  # COMPACTION, PRUNE, TOOL_CHOICE, NEW_TURN or OTHER
    # only appended: everything the previous request had is unchanged (its last element may hold
    # blocks appended: what the provider cached of it is read)
    prefix_kept: bool
    resolution: int  # elements per previous digest (1 = index is exact)
    # the element at index is the previous request's last with blocks appended: the blocks of it
    # (the format's merged_key list) the provider had cached; 0 otherwise
    kept_blocks: int = 0


def _short(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def choice_digest(body: dict, fmt) -> bytes:
    """The digest of the body's tool choice where changing it invalidates the provider's cached
    messages (fmt: its WireFormat); NO_CHOICE elsewhere."""
    if not fmt.tool_choice_breaks_cache:
        return NO_CHOICE
    return _short(json.dumps(body.get(fmt.tool_choice_key), sort_keys=True).encode())


def digests(lowered, chain: Chain, messages: list, fmt, last: int, element_pruned: list | None = None,
            model: bytes = bytes(DIGEST_BYTES)) -> Digests:
    """The digests of a built body: chain is prefix_hashes' result (taken before the markers
    were placed), messages the conversation the body was built from, fmt its WireFormat; last:
    projection.last_compaction(messages); element_pruned: each message element's compacted
    tool outputs (its messages' Message.compacted_outputs summed), when the lowering put them
    together (step.pieces.Pieces.pruned). A closing user message (lowered.closed) is left out:
    it stands for no stored message, takes no marker, and the next request sends what the
    client stores in its place, so what is cached for that request ends before it."""
    n_tools, n_system, _ = chain.counts  # Bedrock's system cachePoint block came later
    pruned = [0] * (n_tools + n_system)
    if element_pruned is not None:
        pruned += element_pruned
    else:
        counts = list(map(_COMPACTED_OUTPUTS, messages))
        if any(counts):  # each element's sum over the messages it holds, in C
            by_id = collections.defaultdict(int, zip(map(_ID, messages), counts)).__getitem__
            pruned += map(sum, map(map, itertools.repeat(by_id), lowered.sources))
        else:
            pruned += [0] * len(lowered.sources)
    short, n_messages = chain.short, len(lowered.sources)
    if lowered.closed:
        short, pruned, n_messages = short[:-1], pruned[:-1], n_messages - 1
    return Digests((n_tools, n_system, n_messages),
                   short, pruned,
                   _short(messages[last].id.encode()) if last >= 0 else bytes(DIGEST_BYTES),
                   choice_digest(lowered.body, fmt), model, chain.tail_blocks[-2 if lowered.closed else -1],
                   chain.extended)


_COMPACTED_OUTPUTS, _ID = operator.attrgetter("compacted_outputs"), operator.attrgetter("id")


_ONE_BYTE = [bytes([n]) for n in range(0x80)]  # most counts in a state are small


def varint_bytes(n: int) -> bytes:
    """n (not negative) as a protobuf varint: the cache state's counts, and a length on the wire."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(the protobuf varint at data[pos:], where it ends); IndexError past the end of data,
    ValueError when it runs over 64 bits."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("overlong varint")


def encode(d: Digests, max_groups: int, overhead: Overhead | None = None, version: int = STATE_VERSION) -> bytes:
    """cache_state: at most max_groups digests, so a very long session groups its elements (the
    report's index is then the first element of the group that changed); overhead: the figures
    of the body's tools and system, None when not figured; version: 2 leaves them out, for a
    fleet whose older replicas read no later one (assemble.cache_state_version)."""
    n = len(d.chain)
    group = max(1, -(-n // max(1, max_groups)))
    if group == 1:
        ends, pruned = d.chain, d.pruned
    else:  # each group's last digest and its pruned count, the last group maybe short (by slices in C)
        ends, whole = d.chain[group - 1::group], n - n % group
        pruned = list(map(sum, zip(*[iter(d.pruned)] * group)))
        if whole < n:
            ends.append(d.chain[-1])
            pruned.append(sum(d.pruned[whole:]))
    out = bytearray(_MAGIC)
    out.append(version)
    for v in (*d.counts, group):
        out += varint_bytes(v)
    if version >= 3:  # a presence flag, then the figures: a body of no tools and no system is figured 0
        out += b"\x00" if overhead is None else \
            b"\x01" + varint_bytes(overhead.calibrated) + varint_bytes(overhead.decision)
    out += d.compaction
    out += d.choice
    if version >= 4:
        out += d.model
    if version >= 5:
        out += varint_bytes(d.last_blocks)
    out += b"".join(ends)
    # a count under 0x80 is its own one-byte varint, and most are 0: bytes() encodes them in C
    out += bytes(pruned) if max(pruned, default=0) < 0x80 else b"".join(map(varint_bytes, pruned))
    out += hashlib.sha256(out).digest()[:_CHECK_BYTES]
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise _bad("is truncated")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def varint(self) -> int:
        try:
            value, self.at = read_varint(self.data, self.at)
        except IndexError:
            raise _bad("is truncated") from None
        except ValueError:
            raise _bad("has an overlong number") from None
        return value


def _bad(why: str):
    from .errors import BadInput

    return BadInput(STATE_FIELD, f"{why}: pass back the cache_state of the session's previous "
                                 "response unchanged, or nothing")


def decode(raw: bytes) -> State:
    """A cache_state sent back by a client; BadInput naming the field when it is not one."""
    if len(raw) < len(_MAGIC) + 1 + _CHECK_BYTES or raw[:len(_MAGIC)] != _MAGIC:
        raise _bad("is not a cache_state")
    body, check = raw[:-_CHECK_BYTES], raw[-_CHECK_BYTES:]
    if hashlib.sha256(body).digest()[:_CHECK_BYTES] != check:
        raise _bad("is damaged (check bytes differ)")
    r = _Reader(body)
    r.take(len(_MAGIC))
    version = r.take(1)[0]
    if version not in _READ_VERSIONS:
        raise _bad(f"has version {version}; this server reads versions {', '.join(map(str, _READ_VERSIONS))}")
    counts = (r.varint(), r.varint(), r.varint())
    group = r.varint()
    overhead = None
    if version >= 3 and r.varint():
        overhead = Overhead(r.varint(), r.varint())
    n = sum(counts)
    if n > _MAX_STATE_ELEMENTS or group < 1:
        raise _bad("has impossible sizes")
    groups = -(-n // group)
    if groups > _MAX_STATE_GROUPS:
        raise _bad(f"has {groups} digests, more than {_MAX_STATE_GROUPS}")
    compaction = r.take(DIGEST_BYTES)
    choice = r.take(DIGEST_BYTES) if version >= 2 else None
    model = r.take(DIGEST_BYTES) if version >= 4 else None
    last_blocks = r.varint() if version >= 5 else 0
    ends = [r.take(DIGEST_BYTES) for _ in range(groups)]
    pruned = [r.varint() for _ in range(groups)]
    if r.at != len(body):
        raise _bad("has trailing bytes")
    return State(counts, group, ends, pruned, compaction, choice, overhead, model, last_blocks)


def _segment_of(flat: int, before: tuple, now: tuple) -> tuple:
    """(segment, index in this body) of a first change at flat, given the segment sizes of the
    previous request and this one (a segment whose size changed is where the change is)."""
    t = now[0]
    if flat < t or flat < before[0]:
        return TOOLS, flat
    s = now[1]
    if flat - t < s or flat - t < before[1]:
        return SYSTEM, flat - t
    return MESSAGES, flat - t - s


def head_unchanged(before: State | None, now: Digests | None, change: Change | None) -> bool:
    """Whether a body's tool definitions and system elements are the previous request's (before:
    its cache state, None when the client sent none; now: this body's digests, change: compare's
    answer), so that only its messages differ, or nothing."""
    return before is not None and now is not None and (change is None or change.segment == MESSAGES)


def compare(before: State, now: Digests) -> Change | None:
    """The first element of this body whose cache the previous request's does not serve: the
    first that differs, judged on the prefix digests (equal at element i means every element up
    to i is equal), or the first message where the tool choice changed and that invalidates the
    provider's cached messages (a change of the tools or system comes first); None when the two
    are the same elements under the same choice. Sent to another provider or model, the body is
    written whole again, from its first element (MODEL)."""
    if before.model is not None and before.model != now.model:
        return Change(TOOLS if now.counts[0] else SYSTEM if now.counts[1] else MESSAGES, 0, 0, MODEL, False, 1)
    change = _first_difference(before, now)
    if before.choice is None or before.choice == now.choice:
        return change
    messages = before.counts[0] + before.counts[1]
    if messages >= before.elements or (change is not None and not change.prefix_kept and change.flat <= messages):
        return change  # no cached message to lose, or the content changed there or before
    segment, index = _segment_of(messages, before.counts, now.counts)
    return Change(segment, index, messages, TOOL_CHOICE, False, 1)  # the index is exact


def _first_difference(before: State, now: Digests) -> Change | None:
    """The first element of this body that differs from the previous request's, or None when
    the two are the same elements."""
    n_before, n_now, g = before.elements, len(now.chain), before.group
    for k, end_digest in enumerate(before.ends):
        start = k * g
        end = min(start + g, n_before) - 1
        if end < n_now and now.chain[end] == end_digest:
            continue
        if end == n_before - 1 and before.last_blocks and now.extended == end_digest:
            # its last element, now with blocks appended: a provider caches blocks, so what the
            # previous request wrote is read (a whitespace-only answer, sent as nothing, joins the
            # next user text to the tool results; a cut reply joins the next one), and the
            # rewrite starts after its cached blocks. The digest is of everything up to them:
            # the element is known in a group too
            segment, index = _segment_of(end, before.counts, now.counts)
            return Change(segment, index, end, NEW_TURN, True, 1, before.last_blocks)
        segment, index = _segment_of(start, before.counts, now.counts)
        if segment == MESSAGES and now.compaction != before.compaction and any(now.compaction):
            cause = COMPACTION
        elif segment == MESSAGES and sum(now.pruned[start:end + 1]) > before.pruned[k]:
            cause = PRUNE
        else:
            cause = OTHER
        return Change(segment, index, start, cause, False, g)
    if n_now == n_before:
        return None
    segment, index = _segment_of(n_before, before.counts, now.counts)
    return Change(segment, index, n_before, NEW_TURN, True, g)
