"""What Prune, Compact's selection and the offline summarizer compute per message, kept for the next step.

An agent resends its whole history every step; only the newest messages are new. What depends
only on one message (the tool outputs prune weighs, its size for the tail selection, the facts
the extractive summarizer and the retention check draw from it) is kept under the message's wire
digest (model.Message.digest, set by convert) and the settings that change it, so a step pays
for the new messages only. A message without a digest (built in the core, or a changed copy) is
computed every time.

Bounded in memory: each entry is charged its value's real size (message_cache.resident_size,
sys.getsizeof over the objects it holds) plus its key and bookkeeping; least recently used go
first. Values are never mutated once stored (tuples), so threads share them safely. The answers
are the same with the memo on or off: it only skips recomputing a pure function of the message.
"""
from __future__ import annotations

import sys

from .message_cache import ENTRY_OVERHEAD, SizedCache, resident_size


class StepMemo(SizedCache):
    """SizedCache's bound and LRU, keyed by (kind, digest, *settings) tuples."""

    def _put(self, key: tuple, value) -> None:
        self._add(key, value, resident_size(value) + _key_size(key) + ENTRY_OVERHEAD)

    def each(self, kind: str, messages: list, settings: tuple, compute) -> list:
        """[compute(msg) for msg in messages], each kept under (kind, msg.digest, *settings): one
        lock for all the lookups (get_many), misses computed outside it. compute never answers
        None: that is how get_many says a value is not kept."""
        keys = [(kind, msg.digest, *settings) if msg.digest else None for msg in messages]
        out = self.get_many(keys)
        for i, value in enumerate(out):
            if value is None:
                out[i] = value = compute(messages[i])
                if keys[i] is not None:
                    self._put(keys[i], value)
        return out


def _key_size(key: tuple) -> int:
    """The key tuple and its own items: the digest and small settings (their strings are most
    often interned constants, counted anyway: erring high keeps the bound)."""
    return sys.getsizeof(key) + sum(sys.getsizeof(x) for x in key)


def each(memo, kind: str, messages: list, settings: tuple, compute) -> list:
    """[compute(msg) for msg in messages], through memo when there is one (StepMemo.each)."""
    if memo is None:
        return [compute(x) for x in messages]
    return memo.each(kind, messages, settings, compute)
