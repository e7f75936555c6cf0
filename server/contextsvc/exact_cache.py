"""Exact token counts of a long text from cached counts of its pieces.

tiktoken first cuts text into pieces with a regular expression and runs BPE on each piece alone,
so the count of a text is the sum of the counts of any split of it made at piece boundaries.
split_points finds positions that are piece boundaries of cl100k/o200k's pattern whatever
surrounds them:

* after an ASCII letter or digit, before ASCII punctuation: no piece runs from a letter or digit
  into punctuation;
* before an ASCII letter that follows two or more ASCII punctuation characters other than the
  apostrophe, the first not a slash: the piece holding the last one is a punctuation run, which
  stops at the letter (the letter piece cannot start one character early: a run holding the
  first goes on through every punctuation character up to the letter; only o200k's slashes
  taken after a line break end a run at punctuation, hence the first is not a slash).

In a JSON request every element starts with `{"key` and ends with `..."}]}`, so the per-element
pieces of a conversation are stable: measuring one that grew by one message tokenizes only that
message and the few characters joining it to the previous one.
"""
from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections import OrderedDict

# [!-&(-/:-@\[-`{-~] below is ASCII punctuation but the apostrophe (which starts contractions)
# 2+ punctuation, then a letter; not from a slash: o200k's punctuation piece takes slashes after
# its line breaks, so after ".\n" a part "/:key" is cut ".\n/" + ":key" (no boundary at the letter)
_HEAD = re.compile(r"""(?!/)[!-&(-/:-@\[-`{-~]{2,16}(?=[A-Za-z])""")
_TAIL_SCAN = 16  # how far back from an element's end a punctuation run is looked for
_TAIL = re.compile(r"""[A-Za-z0-9][!-&(-/:-@\[-`{-~]{1,%d}\Z""" % _TAIL_SCAN)  # alnum, punctuation, end
_INLINE_KEY = 64  # pieces up to this long are their own cache key; longer ones are hashed


def part_starts(parts: list) -> list:
    """Where each part starts in "".join(parts): what split_points takes."""
    return list(itertools.accumulate((len(p) for p in parts[:-1]), initial=0)) if parts else []


def split_points(text: str, starts: list) -> list:
    """Sorted positions in text that are piece boundaries, near the given part starts: for a part
    [s, e), the letter after its leading punctuation and the start of its trailing punctuation."""
    points = []
    n = len(text)
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else n
        head = _HEAD.match(text, s, e)
        h = head.end() if head else -1
        if h > 0:
            points.append(h)
        tail = _TAIL.search(text, max(s, e - _TAIL_SCAN - 1), e)
        if tail and tail.start() + 1 > h:
            points.append(tail.start() + 1)
    return points


def keys(encoding: str, pieces: list) -> list:
    """The cache key of each piece: a short piece itself, else blake2b of encoding and text."""
    person = encoding.encode()[:16]
    blake2b = hashlib.blake2b
    return [p if len(p) <= _INLINE_KEY else
            blake2b(p.encode("utf-8", "surrogatepass"), digest_size=16, person=person).digest()
            for p in pieces]


class CountCache:
    """A bounded, thread-safe LRU of token counts by piece key."""

    def __init__(self, entries: int):
        self.entries = entries
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.tokenized_chars = 0  # characters handed to the tokenizer, for tests and benches

    def __len__(self) -> int:
        return len(self._data)

    def lookup(self, keys: list) -> list:
        """The cached count of each key, or None."""
        data = self._data
        out = []
        with self._lock:
            for k in keys:
                v = data.get(k)
                if v is not None:
                    data.move_to_end(k)
                out.append(v)
            found = sum(v is not None for v in out)
            self.hits += found
            self.misses += len(keys) - found
        return out

    def store(self, items: list, chars: int) -> None:
        if self.entries <= 0:
            return
        data = self._data
        with self._lock:
            self.tokenized_chars += chars
            for k, v in items:
                data[k] = v
                data.move_to_end(k)
            while len(data) > self.entries:
                data.popitem(last=False)
