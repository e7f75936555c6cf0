"""Pure-Python hot path: the executable specification of `contextsvc._native_c`.

Both modules expose the same functions with the same results and the same exceptions;
`contextsvc.native` picks one of them. Everything here favours being obviously right over
being fast: the compiled module is the fast one, and the tests check it against this one.

JSON text below always means json_text(value): what

    json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

writes, with numbers as Node's JSON.stringify writes them (docs/design.md §3, "Bytes"): a float by
number_text (ECMAScript's Number::toString: 1.0 -> 1, 1e-07 -> 1e-7, -0.0 -> 0), an int as
int.__repr__ (exact, however big: a JSON integer the caller wrote is kept as written). NaN and
the infinities are not JSON: every function here refuses them with ValueError. One more
deliberate difference: a surrogate code point (U+D800..U+DFFF) inside a str is a lone
surrogate and is counted as its six-character escape ``\\udXXX``, as JavaScript's
JSON.stringify writes it (json.dumps would emit it raw, which cannot be encoded as UTF-8).
"""
from __future__ import annotations

import json
import json.encoder
import operator
import re
import secrets
import sys
from importlib import resources

from ._wire_py import (WIRE_DEPTH, WIRE_I32, WIRE_I64, WIRE_LEN, WIRE_MESSAGE, WIRE_PLAIN, WIRE_STRING,
                       WIRE_VARINT, message_spans, wire_entries, wire_schema)

__all__ = [
    "MAX_JSON_DEPTH",
    "number_text",
    "json_text",
    "has_float",
    "json_size",
    "json_lengths",
    "utf16_len",
    "estimate_tokens",
    "split_turns",
    "select_tail",
    "TEXT_CLASSES",
    "PROFILE_BLOCK",
    "CJK_COUNTS",
    "text_profile",
    "json_profile",
    "sum_profiles",
    "Calibration",
    "calibrated_pair",
    "WIRE_DEPTH",
    "WIRE_VARINT",
    "WIRE_I64",
    "WIRE_LEN",
    "WIRE_I32",
    "WIRE_PLAIN",
    "WIRE_STRING",
    "WIRE_MESSAGE",
    "wire_schema",
    "message_spans",
    "wire_entries",
    "resident_size",
]

# Containers nested deeper than this raise ValueError (the compiled module imports it from here).
MAX_JSON_DEPTH = 1000

# Characters JSON must escape. The short forms (\" \\ \b \f \n \r \t) are two characters;
# the remaining control characters are written \u00XX, six characters. 0x7f is not escaped.
_SHORT_ESCAPES = frozenset('"\\\b\f\n\r\t')
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _escape_extra(s: str) -> int:
    """Characters (= bytes, they are ASCII) that escaping adds to s."""
    return sum(1 if ch in _SHORT_ESCAPES else 5 for ch in _NEEDS_ESCAPE.findall(s))


def _str_lengths(s: str) -> tuple[int, int]:
    """(UTF-8 bytes, UTF-16 units) of the JSON string literal for s, quotes included."""
    s = str.__str__(s)  # the str data itself, whatever a subclass overrides
    extra = _escape_extra(s)
    if s.isascii():
        n = len(s) + 2 + extra
        return n, n
    surrogates = len(_SURROGATE.findall(s))
    # "surrogatepass" writes each surrogate as 3 bytes; its escape \udXXX is 6.
    utf8 = len(s.encode("utf-8", "surrogatepass")) + 3 * surrogates
    # Astral characters are two UTF-16 units; a surrogate's escape is six.
    utf16 = len(s) + len(_ASTRAL.findall(s)) + 5 * surrogates
    return utf8 + 2 + extra, utf16 + 2 + extra


# Node's JSON.stringify writes a double in decimal notation from 1e-7 up to (not including) 1e21,
# and with an exponent outside that range (ECMAScript Number::toString, step 6 onwards).
_MAX_DECIMAL_EXPONENT = 21
_MIN_DECIMAL_EXPONENT = -6


def number_text(x: float) -> str:
    """A finite double as Node's JSON.stringify writes it: ECMAScript's Number::toString.

    The digits are float.__repr__'s, the shortest that read back as x (as V8's are); only the
    layout differs. With those k digits worth 0.DIGITS * 10**n: k <= n <= 21 gives the digits
    and n - k zeros; 0 < n <= 21 puts the point after n digits; -6 < n <= 0 gives "0.", -n
    zeros and the digits; otherwise d[.ddd]e+N / e-N (no padding of the exponent). -0.0 is "0".
    This is the one definition of a number's text: the body's serializer (json_text) writes
    it, the counters here count it and the compiled module's are tested against it.
    """
    if x != x or x in (_INF, -_INF):
        raise ValueError(f"Out of range float values are not JSON compliant: {float.__repr__(x)}")
    if x == 0:
        return "0"
    text = float.__repr__(x)
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    n = len(whole) + int(exponent or 0) - (len(digits) - len(significant))
    digits = significant.rstrip("0")
    k = len(digits)
    if k <= n <= _MAX_DECIMAL_EXPONENT:
        out = digits + "0" * (n - k)
    elif 0 < n <= _MAX_DECIMAL_EXPONENT:
        out = digits[:n] + "." + digits[n:]
    elif _MIN_DECIMAL_EXPONENT < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + out


_INF = float("inf")


def _not_serializable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def json_text(value) -> str:
    """The JSON text of value (see the module docstring): the body Assemble emits is this text.

    Without floats it is json.dumps's own (its C encoder); with some, see json_text_with_floats.
    """
    if not has_float(value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return json_text_with_floats(value, has_float)


# Marks, in the copy json_text_with_floats serializes, a number json.dumps cannot write as Node
# does (no other string of a body holds a NUL and this tag)
_NUMBER_TAG = secrets.token_hex(8)
_NUMBER_MARK = re.compile('"\\\\u0000' + _NUMBER_TAG + r'(\d+)"')


def json_text_with_floats(value, has_float) -> str:
    """json_text of a value holding floats (has_float is the caller's implementation).

    json.dumps's C encoder writes a copy of the paths that lead to floats (has_float says which
    subtrees; the others are shared, not copied) in which each float is something it writes as
    Node does: the float itself when its repr is Node's text (most non-integral ones), an int
    for an integral one (below 1e21 Node writes all its digits), else a marked string put back
    afterwards (1e-7, 1.5e-5, 1e21). A float dict key becomes its text. Should that make two
    keys one, json's pure-Python encoder (the C encoder's reference) writes value instead.
    """
    numbers = []

    def number(x):
        text = number_text(x)
        if text == float.__repr__(x):
            return x
        if "." not in text and "e" not in text:
            return int(text)
        numbers.append(text)
        return f"\x00{_NUMBER_TAG}{len(numbers) - 1}"

    def copy(o):
        if isinstance(o, float):
            return number(o)
        if isinstance(o, (list, tuple)):
            return [copy(v) if has_float(v) else v for v in o]
        pairs = list(o.items())  # a dict: has_float found a float in it
        out = {(number_text(k) if isinstance(k, float) else k): copy(v) if has_float(v) else v
               for k, v in pairs}
        if len(out) != len(pairs):
            raise _KeysMerged
        return out

    try:
        text = json.dumps(copy(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except _KeysMerged:
        encode = json.encoder._make_iterencode(
            {}, _not_serializable, json.encoder.encode_basestring, None, number_text, ":", ",",
            False, False, True)
        return "".join(encode(value, 0))
    return _NUMBER_MARK.sub(lambda m: numbers[int(m.group(1))], text) if numbers else text


class _KeysMerged(Exception):
    """A float key's text is another key of the same dict."""


def has_float(value) -> bool:
    """True when the JSON text of value writes a float, as a value or as a dict key (walked as
    json_lengths walks: a subclass's __iter__ or items() is honoured). Other types are passed
    over (the walks that write or count text refuse them)."""
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        obj, depth = pop()
        if isinstance(obj, float):
            return True
        if isinstance(obj, (str, int)) or obj is None:
            continue
        if isinstance(obj, (list, tuple)):
            if depth + 1 > MAX_JSON_DEPTH:
                raise _depth_error()
            for item in list(obj):
                push((item, depth + 1))
        elif isinstance(obj, dict) and dict.__len__(obj):
            if depth + 1 > MAX_JSON_DEPTH:
                raise _depth_error()
            for key, item in obj.items():
                if isinstance(key, float):
                    return True
                push((item, depth + 1))
    return False


def _key_text(key) -> str:
    """A non-str dict key as json.dumps turns it into a string (checked in json's order)."""
    if isinstance(key, float):
        return number_text(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _depth_error() -> ValueError:
    return ValueError(f"JSON nesting deeper than {MAX_JSON_DEPTH} containers")


_ITEM = object()  # tags a pending (key, value) pair of a dict on the work stack


def json_lengths(value) -> tuple[int, int]:
    """(UTF-8 bytes, UTF-16 units) of the JSON text of value, without building it.

    The walk is depth-first in document order (an explicit stack, so deep nesting is bounded
    by MAX_JSON_DEPTH and not by Python's recursion limit), so the first unsupported value
    met is the one json.dumps would complain about.
    """
    utf8 = utf16 = 0
    stack = [(value, 0)]  # (value, depth of its enclosing container) or (_ITEM, (pair, depth))
    pop, push = stack.pop, stack.append
    while stack:
        obj, depth = pop()
        if obj is _ITEM:
            pair, depth = depth
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError("items must return 2-tuples")
            key, obj = pair
            push((obj, depth))  # the value comes next, after its key
            if isinstance(key, str):
                b, u = _str_lengths(key)
            else:
                b = u = len(_key_text(key)) + 2
        elif obj is None or obj is True:
            b = u = 4
        elif obj is False:
            b = u = 5
        elif isinstance(obj, str):
            b, u = _str_lengths(obj)
        elif isinstance(obj, int):
            b = u = len(int.__repr__(obj))
        elif isinstance(obj, float):
            b = u = len(number_text(obj))
        elif isinstance(obj, (list, tuple)):
            if depth + 1 > MAX_JSON_DEPTH:
                raise _depth_error()
            items = list(obj)  # as json.dumps: a subclass's __iter__ is honoured
            b = u = 2 + max(len(items) - 1, 0)  # brackets and commas
            for item in reversed(items):
                push((item, depth + 1))
        elif isinstance(obj, dict):
            if depth + 1 > MAX_JSON_DEPTH:
                raise _depth_error()
            # as json.dumps: an empty dict is "{}", otherwise a subclass's items() is honoured
            items = list(obj.items()) if dict.__len__(obj) else []
            b = u = 2 + 2 * len(items) - (1 if items else 0)  # braces, colons, commas
            for pair in reversed(items):
                push((_ITEM, (pair, depth + 1)))
        else:
            raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
        utf8 += b
        utf16 += u
    return utf8, utf16


def json_size(value) -> int:
    """UTF-8 byte length of the JSON text of value, without building it."""
    return json_lengths(value)[0]


def utf16_len(s: str) -> int:
    """JavaScript's s.length: astral characters count two, everything else one."""
    if not isinstance(s, str):
        raise TypeError(f"utf16_len() expects str, not {type(s).__name__}")
    s = str.__str__(s)
    if s.isascii():
        return len(s)
    return len(s) + len(_ASTRAL.findall(s))


def estimate_tokens(x) -> int:
    """The reference agent's estimate max(0, Math.round(chars / 4)), JavaScript rounding (halves up).

    x is a str (chars = its UTF-16 length) or a non-negative int (the chars count itself);
    bool is refused as a likely mistake. For n >= 0, floor(n / 4 + 1/2) == (n + 2) // 4.
    """
    if isinstance(x, str):
        chars = utf16_len(x)
    elif isinstance(x, int) and not isinstance(x, bool):
        chars = int.__int__(x)  # the int value itself, whatever a subclass overrides
        if chars < 0:
            raise ValueError(f"estimate_tokens() needs a non-negative count, got {chars}")
    else:
        raise TypeError(f"estimate_tokens() expects str or int, not {type(x).__name__}")
    return (chars + 2) // 4


def split_turns(starts) -> list[int]:
    """Indices of the truthy entries of starts (one entry per message, truthy = starts a turn)."""
    if isinstance(starts, str):
        raise TypeError("split_turns() expects a sequence of flags, not str")
    return [i for i, flag in enumerate(starts) if flag]


def _non_negative(name: str, value) -> int:
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def select_tail(starts, sizes, tail_turns, budget) -> int:
    """First message index of the kept tail, or -1 when nothing is kept.

    starts: ascending turn-start indices (split_turns output); turn k runs from starts[k] to
    starts[k + 1] (the last one to len(sizes)). The last tail_turns turns are walked newest
    first with `remaining = budget`: a turn that fits is kept whole and the walk goes on; a
    turn that does not fit keeps its longest fitting suffix that excludes the turn's first
    message (if any) and ends the walk; once remaining is <= 0 nothing more is kept.
    """
    tail_turns = _non_negative("tail_turns", tail_turns)
    budget = _non_negative("budget", budget)
    sizes = [_non_negative("size", s) for s in sizes]
    n = len(sizes)
    starts = [operator.index(s) for s in starts]
    previous = -1
    for s in starts:
        if not previous < s < n:
            raise ValueError(
                f"turn starts must be ascending indices into the {n} sizes, got {s} after {previous}"
            )
        previous = s
    kept = -1
    remaining = budget
    ends = starts[1:] + [n]
    first = max(0, len(starts) - tail_turns)
    for k in range(len(starts) - 1, first - 1, -1):
        if remaining <= 0:
            break
        start, end = starts[k], ends[k]
        size = sum(sizes[start:end])
        if size <= remaining:
            remaining -= size
            kept = start
            continue
        # Suffix sums only shrink as j grows: walk back from the end while they still fit.
        j, suffix = end, 0
        while j - 1 > start and suffix + sizes[j - 1] <= remaining:
            j -= 1
            suffix += sizes[j]
        if j < end:
            kept = j
        break
    return kept



# ---- text profile: the content classes behind the calibrated estimate ----------------------

# Content classes, in the order text_profile reports them (tokens.py holds a ratio for each).
TEXT_CLASSES = ("prose", "cjk", "code", "json", "base64", "hex", "logs", "hexdump", "testlog", "table")
PROSE, CJK, CODE, JSON, BASE64, HEX, LOGS, HEXDUMP, TESTLOG, TABLE = range(len(TEXT_CLASSES))

# Text is classified in blocks of this many code points: small enough to follow a conversation
# that mixes prose, code and tool output, large enough for a stable histogram.
PROFILE_BLOCK = 256

# Character kinds counted in a block's histogram. K_B64_PUNCT (+ / =) is punctuation everywhere
# but in base64, whose alphabet it completes: base64 of machine code is a fifth of them.
(K_HEX_LETTER, K_LETTER, K_DIGIT, K_SPACE, K_NEWLINE, K_JSON, K_BACKSLASH, K_PUNCT, K_CJK,
 K_OTHER, K_B64_PUNCT) = range(11)
KINDS = 11


def _ascii_kind(c: int) -> int:
    ch = chr(c)
    if ch in "abcdefABCDEF":
        return K_HEX_LETTER
    if ch.isalpha():
        return K_LETTER
    if ch.isdigit():
        return K_DIGIT
    if ch in " \t":
        return K_SPACE
    if ch in "\n\r":
        return K_NEWLINE
    if ch in '"{}[]:,':
        return K_JSON
    if ch == "\\":
        return K_BACKSLASH
    if ch in "+/=":
        return K_B64_PUNCT
    return K_PUNCT  # other punctuation and control characters


# Kind of each ASCII code point (the compiled module copies this table).
ASCII_KINDS = bytes(_ascii_kind(c) for c in range(128))

# Runs: maximal stretches of one group of kinds (letters, digits, spaces, newlines,
# punctuation, CJK, other), a cheap stand-in for the tokenizer's pre-split pieces.
RUN_GROUPS = bytes([0, 0, 1, 2, 3, 4, 4, 4, 5, 6, 4])


def _is_cjk(cp: int) -> bool:
    """CJK ideographs, kana, Hangul, CJK punctuation and full-width forms."""
    return (0x2E80 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7AF or 0xF900 <= cp <= 0xFAFF
            or 0xFF00 <= cp <= 0xFFEF or 0x20000 <= cp <= 0x3FFFF)


# Counts of the CJK characters of every block, in the order text_profile reports them (tokens.py
# holds a ratio for each). cl100k spends about one token on a kana but two or three on most Han
# and Hangul, except on the few hundred it holds whole ("single", across the scripts).
CJK_COUNTS = ("kana", "han", "hangul", "other", "single")
KANA, HAN, HANGUL, OTHER_CJK, SINGLE = range(len(CJK_COUNTS))

# BMP CJK characters that are one cl100k token on their own, written by bench/calibrate.py.
SINGLE_TOKEN_FILE = "cjk_single_tokens.json"


def _load_single_tokens() -> frozenset:
    text = resources.files(__package__).joinpath("data", SINGLE_TOKEN_FILE).read_text(encoding="utf-8")
    return frozenset(map(ord, json.loads(text)["characters"]))


SINGLE_TOKEN_CJK = _load_single_tokens()


def cjk_script(cp: int) -> int:
    """KANA, HAN, HANGUL or OTHER_CJK for a CJK code point (_is_cjk)."""
    if 0x3040 <= cp <= 0x30FF:
        return KANA
    if 0x4E00 <= cp <= 0x9FFF:
        return HAN
    if 0xAC00 <= cp <= 0xD7AF:
        return HANGUL
    return OTHER_CJK


def classify_block(hist, upper: int, switches: int, n: int, padding: int) -> int:
    """The content class of a block of n code points from its histogram of kinds, its count of
    A-Z, its count of adjacent letter/digit pairs and its padding (block_padding). Integer
    thresholds: no rounding."""
    letters = hist[K_HEX_LETTER] + hist[K_LETTER]
    alnum = letters + hist[K_DIGIT]
    space = hist[K_SPACE] + hist[K_NEWLINE]
    punct = hist[K_PUNCT] + hist[K_B64_PUNCT]
    if hist[K_CJK] * 4 >= n:
        return CJK
    # an unbroken alphanumeric run, or one of base64's alphabet (+ / = too, but no space and no
    # other punctuation: a listing of paths is not base64)
    if space * 20 <= n and (alnum * 10 >= n * 9 or ((alnum + hist[K_B64_PUNCT]) * 10 >= n * 9
                                                  and hist[K_SPACE] == 0 and hist[K_PUNCT] * 100 <= n)):
        # hex digits only, but for the n of each escaped newline (\n) of a JSON string
        if alnum * 10 >= n * 9 and hist[K_LETTER] <= hist[K_BACKSLASH] and hist[K_DIGIT] * 5 >= n * 2:
            return HEX
        if switches * 10 >= n or upper * 5 >= n:
            return BASE64
    # a hex dump (xxd, od, hexdump -C): hex digit pairs and groups between spaces, at most a
    # few other letters (its character column); tokenized far more finely than logs
    if (hist[K_DIGIT] + hist[K_HEX_LETTER]) * 2 >= n and space * 8 >= n and hist[K_LETTER] * 8 <= n:
        return HEXDUMP
    if (hist[K_JSON] + hist[K_BACKSLASH]) * 100 >= n * 15:
        return JSON
    if is_table(hist, n):
        return TABLE
    # test and CI output (pytest node ids and PASSED/FAILED lines, paths, progress dots): almost
    # no spaces but the padding of pytest -v's progress column ("PASSED      [ 10%]"), and dense
    # punctuation (:: [] / . _ -) among the rest; cl100k cuts it finer than code (indented) or logs
    if (space - padding) * 20 <= n and (punct + hist[K_JSON]) * 8 >= n - padding:
        return TESTLOG
    if hist[K_DIGIT] * 10 >= n:
        return LOGS
    if (hist[K_JSON] + hist[K_BACKSLASH] + punct) * 10 >= n:
        return CODE
    return PROSE


def is_table(hist, n: int) -> bool:
    """Delimited records (CSV and RECORD rows, TSV): fields of letters and digits (half the block
    or more, one in 32 a digit: sizes, numbers) joined by punctuation with not one space in the
    block (once it is half a full one),
    or tabs and line ends escaped in a JSON string (a backslash every 16 characters or closer)
    with at most one space in 24 and little JSON punctuation. Digests, paths and numbers with no
    space between them are cut finer by cl100k than logs or test output (minified code and long
    URLs are not: few digits); pytest's progress dots are not fields."""
    alnum = hist[K_HEX_LETTER] + hist[K_LETTER] + hist[K_DIGIT]
    return ((hist[K_SPACE] == 0 and n * 2 >= PROFILE_BLOCK and alnum * 2 >= n and hist[K_DIGIT] * 32 >= n)
            or (hist[K_BACKSLASH] * 16 >= n and hist[K_SPACE] * 24 <= n and hist[K_JSON] * 32 <= n))


def block_padding(block: str) -> int:
    """Spaces (or tabs) in runs of two or more after a line's first other character: columns
    lined up with spaces, not indentation and not the single space between words. A line starts
    after a newline and after a newline's escape in a JSON string (a backslash, then n); a block
    is taken to start mid-line (blocks cut lines anywhere, and most of a line is past its
    indentation)."""
    padding = run = 0
    indent = was_backslash = False
    for ch in block:
        if ch in " \t":
            run += 1
        else:
            if run >= 2 and not indent:
                padding += run
            run = 0
            indent = ch in "\n\r" or (ch == "n" and was_backslash)
        was_backslash = ch == "\\"
    if run >= 2 and not indent:
        padding += run
    return padding


def text_profile(s: str) -> tuple:
    """(UTF-16 length, UTF-16 units per content class, runs per content class, CJK counts) of
    s, in one pass.

    s is cut into blocks of PROFILE_BLOCK code points (the last may be shorter); each block is
    classified by classify_block and its UTF-16 units (astral characters count two) and its
    runs (a run starts at the block's first character and wherever the RUN_GROUPS group
    changes) go to its class. The per-class units sum to the UTF-16 length. The CJK counts
    (CJK_COUNTS order) cover every block, whatever its class (CJK words in code or logs cost
    as much as in CJK prose): its CJK characters by cjk_script, and those of SINGLE_TOKEN_CJK.
    """
    if not isinstance(s, str):
        raise TypeError(f"text_profile() expects str, not {type(s).__name__}")
    s = str.__str__(s)
    units = [0] * len(TEXT_CLASSES)
    runs = [0] * len(TEXT_CLASSES)
    cjk = [0] * len(CJK_COUNTS)
    total = 0
    for start in range(0, len(s), PROFILE_BLOCK):
        block = s[start:start + PROFILE_BLOCK]
        hist = [0] * KINDS
        block_cjk = [0] * len(CJK_COUNTS)
        upper = switches = astral = block_runs = 0
        previous = K_OTHER
        group = -1
        for ch in block:
            cp = ord(ch)
            if cp < 128:
                kind = ASCII_KINDS[cp]
                if 65 <= cp <= 90:
                    upper += 1
            elif _is_cjk(cp):
                kind = K_CJK
                block_cjk[cjk_script(cp)] += 1
                block_cjk[SINGLE] += cp in SINGLE_TOKEN_CJK
            else:
                kind = K_OTHER
            if cp > 0xFFFF:
                astral += 1
            hist[kind] += 1
            if (kind == K_DIGIT and previous <= K_LETTER) or (kind <= K_LETTER and previous == K_DIGIT):
                switches += 1
            if RUN_GROUPS[kind] != group:
                block_runs += 1
                group = RUN_GROUPS[kind]
            previous = kind
        n = len(block)
        cls = classify_block(hist, upper, switches, n, block_padding(block))
        units[cls] += n + astral
        runs[cls] += block_runs
        total += n + astral
        cjk = [a + b for a, b in zip(cjk, block_cjk)]
    return total, tuple(units), tuple(runs), tuple(cjk)


def sum_profiles(profiles, extra) -> tuple:
    """The text profile of texts taken together, from theirs (text_profile results): each of the
    profiles and extra, added up field by field. Each text's blocks start at its own start, so
    this is the profile of their concatenation only where every text but the last fills whole
    blocks; the calibrated figures of a stretch of elements are defined on it (step.figures)."""
    total = extra[0]
    units, runs, cjk = list(extra[1]), list(extra[2]), list(extra[3])
    for p in profiles:
        total += p[0]
        for i, u in enumerate(p[1]):
            units[i] += u
        for i, r in enumerate(p[2]):
            runs[i] += r
        for i, c in enumerate(p[3]):
            cjk[i] += c
    return total, tuple(units), tuple(runs), tuple(cjk)


class Calibration:
    """The coefficients of the calibrated figure (tokens.Ratios), held for calibrated_pair: per
    content class (TEXT_CLASSES order) tokens per UTF-16 unit and per run, and the decision
    margin; per CJK count (CJK_COUNTS order) tokens per character. No margins: all 0."""

    __slots__ = ("per_unit", "per_run", "per_cjk", "margins")

    def __init__(self, per_unit, per_run, per_cjk, margins=()):
        per_unit, per_run, per_cjk = tuple(map(float, per_unit)), tuple(map(float, per_run)), tuple(map(float, per_cjk))
        margins = tuple(map(float, margins)) or (0.0,) * len(TEXT_CLASSES)
        if not len(per_unit) == len(per_run) == len(margins) == len(TEXT_CLASSES) \
                or len(per_cjk) != len(CJK_COUNTS):
            raise ValueError(f"Calibration(): {len(TEXT_CLASSES)} coefficients per class and "
                             f"{len(CJK_COUNTS)} per CJK count are needed")
        self.per_unit, self.per_run, self.per_cjk, self.margins = per_unit, per_run, per_cjk, margins


def calibrated_pair(profile, calibration) -> tuple:
    """(calibrated figure, the same with the decision margins), unrounded, of a text profile
    (text_profile's result). Each class with units adds its units and runs times its
    coefficients, unless that comes to zero or less (a class never counts below zero); with the
    margins, raised by its class's margin. The CJK characters add their counts times theirs
    (over every block, whatever its class), raised by the CJK class's margin. Added up in that
    order, one class after another, as floats."""
    _, units, runs, cjk = profile
    c = calibration
    plain = margined = 0.0
    for i in range(len(TEXT_CLASSES)):
        if units[i]:  # a class without units has no runs either: it adds nothing
            t = c.per_unit[i] * units[i] + c.per_run[i] * runs[i]
            if t > 0.0:
                plain += t
                margined += t * (1.0 + c.margins[i])
    t = 0.0
    for k in range(len(CJK_COUNTS)):
        t += c.per_cjk[k] * cjk[k]
    if t > 0.0:
        plain += t
        margined += t * (1.0 + c.margins[CJK])
    return plain, margined


def json_profile(value) -> tuple:
    """text_profile of the JSON text of value (json_text). The compiled module streams it from
    a walk of value instead."""
    json_lengths(value)  # the same depth bound and type errors as every JSON walk here
    return text_profile(json_text(value))


def resident_size(obj, fields) -> int:
    """Bytes the Python objects reachable from obj take: sys.getsizeof of each, walking lists,
    tuples and dicts (keys and values), and any other object through fields(type(x))(x), the
    tuple of its attribute values; without recursion. None, booleans, the small ints (-5..256)
    and the empty string are shared by everything and free. Objects reached twice are counted
    twice (memo.resident_size's values are trees)."""
    size = 0
    stack = [obj]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is str:
            if x:
                size += sys.getsizeof(x)
        elif t is list or t is tuple:
            size += sys.getsizeof(x)
            stack.extend(x)
        elif t is dict:
            size += sys.getsizeof(x)
            stack.extend(x.keys())
            stack.extend(x.values())
        elif t is int:
            if not -5 <= x <= 256:
                size += sys.getsizeof(x)
        elif x is None or t is bool:
            pass
        elif t is bytes or t is float:
            size += sys.getsizeof(x)
        else:
            size += sys.getsizeof(x)
            stack.extend(fields(t)(x))
    return size
