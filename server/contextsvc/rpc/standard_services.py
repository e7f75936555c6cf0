"""grpc.health.v1.Health and server reflection, served through handlers of our own.

The stock handlers (grpcio-health-checking, grpcio-reflection) keep their logic and state here;
what ours add around them:
- the request bytes are parsed here, so garbage gets INVALID_ARGUMENT naming the message
  (grpc's own deserialization would answer INTERNAL "Exception deserializing request!");
- a reflection stream holds a worker thread while it is open (grpcio's sync server): streams
  are bounded by Admission and refused beyond it, and any stream (Watch included, which holds no
  thread) with no message either way for `stream_idle_seconds` is closed;
- Watch updates are sent from a thread of their own (health_watches.py says why), and open
  watches end with UNAVAILABLE once stop's drain is over;
- Health/Check says NOT_SERVING while abandoned work leaves no room for a new call.
"""
from __future__ import annotations

import threading

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from .admission import Admission
from ..errors import BadInput, Exhausted, Unavailable
from .health_watches import HealthServicer, HealthWatches, check_service_name, on_close
from .interceptors import abort_for, identity

HEALTH_SERVICE = health.SERVICE_NAME
REFLECTION_SERVICE = reflection.SERVICE_NAME


def _parse(cls, data: bytes, context):
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"request: not a valid {cls.DESCRIPTOR.full_name} message ({e})")
    return message


def _health_request(data: bytes, context) -> health_pb2.HealthCheckRequest:
    request = _parse(health_pb2.HealthCheckRequest, data, context)
    try:
        check_service_name(request.service)
    except BadInput as e:
        abort_for(context, e)
    return request


def _serialize(message) -> bytes:
    return message.SerializeToString()


class _Registering:
    """The context the stock servicer's Watch sees: a callback it registers on a call that has
    already ended runs at once. The servicer ignores add_callback's False and would otherwise
    keep that stream's send callback (and the call behind it) for the life of the process."""

    def __init__(self, context):
        self._context = context

    def add_callback(self, callback) -> bool:
        on_close(self._context, callback)  # the servicer's lock is re-entrant: it holds it here
        return True

    def __getattr__(self, name):
        return getattr(self._context, name)


class StandardServices:
    """Health (its state in `servicer`: set(), enter_graceful_shutdown()) and reflection."""

    def __init__(self, admission: Admission, idle_seconds: float, service_names, reflection_on: bool,
                 serving_names=("",), max_watches: int = 64):
        self.servicer = HealthServicer()
        self._admission = admission
        self._idle = idle_seconds
        self._serving_names = set(serving_names)
        self._reflection = reflection.ReflectionServicer(service_names) if reflection_on else None
        self._watches = HealthWatches(max_watches)  # Watch streams (they hold no thread)
        self._stop = threading.Event()
        self._reaper = None

    def handlers(self) -> list:
        out = [grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
            "Check": grpc.unary_unary_rpc_method_handler(
                self._check, request_deserializer=identity, response_serializer=_serialize),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self._watch_behavior(), request_deserializer=identity, response_serializer=_serialize),
        })]
        if self._reflection is not None:
            out.append(grpc.method_handlers_generic_handler(REFLECTION_SERVICE, {
                "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                    self._reflect, request_deserializer=identity, response_serializer=_serialize),
            }))
        return out

    # -- health ------------------------------------------------------------------------------------

    def _check(self, data, context):
        return self.check(_health_request(data, context), context)

    def check(self, request, context):
        """What Health/Check answers for request (the metrics port's /healthz reads it too)."""
        response = self.servicer.Check(request, context)
        if (response.status == health_pb2.HealthCheckResponse.SERVING
                and request.service in self._serving_names and self._admission.stalled()):
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return response

    def _watch_behavior(self):
        def watch(data, context, send_response_callback=None):
            request = _health_request(data, context)
            try:
                stream = self._watches.open(context, send_response_callback)
            except (Exhausted, Unavailable) as e:
                abort_for(context, e)
            return self.servicer.Watch(request, _Registering(context),
                                       send_response_callback=lambda r: self._watches.send(stream, r))

        # grpcio calls it with send_response_callback and frees the thread once it returns
        watch.experimental_non_blocking = True
        watch.experimental_thread_pool = None
        return watch

    def end_watches(self) -> None:
        """At stop, after the drain: watchers have seen NOT_SERVING; their streams end now."""
        self._watches.end_all("server shutting down; watch another replica")

    # -- reflection --------------------------------------------------------------------------------

    def _reflect(self, request_iterator, context):
        try:
            ticket = self._admission.enter_stream("ServerReflectionInfo", context.cancel)
        except (Exhausted, Unavailable) as e:
            abort_for(context, e)
        try:
            def requests():
                for data in request_iterator:
                    ticket.touch()
                    yield _parse(reflection_pb2.ServerReflectionRequest, data, context)

            for response in self._reflection.ServerReflectionInfo(requests(), context):
                ticket.touch()
                yield response
        finally:
            self._admission.leave(ticket)

    # -- idle streams ------------------------------------------------------------------------------

    def start(self) -> None:
        self._reaper = threading.Thread(target=self._reap, name="idle-streams", daemon=True)
        self._reaper.start()
        self._watches.start()

    def stop(self) -> None:
        self._stop.set()
        self._watches.stop()

    def _reap(self) -> None:
        period = max(0.05, min(1.0, self._idle / 4))
        while not self._stop.wait(period):
            for t in self._watches.idle_streams(self._idle) + self._admission.idle_streams(self._idle):
                t.on_idle()  # cancels the call: the stream ends, its thread (if any) is freed
