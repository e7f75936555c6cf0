"""grpc.health.v1.Health and server reflection, served through handlers of our own.

Around the health state (health.py) and grpcio-reflection's servicer, ours:
- parse the request bytes here, so garbage gets INVALID_ARGUMENT naming the message (grpc's own
  deserialization would answer INTERNAL "Exception deserializing request!");
- bound reflection streams by Admission (`server.max_streams`), refuse beyond it at once, and
  close one with no request for `stream_idle_seconds` (CANCELLED);
- put reflection behind the bearer token when one is set (health stays open for probes);
- answer Health/Check NOT_SERVING while abandoned work leaves no room for a new call.
"""
from __future__ import annotations

import asyncio

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from .admission import Admission
from .calls import Refused, WaitingCalls, hold_open, receive
from .security import TokenCheck
from ..errors import BadInput, Exhausted, Unavailable
from .health import NOT_SERVING, SERVING, Health, check_service_name
from .streams import StreamIdle, write_within
from .statuses import identity, status_for

HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICE = reflection.SERVICE_NAME


def _parse(cls, data: bytes):
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise BadInput("request", f"not a valid {cls.DESCRIPTOR.full_name} message ({e})") from None
    return message


def _health_request(data: bytes) -> health_pb2.HealthCheckRequest:
    request = _parse(health_pb2.HealthCheckRequest, data)
    check_service_name(request.service)
    return request


def _serialize(message) -> bytes:
    return message.SerializeToString()


async def _abort_for(context, error: Exception) -> None:
    """Ends the call with error's status. Called after the except clause that caught error has
    ended, its traceback dropped: it would hold the frames (and a request of up to the size
    limit) until the cycle collector runs."""
    error.__traceback__ = None
    if isinstance(error, StreamIdle):
        await context.abort(grpc.StatusCode.CANCELLED, str(error))
    await context.abort(status_for(error), str(error))


class StandardServices:
    """Health (its state in `health`: set(), enter_graceful_shutdown()) and reflection."""

    def __init__(self, health: Health, admission: Admission, idle_seconds: float, service_names,
                 reflection_on: bool, serving_names=("",), token: TokenCheck | None = None,
                 request_wait: float = 10.0, waiting: WaitingCalls | None = None):
        self.health = health
        self._request_wait = request_wait  # server.request_wait_seconds
        self._waiting = waiting or WaitingCalls(0)  # the service's, shared
        self._admission = admission
        self._idle = idle_seconds
        self._serving_names = set(serving_names)
        self._token = token
        self._reflection = reflection.aio.ReflectionServicer(service_names) if reflection_on else None

    def handlers(self) -> list:
        # registered as client streams (one message each way on the wire, as unary calls) so the
        # request is read here: grpc's unary handler waits for it without end, and a thousand
        # calls that never send one filled the transport's bound for good
        out = [grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
            "Check": grpc.stream_unary_rpc_method_handler(
                self._check_call, request_deserializer=identity, response_serializer=_serialize),
            "Watch": grpc.stream_stream_rpc_method_handler(
                self._watch_call, request_deserializer=identity, response_serializer=_serialize),
        })]
        if self._reflection is not None:
            out.append(grpc.method_handlers_generic_handler(REFLECTION_SERVICE, {
                "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                    self._reflect, request_deserializer=identity, response_serializer=_serialize),
            }))
        return out

    # -- health ------------------------------------------------------------------------------------

    async def _request(self, context, method: str) -> bytes | None:
        """The call's request message, as the service's calls read theirs (calls.receive);
        None once the call is ended with the refusal."""
        try:
            hold_open(context, self._waiting, context.peer())
            return await receive(context, method, self._request_wait)
        except Refused as e:
            refusal = (e.code, e.details)
        await context.abort(*refusal)
        return None

    async def _check_call(self, _requests, context):
        data = await self._request(context, "Check")
        return await self._check(data, context)

    async def _watch_call(self, _requests, context):
        data = await self._request(context, "Watch")
        await self._watch(data, context)

    async def _check(self, data, context):
        try:
            request = _health_request(data)
        except BadInput as e:
            error = e
        else:
            error = None
        if error is not None:
            await _abort_for(context, error)
        status = self.check(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service[:200]!r}")
        return health_pb2.HealthCheckResponse(status=status)

    def check(self, service: str = "") -> int | None:
        """What Health/Check answers for service (the metrics port's /healthz reads it too);
        None for a service it does not know."""
        status = self.health.status(service)
        if status == SERVING and service in self._serving_names and self._admission.stalled():
            return NOT_SERVING
        return status

    async def _watch(self, data, context):
        error = None
        try:
            service = _health_request(data).service
            del data
            await self.health.watch(service, context)
        except (BadInput, Exhausted, Unavailable, StreamIdle) as e:
            error = e
        if error is not None:
            await _abort_for(context, error)

    def end_watches(self) -> None:
        """At stop, after the drain: watchers have seen NOT_SERVING; their streams end now."""
        self.health.end_all()

    # -- reflection --------------------------------------------------------------------------------

    async def _reflect(self, requests, context):
        if self._token is not None:
            reason = self._token.refusal(context.invocation_metadata())
            if reason:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        try:
            ticket = self._admission.enter_stream("ServerReflectionInfo")
        except (Exhausted, Unavailable) as e:
            error = e
        else:
            error = None
        if error is not None:
            await _abort_for(context, error)
        try:
            async def parsed():
                while True:
                    try:
                        data = await asyncio.wait_for(requests.__anext__(), self._idle)
                    except StopAsyncIteration:
                        return
                    except asyncio.TimeoutError:
                        raise StreamIdle(f"ServerReflectionInfo: no request for {self._idle:g} s "
                                         "(server.stream_idle_seconds)") from None
                    yield _parse(reflection_pb2.ServerReflectionRequest, data)

            error = None
            try:
                async for response in self._reflection.ServerReflectionInfo(parsed(), context):
                    await write_within(context, response, self._idle)
            except (BadInput, StreamIdle) as e:
                error = e
            if error is not None:
                await _abort_for(context, error)
        finally:
            self._admission.leave(ticket)
