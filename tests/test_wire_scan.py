"""The wire scanner (native.message_spans, native.wire_entries): the compiled module and its
Python twin against each other and against the protobuf runtime's own parser, on hostile bytes.

The property, for any bytes: both twins refuse them (ValueError) exactly when
`Conversation.FromString` does, and otherwise give the same spans, whose bytes parse to the very
messages FromString gives, whatever unknown fields, groups or odd encodings surround them.
Inputs are wire-format token streams drawn at random (any field number including 0, any wire type
including 6 and 7, overlong and truncated varints, lengths that lie, groups closed, mismatched or
never closed, nested messages built of the same), valid conversations with such fields spliced
in, and random byte edits of both. wire_entries is held the same way to the parse of a message with
neither string nor message fields (google.protobuf.Timestamp: two numbers, fields 1 and 2; any
other field is unknown to it, as wire_entries reads every field).
"""
from __future__ import annotations

import os

import pytest
from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings, strategies as st

from contextsvc import _native_py
from contextsvc.rpc.message_keys import SCHEMA
from contextsvc.v1 import context_pb2 as pb
from helpers import convo
from helpers.implementations import NO_EXTENSIONS, compiled

EXAMPLES = int(os.environ.get("CONTEXTSVC_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("CONTEXTSVC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONVERSATION = pb.MeasureRequest.DESCRIPTOR.fields_by_name["conversation"].number


def twins() -> list:
    return [_native_py] if NO_EXTENSIONS else [_native_py, compiled()]


def varint(n: int, pad: int = 0) -> bytes:
    """n as a varint, with pad redundant bytes (an overlong encoding)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    if not pad:
        return bytes(out + bytes([n]))
    return bytes(out + bytes([n | 0x80]) + b"\x80" * (pad - 1) + b"\x00")


def tag(number: int, wire_type: int, pad: int = 0) -> bytes:
    return varint(number << 3 | wire_type, pad)


def field(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


# ---- strategies ------------------------------------------------------------------------------

# small numbers are the schema's own fields (at every level), 0 is refused outside groups, the
# last are the largest a tag can carry and one past it
numbers = st.one_of(st.integers(0, 22), st.sampled_from([99, 2**28, 2**29 - 1, 2**29]))
wire_types = st.one_of(st.sampled_from([0, 1, 2, 3, 5]), st.integers(0, 7))
pads = st.one_of(st.just(0), st.integers(0, 6))
unknown_numbers = st.integers(23, 2**18 - 1)  # no type here has them; a 3-byte tag, padded, stays within 5
utf8_text = st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass"))
raw_bytes = st.binary(max_size=12)


@st.composite
def tokens(draw, depth: int = 3, lies: bool = True) -> bytes:
    """A stream of wire-format fields. With lies, any field may be malformed a little (field 0,
    wire types 6 and 7, varints too long, lengths that do not fit, groups ill closed); without,
    they are well formed fields no message type here has (or has with another wire type)."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        wire_type = draw(wire_types if lies else st.sampled_from([0, 1, 2, 3, 5]))
        number = draw(numbers if lies else unknown_numbers if wire_type == 2 else st.integers(1, 99))
        out += tag(number, wire_type, draw(st.one_of(st.just(0), st.just(0), st.integers(0, 2))))
        if wire_type == 0:
            big = draw(st.booleans())
            value = draw(st.integers(0, 2**64 - 1) if big else st.integers(0, 300))
            out += varint(value, draw(pads) if lies or not big else 0)
        elif wire_type == 1:
            out += draw(st.binary(min_size=8, max_size=8))
        elif wire_type == 5:
            out += draw(st.binary(min_size=4, max_size=4))
        elif wire_type == 2:
            inner = st.one_of(utf8_text, raw_bytes, tokens(depth - 1, lies)) if depth else st.one_of(utf8_text, raw_bytes)
            payload = draw(inner)
            off = draw(st.one_of(st.just(0), st.just(0), st.just(0), st.integers(-2, 2))) if lies else 0
            pad = draw(st.one_of(st.just(0), st.just(0), st.integers(0, 5 if lies else 3)))
            out += varint(max(len(payload) + off, 0), pad) + payload
        elif wire_type == 3:
            if depth:
                out += draw(tokens(depth - 1, lies))
            end = draw(st.one_of(st.just(number), st.just(number), numbers)) if lies else number
            if not lies or draw(st.integers(0, 9)):
                out += tag(end, 4)
    return bytes(out)


@st.composite
def conversations(draw) -> bytes:
    """A valid conversation's bytes with unknown or mis-typed fields spliced in at field
    boundaries, at the top and inside its messages."""
    messages = []
    for i in range(draw(st.integers(0, 4))):
        m = convo.user(f"m{i}", convo.text(f"p{i}", draw(st.text(max_size=20))))
        messages.append(m.SerializeToString() + draw(tokens(1, lies=False)))
    out = draw(tokens(1, lies=False)) + field(1, draw(utf8_text))
    for m in messages:
        out += field(2, m) + draw(tokens(1, lies=False))
    return out


@st.composite
def edited(draw, base) -> bytes:
    """base with a few bytes changed, inserted or cut off."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.integers(0, 3))
        if action == 0:
            data[at] = draw(st.integers(0, 255))
        elif action == 1:
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif action == 2:
            del data[at:]
        else:
            del data[at]
    return bytes(data)


hostile = st.one_of(tokens(), conversations(), edited(tokens()), edited(conversations()), st.binary(max_size=40))


def outcome(module, data: bytes, at: int = 0):
    try:
        return module.message_spans(data, SCHEMA, at)
    except ValueError:
        return ValueError


def check(data: bytes, parse, at: int = 0) -> None:
    """Both twins against each other and against parse(data).conversation."""
    got = [outcome(m, data, at) for m in twins()]
    assert all(g == got[0] for g in got), got
    try:
        parsed = parse(data)
    except DecodeError:
        assert got[0] is ValueError, "the parser refused bytes the scanner accepted"
        return
    assert got[0] is not ValueError, "the scanner refused bytes the parser accepted"
    messages = [pb.Message.FromString(data[s:e]) for s, e in got[0]]
    assert messages == list(parsed.messages)


# ---- properties ------------------------------------------------------------------------------

@FUZZ
@given(data=hostile)
def test_spans_and_refusals_are_the_parser_s(data):
    check(data, pb.Conversation.FromString)


@FUZZ
@given(parts=st.lists(st.tuples(st.sampled_from(["conversation", "other", "model"]), hostile), max_size=4))
def test_a_request_holding_the_conversation(parts):
    """The conversation inside a request, in one or several occurrences (they merge: their
    messages add up), among other fields (read as unknown ones: here well formed, so the
    request is refused exactly when a conversation in it is)."""
    data = bytearray()
    for kind, payload in parts:
        if kind == "conversation":
            data += field(CONVERSATION, payload)
        elif kind == "model":
            data += pb.MeasureRequest(model=convo.model()).SerializeToString()
        else:
            data += tag(99, 0) + varint(len(payload))
    check(bytes(data), lambda b: pb.MeasureRequest.FromString(b).conversation, at=CONVERSATION)


def entries_outcome(module, data: bytes, start: int, end: int, until: int = 0, limit: int = 0):
    try:
        return module.wire_entries(data, start, end, until, limit)
    except ValueError:
        return ValueError


@FUZZ
@given(data=hostile)
def test_entries_and_refusals_are_the_parser_s(data):
    """Every field of the bytes, read as unknown ones: refused exactly when the parser refuses
    them; otherwise one entry per field the parser found, in order, with its number, wire type and
    (length-delimited) value, the entries tiling the bytes."""
    got = [entries_outcome(m, data, 0, len(data)) for m in twins()]
    assert all(g == got[0] for g in got), got
    try:
        parsed = timestamp_pb2.Timestamp.FromString(data)
    except DecodeError:
        assert got[0] is ValueError, "the parser refused bytes wire_entries accepted"
        return
    assert got[0] is not ValueError, "wire_entries refused bytes the parser accepted"
    ends = [0] + [e[4] for e in got[0]]
    assert [e[2] for e in got[0]] == ends[:-1] and ends[-1] == len(data)
    unknown = list(UnknownFieldSet(parsed))
    others = [e for e in got[0] if (e[0], e[1]) not in ((1, 0), (2, 0))]  # not Timestamp's own
    assert [(e[0], e[1]) for e in others] == [(f.field_number, f.wire_type) for f in unknown]
    for (number, wire_type, entry, value, end), f in zip(others, unknown):
        if wire_type == 2:
            assert data[value:end] == f.data
        elif wire_type == 0:
            assert sum((b & 0x7F) << 7 * i for i, b in enumerate(data[value:end])) & (2**64 - 1) == f.data
        elif wire_type in (1, 5):
            assert end - value == (8 if wire_type == 1 else 4)


@FUZZ
@given(data=hostile, cut=st.tuples(st.integers(0, 60), st.integers(0, 60)), until=st.integers(0, 5),
       limit=st.integers(0, 4))
def test_entries_of_a_stretch_up_to_a_field(data, cut, until, limit):
    """A stretch of the bytes (bounds outside them refused), read up to the first field `until`,
    at most `limit` fields: the twins agree, and what they read is the start of the whole read's."""
    start, end = min(cut), max(cut)
    got = [entries_outcome(m, data, start, end, until, limit) for m in twins()]
    assert all(g == got[0] for g in got), got
    if end > len(data):
        assert got[0] is ValueError
        return
    whole = entries_outcome(_native_py, data, start, end)
    if got[0] is ValueError:  # refused before `until`, or more than limit fields before it
        assert whole is ValueError or limit and len(whole) > limit
        return
    numbers = [e[0] for e in got[0]]
    ends = [start] + [e[4] for e in got[0]]
    assert [e[2] for e in got[0]] == ends[:-1]  # from start, one after the other
    assert until not in numbers[:-1]
    assert ends[-1] == end or numbers[-1] == until  # to the end, or stopped at `until`
    if whole is not ValueError:  # bytes past `until` are not read: they may be anything
        assert got[0] == whole[:len(got[0])]
    assert not limit or len(got[0]) <= limit


def test_entries_of_a_real_request():
    """A Measure request's fields, and its conversation's read up to its first message."""
    import workload

    request = workload.measure_request(20_000)
    data = request.SerializeToString()
    top = request.DESCRIPTOR.fields_by_name
    for module in twins():
        fields = module.wire_entries(data, 0, len(data))
        assert [e[0] for e in fields] == [f.number for f, value in request.ListFields()
                                          for _ in (value if f.is_repeated else [value])]
        _, _, _, start, end = next(e for e in fields if e[0] == top["conversation"].number)
        assert data[start:end] == request.conversation.SerializeToString()
        head = module.wire_entries(data, start, end, pb.Conversation.MESSAGES_FIELD_NUMBER)
        assert data[head[-1][3]:head[-1][4]] == request.conversation.messages[0].SerializeToString()
        with pytest.raises(ValueError):
            module.wire_entries(data, 0, len(data), 0, len(fields) - 1)


# ---- cases -----------------------------------------------------------------------------------

def _nested_groups(n: int) -> bytes:
    return tag(3, 3) * n + tag(3, 4) * n


@pytest.mark.parametrize("data", [
    b"",
    tag(2, 0) + b"\x05",  # messages sent as a number: an unknown field
    tag(2, 3) + tag(2, 4),  # ... or as a group
    tag(0, 0) + b"\x00",  # field 0
    tag(3, 3) + tag(0, 0) + b"\x00" + tag(3, 4),  # field 0 inside an unknown group: let through
    tag(3, 6), tag(3, 7),  # no such wire types
    tag(3, 4),  # a group's end outside any group
    tag(3, 3) + tag(4, 4),  # ... naming another group
    tag(3, 3),  # a group never closed
    tag(3, 0) + b"\xff" * 9 + b"\x01",  # a 10-byte varint
    tag(3, 0) + b"\xff" * 10 + b"\x01",  # an 11-byte one
    b"\xf8\xff\xff\xff\x0f\x00",  # the largest tag
    b"\x80\x80\x80\x80\x10\x00",  # a tag past 2**32 - 1
    b"\x98\x80\x80\x80\x80\x00\x00",  # a 6-byte tag
    tag(3, 2) + b"\x83\x80\x80\x80\x00abc",  # a 5-byte length
    tag(3, 2) + b"\x83\x80\x80\x80\x80\x00abc",  # a 6-byte one
    tag(3, 2) + b"\x05abc",  # a length past the end
    tag(3, 5) + b"\x01\x02",  # a truncated fixed32
    field(1, b"\xff"), field(1, b"\xed\xa0\x80"), field(1, b"\xf4\x90\x80\x80"),  # not UTF-8
    field(3, b"\xff"),  # not UTF-8, but not a known string field either
    field(2, field(1, b"\xc0\x80")),  # a message's id, overlong UTF-8
    field(2, tag(2, 2) + b"\x01\x00"),  # a message's role sent length-delimited: unknown
    field(2, field(5, field(13, field(3, field(6, field(1, b"\xe0\x80\x80")))))),  # deep in an attachment
    field(2, tag(3, 4)),  # a group's end inside a message
    field(2, b"") * 3,
    _nested_groups(100), _nested_groups(101),  # nesting: upb's depth limit
    field(2, _nested_groups(99)), field(2, _nested_groups(100)),
    field(2, field(5, _nested_groups(98))), field(2, field(5, _nested_groups(99))),
])
def test_cases(data):
    check(data, pb.Conversation.FromString)


def test_the_depth_limit_is_the_parser_s():
    """At the top, inside a message and inside a part: the deepest nesting accepted is the
    parser's, one more is refused (the cases above would pass with both limits wrong)."""
    assert _native_py.WIRE_DEPTH == 100
    for wrap, limit in ((lambda b: b, 100), (lambda b: field(2, b), 99), (lambda b: field(2, field(5, b)), 98)):
        pb.Conversation.FromString(wrap(_nested_groups(limit)))
        with pytest.raises(DecodeError):
            pb.Conversation.FromString(wrap(_nested_groups(limit + 1)))
        for module in twins():
            module.message_spans(wrap(_nested_groups(limit)), SCHEMA)
            with pytest.raises(ValueError):
                module.message_spans(wrap(_nested_groups(limit + 1)), SCHEMA)


def test_a_real_request():
    """A 200 KB agent session as Measure sends it: one span per message, the bytes of each the
    message's own serialization."""
    import workload

    request = workload.measure_request(200_000)
    data = request.SerializeToString()
    for module in twins():
        spans = module.message_spans(data, SCHEMA, CONVERSATION)
        assert [data[s:e] for s, e in spans] == [m.SerializeToString() for m in request.conversation.messages]


def test_any_buffer():
    data = field(2, field(1, b"id"))
    for module in twins():
        assert module.message_spans(bytearray(data), SCHEMA) == module.message_spans(memoryview(data), SCHEMA) == [(2, 6)]
