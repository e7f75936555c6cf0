"""What a step computes per message, kept across steps (docs/design.md §10, issue "the cost of a
step").

An agent resends its whole history every step and only the newest messages are new. The lowering
of one stored message to its provider elements depends only on that message and on the request's
settings (provider, model id, placeholder mode), and an element's JSON text and lengths only on
the messages lowered into it; so both are kept, by the digest of the message's wire bytes (the
key message_cache already computes) and those settings. What depends on position is recomputed
every step: which consecutive messages merge into one element, the lead user message, the cache
markers, the prefix digests, the figures of each stretch.

Bounded in real memory like message_cache: each entry is charged what its Python objects take
(message_cache.resident_size), least recently used go first. Entries are never mutated: a
marker goes on a copy of the element it marks (body.py).
"""
from __future__ import annotations

import hashlib

from .message_cache import ENTRY_OVERHEAD, SizedCache, resident_size


class StepMemo(SizedCache):
    """The LRU shared by all RPCs. Two kinds of entry:
    (digest, settings) -> a piece: what one stored message lowers to alone, the tuple
        (elements, media_count, extra, saved_units), elements a tuple of
        (role, element dict, saved units inside it);
    (settings, piece keys) -> (JSON text, (UTF-8 bytes, UTF-16 units)) of the element those
        pieces make, a piece key being (digest, index of the element in its piece)."""

    def put(self, key, value, wire_size: int = 0) -> None:
        """The charge covers the key too (its digests and settings)."""
        self._add(key, value, resident_size(key) + resident_size(value) + ENTRY_OVERHEAD)


class Wire:
    """The wire digest of each converted message of one request, by identity (a message the core
    derives later, say a pruned copy, has none), and the memo they key."""

    __slots__ = ("memo", "_by_id")

    def __init__(self, memo: StepMemo):
        self.memo = memo
        self._by_id = {}  # id(message) -> (message, digest); the message held so its id stays its own

    def add(self, message, digest: bytes) -> None:
        self._by_id[id(message)] = (message, digest)

    def digest(self, message) -> bytes | None:
        entry = self._by_id.get(id(message))
        return entry[1] if entry is not None and entry[0] is message else None

    def pruned(self, before: list, after: list, part_ids) -> "Wire":
        """The digests of after, prune.apply's copy of before with part_ids marked compacted: a
        message prune copied lowers as its original with those parts compacted, whenever that
        was, so its key is the original's digest and the ids (the compaction time differs from
        step to step, and lowering never reads it)."""
        out = Wire(self.memo)
        out._by_id = dict(self._by_id)
        wanted = set(part_ids)
        for old, new in zip(before, after):
            if new is old:
                continue
            digest = self.digest(old)
            if digest is not None:
                ids = "\x00".join(p.id for p in new.parts if p.id in wanted)
                out.add(new, hashlib.blake2b(digest + ids.encode("utf-8", "surrogatepass"), digest_size=16,
                                             person=b"pruned").digest())
        return out
