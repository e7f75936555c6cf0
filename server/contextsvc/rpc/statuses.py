"""Which gRPC status each core error stands for, in one table.

Core exceptions become statuses here, so servicer methods stay plain conversions.
"""
from __future__ import annotations

import grpc

from ..errors import BadInput, DeadlineExceeded, Exhausted, NotFound, Unavailable

_STATUS_FOR = (
    (BadInput, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Exhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
)


def identity(data: bytes) -> bytes:
    """A (de)serializer that passes the bytes through: the handler reads or wrote them itself."""
    return data


def status_for(error: Exception) -> grpc.StatusCode | None:
    """The status the core's error stands for (errors.py's tree), None for any other error."""
    for kind, code in _STATUS_FOR:
        if isinstance(error, kind):
            return code
    return None
