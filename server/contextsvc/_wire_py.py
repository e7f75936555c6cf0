"""Protobuf wire-format scanner, pure Python: the executable specification of the one in
`contextsvc._native_c` (_native/wirescan.pxi); `_native_py` exports it as part of the hot path.

`message_spans` finds where each entry of one repeated message field lies in the serialized
bytes of a message (a conversation's messages), so that each can be keyed by a digest of its own
bytes without being parsed. It reads hostile input and refuses (ValueError) exactly what the
protobuf runtime's parser (upb, which `FromString` runs) refuses:
- a varint longer than 10 bytes, a tag longer than 5 bytes or above 2**32 - 1, a length longer
  than 5 bytes or past the end of its message, a truncated fixed32/fixed64;
- field number 0 (except inside an unknown group, where upb skips it), wire types 6 and 7, an
  end-group tag outside a group or naming another field, a group never closed;
- nesting (messages and groups) deeper than WIRE_DEPTH below the scanned message;
- a string field that is not valid UTF-8; any of these inside a known submessage.
A known field sent with another wire type is an unknown field, as upb reads it. The scanner knows
the message types from a schema (wire_schema): plain data, so the core never imports the
generated stubs; rpc/ builds it from their descriptors.

`wire_entries` lists the fields of a message as unknown ones (where each entry and its value lie),
reading none of them inside: how the transport finds a request's conversation and the entries
around it without parsing it.
"""
from __future__ import annotations

# Nesting upb's Python parser allows below the message it parses (its default depth limit)
WIRE_DEPTH = 100

# Wire types
WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_SGROUP, WIRE_EGROUP, WIRE_I32 = 0, 1, 2, 3, 4, 5
# What a known field holds besides its wire type: checked as UTF-8, parsed as a message, or neither
WIRE_PLAIN, WIRE_STRING, WIRE_MESSAGE = 0, 1, 2
# A schema row's entry for a field number its type does not have
UNKNOWN = 0xFF
ENTRY = 3  # bytes per schema entry: wire type, kind, message type index


def wire_schema(types, spans_field: int) -> tuple:
    """The scanner's schema: (table, width, spans_field). types[i] is a dict {field number:
    (wire type, kind, index of its message type in types or 0)}; types[0] is the message scanned
    and spans_field its repeated message field whose entries message_spans finds. The table holds
    one row per type, one 3-byte entry per field number below width."""
    width = 1 + max((n for t in types for n in t), default=0)
    if len(types) > 0xFF or width > 1 << 16:
        raise ValueError("wire_schema: at most 255 types and field numbers below 65536")
    table = bytearray([UNKNOWN, 0, 0] * (width * len(types)))
    for i, fields in enumerate(types):
        for number, (wire_type, kind, sub) in fields.items():
            known = wire_type in (WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32) and kind in (WIRE_PLAIN, WIRE_STRING, WIRE_MESSAGE)
            if not known or number < 1 or kind != WIRE_PLAIN and wire_type != WIRE_LEN or not 0 <= sub < len(types):
                raise ValueError(f"wire_schema: bad field {number} of type {i}")
            at = (i * width + number) * ENTRY
            table[at:at + ENTRY] = bytes((wire_type, kind, sub))
    if types[0].get(spans_field, (0, WIRE_PLAIN, 0))[1] != WIRE_MESSAGE:
        raise ValueError(f"wire_schema: field {spans_field} of type 0 is not a message field")
    return bytes(table), width, spans_field


def message_spans(data, schema: tuple, at: int = 0) -> list:
    """[(start, end)] of each entry of schema's spans field, in order: in data itself (at=0), or
    in every occurrence of field `at` of the message data holds (a request holding the scanned
    message there; its other fields are read as unknown ones, checked only as wire format).
    Occurrences of a message field merge, so their entries add up, as the parser makes them.
    ValueError wherever the parser would refuse data (see the module's docstring)."""
    data = bytes(data)
    spans = []
    scan = _Scan(data, schema, spans)
    if at:
        scan.wrapper(0, len(data), at)
    else:
        scan.message(0, len(data), 0, WIRE_DEPTH, True)
    return spans


def wire_entries(data, start: int, end: int, until: int = 0, limit: int = 0) -> list:
    """[(field number, wire type, entry start, value start, entry end)] of each field of the
    message in data[start:end], in order, nothing inside a value read (a group's fields only to
    find its end); a length-delimited value starts after its length, a group's after its tag.
    Stops after the first field numbered `until` (0: reads to the end), so a request's fields are
    read up to its conversation without its messages. ValueError where message_spans would refuse
    these fields as unknown ones, on bounds outside data, and when there would be more than `limit`
    fields (0: no limit): the caller's bound on what it reads."""
    data = data if isinstance(data, bytes) else bytes(data)
    if not 0 <= start <= end <= len(data):
        raise ValueError(f"wire_entries: no bytes [{start}:{end}] in {len(data)}")
    scan = _Scan(data, _NO_SCHEMA, [])
    out, pos = [], start
    while pos < end:
        if limit and len(out) == limit:
            raise _corrupt(f"more than {limit} fields", pos)
        number, wire_type, after = scan.field_tag(pos, end)
        value = scan.length(after, end)[0] if wire_type == WIRE_LEN else after
        entry_end = scan.value(after, end, number, wire_type, WIRE_DEPTH)
        out.append((number, wire_type, pos, value, entry_end))
        pos = entry_end
        if until and number == until:
            break
    return out


_NO_SCHEMA = (b"", 0, 0)  # wire_entries reads every field as an unknown one


def _corrupt(what: str, pos: int) -> ValueError:
    return ValueError(f"not valid protobuf wire format: {what} at byte {pos}")


class _Scan:
    def __init__(self, data: bytes, schema: tuple, spans: list):
        self.data = data
        self.table, self.width, self.spans_field = schema
        self.spans = spans

    def varint(self, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
        """(value, position after it) of the varint at pos: at most max_bytes bytes."""
        value = shift = 0
        for i in range(max_bytes):
            if pos + i >= end:
                raise _corrupt(f"truncated {what}", pos)
            byte = self.data[pos + i]
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value & 0xFFFF_FFFF_FFFF_FFFF, pos + i + 1
        raise _corrupt(f"{what} longer than {max_bytes} bytes", pos)

    def tag(self, pos: int, end: int) -> tuple[int, int, int]:
        """(field number, wire type, position after the tag)."""
        tag, after = self.varint(pos, end, 5, "tag")
        if tag > 0xFFFF_FFFF:
            raise _corrupt("tag above 2**32 - 1", pos)
        wire_type = tag & 7
        if wire_type > WIRE_I32:
            raise _corrupt(f"wire type {wire_type}", pos)
        return tag >> 3, wire_type, after

    def field_tag(self, pos: int, end: int) -> tuple[int, int, int]:
        """tag() of a field of a message (not inside a group): never number 0 nor an end-group."""
        number, wire_type, after = self.tag(pos, end)
        if number == 0:
            raise _corrupt("field number 0", pos)
        if wire_type == WIRE_EGROUP:
            raise _corrupt(f"end of group {number} outside any group", pos)
        return number, wire_type, after

    def length(self, pos: int, end: int) -> tuple[int, int]:
        """(start, end) of the length-delimited bytes whose length is at pos."""
        n, start = self.varint(pos, end, 5, "length")
        if n > end - start:
            raise _corrupt("length past the end of its message", pos)
        return start, start + n

    def value(self, pos: int, end: int, number: int, wire_type: int, depth: int) -> int:
        """Skips the value of an unknown field; the position after it."""
        if wire_type == WIRE_VARINT:
            return self.varint(pos, end, 10, "varint")[1]
        if wire_type == WIRE_LEN:
            return self.length(pos, end)[1]
        if wire_type == WIRE_SGROUP:
            return self.group(pos, end, number, depth - 1)
        size = 8 if wire_type == WIRE_I64 else 4
        if end - pos < size:
            raise _corrupt("truncated fixed-size value", pos)
        return pos + size

    def group(self, pos: int, end: int, number: int, depth: int) -> int:
        """Skips an unknown group opened for field `number`; the position after its end tag.
        Field number 0 is let through inside it, as upb's skipping does."""
        if depth < 0:
            raise _corrupt(f"nesting deeper than {WIRE_DEPTH}", pos)
        while pos < end:
            field, wire_type, after = self.tag(pos, end)
            if wire_type == WIRE_EGROUP:
                if field != number:
                    raise _corrupt(f"end of group {field} inside group {number}", pos)
                return after
            pos = self.value(after, end, field, wire_type, depth)
        raise _corrupt(f"group {number} not closed", end)

    def message(self, pos: int, end: int, type_index: int, depth: int, top: bool) -> None:
        """Checks the message of type `type_index` in data[pos:end]; on the scanned message (top),
        records the spans of its spans field."""
        if depth < 0:
            raise _corrupt(f"nesting deeper than {WIRE_DEPTH}", pos)
        table, width, row = self.table, self.width, type_index * self.width
        while pos < end:
            number, wire_type, after = self.field_tag(pos, end)
            entry = (row + number) * ENTRY if number < width else -1
            # unknown, known with another wire type, or a number: nothing to check inside
            if entry < 0 or table[entry] != wire_type or wire_type != WIRE_LEN:
                pos = self.value(after, end, number, wire_type, depth)
                continue
            start, pos = self.length(after, end)
            kind = table[entry + 1]
            if kind == WIRE_STRING:
                try:
                    self.data[start:pos].decode("utf-8")
                except UnicodeDecodeError:
                    raise _corrupt(f"field {number} is not valid UTF-8", start) from None
            elif kind == WIRE_MESSAGE:
                self.message(start, pos, table[entry + 2], depth - 1, False)
                if top and number == self.spans_field:
                    self.spans.append((start, pos))

    def wrapper(self, pos: int, end: int, at: int) -> None:
        """A message whose field `at` (sent length-delimited) is the scanned message; every other
        field is read as an unknown one."""
        while pos < end:
            number, wire_type, after = self.field_tag(pos, end)
            if number == at and wire_type == WIRE_LEN:
                start, pos = self.length(after, end)
                self.message(start, pos, 0, WIRE_DEPTH - 1, True)
            else:
                pos = self.value(after, end, number, wire_type, WIRE_DEPTH)
