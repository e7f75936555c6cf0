"""What Measure and Assemble lower each message to, kept across steps (docs/design.md §10, issue
"the cost of a step").

An agent resends its whole history every step and only the newest messages are new. The lowering
of one stored message to its provider elements depends only on that message and on the request's
settings (provider, model id, placeholder mode), and an element's JSON text and lengths only on
the messages lowered into it; so both are kept, by the digest of the message's wire bytes
(model.Message.digest, set by convert: the key message_cache computes) and those settings. A
message without a digest (built or changed in the core) is lowered afresh. What depends on
position is recomputed every step: which consecutive messages merge into one element, the lead
user message, the cache markers, the prefix digests, the figures of each stretch.

Bounded in real memory like message_cache: each entry is charged what its Python objects take
(message_cache.resident_size), least recently used go first. Entries are never mutated: a
marker goes on a copy of the element it marks (body.py).

Not to be confused with memo.py (StepMemo): that one keeps what Prune, Compact's selection,
validation and the offline summarizer compute per message, under the same digests; this one
keeps what Measure and Assemble lower them to.
"""
from __future__ import annotations

import hashlib

from .message_cache import ENTRY_OVERHEAD, SizedCache, resident_size


class LoweringMemo(SizedCache):
    """The LRU shared by all RPCs. Two kinds of entry:
    (digest, settings) -> a piece: what one stored message lowers to alone, the tuple
        (elements, media_count, extra, saved_units, texts), elements a tuple of
        (role, element dict, saved units inside it), texts each element's
        (JSON text, (UTF-8 bytes, UTF-16 units));
    (settings, piece keys) -> the same (JSON text, lengths) of an element that consecutive
        pieces merge into (formats that join same-role messages), a piece key being
        (digest, index of the element in its piece)."""

    def put(self, key, value, wire_size: int = 0) -> None:
        """The charge covers the key too (its digests and settings)."""
        self._add(key, value, resident_size(key) + resident_size(value) + ENTRY_OVERHEAD)


def pruned_digest(digest: bytes, part_ids) -> bytes:
    """The digest of a copy of a message (digest) with the parts part_ids marked compacted
    (prune.apply, in the payload guard): the copy lowers as its original with those parts
    compacted, whenever that was, so its key is the original's digest and the ids (the
    compaction time differs from step to step; lowering, and every per-message memo, reads only
    whether a part is compacted)."""
    ids = "\x00".join(part_ids)
    return hashlib.blake2b(digest + ids.encode("utf-8", "surrogatepass"), digest_size=16,
                           person=b"pruned").digest()
