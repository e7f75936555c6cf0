"""Script corrections (step.figures): what the exact count of an element of mostly non-Latin
text adds to its calibrated figures, or takes off them where the count is the model's own.

The per-class ratios are fitted on English and CJK material and read such text at 0.2-0.8x
cl100k (Greek 0.27x, Hindi 0.26x, Thai 0.17x, Polish 0.67x): a gpt-4o session sent a body o200k
counted over its window. So each element at least 1% of whose characters are neither ASCII nor
CJK (Greek, Cyrillic, Arabic, Hebrew, Devanagari, Thai, accented Latin, emoji: wide, the UTF-8
bytes over the UTF-16 units, less two for each CJK character, tells them from the profile alone)
counts at least its exact count in the counter's encoding (the model's own, else the one the
family priors scale; Claude counts these scripts at 0.73-0.98x cl100k and accented Latin and
emoji at up to 1.7x, within its priors); never less than its calibrated figures, with a proxy.

The CJK ratios are cl100k's, which spends two or three tokens on most Han and Hangul where o200k
spends about one: a gpt-5 session whose tool output was Korean compacted at 54% of its window,
its decision figure 2.1x o200k's count (Chinese and Japanese 1.4x), and the provider's count
could not bring it down (the tokenizer factor is never below 1). So where the counter is the
model's own tokenizer (o200k for GPT-4o, GPT-4.1, GPT-5, the o-series) an element at least 1% of
whose characters are CJK is counted too, and every counted element's calibrated figure is its
exact count, less or more than the ratios', and its decision figure that count with the
element's own margins (its decision figure over its calibrated one): the margins also stand for
what the body holds beyond its elements (the request's keys, each tool's wrapper), which a
request sized at its elements' bare counts left out, up to 1% under o200k's count of the body.

The corrections are held per element, in arrays aligned with the elements: a session's next step
takes those of the elements it shares with this one as they are and checks only its others (a
history of a thousand elements, most with an emoji or a dash, is otherwise read whole in Python
at every step), and a stretch's sum is taken in C.
"""
from __future__ import annotations

import functools
import itertools
import operator
import sys
from array import array
from dataclasses import dataclass
from typing import Callable

from .. import tokens
from ..deadline import Deadline
from ..memo import SCRIPT, Memo
from ..positions import positions

# an element whose non-ASCII, non-CJK characters (or, counted with the model's own tokenizer, CJK
# characters) are at least 1 / SCRIPT_SHARE of it is counted
SCRIPT_SHARE = 100
# what the encoding's name is tagged with where the counter is the model's own tokenizer: its
# corrections are others (they may take off), never taken for a proxy's of the same encoding
OWN = "+own"


@dataclass(slots=True)
class Corrections:
    """Of each element of a list: what its exact count adds to its calibrated figure (cal) and
    to its decision figure (dec), and whether it adds anything (present: 1 or 0); counted in
    encoding."""
    cal: array
    dec: array
    present: bytearray
    encoding: str

    @classmethod
    def none(cls, n: int, encoding: str) -> "Corrections":
        return cls(array("d", bytes(8 * n)), array("d", bytes(8 * n)), bytearray(n), encoding)

    def __add__(self, other: "Corrections") -> "Corrections":
        """The corrections of this list's elements followed by other's."""
        return Corrections(self.cal + other.cal, self.dec + other.dec, self.present + other.present, self.encoding)

    def added(self, pair: tuple, start: int = 0, end: int | None = None) -> tuple:
        """pair (calibrated, decision figure) with the corrections of elements start..end added
        one at a time, in order: the same sums as adding each element's to it."""
        if self.present.find(1, start, len(self.present) if end is None else end) < 0:
            return pair
        present = self.present[start:end]
        return (functools.reduce(operator.add, itertools.compress(self.cal[start:end], present), pair[0]),
                functools.reduce(operator.add, itertools.compress(self.dec[start:end], present), pair[1]))

    def calibrated(self, start: int, end: int) -> float:
        """The sum of the calibrated corrections of elements start..end."""
        return sum(itertools.compress(self.cal[start:end], self.present[start:end]))

    def size(self) -> int:
        return sys.getsizeof(self.cal) + sys.getsizeof(self.dec) + sys.getsizeof(self.present)


def corrections(profiles: list, wide_at: Callable[[list], list], texts_at: Callable[[list], list], counter,
                memo: Memo | None, deadline: Deadline, earlier: Corrections | None = None,
                same: list | None = None, own: bool = False) -> Corrections:
    """The corrections of the elements whose text profiles these are (native.text_profile),
    wide_at(indices) their wide values and texts_at(indices) their JSON texts, counted by
    counter; own: the counter is the model's own tokenizer (encodings.ExactTokenizer.native).
    earlier: the corrections of an earlier list whose first len(same) elements stand where these
    do, same[i] saying whether element i is the very one (its profile the same tuple): those are
    taken as they are. Each element's is kept by the memo per element text."""
    n = len(profiles)
    encoding = counter.encoding_name + (OWN if own else "")
    if earlier is None or same is None or earlier.encoding != encoding:
        out, check = Corrections.none(n, encoding), range(n)
    else:
        common = len(same)
        out = Corrections(earlier.cal[:common], earlier.dec[:common], earlier.present[:common], encoding)
        changed = positions(same, False)
        for i in changed:
            out.cal[i] = out.dec[i] = 0.0
            out.present[i] = 0
        out.cal.extend(itertools.repeat(0.0, n - common))
        out.dec.extend(itertools.repeat(0.0, n - common))
        out.present.extend(bytes(n - common))
        check = changed + list(range(common, n))
    flagged = [i for i, wide in zip(check, wide_at(check))
               if wide > 0 and (_other_script(wide, profiles[i]) or own and _cjk(profiles[i]))]
    if not flagged:
        return out
    texts = texts_at(flagged)
    keys = [(SCRIPT, encoding, t) for t in texts]
    found = memo.get_many(keys) if memo is not None else [None] * len(keys)
    for i, text, key, kept in zip(flagged, texts, keys, found):
        if kept is None:
            count = float(counter.count_cached(text, deadline))
            cal, decide = tokens.calibrated_pair(profiles[i])
            if own:  # the count is the figure; the decision figure keeps the element's margins over it
                kept = (count - cal, count * decide / cal - decide if cal > 0 else count - decide)
            else:
                kept = (max(0.0, count - cal), max(0.0, count - decide))
            if memo is not None:
                memo.put(key, kept)
        if kept[0] or kept[1]:
            out.cal[i], out.dec[i] = kept
            out.present[i] = 1
    return out


def _cjk(profile: tuple) -> bool:
    """At least 1 / SCRIPT_SHARE of the element's characters are CJK."""
    cjk = profile[3]
    return (cjk[0] + cjk[1] + cjk[2] + cjk[3]) * SCRIPT_SHARE >= profile[0]


def _other_script(wide: int, profile: tuple) -> bool:
    """At least 1 / SCRIPT_SHARE of the element's characters are neither ASCII nor CJK."""
    cjk = profile[3]
    other = wide - 2 * (cjk[0] + cjk[1] + cjk[2] + cjk[3])
    return other > 0 and other * SCRIPT_SHARE >= profile[0]
