# Protobuf wire-format scanner (included by hotpath.pyx): message_spans and wire_entries, as specified by
# contextsvc._wire_py (what is refused and why is told there). The schema is wire_schema's
# (table, width, spans_field); the table is checked once per call so that no index it holds
# reads outside it.

from libc.string cimport memcpy

from contextsvc._wire_py import (WIRE_DEPTH, WIRE_I32, WIRE_I64, WIRE_LEN, WIRE_MESSAGE, WIRE_PLAIN,
                                 WIRE_STRING, WIRE_VARINT, wire_schema)

cdef enum:
    _W_VARINT = 0
    _W_I64 = 1
    _W_LEN = 2
    _W_SGROUP = 3
    _W_EGROUP = 4
    _W_I32 = 5
    _W_STRING = 1
    _W_MESSAGE = 2
    _W_UNKNOWN = 0xFF
    _W_ENTRY = 3

cdef Py_ssize_t _wire_depth = WIRE_DEPTH


cdef struct _WScan:
    const uint8_t *data
    const uint8_t *table
    Py_ssize_t width
    uint64_t spans_field


cdef int _corrupt(str what, Py_ssize_t pos) except -1:
    raise ValueError(f"not valid protobuf wire format: {what} at byte {pos}")


cdef inline Py_ssize_t _varint(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int max_bytes,
                               uint64_t *out, str what) except -1:
    """Reads the varint at pos (at most max_bytes bytes) into out; the position after it."""
    cdef uint64_t value = 0
    cdef int i
    cdef uint8_t b
    for i in range(max_bytes):
        if pos + i >= end:
            return _corrupt("truncated " + what, pos)
        b = d[pos + i]
        value |= (<uint64_t>(b & 0x7F)) << (7 * i)
        if b < 0x80:
            out[0] = value
            return pos + i + 1
    return _corrupt(f"{what} longer than {max_bytes} bytes", pos)


cdef inline Py_ssize_t _tag(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, uint64_t *number,
                            int *wire_type) except -1:
    cdef uint64_t tag = 0
    cdef Py_ssize_t after = _varint(d, pos, end, 5, &tag, "tag")
    if tag > 0xFFFFFFFFu:
        return _corrupt("tag above 2**32 - 1", pos)
    wire_type[0] = <int>(tag & 7)
    if wire_type[0] > _W_I32:
        return _corrupt(f"wire type {wire_type[0]}", pos)
    number[0] = tag >> 3
    return after


cdef inline Py_ssize_t _field_tag(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, uint64_t *number,
                                  int *wire_type) except -1:
    cdef Py_ssize_t after = _tag(d, pos, end, number, wire_type)
    if number[0] == 0:
        return _corrupt("field number 0", pos)
    if wire_type[0] == _W_EGROUP:
        return _corrupt(f"end of group {number[0]} outside any group", pos)
    return after


cdef inline Py_ssize_t _length(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *start) except -1:
    """The end of the length-delimited bytes whose length is at pos; their start into start."""
    cdef uint64_t n = 0
    start[0] = _varint(d, pos, end, 5, &n, "length")
    if n > <uint64_t>(end - start[0]):
        return _corrupt("length past the end of its message", pos)
    return start[0] + <Py_ssize_t>n


cdef Py_ssize_t _skip(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, uint64_t number, int wire_type,
                      Py_ssize_t depth) except -1:
    """Skips the value of an unknown field; the position after it."""
    cdef uint64_t ignored
    cdef Py_ssize_t start
    if wire_type == _W_VARINT:
        return _varint(d, pos, end, 10, &ignored, "varint")
    if wire_type == _W_LEN:
        return _length(d, pos, end, &start)
    if wire_type == _W_SGROUP:
        return _group(d, pos, end, number, depth - 1)
    cdef Py_ssize_t size = 8 if wire_type == _W_I64 else 4
    if end - pos < size:
        return _corrupt("truncated fixed-size value", pos)
    return pos + size


cdef Py_ssize_t _group(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, uint64_t number,
                       Py_ssize_t depth) except -1:
    """Skips an unknown group opened for field `number` (field 0 is let through inside it)."""
    cdef uint64_t field = 0
    cdef int wire_type = 0
    cdef Py_ssize_t after
    if depth < 0:
        return _corrupt(f"nesting deeper than {_wire_depth}", pos)
    while pos < end:
        after = _tag(d, pos, end, &field, &wire_type)
        if wire_type == _W_EGROUP:
            if field != number:
                return _corrupt(f"end of group {field} inside group {number}", pos)
            return after
        pos = _skip(d, after, end, field, wire_type, depth)
    return _corrupt(f"group {number} not closed", end)


cdef bint _utf8_valid(const uint8_t *p, Py_ssize_t n) noexcept:
    """Whether p[:n] is strict UTF-8 (as bytes.decode("utf-8") and upb judge it: no overlong
    forms, no surrogates, nothing past U+10FFFF, no truncated sequence)."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    cdef uint8_t c, lo, hi
    cdef int need, k
    while i < n:
        while i + 8 <= n:
            memcpy(&word, p + i, 8)
            if word & 0x8080808080808080u:
                break
            i += 8
        if i >= n:
            return True
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        lo, hi = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            need = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            return False
        if i + need >= n:
            return False
        if not lo <= p[i + 1] <= hi:
            return False
        for k in range(2, need + 1):
            if not 0x80 <= p[i + k] <= 0xBF:
                return False
        i += need + 1
    return True


cdef int _message(_WScan *s, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t type_index, Py_ssize_t depth,
                  list spans) except -1:
    """Checks the message of type type_index in data[pos:end]; spans, when not None (the scanned
    message), gets the span of each entry of its spans field."""
    cdef const uint8_t *d = s.data
    cdef const uint8_t *row = s.table + type_index * s.width * _W_ENTRY
    cdef const uint8_t *entry
    cdef uint64_t number = 0
    cdef int wire_type = 0
    cdef Py_ssize_t after, start
    if depth < 0:
        return _corrupt(f"nesting deeper than {_wire_depth}", pos)
    while pos < end:
        after = _field_tag(d, pos, end, &number, &wire_type)
        entry = row + number * _W_ENTRY if number < <uint64_t>s.width else NULL
        # unknown, known with another wire type, or a number: nothing to check inside
        if entry == NULL or entry[0] != wire_type or wire_type != _W_LEN:
            pos = _skip(d, after, end, number, wire_type, depth)
            continue
        pos = _length(d, after, end, &start)
        if entry[1] == _W_STRING:
            if not _utf8_valid(d + start, pos - start):
                return _corrupt(f"field {number} is not valid UTF-8", start)
        elif entry[1] == _W_MESSAGE:
            _message(s, start, pos, entry[2], depth - 1, None)
            if spans is not None and number == s.spans_field:
                spans.append((start, pos))
    return 0


def message_spans(data, schema, Py_ssize_t at=0):
    cdef const uint8_t[::1] view = data
    cdef bytes table
    cdef Py_ssize_t width, types, i
    cdef _WScan s
    cdef list spans = []
    cdef Py_ssize_t pos = 0, end = view.shape[0], after, start
    cdef uint64_t number = 0
    cdef int wire_type = 0
    table, width, spans_field = schema
    types = len(table) // (width * _W_ENTRY) if width > 0 else 0
    if types < 1 or len(table) != types * width * _W_ENTRY:
        raise ValueError("message_spans: not a schema made by wire_schema")
    for i in range(2, len(table), _W_ENTRY):
        if table[i] >= types:
            raise ValueError("message_spans: not a schema made by wire_schema")
    if end == 0:
        return spans
    s.data = &view[0]
    s.table = table
    s.width = width
    s.spans_field = spans_field
    if not at:
        _message(&s, 0, end, 0, _wire_depth, spans)
        return spans
    while pos < end:
        after = _field_tag(s.data, pos, end, &number, &wire_type)
        if number == <uint64_t>at and wire_type == _W_LEN:
            pos = _length(s.data, after, end, &start)
            _message(&s, start, pos, 0, _wire_depth - 1, spans)
        else:
            pos = _skip(s.data, after, end, number, wire_type, _wire_depth)
    return spans


def wire_entries(data, Py_ssize_t start, Py_ssize_t end, uint64_t until=0, Py_ssize_t limit=0):
    cdef const uint8_t[::1] view = data
    cdef const uint8_t *d
    cdef list out = []
    cdef Py_ssize_t pos = start, after, value, entry_end
    cdef uint64_t number = 0
    cdef int wire_type = 0
    if not 0 <= start <= end <= view.shape[0]:
        raise ValueError(f"wire_entries: no bytes [{start}:{end}] in {view.shape[0]}")
    if start == end:
        return out
    d = &view[0]
    while pos < end:
        if limit and len(out) == limit:
            _corrupt(f"more than {limit} fields", pos)
        after = _field_tag(d, pos, end, &number, &wire_type)
        if wire_type == _W_LEN:
            entry_end = _length(d, after, end, &value)
        else:
            value = after
            entry_end = _skip(d, after, end, number, wire_type, _wire_depth)
        out.append((number, wire_type, pos, value, entry_end))
        pos = entry_end
        if until and number == until:
            break
    return out
