"""A stop that fails half-way still ends the server: `contextsvc serve` waits for it (Server.wait),
and a process that never exits after SIGTERM is worse than one whose last steps went wrong."""
from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers import convo
from helpers.server import start_server, wait_for
from contextsvc.v1 import context_pb2_grpc as pb_grpc

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_stop_that_fails_half_way_still_ends_the_server():
    s = start_server()

    def close():
        raise OSError("connection pool already closed")

    s.store.close = close  # the stop's last steps close the store (Redis: its connection pool)
    stopper = threading.Thread(target=s.stop, kwargs={"grace": 1}, daemon=True)
    stopper.start()
    stopper.join(10)
    ended = threading.Event()
    threading.Thread(target=lambda: (s.wait(), ended.set()), daemon=True).start()
    assert ended.wait(10), "wait() still blocked after the stop failed"
    assert s.exit_code == 1  # serve says the stop failed


def test_a_stopping_server_says_not_serving_and_keeps_answering_until_the_drain_ends():
    """A proxy takes a replica out on its health checks: until it has, the replica must answer
    every call (a refusal inside an HTTP/2 answer is one a proxy cannot retry)."""
    s = start_server()
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    stub, health = pb_grpc.ContextServiceStub(channel), health_pb2_grpc.HealthStub(channel)
    try:
        stopper = threading.Thread(target=s.stop, kwargs={"grace": 1, "drain": 2.0}, daemon=True)
        started = time.monotonic()
        stopper.start()
        assert wait_for(lambda: not s.serving(), 1)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == NOT_SERVING
        answered = 0
        while time.monotonic() - started < 1.5:  # well inside the drain
            assert stub.Measure(convo.measure_request(), timeout=5).body_bytes > 0
            answered += 1
        assert answered > 5
        stopper.join(10)
        with pytest.raises(grpc.RpcError) as e:  # once the drain is over, calls are refused
            stub.Measure(convo.measure_request(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        channel.close()
        s.stop(grace=1)
