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


RETURN_SECONDS = 0.05  # an answer's way back from grpc's core to the caller, on a loaded machine


def test_retries_end_within_the_calls_deadline(closed_port):
    policy = RetryPolicy(attempts=100, initial_backoff=0.05, max_backoff=0.2)
    stub = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{closed_port}", policy))
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(convo.measure_request(), timeout=1.5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the last attempt's answer, not a deadline
    # the deadline starts inside the call, after start, and its answer still has to return: the
    # bound is the deadline plus that return (a CI run measured 1.50024 s against exactly 1.5)
    assert 1.0 <= time.monotonic() - start <= 1.5 + RETURN_SECONDS


def test_a_request_over_max_request_bytes_is_refused_by_the_channel_and_never_sent():
    """A proxy ends a request over the server's limit as CANCELLED (HAProxy: RST_STREAM), which
    is retried: ten uploads of 70 MiB. The channel refuses a request over the policy's bound
    (the server's default limit) before sending it, RESOURCE_EXHAUSTED, at once."""
    from helpers.metrics import scrape
    from helpers.server import start_server

    assert RetryPolicy().max_request_bytes == 64 * 1024 * 1024  # the server's default
    s = start_server()
    try:
        policy = RetryPolicy(max_request_bytes=4096)
        stub = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{s.port}", policy))
        big = convo.measure_request()
        big.conversation.messages[0].parts[0].text.text = "x" * 10_000
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            stub.Measure(big, timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() - start < 1
        assert stub.Measure(convo.measure_request(), timeout=30).body_bytes > 0  # a small one goes
        # the caller's own channel option wins over the policy's (grpc takes a key's first value)
        own = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{s.port}", options=[
            ("grpc.max_send_message_length", 4096)]))
        with pytest.raises(grpc.RpcError) as e:
            own.Measure(big, timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        counted = scrape(s.metrics_port)
        assert counted[("contextsvc_rpcs_total", (("code", "OK"), ("method", "Measure")))] == 1
        assert not [k for k in counted if k[0] == "contextsvc_rpcs_total" and ("code", "OK") not in k[1]]
    finally:
        s.stop(grace=1)


def test_an_answer_over_grpc_s_default_4_mib_is_taken_in():
    """An Assemble body is as large as its conversation: grpc's own 4 MiB limit on what a channel
    takes in refused a body with one 3.5 MB screenshot, RESOURCE_EXHAUSTED, at every step."""
    from helpers.server import start_server
    from contextsvc.v1 import context_pb2 as pb

    assert RetryPolicy().max_response_bytes == 64 * 1024 * 1024  # the server's default
    s = start_server()
    try:
        big = convo.measure_request()
        big.conversation.messages[0].parts[0].text.text = "x" * (5 * 2**20)
        request = pb.AssembleRequest(conversation=big.conversation, model=big.model)
        answer = pb_grpc.ContextServiceStub(retrying_channel(f"127.0.0.1:{s.port}")).Assemble(request, timeout=30)
        assert len(answer.body) > 5 * 2**20
        with pytest.raises(grpc.RpcError) as e:  # what the policy's bound spares a caller
            pb_grpc.ContextServiceStub(grpc.insecure_channel(f"127.0.0.1:{s.port}")).Assemble(request, timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        s.stop(grace=1)
