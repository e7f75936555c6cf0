"""Cross-cutting RPC concerns, once for every method: error mapping, metrics, the in-flight limit.

Core exceptions become gRPC statuses here, so servicer methods stay plain conversions. A request
whose bytes are not a valid protobuf message gets INVALID_ARGUMENT (grpc's own handling would
answer INTERNAL).
"""
from __future__ import annotations

import logging
import time

import grpc
from google.protobuf.message import DecodeError

from .admission import Admission
from ..errors import BadInput, DeadlineExceeded, Exhausted, NotFound, Unavailable

log = logging.getLogger("contextsvc")

_STATUS_FOR = (
    (BadInput, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Exhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
)


class _Undecodable:
    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


def _status_name(context) -> str:
    """The status the caller saw. A call whose caller has gone ends with no code of its own (the
    response goes nowhere): it counts as the caller's DEADLINE_EXCEEDED or CANCELLED, not OK."""
    code = context.code()
    if context.is_active():
        return (code or grpc.StatusCode.OK).name
    left = context.time_remaining()
    if left is not None and left <= 0:
        return grpc.StatusCode.DEADLINE_EXCEEDED.name
    return grpc.StatusCode.CANCELLED.name


def identity(data: bytes) -> bytes:
    """A (de)serializer that passes the bytes through: the handler reads or wrote them itself."""
    return data


def status_for(error: Exception) -> grpc.StatusCode | None:
    """The status the core's error stands for (errors.py's tree), None for any other error."""
    for kind, code in _STATUS_FOR:
        if isinstance(error, kind):
            return code
    return None


def abort_for(context, error: Exception) -> None:
    """Ends the call with the status error stands for and its message (raises, as abort does)."""
    context.abort(status_for(error), str(error))


class ServiceInterceptor(grpc.ServerInterceptor):
    """Maps errors and records count, latency and request size per method and code."""

    def __init__(self, metrics, service_prefix: str, limit: Admission, max_response_bytes: int = 0):
        self._metrics = metrics
        self._prefix = service_prefix  # only this service's methods; health/reflection pass
        self._limit = limit
        self._max_response = max_response_bytes  # 0 = grpc's own limit only

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or not details.method.startswith(self._prefix) or handler.unary_unary is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        metrics = self._metrics
        deserialize = handler.request_deserializer
        inner = handler.unary_unary
        limit = self._limit
        serialize = handler.response_serializer
        max_response = self._max_response

        def read(data: bytes):
            if metrics is not None:
                metrics.request_bytes.labels(method).observe(len(data))
            try:
                return deserialize(data)
            except (DecodeError, ValueError, RuntimeError) as e:
                return _Undecodable(e)

        def behavior(request, context):
            start = time.perf_counter()
            try:
                if isinstance(request, _Undecodable):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"request: not a valid {method} request message ({request.error})")
                try:
                    ticket = limit.enter_call(method, context.is_active)
                except (Exhausted, Unavailable) as e:
                    abort_for(context, e)
                try:
                    response = inner(request, context)
                    # serialized here: a response over the limit is refused with a reason (and
                    # counted so) instead of failing in the transport after an OK was recorded
                    data = serialize(response) if serialize else response
                    if max_response and len(data) > max_response:
                        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                      f"{method}: the response is {len(data)} bytes, over "
                                      f"server.max_response_bytes ({max_response})")
                    return data
                except Exception as e:  # noqa: BLE001 - mapped below, or re-raised
                    if status_for(e) is not None:
                        abort_for(context, e)
                    if context.code() is not None:
                        raise  # an abort from the servicer itself
                    log.exception("%s failed", method)
                    context.abort(grpc.StatusCode.INTERNAL, f"{method}: internal error ({type(e).__name__})")
                finally:
                    limit.leave(ticket)
            finally:
                if metrics is not None:
                    code = _status_name(context)
                    metrics.rpcs.labels(method, code).inc()
                    metrics.latency.labels(method, code).observe(time.perf_counter() - start)

        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=read,
            response_serializer=identity,
        )
