"""Converted messages, reused across requests.

An agent resends the same history on every step; only the newest messages are new. Converting a
protobuf message to core types costs far more than serializing and hashing it, so converted
messages are kept by the digest of their wire bytes. Core messages are never mutated after
conversion (the core builds new ones with dataclasses.replace), so sharing them between requests
and threads is safe. Bounded in memory: each entry is charged what its
Python objects really take (`resident_size`, a walk with sys.getsizeof, plus the entry's own
bookkeeping), so tiny and large messages alike stay within the bound; least recently used go
first.
"""
from __future__ import annotations

import hashlib
import operator
import sys
from collections import OrderedDict
from threading import Lock

# What one entry costs besides its message: the 16-byte digest key (49 bytes), the
# (message, size) tuple (56) and its int (28), and the OrderedDict's hash slot, index and link
# node (about 100, amortized over the table's growth)
ENTRY_OVERHEAD = 240

def resident_size(obj) -> int:
    """Bytes the Python objects reachable from obj take: sys.getsizeof of each, walking
    dataclasses with slots, lists, tuples and dicts without recursion. Objects every message
    shares (None, booleans, small ints, the empty string) are free; a converted message is a
    tree, so nothing else is counted twice (and a shared constant counted twice only errs high)."""
    size = 0
    stack = [obj]
    pop, extend, getsizeof = stack.pop, stack.extend, sys.getsizeof
    while stack:
        x = pop()
        t = type(x)
        if t is str:
            if x:
                size += getsizeof(x)
        elif t is list or t is tuple:
            size += getsizeof(x)
            extend(x)
        elif t is dict:
            size += getsizeof(x)
            extend(x.keys())
            extend(x.values())
        elif t is int:
            if not -5 <= x <= 256:
                size += getsizeof(x)
        elif x is None or t is bool:
            pass
        elif t is bytes or t is float:
            size += getsizeof(x)
        else:
            size += getsizeof(x)
            fields = _FIELDS.get(t)
            if fields is None:
                fields = _FIELDS[t] = _fields_of(t)
            extend(fields(x))
    return size


_FIELDS: dict = {}  # type -> a function giving the tuple of its attribute values


# A message's `digest` is the cache key itself, already charged in ENTRY_OVERHEAD.
_NOT_WALKED = ("__weakref__", "__dict__", "digest")


def _fields_of(t):
    names = [n for c in t.__mro__ for n in getattr(c, "__slots__", ()) if n not in _NOT_WALKED]
    getter = operator.attrgetter(*names) if names else None

    def values(x):
        out = () if getter is None else (getter(x) if len(names) > 1 else (getter(x),))
        d = getattr(x, "__dict__", None)
        return out + (d,) if d is not None else out
    return values


class SizedCache:
    """An LRU whose bound is the real size of what it holds (resident_size of each value)."""

    def __init__(self, max_bytes: int):
        self._max = max_bytes
        self._items = OrderedDict()  # key -> (value, charged bytes)
        self._bytes = 0
        self._lock = Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def get_many(self, keys: list) -> list:
        """[get(key) for key in keys] under one lock (a step looks up thousands); a None key
        gives None and counts as nothing."""
        out = [None] * len(keys)
        found = asked = 0
        with self._lock:
            get, touch = self._items.get, self._items.move_to_end
            for i, key in enumerate(keys):
                if key is None:
                    continue
                asked += 1
                item = get(key)
                if item is not None:
                    touch(key)
                    out[i] = item[0]
                    found += 1
            self.hits += found
            self.misses += asked - found
        return out

    def put(self, key, message, wire_size: int = 0) -> None:
        """Charged the value's real size; wire_size, when known, skips what cannot fit."""
        # no need to walk what cannot fit: Python text takes at least half its UTF-8 size
        if wire_size > 2 * self._max:
            return
        self._add(key, message, resident_size(message) + ENTRY_OVERHEAD)

    def _add(self, key, message, size: int) -> None:
        if size > self._max:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (message, size)
            self._bytes += size
            while self._bytes > self._max:
                _, (_, gone) = self._items.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


class MessageCache(SizedCache):
    """Converted messages by the digest of their wire bytes."""

    @staticmethod
    def key(wire: bytes) -> bytes:
        """A message's digest (model.Message.digest): the key here, in memo.py and lowering_memo.py."""
        return hashlib.blake2b(wire, digest_size=16).digest()
