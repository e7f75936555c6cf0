"""Metrics scraped from the real /metrics endpoint after real RPCs."""
from __future__ import annotations

import grpc
import pytest

from helpers import convo
from helpers.server import start_server
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.metrics import scrape


@pytest.fixture()
def fresh():
    s = start_server()
    ch = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    yield s, pb_grpc.ContextServiceStub(ch)
    ch.close()
    s.stop(grace=1)


def test_rpc_counts_latency_and_overflow_rate(fresh):
    server, stub = fresh
    for _ in range(3):
        stub.Measure(convo.measure_request(), timeout=10)
    over = convo.small_conversation()
    over.messages[1].usage.input = 500_000
    stub.Measure(convo.measure_request(over), timeout=10)
    with pytest.raises(grpc.RpcError):
        stub.Measure(pb.MeasureRequest(), timeout=10)
    with pytest.raises(grpc.RpcError):
        stub.Assemble(pb.AssembleRequest(conversation=convo.small_conversation()), timeout=10)

    s = scrape(server.metrics_port)
    assert s[("contextsvc_rpcs_total", (("code", "OK"), ("method", "Measure")))] == 4
    assert s[("contextsvc_rpcs_total", (("code", "INVALID_ARGUMENT"), ("method", "Measure")))] == 1
    assert s[("contextsvc_rpcs_total", (("code", "INVALID_ARGUMENT"), ("method", "Assemble")))] == 1
    assert s[("contextsvc_rpc_duration_seconds_count", (("code", "OK"), ("method", "Measure")))] == 4
    assert s[("contextsvc_request_bytes_count", (("method", "Measure"),))] == 5
    measured = s[("contextsvc_measure_requests_total", (("provider", "anthropic"),))]
    overflowed = s[("contextsvc_measure_overflowed_total", (("provider", "anthropic"),))]
    assert (measured, overflowed) == (4, 1)  # overflow rate 0.25


def test_health_checks_are_not_counted_as_service_rpcs(fresh):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server, _ = fresh
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    s = scrape(server.metrics_port)
    assert not any(k[0] == "contextsvc_rpcs_total" for k in s)


def test_truncation_store_eviction_is_reported():
    s = start_server(truncation_overrides={"max_store_bytes": 100_000})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            ids = [stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text="line\n" * 12_000), timeout=10).output_id
                   for _ in range(3)]  # 60 KB each against a 100 KB cap
            with pytest.raises(grpc.RpcError) as e:
                stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=ids[0]), timeout=10)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND  # the oldest went first
            assert stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=ids[2]), timeout=10).total_lines == 12_000
        samples = scrape(s.metrics_port)
        assert samples[("contextsvc_truncation_evicted_outputs_total", ())] == 2
        assert samples[("contextsvc_truncation_evicted_bytes_total", ())] == 120_000
        assert samples[("contextsvc_truncations_total", (("cut_by", "lines"),))] == 3
    finally:
        s.stop(grace=1)


def test_payload_guard_trips_by_outcome(fresh):
    from helpers.rpc import big_conversation_with_summary, request

    server, stub = fresh
    assert not stub.Assemble(request(big_conversation_with_summary()), timeout=30).over_payload_limit
    conv = convo.small_conversation()
    conv.messages[2].parts[0].text.text = "z" * 2_000_000  # fresh content: nothing may be pruned
    assert stub.Assemble(request(conv), timeout=30).over_payload_limit
    stub.Assemble(request(convo.small_conversation()), timeout=30)  # under the limit: no trip
    s = scrape(server.metrics_port)
    assert s[("contextsvc_payload_guard_trips_total", (("outcome", "under"),))] == 1
    assert s[("contextsvc_payload_guard_trips_total", (("outcome", "still-over"),))] == 1
