"""contextsvc_client.retry against real server processes: calls retried on UNAVAILABLE go on
across a restart of the one server they talk to; the attempts and the call's deadline bound
the retries."""
from __future__ import annotations

import socket
import time

import grpc
import pytest

from contextsvc.v1 import context_pb2_grpc as pb_grpc
from contextsvc_client.retry import RetryPolicy, retrying_channel
from helpers import convo
from helpers.restarts import assert_outcomes, calls_across_a_restart


def measure_calls(channel: grpc.Channel):
    """One Measure per next(), with a 20 s deadline: its status code name and its seconds."""
    stub = pb_grpc.ContextServiceStub(channel)
    with channel:
        while True:
            start = time.monotonic()
            try:
                stub.Measure(convo.measure_request(), timeout=20)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            yield code, time.monotonic() - start


@pytest.mark.parametrize("retry", [True, False], ids=["retrying", "plain"])
def test_calls_with_retries_all_succeed_across_a_server_restart(tmp_path, retry):
    channel = retrying_channel if retry else grpc.insecure_channel
    outcomes = calls_across_a_restart(tmp_path, lambda port: measure_calls(channel(f"127.0.0.1:{port}")))
    assert_outcomes(outcomes, retry)


@pytest.fixture()
def closed_port():
    """A loopback port nothing listens on (connections are refused: UNAVAILABLE)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_retries_stop_after_the_attempts(closed_port):
    policy = RetryPolicy(attempts=3, initial_backoff=0.2, max_backoff=10)
    stub = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{closed_port}", policy))
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(convo.measure_request(), timeout=30)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # two waits: 0.1-0.2 s, then 0.2-0.4 s
    assert 0.3 <= time.monotonic() - start < 2


def test_retries_end_within_the_calls_deadline(closed_port):
    policy = RetryPolicy(attempts=100, initial_backoff=0.05, max_backoff=0.2)
    stub = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{closed_port}", policy))
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(convo.measure_request(), timeout=1.5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the last attempt's answer, not a deadline
    assert 1.0 <= time.monotonic() - start <= 1.5
