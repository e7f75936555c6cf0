"""Compact over loopback: offline by default, the Anthropic and OpenAI backends through their real SDKs."""
from __future__ import annotations

import grpc
import pytest

from helpers import convo
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import summarizer_server
from helpers.metrics import scrape
from helpers.rpc import compact_request, session

SECTIONS = ("## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress",
            "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context", "## Relevant Files")


def test_offline_compaction_end_to_end(stub):
    r = stub.Compact(compact_request(auto=True), timeout=30)
    assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED and r.under_limit
    assert r.backend == "offline" and not r.fell_back
    assert r.tokens_after < r.tokens_before and r.limit == 26_000
    assert r.summary.summary and r.summary.role == pb.ROLE_ASSISTANT
    text = r.summary.parts[0].text.text
    for section in SECTIONS:
        assert section in text
    assert "src/module_0.py" in text and "pytest tests/test_module_0.py" in text
    assert r.summarized_ids and r.summarized_ids[0] == "msg_001"
    assert r.tail_start_id > r.summarized_ids[-1]
    assert r.retention.items > 0 and 0 < r.retention.ratio <= 1
    assert r.continue_message.role == pb.ROLE_USER
    assert r.attempts == 1


def test_attempt_cap_is_context_overflow(stub):
    r = stub.Compact(compact_request(attempts=3), timeout=30)
    assert r.outcome == pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW and not r.under_limit
    assert not r.HasField("summary") and r.attempts == 3


def test_tiny_window_is_insufficient_not_success(stub):
    r = stub.Compact(compact_request(context=4_500), timeout=30)
    assert r.outcome == pb.COMPACT_OUTCOME_INSUFFICIENT and not r.under_limit


@pytest.mark.parametrize("req,field", [
    (pb.CompactRequest(model=convo.model()), "conversation"),
    (pb.CompactRequest(conversation=session()), "model"),
    (compact_request(attempts=-1), "attempts"),
])
def test_bad_compact_requests(stub, req, field):
    with pytest.raises(grpc.RpcError) as e:
        stub.Compact(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()


def test_anthropic_backend_through_the_server(api):
    s = summarizer_server(api, fallback=False, timeout=0.5)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
        assert r.backend == "anthropic" and not r.fell_back
        path, headers, body = api.requests[-1]
        assert path == "/v1/messages" and body["model"] == "claude-haiku-4-5"
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert "src/module_0.py" in body["messages"][0]["content"][0]["text"]
        assert "## Goal" in r.summary.parts[0].text.text
        samples = scrape(s.metrics_port)
        assert samples[("contextsvc_compaction_attempts_total",
                        (("backend", "anthropic"), ("outcome", "compacted")))] == 1
        assert samples[("contextsvc_summary_retention_ratio_count", ())] == 1
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("mode", ["500", "401", "slow"])
def test_model_backend_failures_status_or_fallback(model_api, mode):
    api = model_api
    api.mode = mode
    strict, lenient = (summarizer_server(api, fallback, timeout=0.5) for fallback in (False, True))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{strict.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE and e.value.details().startswith(f"{api.BACKEND} summarizer: ")
        with grpc.insecure_channel(f"127.0.0.1:{lenient.port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
            assert r.fell_back and r.backend == "offline" and r.fallback_reason.startswith(f"{api.BACKEND} summarizer")
            assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED
        assert scrape(lenient.metrics_port)[("contextsvc_summarizer_fallbacks_total", ())] == 1
    finally:
        strict.stop(grace=1)
        lenient.stop(grace=1)


def test_a_hung_summarizer_holds_at_most_its_slots_and_other_calls_are_answered(model_api):
    """Six agents, each on its own connection, compact at once against a summarizer that never
    answers, on a server of 6 slots (server.max_concurrent_rpcs): each call held its slot for
    the whole hang, and another agent's Measure, which never asks the summarizer, was refused
    RESOURCE_EXHAUSTED throughout (16 agents of 16 in the trial, 99 Measures of 99). Now at most
    summarizer.max_concurrent (2) wait on it: the others get the offline summary at once, and
    once those two timed out the breaker sends nothing for breaker_open_seconds. Measure is
    answered throughout."""
    import threading
    import time
    from helpers.server import start_server
    api = model_api
    api.mode = "hang"
    s = start_server(summarizer_overrides=dict(
        backend=api.BACKEND, base_url=api.url, api_key_env="CONTEXTSVC_TEST_KEY", timeout_seconds=3.0,
        max_retries=0, fallback_to_offline=True, max_concurrent=2, breaker_failures=2, breaker_open_seconds=60.0),
        max_concurrent_rpcs=6)
    address = f"127.0.0.1:{s.port}"
    compacted, measured, done = [], [], threading.Event()

    def compact():
        with grpc.insecure_channel(address) as ch:
            started = time.monotonic()
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=20)
            compacted.append((time.monotonic() - started, r))

    def measure():
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            while not done.is_set():
                try:
                    stub.Measure(convo.measure_request(), timeout=5)
                    measured.append("OK")
                except grpc.RpcError as e:
                    measured.append(e.code().name)
                time.sleep(0.05)

    try:
        agents = [threading.Thread(target=compact) for _ in range(6)]
        for t in agents:
            t.start()
        time.sleep(1.0)  # every agent's call is in: those that do not wait on the summarizer are done
        prober = threading.Thread(target=measure)
        prober.start()
        for t in agents:
            t.join(30)
        done.set()
        prober.join(10)
        assert len(compacted) == 6 and all(r.fell_back and r.backend == "offline" for _, r in compacted)
        waited = sorted(seconds for seconds, _ in compacted)
        assert len(api.requests) == 2 and waited[-2] >= 3.0 > waited[-3], waited
        assert all("summarizer.max_concurrent" in r.fallback_reason for seconds, r in compacted if seconds < 3)
        assert len(measured) > 10 and set(measured) == {"OK"}, measured
        # the two that got no answer opened the breaker: the next is not sent at all
        with grpc.insecure_channel(address) as ch:
            started = time.monotonic()
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=20)
        assert r.fell_back and "not tried, 2 calls in a row got no answer" in r.fallback_reason
        assert time.monotonic() - started < 1.5 and len(api.requests) == 2
    finally:
        s.stop(grace=1)
