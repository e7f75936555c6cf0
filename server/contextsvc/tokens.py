"""How many tokens: the reference agent's estimator, the pre-flight factor, the calibrated estimate and
the exact counter.

Every figure is reported with the method that produced it.
"""
from __future__ import annotations

import functools
import json
import math
import re
import threading
import zlib
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources

from . import _native_py, encodings, exact_cache, native
from .deadline import NO_DEADLINE, Deadline

ESTIMATE = "estimate:chars/4"  # UTF-16 code units / 4, JavaScript Math.round
PREFLIGHT = "estimate:ceil(chars/4*1.3)"
CALIBRATED = "calibrated:cl100k-ratios"  # per-class ratios fitted by bench/calibrate.py
SELF_CALIBRATED = "self-calibrated:"  # + "<factor>x" and the message it was derived from
EXACT_PREFIX = "tiktoken:"
SPLIT_RUNS = "+split-runs"  # appended to the exact method when a run was cut (see SLICE_CHARS)

# tiktoken's BPE is super-linear in the length of one regex piece, in time and memory (30 MB of
# one letter: 36 s and 1.7 GB; 4 MB: 2.3 s and 120 MB), so text is tokenized in slices of at most
# this many characters: 20 ms and a few MB each, and the deadline is checked between them.
SLICE_CHARS = 1 << 16
# A slice ends at the last exact piece boundary within this many characters of its end: a space
# after a non-space and before an ASCII letter starts a piece in both cl100k's and o200k's
# patterns, so cutting there changes no count. A slice with no such boundary (one run of 4 KiB
# without a space) is cut where it is: its count may differ by a token or two at the cut, and the
# method says so (SPLIT_RUNS).
_SLICE_SEARCH = 4096
_BOUNDARY = re.compile(r"(?<=\S) (?=[A-Za-z])")
RATIOS_FILE = "token_ratios.json"  # package data written by bench/calibrate.py


def estimate_units(units: int) -> int:
    """The reference estimate for a text of `units` UTF-16 code units."""
    return native.estimate_tokens(units)


def preflight(tokens: int, factor: Fraction) -> int:
    """ceil(tokens * factor), exactly (no float: ceil(10 * 1.3) is 13), in integers: no Fraction
    is made per figure."""
    return -(-tokens * factor.numerator // factor.denominator)


def json_array_units(units: list) -> int:
    """UTF-16 length of a JSON array whose elements have these lengths."""
    return 2 + sum(units) + max(0, len(units) - 1)


# ---- calibrated estimate ----------------------------------------------------------------------

def single_token_table_id() -> str:
    """Names the one-token CJK table the profile counts with, so that ratios fitted with
    another table are refused."""
    chars = "".join(map(chr, sorted(_native_py.SINGLE_TOKEN_CJK)))
    return f"{len(chars)}:{zlib.crc32(chars.encode()):08x}"


@dataclass(frozen=True)
class Ratios:
    """Per content class (native.TEXT_CLASSES order): tokens per UTF-16 unit and per run; per
    CJK count of the profile (_native_py.CJK_COUNTS order, over every block), tokens per
    character; and per content class the decision margin: the p95 of the calibrated figure's
    under-count on held-back real material whose main class it is (bench/calibrate.py)."""
    per_unit: tuple
    per_run: tuple
    per_cjk: tuple
    margins: tuple = ()

    @classmethod
    def from_mapping(cls, data: dict) -> "Ratios":
        classes, counts = native.TEXT_CLASSES, native.CJK_COUNTS
        if (tuple(data.get("classes", ())) != classes or data.get("block") != native.PROFILE_BLOCK
                or tuple(data.get("cjk_counts", ())) != counts
                or data.get("single_token_table") != single_token_table_id()):
            raise ValueError(f"{RATIOS_FILE} was fitted for another text profile; rerun bench/calibrate.py")
        margins = data.get("decision_margins", {})
        return cls(tuple(float(data["tokens_per_unit"][c]) for c in classes),
                   tuple(float(data["tokens_per_run"][c]) for c in classes),
                   tuple(float(data["tokens_per_cjk"][c]) for c in counts),
                   tuple(float(margins.get(c, 0.0)) for c in classes))

    def tokens(self, units, runs, cjk, margins: bool = False) -> float:
        """The unrounded estimate of a profile (text_profile without its length); a class
        never counts below zero. With margins, each class's share is raised by its decision
        margin (the CJK characters' share by the CJK class's): native.calibrated_pair."""
        return native.calibrated_pair((0, tuple(units), tuple(runs), tuple(cjk)), self.calibration)[1 if margins else 0]

    @functools.cached_property
    def calibration(self) -> "native.Calibration":
        """The coefficients as the compiled module reads them (the ratios never change)."""
        return native.Calibration(self.per_unit, self.per_run, self.per_cjk, self.margins)

    def margin_text(self) -> str:
        """The margins as the decision figure's method names them: "p95-margin(prose 4%,...)"."""
        return self._margin_text

    @functools.cached_property
    def _margin_text(self) -> str:  # every decision names it: formatted once (the ratios never change)
        return "p95-margin(" + ",".join(f"{c} {m * 100:.0f}%" for c, m in zip(native.TEXT_CLASSES, self.margins)) + ")"


_ratios = None


def ratios() -> Ratios:
    """The ratios shipped with the package (read once)."""
    global _ratios
    if _ratios is None:
        text = resources.files(__package__).joinpath("data", RATIOS_FILE).read_text()
        _ratios = Ratios.from_mapping(json.loads(text))
    return _ratios


def calibrated_profile(profiles) -> int:
    """The calibrated estimate of texts given by their native.text_profile results."""
    r = ratios()
    return round_half_up(sum(r.tokens(*p[1:]) for p in profiles))


def calibrated(text: str) -> int:
    """The calibrated estimate of one text: class-aware, meant to track cl100k within 10%."""
    return calibrated_profile([native.text_profile(text)])


def calibrated_pair(profile) -> tuple:
    """(calibrated, calibrated with the per-class decision margins) of one text_profile or
    json_profile result, both unrounded: one profile serves both figures."""
    return native.calibrated_pair(profile, ratios().calibration)


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def scaled(tokens: int, factor: float) -> int:
    """ceil(tokens * factor) for a measured (float) correction factor."""
    return math.ceil(tokens * factor - 1e-9)


# ---- exact counts -----------------------------------------------------------------------------

class ExactCounter:
    """tiktoken over one offline encoding (encodings.py); loaded on first use (about 1 s).

    count_parts caches the counts of pieces by content in a bounded LRU of cache_entries
    (0 = no cache), shared by every caller of this counter.
    """

    def __init__(self, encoding_name: str, cache_entries: int = 0):
        self.encoding_name = encodings.canonical(encoding_name)
        self._encoding = None
        self.cache = exact_cache.CountCache(cache_entries)

    @property
    def method(self) -> str:
        return EXACT_PREFIX + self.encoding_name

    def _get(self):
        if self._encoding is None:
            self._encoding = encodings.get(self.encoding_name)
        return self._encoding

    def count(self, text: str) -> int:
        return self.count_bounded(text)[0]

    def count_bounded(self, text: str, deadline: Deadline = NO_DEADLINE) -> tuple:
        """(tokens, exact): the count of text, tokenized in slices of at most SLICE_CHARS;
        exact is False when a slice had to cut a run without a boundary (a token or two off per cut)."""
        # Special-token strings in content are plain text to the model's tokenizer.
        encode = self._get().encode_ordinary
        if len(text) <= SLICE_CHARS:
            return len(encode(text)), True
        total, exact, start, n = 0, True, 0, len(text)
        while start < n:
            deadline.check("exact token count")
            end = min(start + SLICE_CHARS, n)
            if end < n:
                cut = None
                for cut in _BOUNDARY.finditer(text, end - _SLICE_SEARCH, end):
                    pass
                if cut is not None:
                    end = cut.start()
                else:
                    exact = False
            total += len(encode(text[start:end]))
            start = end
        return total, exact

    def count_cached(self, text: str, deadline: Deadline = NO_DEADLINE) -> int:
        """The exact count of text, its pieces cached (count_parts): a text counted at every
        step, or sharing most pieces with one counted before, is tokenized once."""
        return sum(self.count_parts([text], deadline))

    def count_parts(self, parts: list, deadline: Deadline = NO_DEADLINE) -> list:
        return self.count_parts_with_method(parts, deadline)[0]

    def count_parts_with_method(self, parts: list, deadline: Deadline = NO_DEADLINE) -> tuple:
        """(counts, method): the exact count of "".join(parts), attributed to the parts: their
        sum is exact (unless the method ends in SPLIT_RUNS: see count_bounded).

        The text is split at piece boundaries near each part's start and end
        (exact_cache.split_points); a split piece counts toward the part it starts in, and only
        pieces not in the cache are tokenized. A piece counted inexactly is not cached.
        """
        text = "".join(parts)
        starts = exact_cache.part_starts(parts)
        cuts = [0] + exact_cache.split_points(text, starts) + [len(text)]
        pieces = [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
        owners, part = [], 0
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                while part + 1 < len(starts) and starts[part + 1] <= a:
                    part += 1
                owners.append(part)
        keys = exact_cache.keys(self.encoding_name, pieces)
        counts = self.cache.lookup(keys)
        new, chars, all_exact = [], 0, True
        for i, c in enumerate(counts):
            if c is None:
                deadline.tick(len(new), "exact token count")
                counts[i], exact = self.count_bounded(pieces[i], deadline)
                if exact:
                    new.append((keys[i], counts[i]))
                all_exact = all_exact and exact
                chars += len(pieces[i])
        if new:
            self.cache.store(new, chars)
        out = [0] * len(parts)
        for owner, c in zip(owners, counts):
            out[owner] += c
        return out, self.method if all_exact else self.method + SPLIT_RUNS


class ExactCounters:
    """The exact counter of each offline encoding, made on first use, and the one a model counts
    with (encodings.for_model; `proxy` for a model with no offline tokenizer of its own). Each
    has its own cache of cache_entries: a short piece is its own key, whatever the encoding.
    endpoints: the providers' count endpoints (count_endpoints.CountEndpoints) the reported exact
    figure of their own models comes from, when configured."""

    def __init__(self, proxy: str, cache_entries: int = 0, endpoints=None):
        self.proxy = encodings.canonical(proxy)
        self.endpoints = endpoints
        self._entries = cache_entries
        self._counters: dict = {}
        self._lock = threading.Lock()

    def counter(self, encoding_name: str) -> ExactCounter:
        name = encodings.canonical(encoding_name)
        c = self._counters.get(name)  # the usual case, without the lock every step would take
        if c is not None:
            return c
        with self._lock:
            c = self._counters.get(name)
            if c is None:
                c = self._counters[name] = ExactCounter(name, self._entries)
        return c

    def for_model(self, model_id: str) -> tuple:
        """(counter, encodings.ExactTokenizer) of a model."""
        tok = encodings.for_model(model_id, self.proxy)
        return self.counter(tok.encoding), tok
