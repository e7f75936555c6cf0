"""Each message's key from the request's own bytes: the digest of the bytes it was sent in.

The hot path's wire scanner (native.message_spans) finds each message's span in the serialized
request without parsing it; a message seen before then costs a hash and a memo lookup, never a
conversion or a re-serialization. The key is the digest of the bytes as the client wrote them:
the same message written differently (fields in another order, an unknown field) is a miss,
never a wrong answer, since equal bytes always parse to equal messages.
"""
from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor as F

from .. import native
from ..memo import digests
from ..v1 import context_pb2 as pb

_I64 = {F.TYPE_DOUBLE, F.TYPE_FIXED64, F.TYPE_SFIXED64}
_I32 = {F.TYPE_FLOAT, F.TYPE_FIXED32, F.TYPE_SFIXED32}


def _types(root) -> list:
    """The scanner's view of root and every message type under it (wire_schema's types), root
    first: each field's wire type, what it holds, and its message type's index."""
    order, fields = [root], []
    index = {root.full_name: 0}
    for descriptor in order:  # grows while walked: breadth first
        row = {}
        for f in descriptor.fields:
            if f.type == F.TYPE_MESSAGE:
                sub = f.message_type
                if sub.full_name not in index:
                    index[sub.full_name] = len(order)
                    order.append(sub)
                row[f.number] = (native.WIRE_LEN, native.WIRE_MESSAGE, index[sub.full_name])
            elif f.type in (F.TYPE_STRING, F.TYPE_BYTES):
                kind = native.WIRE_STRING if f.type == F.TYPE_STRING else native.WIRE_PLAIN
                row[f.number] = (native.WIRE_LEN, kind, 0)
            elif f.is_repeated or f.type == F.TYPE_GROUP:
                # a packed repeat would need its own reading: no such field is sent today
                raise ValueError(f"the wire scanner does not read {f.full_name}")
            else:
                wire = native.WIRE_I64 if f.type in _I64 else native.WIRE_I32 if f.type in _I32 else native.WIRE_VARINT
                row[f.number] = (wire, native.WIRE_PLAIN, 0)
        fields.append(row)
    return fields


SCHEMA = native.wire_schema(_types(pb.Conversation.DESCRIPTOR), pb.Conversation.MESSAGES_FIELD_NUMBER)


# below this many messages, hashing each one is cheaper than keeping a step's bytes and
# comparing with them (rpc.earlier_step)
PREFIX_FROM_MESSAGES = 32


def message_spans(wire: bytes, at: int = 0) -> list:
    """The (start, end) of each message of the conversation in wire, in order; wire is the
    serialized conversation (at=0) or a request holding it at field `at`."""
    return native.message_spans(wire, SCHEMA, at)


def message_keys(wire: bytes, spans: list) -> tuple[list, list]:
    """(keys, sizes): the digest and size of each message whose span is given."""
    return digests(wire, spans), [end - start for start, end in spans]
