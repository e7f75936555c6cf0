# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled hot path (built as contextsvc._native_c).

Same functions, results and exceptions as contextsvc._native_py, which is the specification
and is what the tests compare this module with. The string kernels (portable, SSE2 and
AVX2, chosen at import from what the CPU supports) live in jsonscan.h next to this file; this
module walks the containers.

Walking uses borrowed references and exact-type checks first. Only subclasses of dict, list
and tuple (whose items() or __iter__ json.dumps honours) can run Python code during a walk, so
every container is held by a reference while it is walked.
"""

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, INT64_MAX, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.mem cimport PyMem_Malloc, PyMem_Free

import json

from contextsvc import _native_py
from contextsvc._native_py import CJK_COUNTS, MAX_JSON_DEPTH, PROFILE_BLOCK, TEXT_CLASSES, number_text

__all__ = list(_native_py.__all__)  # the twin is the specification of the API

cdef extern from "Python.h":
    # Borrowed-reference views of the C API, free of Cython reference counting.
    PyObject *cs_type "(PyObject *)Py_TYPE" (PyObject *o)
    bint cs_is_str "PyUnicode_Check" (PyObject *o)
    bint cs_is_int "PyLong_Check" (PyObject *o)
    bint cs_is_float "PyFloat_Check" (PyObject *o)
    bint cs_is_list "PyList_Check" (PyObject *o)
    bint cs_is_tuple "PyTuple_Check" (PyObject *o)
    bint cs_is_dict "PyDict_Check" (PyObject *o)
    Py_ssize_t cs_list_size "PyList_GET_SIZE" (PyObject *o)
    PyObject *cs_list_item "PyList_GET_ITEM" (PyObject *o, Py_ssize_t i)
    Py_ssize_t cs_tuple_size "PyTuple_GET_SIZE" (PyObject *o)
    PyObject *cs_tuple_item "PyTuple_GET_ITEM" (PyObject *o, Py_ssize_t i)
    bint cs_dict_next "PyDict_Next" (PyObject *d, Py_ssize_t *pos, PyObject **k, PyObject **v)
    Py_ssize_t cs_dict_size "PyDict_GET_SIZE" (PyObject *o)
    object cs_mapping_items "PyMapping_Items" (object o)
    object cs_sequence_fast "PySequence_Fast" (object o, const char *message)
    Py_ssize_t cs_fast_size "PySequence_Fast_GET_SIZE" (object o)
    PyObject **cs_fast_items "PySequence_Fast_ITEMS" (object o)
    int cs_truth "PyObject_IsTrue" (PyObject *o) except -1
    long long cs_as_longlong "PyLong_AsLongLongAndOverflow" (PyObject *o, int *overflow) except? -1
    char *cs_bytes_data "PyBytes_AS_STRING" (object o)
    char *cs_bytearray_data "PyByteArray_AS_STRING" (object o)
    PyObject *cs_none "Py_None"
    PyObject *cs_true "Py_True"
    PyObject *cs_false "Py_False"
    int cs_unicode_kind "PyUnicode_KIND" (object o)
    void *cs_unicode_data "PyUnicode_DATA" (object o)
    Py_ssize_t cs_unicode_length "PyUnicode_GET_LENGTH" (object o)
    Py_UCS4 cs_unicode_read "PyUnicode_READ" (int kind, void *data, Py_ssize_t i)

cdef extern from "jsonscan.h":
    ctypedef struct cs_acc:
        Py_ssize_t u8
        Py_ssize_t d16
    int cs_add_str(PyObject *s, cs_acc *acc) except -1
    Py_ssize_t cs_utf16_len(PyObject *s) except -1
    Py_ssize_t cs_int_len(PyObject *o) except -1
    Py_ssize_t cs_float_len(PyObject *o) except -1
    void cs_init_kernels()
    int cs_kernel_count()
    const char *cs_kernel_name(int i)
    const char *cs_current_kernel()
    bint cs_kernel_usable(int i)
    int cs_use_kernel(int i)

cdef Py_ssize_t _max_depth = MAX_JSON_DEPTH

cs_init_kernels()


def _kernels():
    """Names of the string kernel sets this CPU can run, best first."""
    return [cs_kernel_name(i).decode() for i in range(cs_kernel_count()) if cs_kernel_usable(i)]


def _kernel():
    """Name of the string kernel set in use."""
    return cs_current_kernel().decode()


def _use_kernel(name):
    """Switches the string kernel set (for tests and benchmarks); returns the previous name."""
    cdef int i
    previous = _kernel()
    for i in range(cs_kernel_count()):
        if cs_kernel_name(i).decode() == name:
            if cs_use_kernel(i) == 0:
                return previous
            raise ValueError(f"kernel set {name!r} cannot run on this CPU")
    raise ValueError(f"unknown kernel set {name!r}")


cdef int _depth_error() except -1:
    raise ValueError(f"JSON nesting deeper than {MAX_JSON_DEPTH} containers")


cdef inline void _add(cs_acc *acc, Py_ssize_t n) noexcept:
    acc.u8 += n  # ASCII text: as many UTF-16 units as bytes


cdef inline int _walk_value(PyObject *o, Py_ssize_t depth, cs_acc *acc) except -1:
    """Adds the JSON text of o; depth = containers enclosing o. Common types inline."""
    cdef PyObject *t = cs_type(o)
    if t == <PyObject *>str:
        return cs_add_str(o, acc)
    if t == <PyObject *>dict:
        return _walk_dict(o, depth + 1, acc)
    if t == <PyObject *>list:
        return _walk_list(o, depth + 1, acc)
    if t == <PyObject *>int:
        _add(acc, cs_int_len(o))
        return 0
    if o == cs_none or o == cs_true:
        _add(acc, 4)
        return 0
    if o == cs_false:
        _add(acc, 5)
        return 0
    return _walk_other(o, depth, acc)


cdef int _walk_other(PyObject *o, Py_ssize_t depth, cs_acc *acc) except -1:
    """The rest of _walk_value: floats, tuples, then subclasses in json.dumps's order."""
    cdef PyObject *t = cs_type(o)
    if t == <PyObject *>float:
        _add(acc, cs_float_len(o))
        return 0
    if t == <PyObject *>tuple:
        return _walk_tuple(o, depth + 1, acc)
    if cs_is_str(o):
        return cs_add_str(o, acc)
    if cs_is_int(o):
        _add(acc, cs_int_len(o))
        return 0
    if cs_is_float(o):
        _add(acc, cs_float_len(o))
        return 0
    if cs_is_list(o) or cs_is_tuple(o):
        return _walk_iterated(<object>o, depth + 1, acc)
    if cs_is_dict(o):
        return _walk_items(<object>o, depth + 1, acc)
    raise TypeError(f"Object of type {type(<object>o).__name__} is not JSON serializable")


cdef int _walk_key(PyObject *k, cs_acc *acc) except -1:
    """Adds a dict key, converted to a string as json.dumps does, quotes included."""
    if cs_is_str(k):
        return cs_add_str(k, acc)
    if cs_is_float(k):
        _add(acc, cs_float_len(k) + 2)
    elif k == cs_true or k == cs_none:
        _add(acc, 6)
    elif k == cs_false:
        _add(acc, 7)
    elif cs_is_int(k):
        _add(acc, cs_int_len(k) + 2)
    else:
        raise TypeError(
            f"keys must be str, int, float, bool or None, not {type(<object>k).__name__}"
        )
    return 0


cdef inline void _add_brackets(cs_acc *acc, Py_ssize_t items) noexcept:
    # brackets and the commas between items
    _add(acc, 1 + items if items else 2)


cdef int _walk_list(PyObject *o, Py_ssize_t depth, cs_acc *acc) except -1:
    if depth > _max_depth:
        _depth_error()
    cdef object hold = <object>o
    cdef Py_ssize_t i = 0
    while i < cs_list_size(o):  # re-read: Python code below may resize the list
        _walk_value(cs_list_item(o, i), depth, acc)
        i += 1
    _add_brackets(acc, i)
    return 0


cdef int _walk_tuple(PyObject *o, Py_ssize_t depth, cs_acc *acc) except -1:
    if depth > _max_depth:
        _depth_error()
    cdef object hold = <object>o
    cdef Py_ssize_t i, n = cs_tuple_size(o)
    for i in range(n):
        _walk_value(cs_tuple_item(o, i), depth, acc)
    _add_brackets(acc, n)
    return 0


cdef int _walk_dict(PyObject *o, Py_ssize_t depth, cs_acc *acc) except -1:
    if depth > _max_depth:
        _depth_error()
    cdef object hold = <object>o
    cdef Py_ssize_t pos = 0, count = 0
    cdef PyObject *k
    cdef PyObject *v
    while cs_dict_next(o, &pos, &k, &v):
        if cs_type(k) == <PyObject *>str:
            cs_add_str(k, acc)
        else:
            _walk_key(k, acc)
        _walk_value(v, depth, acc)
        count += 1
    _add_brackets(acc, count)
    _add(acc, count)  # colons
    return 0


cdef int _walk_iterated(object seq, Py_ssize_t depth, cs_acc *acc) except -1:
    """A list or tuple subclass: json.dumps iterates it (its __iter__ is honoured)."""
    if depth > _max_depth:
        _depth_error()
    cdef list items = list(seq)
    return _walk_list(<PyObject *>items, depth, acc)


cdef int _walk_items(object mapping, Py_ssize_t depth, cs_acc *acc) except -1:
    """A dict subclass: json.dumps goes through its items() (unless the dict is empty)."""
    if depth > _max_depth:
        _depth_error()
    if cs_dict_size(<PyObject *>mapping) == 0:
        _add(acc, 2)
        return 0
    cdef list items = list(cs_mapping_items(mapping))
    cdef object pair
    for pair in items:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError("items must return 2-tuples")
        _walk_key(cs_tuple_item(<PyObject *>pair, 0), acc)
        _walk_value(cs_tuple_item(<PyObject *>pair, 1), depth, acc)
    _add_brackets(acc, len(items))
    _add(acc, len(items))
    return 0


def json_size(value):
    """UTF-8 byte length of json.dumps(value, ensure_ascii=False, separators=(",", ":"))."""
    cdef cs_acc acc
    acc.u8 = 0
    acc.d16 = 0
    _walk_value(<PyObject *>value, 0, &acc)
    return acc.u8


cdef int _has_float(object o, Py_ssize_t depth) except -1:
    """1 when the JSON text of o writes a float (a value or a dict key); depth = containers
    enclosing o. Walked as _native_py.has_float walks (references held: subclasses run code)."""
    cdef PyObject *t = cs_type(<PyObject *>o)
    if t == <PyObject *>str or t == <PyObject *>int or o is None or o is True or o is False:
        return 0
    if cs_is_float(<PyObject *>o):
        return 1
    if cs_is_str(<PyObject *>o) or cs_is_int(<PyObject *>o):
        return 0
    if t == <PyObject *>list or t == <PyObject *>tuple or cs_is_list(<PyObject *>o) or cs_is_tuple(<PyObject *>o):
        if depth + 1 > _max_depth:
            _depth_error()
        for item in (o if t == <PyObject *>list or t == <PyObject *>tuple else list(o)):
            if _has_float(item, depth + 1):
                return 1
    elif t == <PyObject *>dict:
        if depth + 1 > _max_depth:
            _depth_error()
        for k, v in (<dict>o).items():
            if cs_is_float(<PyObject *>k) or _has_float(v, depth + 1):
                return 1
    elif cs_is_dict(<PyObject *>o) and cs_dict_size(<PyObject *>o):
        if depth + 1 > _max_depth:
            _depth_error()
        for k, v in o.items():
            if cs_is_float(<PyObject *>k) or _has_float(v, depth + 1):
                return 1
    return 0


def has_float(value):
    """True when the JSON text of value writes a float, as a value or as a dict key."""
    return _has_float(value, 0) == 1


def json_text(value):
    """The JSON text of value, numbers as Node writes them (_native_py.json_text), from
    json.dumps's C encoder; floats as _native_py.json_text_with_floats writes them."""
    if _has_float(value, 0):
        return _native_py.json_text_with_floats(value, has_float)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_lengths(value):
    """(UTF-8 bytes, UTF-16 units) of the JSON text of value, in one pass."""
    cdef cs_acc acc
    acc.u8 = 0
    acc.d16 = 0
    _walk_value(<PyObject *>value, 0, &acc)
    return acc.u8, acc.u8 - acc.d16


def utf16_len(s):
    """JavaScript's s.length: astral characters count two, everything else one."""
    if not isinstance(s, str):
        raise TypeError(f"utf16_len() expects str, not {type(s).__name__}")
    return cs_utf16_len(<PyObject *>s)


def estimate_tokens(x):
    """max(0, Math.round(chars / 4)) with JavaScript rounding: (chars + 2) // 4."""
    cdef Py_ssize_t n
    cdef int overflow = 0
    cdef long long v
    if isinstance(x, str):
        n = cs_utf16_len(<PyObject *>x)
        return (n + 2) // 4
    if isinstance(x, int) and not isinstance(x, bool):
        v = cs_as_longlong(<PyObject *>x, &overflow)
        if overflow == 0:
            if v < 0:
                raise ValueError(f"estimate_tokens() needs a non-negative count, got {v}")
            return (v >> 2) + ((v & 3) >= 2)  # (v + 2) // 4 without overflowing
        return _native_py.estimate_tokens(x)
    raise TypeError(f"estimate_tokens() expects str or int, not {type(x).__name__}")


def split_turns(starts):
    """Indices of the truthy entries of starts (one entry per message, truthy = starts a turn)."""
    cdef list out = []
    cdef const unsigned char *p
    cdef Py_ssize_t i, n
    cdef PyObject **items
    cdef PyObject *item
    cdef object fast
    if isinstance(starts, bytes) or isinstance(starts, bytearray):
        n = len(starts)
        if isinstance(starts, bytes):
            p = <const unsigned char *>cs_bytes_data(starts)
        else:
            p = <const unsigned char *>cs_bytearray_data(starts)
        for i in range(n):
            if p[i]:
                out.append(i)
        return out
    if isinstance(starts, str):
        raise TypeError("split_turns() expects a sequence of flags, not str")
    fast = cs_sequence_fast(starts, "split_turns() expects a sequence of flags")
    n = cs_fast_size(fast)
    items = cs_fast_items(fast)
    for i in range(n):
        item = items[i]
        if item == cs_true:
            out.append(i)
        elif item == cs_false:
            continue
        elif cs_truth(item):
            out.append(i)
    return out


cdef int _read_counts(object seq, int64_t *out, Py_ssize_t n, bint check_sign) except -1:
    """Copies n ints (via __index__) into out; 1 when one does not fit int64, else 0."""
    cdef PyObject **items = cs_fast_items(seq)
    cdef Py_ssize_t i
    cdef int overflow
    cdef long long v
    for i in range(n):
        overflow = 0
        v = cs_as_longlong(items[i], &overflow)
        if overflow > 0:
            return 1
        if overflow < 0 or (check_sign and v < 0):
            if check_sign:
                raise ValueError(f"size must be >= 0, got {<object>items[i]}")
            return 1
        out[i] = v
    return 0


def select_tail(starts, sizes, tail_turns, budget):
    """First message index of the kept tail, or -1 when nothing is kept (see _native_py)."""
    cdef long long tt, bud
    cdef Py_ssize_t n, t, k, first, s, e, i, j, prev
    cdef int64_t *sz
    cdef int64_t *st
    cdef int64_t total, remaining, size, suffix
    cdef Py_ssize_t kept = -1
    cdef int overflow = 0
    tail_turns = _native_py._non_negative("tail_turns", tail_turns)
    budget = _native_py._non_negative("budget", budget)
    cdef object fsizes = cs_sequence_fast(sizes, "sizes must be a sequence of ints")
    cdef object fstarts
    n = cs_fast_size(fsizes)
    sz = <int64_t *>PyMem_Malloc((n + 1) * sizeof(int64_t))
    if sz == NULL:
        raise MemoryError()
    try:
        # Past int64 (a size, a sum of sizes or a start), Python ints take over. The sequences
        # are passed on as read, since starts or sizes may be one-shot iterators.
        if _read_counts(fsizes, sz, n, True):
            return _native_py.select_tail(starts, fsizes, tail_turns, budget)
        total = 0
        for i in range(n):
            if sz[i] > INT64_MAX - total:
                return _native_py.select_tail(starts, fsizes, tail_turns, budget)
            total += sz[i]
        fstarts = cs_sequence_fast(starts, "starts must be a sequence of ints")
        t = cs_fast_size(fstarts)
        st = <int64_t *>PyMem_Malloc((t + 1) * sizeof(int64_t))
        if st == NULL:
            raise MemoryError()
        try:
            overflow = _read_counts(fstarts, st, t, False)
            prev = -1
            for k in range(t):
                if overflow or not (prev < st[k] < n):
                    # reports the offending value exactly as the Python version does
                    return _native_py.select_tail(fstarts, fsizes, tail_turns, budget)
                prev = <Py_ssize_t>st[k]
            tt = tail_turns if tail_turns < t else t
            if budget > total:
                # every turn fits whatever the excess: total + 1 decides alike
                if total == INT64_MAX:
                    return _native_py.select_tail(fstarts, fsizes, tail_turns, budget)
                bud = total + 1
            else:
                bud = budget
            remaining = bud
            first = t - tt
            k = t - 1
            while k >= first:
                if remaining <= 0:
                    break
                s = <Py_ssize_t>st[k]
                e = <Py_ssize_t>st[k + 1] if k + 1 < t else n
                size = 0
                for i in range(s, e):
                    size += sz[i]
                if size <= remaining:
                    remaining -= size
                    kept = s
                    k -= 1
                    continue
                j = e
                suffix = 0
                while j - 1 > s and suffix + sz[j - 1] <= remaining:
                    j -= 1
                    suffix += sz[j]
                if j < e:
                    kept = j
                break
            return kept
        finally:
            PyMem_Free(st)
    finally:
        PyMem_Free(sz)



# ---- text profile (see _native_py.text_profile, the specification) ---------------------------

cdef enum:
    K_HEX_LETTER = 0
    K_LETTER = 1
    K_DIGIT = 2
    K_SPACE = 3
    K_NEWLINE = 4
    K_JSON = 5
    K_BACKSLASH = 6
    K_PUNCT = 7
    K_CJK = 8
    K_OTHER = 9
    K_B64_PUNCT = 10
    KINDS = 11
    N_CLASSES = 10
    C_PROSE = 0
    C_CJK = 1
    C_CODE = 2
    C_JSON = 3
    C_BASE64 = 4
    C_HEX = 5
    C_LOGS = 6
    C_HEXDUMP = 7
    C_TESTLOG = 8
    C_TABLE = 9
    N_CJK_COUNTS = 5
    S_KANA = 0
    S_HAN = 1
    S_HANGUL = 2
    S_OTHER = 3
    S_SINGLE = 4
    SINGLE_TOKEN_BYTES = 0x10000 >> 3

cdef unsigned char _ascii_kinds[128]
cdef unsigned char _run_groups[KINDS]
cdef Py_ssize_t _profile_block = PROFILE_BLOCK
assert len(TEXT_CLASSES) == N_CLASSES and _native_py.KINDS == KINDS
assert len(CJK_COUNTS) == N_CJK_COUNTS and _native_py.SINGLE == S_SINGLE
for _i, _k in enumerate(_native_py.ASCII_KINDS):
    _ascii_kinds[_i] = _k
for _i, _k in enumerate(_native_py.RUN_GROUPS):
    _run_groups[_i] = _k
cdef unsigned char _switches[KINDS][KINDS]  # 1 where a letter meets a digit
for _i in range(KINDS):
    for _k in range(KINDS):
        _switches[_i][_k] = ((_k == K_DIGIT and _i <= K_LETTER) or (_k <= K_LETTER and _i == K_DIGIT))


cdef inline bint _is_cjk(uint32_t cp) noexcept:
    return ((0x2E80 <= cp <= 0x9FFF) or (0xAC00 <= cp <= 0xD7AF) or (0xF900 <= cp <= 0xFAFF)
            or (0xFF00 <= cp <= 0xFFEF) or (0x20000 <= cp <= 0x3FFFF))


cdef inline int _cjk_script(uint32_t cp) noexcept:
    if 0x3040 <= cp <= 0x30FF:
        return S_KANA
    if 0x4E00 <= cp <= 0x9FFF:
        return S_HAN
    if 0xAC00 <= cp <= 0xD7AF:
        return S_HANGUL
    return S_OTHER


# One bit per BMP code point: one of _native_py.SINGLE_TOKEN_CJK.
cdef unsigned char _single_token[SINGLE_TOKEN_BYTES]
for _i in range(SINGLE_TOKEN_BYTES):
    _single_token[_i] = 0
for _i in _native_py.SINGLE_TOKEN_CJK:
    _single_token[_i >> 3] |= 1 << (_i & 7)


cdef inline int _is_single_token(uint32_t cp) noexcept:
    return cp < 0x10000 and (_single_token[cp >> 3] >> (cp & 7)) & 1


ctypedef fused cs_char:
    uint8_t
    uint16_t
    uint32_t


cdef bint _padded(const cs_char *p, Py_ssize_t start, Py_ssize_t end, Py_ssize_t need,
                  Py_ssize_t spaces) noexcept:
    """Whether _native_py.block_padding(p[start:end]) is at least need, for a block holding
    spaces spaces and tabs. Stops as soon as the answer is known: most blocks that ask are
    indented code, whose first lines hold more spaces that cannot be padding than it can spare."""
    cdef Py_ssize_t padding = 0, lost = 0, run = 0, spare = spaces - need, i
    cdef bint indent = False, was_backslash = False
    cdef uint32_t cp
    for i in range(start, end):
        cp = p[i]
        if cp == 32 or cp == 9:
            run += 1
        else:
            if run >= 2 and not indent:
                padding += run
                if padding >= need:
                    return True
            elif run:
                lost += run
                if lost > spare:
                    return False
            run = 0
            indent = cp == 10 or cp == 13 or (cp == 110 and was_backslash)
        was_backslash = cp == 92
    if run >= 2 and not indent:
        padding += run
    return padding >= need


cdef inline int _classify(const cs_char *p, Py_ssize_t start, Py_ssize_t *hist, Py_ssize_t upper,
                          Py_ssize_t switches, Py_ssize_t n) noexcept:
    """_native_py.classify_block of the block p[start:start + n]."""
    cdef Py_ssize_t punct = hist[K_PUNCT] + hist[K_B64_PUNCT] + hist[K_JSON], need
    cdef Py_ssize_t alnum = hist[K_HEX_LETTER] + hist[K_LETTER] + hist[K_DIGIT]
    cdef Py_ssize_t space = hist[K_SPACE] + hist[K_NEWLINE]
    if hist[K_CJK] * 4 >= n:
        return C_CJK
    if space * 20 <= n and (alnum * 10 >= n * 9 or ((alnum + hist[K_B64_PUNCT]) * 10 >= n * 9
                                                  and hist[K_SPACE] == 0 and hist[K_PUNCT] * 100 <= n)):
        if alnum * 10 >= n * 9 and hist[K_LETTER] <= hist[K_BACKSLASH] and hist[K_DIGIT] * 5 >= n * 2:
            return C_HEX
        if switches * 10 >= n or upper * 5 >= n:
            return C_BASE64
    if ((hist[K_DIGIT] + hist[K_HEX_LETTER]) * 2 >= n and space * 8 >= n
            and hist[K_LETTER] * 8 <= n):
        return C_HEXDUMP
    if (hist[K_JSON] + hist[K_BACKSLASH]) * 100 >= n * 15:
        return C_JSON
    # delimited records: _native_py.is_table
    if ((hist[K_SPACE] == 0 and n * 2 >= _profile_block and alnum * 2 >= n and hist[K_DIGIT] * 32 >= n)
            or (hist[K_BACKSLASH] * 16 >= n and hist[K_SPACE] * 24 <= n and hist[K_JSON] * 32 <= n)):
        return C_TABLE
    # test and CI output: the rule holds when the padding is at least need (from its two
    # inequalities); the padding (a second pass) is looked at only when it could be, that is
    # when need is not more than the block's spaces and tabs
    need = max(0, (space * 20 - n + 19) // 20, n - punct * 8)
    if need == 0 or (need <= hist[K_SPACE] and _padded(p, start, start + n, need, hist[K_SPACE])):
        return C_TESTLOG
    if hist[K_DIGIT] * 10 >= n:
        return C_LOGS
    if (hist[K_BACKSLASH] + punct) * 10 >= n:
        return C_CODE
    return C_PROSE


# The loop keeps its counters in registers: each character adds a packed increment of its kind
# and of A-Z (9-bit fields: a block of 256 fits), and each pair of kinds adds its letter/digit
# switch and run start, so no counter waits on a store of the previous character. The top bits
# of the high increment hold the character's kind (their sums spill off the word harmlessly).
cdef enum:
    FIELD_BITS = 9
    FIELDS_PER_WORD = 7  # kinds 0..6 in the low word; kinds 7..10 and A-Z in the high word
    F_UPPER = KINDS - FIELDS_PER_WORD
    FIELD_MASK = (1 << FIELD_BITS) - 1
    RUN_SHIFT = 16
    KIND_SHIFT = 60
    K_START = KINDS  # the "previous kind" of a block's first character

cdef uint64_t _latin1_inc[256][2]  # by code point below 256
cdef uint64_t _cjk_inc, _other_inc  # high words of the non-Latin-1 kinds (their low words are 0)
cdef uint32_t _pair_inc[KINDS + 1][KINDS]  # switch + (run start << RUN_SHIFT), previous kind first


cdef void _kind_inc(int k, bint upper, uint64_t *inc) noexcept:
    inc[0] = 0
    inc[1] = (<uint64_t>k) << KIND_SHIFT
    if k < FIELDS_PER_WORD:
        inc[0] += (<uint64_t>1) << (FIELD_BITS * k)
    else:
        inc[1] += (<uint64_t>1) << (FIELD_BITS * (k - FIELDS_PER_WORD))
    if upper:
        inc[1] += (<uint64_t>1) << (FIELD_BITS * F_UPPER)


cdef void _init_profile_tables() noexcept:
    global _cjk_inc, _other_inc
    cdef int c, k, j
    cdef uint64_t inc[2]
    for c in range(256):
        _kind_inc(_ascii_kinds[c] if c < 128 else K_OTHER, 65 <= c <= 90, _latin1_inc[c])
    _kind_inc(K_CJK, False, inc)
    _cjk_inc = inc[1]
    _kind_inc(K_OTHER, False, inc)
    _other_inc = inc[1]
    for j in range(KINDS):
        for k in range(KINDS):
            _pair_inc[j][k] = _switches[j][k] + ((_run_groups[j] != _run_groups[k]) << RUN_SHIFT)
    for k in range(KINDS):
        _pair_inc[K_START][k] = 1 << RUN_SHIFT


_init_profile_tables()


cdef void _profile(const cs_char *p, Py_ssize_t length, Py_ssize_t *units, Py_ssize_t *runs,
                   Py_ssize_t *cjk, Py_ssize_t *total) noexcept:
    """The loop of text_profile over one storage width (1, 2 or 4 bytes per code point)."""
    cdef Py_ssize_t hist[KINDS]
    cdef Py_ssize_t block_cjk[N_CJK_COUNTS]
    cdef Py_ssize_t start = 0, end, i, n, astral
    cdef uint64_t lo, hi, inc
    cdef uint32_t pairs, cp
    cdef int k, previous, cls
    while start < length:
        end = start + _profile_block
        if end > length:
            end = length
        for k in range(N_CJK_COUNTS):
            block_cjk[k] = 0
        lo = hi = 0
        pairs = 0
        astral = 0
        previous = K_START
        for i in range(start, end):
            cp = p[i]
            if cs_char is uint8_t or cp < 256:
                lo += _latin1_inc[cp][0]
                inc = _latin1_inc[cp][1]
            elif _is_cjk(cp):
                inc = _cjk_inc
                block_cjk[_cjk_script(cp)] += 1
                block_cjk[S_SINGLE] += _is_single_token(cp)
            else:
                inc = _other_inc
            if cs_char is uint32_t:
                astral += cp > 0xFFFF
            hi += inc
            k = inc >> KIND_SHIFT
            pairs += _pair_inc[previous][k]
            previous = k
        for k in range(FIELDS_PER_WORD):
            hist[k] = (lo >> (FIELD_BITS * k)) & FIELD_MASK
        for k in range(FIELDS_PER_WORD, KINDS):
            hist[k] = (hi >> (FIELD_BITS * (k - FIELDS_PER_WORD))) & FIELD_MASK
        n = end - start
        cls = _classify(p, start, hist, (hi >> (FIELD_BITS * F_UPPER)) & FIELD_MASK,
                        pairs & ((1 << RUN_SHIFT) - 1), n)
        units[cls] += n + astral
        runs[cls] += pairs >> RUN_SHIFT
        total[0] += n + astral
        if cs_char is not uint8_t:  # no CJK in a 1-byte string
            for k in range(N_CJK_COUNTS):
                cjk[k] += block_cjk[k]
        start = end


cdef inline void _zero_counts(Py_ssize_t *units, Py_ssize_t *runs, Py_ssize_t *cjk):
    cdef int c
    for c in range(N_CLASSES):
        units[c] = 0
        runs[c] = 0
    for c in range(N_CJK_COUNTS):
        cjk[c] = 0


cdef tuple _profile_tuple(Py_ssize_t total, Py_ssize_t *units, Py_ssize_t *runs, Py_ssize_t *cjk):
    """A text profile as text_profile answers it, from its counts."""
    return (total, tuple([units[c] for c in range(N_CLASSES)]),
            tuple([runs[c] for c in range(N_CLASSES)]),
            tuple([cjk[c] for c in range(N_CJK_COUNTS)]))


def text_profile(s):
    """(UTF-16 length, UTF-16 units per content class, runs per content class, CJK counts) of s."""
    if not isinstance(s, str):
        raise TypeError(f"text_profile() expects str, not {type(s).__name__}")
    cdef int kind = cs_unicode_kind(s)
    cdef void *data = cs_unicode_data(s)
    cdef Py_ssize_t length = cs_unicode_length(s)
    cdef Py_ssize_t units[N_CLASSES]
    cdef Py_ssize_t runs[N_CLASSES]
    cdef Py_ssize_t cjk[N_CJK_COUNTS]
    cdef Py_ssize_t total = 0
    _zero_counts(units, runs, cjk)
    if kind == 1:
        _profile(<const uint8_t *>data, length, units, runs, cjk, &total)
    elif kind == 2:
        _profile(<const uint16_t *>data, length, units, runs, cjk, &total)
    else:
        _profile(<const uint32_t *>data, length, units, runs, cjk, &total)
    return _profile_tuple(total, units, runs, cjk)


cdef inline void _add_counts(object counts, Py_ssize_t *into, int n, str what) except *:
    if not isinstance(counts, tuple) or len(<tuple>counts) != n:
        raise TypeError(f"sum_profiles(): a profile's {what} must be a tuple of {n} ints")
    cdef int i
    for i in range(n):
        into[i] += <Py_ssize_t>(<tuple>counts)[i]


def sum_profiles(profiles, extra):
    """The text profiles added up field by field, extra included (see _native_py.sum_profiles)."""
    cdef Py_ssize_t units[N_CLASSES]
    cdef Py_ssize_t runs[N_CLASSES]
    cdef Py_ssize_t cjk[N_CJK_COUNTS]
    cdef Py_ssize_t total = 0
    _zero_counts(units, runs, cjk)
    for p in [extra, *profiles]:
        if not isinstance(p, tuple) or len(<tuple>p) != 4:
            raise TypeError("sum_profiles(): each profile must be a text_profile result")
        total += <Py_ssize_t>(<tuple>p)[0]
        _add_counts((<tuple>p)[1], units, N_CLASSES, "units")
        _add_counts((<tuple>p)[2], runs, N_CLASSES, "runs")
        _add_counts((<tuple>p)[3], cjk, N_CJK_COUNTS, "CJK counts")
    return _profile_tuple(total, units, runs, cjk)


# ---- calibrated figure of a profile (see _native_py.calibrated_pair, the specification) -------

cdef class Calibration:
    """_native_py.Calibration: the calibrated figure's coefficients, as doubles."""
    cdef double unit[N_CLASSES]
    cdef double run[N_CLASSES]
    cdef double margin[N_CLASSES]
    cdef double cjk[N_CJK_COUNTS]

    def __init__(self, per_unit, per_run, per_cjk, margins=()):
        per_unit, per_run, per_cjk = tuple(map(float, per_unit)), tuple(map(float, per_run)), tuple(map(float, per_cjk))
        margins = tuple(map(float, margins)) or (0.0,) * N_CLASSES
        if not len(per_unit) == len(per_run) == len(margins) == N_CLASSES or len(per_cjk) != N_CJK_COUNTS:
            raise ValueError(f"Calibration(): {N_CLASSES} coefficients per class and "
                             f"{N_CJK_COUNTS} per CJK count are needed")
        cdef int i
        for i in range(N_CLASSES):
            self.unit[i] = per_unit[i]
            self.run[i] = per_run[i]
            self.margin[i] = margins[i]
        for i in range(N_CJK_COUNTS):
            self.cjk[i] = per_cjk[i]

    @property
    def per_unit(self):
        return tuple([self.unit[i] for i in range(N_CLASSES)])

    @property
    def per_run(self):
        return tuple([self.run[i] for i in range(N_CLASSES)])

    @property
    def per_cjk(self):
        return tuple([self.cjk[i] for i in range(N_CJK_COUNTS)])

    @property
    def margins(self):
        return tuple([self.margin[i] for i in range(N_CLASSES)])


cdef inline Py_ssize_t _count_at(object counts, int i, int n, str what) except? -1:
    if not isinstance(counts, tuple) or len(<tuple>counts) != n:
        raise TypeError(f"calibrated_pair(): a profile's {what} must be a tuple of {n} ints")
    return <Py_ssize_t>(<tuple>counts)[i]


def calibrated_pair(profile, Calibration calibration not None):
    """(calibrated figure, with the decision margins) of a text profile (_native_py.calibrated_pair)."""
    if not isinstance(profile, tuple) or len(<tuple>profile) != 4:
        raise TypeError("calibrated_pair(): the profile must be a text_profile result")
    units, runs, cjk = (<tuple>profile)[1], (<tuple>profile)[2], (<tuple>profile)[3]
    cdef double plain = 0.0, margined = 0.0, t
    cdef Py_ssize_t u
    cdef int i
    for i in range(N_CLASSES):
        u = _count_at(units, i, N_CLASSES, "units")
        if u:
            t = calibration.unit[i] * <double>u + calibration.run[i] * <double>_count_at(
                runs, i, N_CLASSES, "runs")
            if t > 0.0:
                plain += t
                margined += t * (1.0 + calibration.margin[i])
    t = 0.0
    for i in range(N_CJK_COUNTS):
        t += calibration.cjk[i] * <double>_count_at(cjk, i, N_CJK_COUNTS, "CJK counts")
    if t > 0.0:
        plain += t
        margined += t * (1.0 + calibration.margin[C_CJK])
    return plain, margined


# ---- JSON profile: text_profile of a value's JSON text, streamed from the walk ----------------

cdef enum:
    STREAM_BLOCK = 256

assert PROFILE_BLOCK == STREAM_BLOCK


cdef struct _Stream:
    uint32_t buf[STREAM_BLOCK]  # the code points of the block being filled
    Py_ssize_t n
    Py_ssize_t units[N_CLASSES]
    Py_ssize_t runs[N_CLASSES]
    Py_ssize_t cjk[N_CJK_COUNTS]
    Py_ssize_t total


cdef inline void _emit(_Stream *s, uint32_t cp) noexcept:
    s.buf[s.n] = cp
    s.n += 1
    if s.n == STREAM_BLOCK:
        _profile(<const uint32_t *>s.buf, s.n, s.units, s.runs, s.cjk, &s.total)
        s.n = 0


cdef const char *_HEX = b"0123456789abcdef"


cdef inline void _emit_escaped(_Stream *s, uint32_t cp) noexcept:
    """One code point of a string as json.dumps(ensure_ascii=False) writes it."""
    if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
        _emit(s, cp)
        return
    _emit(s, 0x5C)
    if cp == 0x22 or cp == 0x5C:
        _emit(s, cp)
    elif cp == 0x0A:
        _emit(s, 0x6E)  # n
    elif cp == 0x0D:
        _emit(s, 0x72)  # r
    elif cp == 0x09:
        _emit(s, 0x74)  # t
    elif cp == 0x08:
        _emit(s, 0x62)  # b
    elif cp == 0x0C:
        _emit(s, 0x66)  # f
    else:
        _emit(s, 0x75)  # u00XX
        _emit(s, 0x30)
        _emit(s, 0x30)
        _emit(s, _HEX[cp >> 4])
        _emit(s, _HEX[cp & 15])


cdef void _stream_latin1(_Stream *s, const uint8_t *p, Py_ssize_t n) noexcept:
    """A 1-byte string's characters, escaped: copied a block's room at a time, the rare
    character that needs escaping through _emit_escaped."""
    cdef Py_ssize_t i = 0, room, j
    cdef uint8_t ch
    while i < n:
        room = STREAM_BLOCK - s.n
        if room > n - i:
            room = n - i
        j = 0
        while j < room:
            ch = p[i + j]
            if ch < 0x20 or ch == 0x22 or ch == 0x5C:
                break
            s.buf[s.n + j] = ch
            j += 1
        s.n += j
        i += j
        if s.n == STREAM_BLOCK:
            _profile(<const uint32_t *>s.buf, s.n, s.units, s.runs, s.cjk, &s.total)
            s.n = 0
        if j < room:  # stopped at a character to escape
            _emit_escaped(s, p[i])
            i += 1


cdef void _stream_str(_Stream *s, object text, bint quoted) noexcept:
    """A string's JSON form (quoted and escaped), or, unquoted, text that is JSON already."""
    cdef int kind = cs_unicode_kind(text)
    cdef void *data = cs_unicode_data(text)
    cdef Py_ssize_t i, n = cs_unicode_length(text)
    if not quoted:
        for i in range(n):
            _emit(s, cs_unicode_read(kind, data, i))
        return
    _emit(s, 0x22)
    if kind == 1:
        _stream_latin1(s, <const uint8_t *>data, n)
    elif kind == 2:
        for i in range(n):
            _emit_escaped(s, (<const uint16_t *>data)[i])
    else:
        for i in range(n):
            _emit_escaped(s, (<const uint32_t *>data)[i])
    _emit(s, 0x22)


cdef int _stream_value(_Stream *s, object o, Py_ssize_t depth) except -1:
    """The JSON text of o; depth = containers enclosing o. Exact str, int, float, dict, list,
    tuple, bool and None are walked; anything else (subclasses, odd keys) is streamed from
    json.dumps."""
    cdef PyObject *t = cs_type(<PyObject *>o)
    cdef Py_ssize_t i, n
    cdef bint first
    if t == <PyObject *>str:
        _stream_str(s, o, True)
    elif o is None:
        _stream_str(s, "null", False)
    elif o is True:
        _stream_str(s, "true", False)
    elif o is False:
        _stream_str(s, "false", False)
    elif t == <PyObject *>int:
        _stream_str(s, int.__repr__(o), False)
    elif t == <PyObject *>float:
        _stream_str(s, number_text(o), False)
    elif t == <PyObject *>list or t == <PyObject *>tuple:
        if depth + 1 > _max_depth:
            _depth_error()
        _emit(s, 0x5B)
        n = len(o)
        for i in range(n):
            if i:
                _emit(s, 0x2C)
            _stream_value(s, o[i], depth + 1)
        _emit(s, 0x5D)
    elif t == <PyObject *>dict and all(type(k) is str for k in o):
        if depth + 1 > _max_depth:
            _depth_error()
        _emit(s, 0x7B)
        first = True
        for k, v in (<dict>o).items():
            if not first:
                _emit(s, 0x2C)
            first = False
            _stream_str(s, k, True)
            _emit(s, 0x3A)
            _stream_value(s, v, depth + 1)
        _emit(s, 0x7D)
    else:
        _native_py.json_lengths(o)  # depth and types checked as everywhere else
        _stream_str(s, _native_py.json_text(o), False)
    return 0


def json_profile(value):
    """text_profile of the JSON text of value (json_text), streamed from a walk of value: the
    text is never built."""
    cdef _Stream *s = <_Stream *>PyMem_Malloc(sizeof(_Stream))
    cdef int c
    if s == NULL:
        raise MemoryError()
    try:
        s.n = 0
        s.total = 0
        for c in range(N_CLASSES):
            s.units[c] = 0
            s.runs[c] = 0
        for c in range(N_CJK_COUNTS):
            s.cjk[c] = 0
        _stream_value(s, value, 0)
        if s.n:
            _profile(<const uint32_t *>s.buf, s.n, s.units, s.runs, s.cjk, &s.total)
        return (s.total, tuple([s.units[c] for c in range(N_CLASSES)]),
                tuple([s.runs[c] for c in range(N_CLASSES)]),
                tuple([s.cjk[c] for c in range(N_CJK_COUNTS)]))
    finally:
        PyMem_Free(s)


cdef extern from "Python.h":
    Py_ssize_t cs_sizeof "(Py_ssize_t)_PySys_GetSizeOf" (object o) except -1


def resident_size(obj, fields):
    """_native_py.resident_size: the same walk, each step in C but the attribute values of
    objects other than str, list, tuple, dict, int, float, bytes, bool and None."""
    cdef Py_ssize_t size = 0
    cdef list stack = [obj]
    cdef object x, t
    cdef long long v
    cdef int overflow
    while stack:
        x = stack.pop()
        t = type(x)
        if t is str:
            if cs_unicode_length(x):
                size += cs_sizeof(x)
        elif t is list or t is tuple:
            size += cs_sizeof(x)
            stack.extend(x)
        elif t is dict:
            size += cs_sizeof(x)
            stack.extend((<dict>x).keys())
            stack.extend((<dict>x).values())
        elif t is int:
            overflow = 0
            v = cs_as_longlong(<PyObject *>x, &overflow)
            if overflow or v < -5 or v > 256:
                size += cs_sizeof(x)
        elif x is None or t is bool:
            pass
        elif t is bytes or t is float:
            size += cs_sizeof(x)
        else:
            size += cs_sizeof(x)
            stack.extend(fields(t)(x))
    return size


include "wirescan.pxi"
