"""Retrying a call the server could not take: a channel whose unary calls are sent again after
UNAVAILABLE or CANCELLED, with exponential backoff and jitter (README, "Retries").

A server that stops answers UNAVAILABLE ("the server is shutting down; retry on another
replica") while it drains, and the connection is refused until it is back. A call reaching it
in the instant its listener closes is dropped by grpc as CANCELLED (docs/reliability.md); the
caller never cancels a call this retries (it holds no call object until the retries are over),
so CANCELLED here is that drop. Either way nothing was done, or (TruncateToolOutput only) an
output was stored whose id never reached the caller and which expires with the store's
retention. Every other code is returned at once: DEADLINE_EXCEEDED is the call's own time
running out, RESOURCE_EXHAUSTED also means a request too large to ever be taken. A request over
RetryPolicy.max_request_bytes is refused by the channel before it is sent (a proxy answers one
over the server's limit CANCELLED, which is retried).

    stub = pb_grpc.ContextServiceStub(retrying_channel("127.0.0.1:50051"))
    r = stub.Measure(request, timeout=5)  # up to 5 s in all, retries included

retrying(channel) retries on a channel made elsewhere; such a channel should reconnect as often
as the calls retry (grpc's own reconnect backoff grows to 120 s, and a call while the channel
waits to reconnect fails at once): make it with options=policy.channel_options(). The retries wait in the calling thread (also for `.future()` calls); streaming calls (health
Watch) are not retried.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import time

import grpc

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """attempts counts the first call; the n-th retry waits a random time between half and all
    of min(initial_backoff * 2**(n-1), max_backoff) seconds. The call's timeout, if any, bounds
    every attempt and wait together: no retry starts that would end after it."""
    attempts: int = 10
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    # a larger request is refused by the channel itself, RESOURCE_EXHAUSTED, never sent: the
    # server's default server.max_request_bytes (raise both together). A proxy in front ends a
    # request over the server's limit as CANCELLED, which would be retried, uploaded each time.
    max_request_bytes: int = 64 * 1024 * 1024
    # what the channel takes in: grpc's own default of 4 MiB refused an Assemble body with one
    # 3.5 MB screenshot, RESOURCE_EXHAUSTED, at every later step; the server's default
    # server.max_response_bytes
    max_response_bytes: int = 64 * 1024 * 1024

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 for the first)."""
        ceiling = min(self.initial_backoff * 2 ** (retry - 1), self.max_backoff)
        return random.uniform(ceiling / 2, ceiling)

    def channel_options(self) -> list[tuple[str, int]]:
        """A channel's reconnect backoff on the same schedule as the retries, and its bounds on
        what it sends and takes in."""
        return [("grpc.initial_reconnect_backoff_ms", int(self.initial_backoff * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(self.max_backoff * 1000)),
                ("grpc.max_send_message_length", self.max_request_bytes),
                ("grpc.max_receive_message_length", self.max_response_bytes)]


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
        grpc.ClientCallDetails):
    """A call's details with the time left for the next attempt."""


class _RetryUnavailable(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, policy: RetryPolicy):
        self.policy = policy

    def intercept_unary_unary(self, continuation, details, request):
        deadline = None if details.timeout is None else time.monotonic() + details.timeout
        retry = 0
        while True:
            call = continuation(details, request)
            retry += 1
            if call.code() not in RETRYABLE or retry == self.policy.attempts:
                return call
            pause = self.policy.backoff(retry)
            if deadline is not None and time.monotonic() + pause >= deadline:
                return call
            time.sleep(pause)
            if deadline is not None:
                details = _CallDetails(details.method, deadline - time.monotonic(), details.metadata,
                                       details.credentials, details.wait_for_ready, details.compression)


def retrying(channel: grpc.Channel, policy: RetryPolicy = RetryPolicy()) -> grpc.Channel:
    """channel with its unary calls (every ContextService RPC, health Check) retried as policy
    says; make the stubs on the channel this returns."""
    return grpc.intercept_channel(channel, _RetryUnavailable(policy))


def retrying_channel(address: str, policy: RetryPolicy = RetryPolicy(),
                     credentials: grpc.ChannelCredentials | None = None, options=()) -> grpc.Channel:
    """A channel to address (insecure without credentials) that reconnects and retries as policy
    says; options are further channel options, and win over the policy's (grpc takes a key's
    first value)."""
    options = [*options, *policy.channel_options()]
    channel = (grpc.secure_channel(address, credentials, options) if credentials
               else grpc.insecure_channel(address, options))
    return retrying(channel, policy)
