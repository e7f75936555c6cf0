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


def test_the_guard_s_prune_and_the_post_compaction_prune_count_as_prune_runs(fresh):
    """Prune runs and tokens freed by reason (SPEC §8) count every prune: the Prune RPC's, the
    payload guard's in Assemble (payload-limit) and Compact's own (post-compaction), each with
    the figures its own RPC would answer."""
    from helpers.rpc import big_conversation_with_summary, request

    server, stub = fresh
    conv = big_conversation_with_summary()
    a = stub.Assemble(request(conv), timeout=30)
    assert a.guard_tripped and a.pruned_part_ids
    s = scrape(server.metrics_port)
    runs = s[("contextsvc_prune_runs_total", (("outcome", "acted"), ("reason", "payload-limit")))]
    freed = s[("contextsvc_prune_tokens_freed_total", (("reason", "payload-limit"),))]
    alone = stub.Prune(pb.PruneRequest(conversation=conv, model=request(conv).model,
                                       reason=pb.PRUNE_REASON_PAYLOAD_LIMIT), timeout=30)
    assert list(alone.part_ids) == list(a.pruned_part_ids) and (runs, freed) == (1, alone.tokens_freed)
    stub.Measure(pb.MeasureRequest(conversation=conv, model=request(conv).model), timeout=30)  # no body sent
    over = convo.small_conversation()
    over.messages[2].parts[0].text.text = "z" * 2_000_000  # nothing to prune: a run that did nothing
    stub.Assemble(request(over), timeout=30)
    s = scrape(server.metrics_port)
    assert s[("contextsvc_prune_runs_total", (("outcome", "acted"), ("reason", "payload-limit")))] == 2  # with the RPC's
    assert s[("contextsvc_prune_runs_total", (("outcome", "noop"), ("reason", "payload-limit")))] == 1
    # a kept tail of eight turns holds outputs the post-compaction prune marks, one that keeps little none
    for tail, outcome in ((pb.CompactionSettings(preserve_recent_tokens=200_000, tail_turns=8), "acted"),
                          (pb.CompactionSettings(), "noop")):
        c = stub.Compact(pb.CompactRequest(conversation=conv, model=request(conv).model, auto=True, compaction=tail),
                         timeout=30)
        assert c.outcome == pb.COMPACT_OUTCOME_COMPACTED and bool(c.pruned_part_ids) == (outcome == "acted")
    s = scrape(server.metrics_port)
    assert s[("contextsvc_prune_runs_total", (("outcome", "acted"), ("reason", "post-compaction")))] == 1
    assert s[("contextsvc_prune_runs_total", (("outcome", "noop"), ("reason", "post-compaction")))] == 1
    assert s[("contextsvc_prune_tokens_freed_total", (("reason", "post-compaction"),))] == 5 * 25_000  # 5 outputs


def test_a_prefix_break_counts_once_per_body_sent_however_often_a_step_assembles(fresh):
    """The README's loop: a step that prunes, then compacts, assembles three times against the
    state of the body sent last; the provider sees one change of its cached prefix."""
    import copy

    from helpers.rpc import SYSTEM, TOOLS

    server, stub = fresh

    def assemble(conv, state):
        return stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(), tools=TOOLS, system=SYSTEM,
                                                previous_cache_state=state), timeout=10)

    def breaks():
        return sum(v for k, v in scrape(server.metrics_port).items() if k[0] == "contextsvc_prefix_breaks_total")

    conv = pb.Conversation(session_id="s1", messages=[convo.user("msg_001", convo.text("u1", "Fix the parser."))])
    for n in range(2, 6):
        conv.messages.append(convo.assistant(f"msg_{n:03d}", convo.text(f"a{n}", f"Reading part {n}."),
                                             convo.tool(f"t{n}", f"call_{n}", "read", {"path": f"src/p{n}.py"},
                                                        f"def f{n}():\n    return {n}\n" * 200)))
    sent = assemble(conv, b"").cache_state  # step 1, sent
    conv.messages.append(convo.assistant("msg_006", convo.text("a6", "Reading the tests."),
                                         convo.tool("t6", "call_6", "read", {"path": "tests/t.py"}, "x\n")))
    first = assemble(conv, sent)  # step 2: only appended
    assert first.cache_report.prefix_kept
    conv.messages[1].parts[1].tool.state.time_compacted_ms = 1_700_000_000_000  # the prune acted
    pruned = assemble(conv, sent)
    assert pruned.cache_report.cause == "prune"
    conv.messages[2].parts[1].tool.state.time_compacted_ms = 1_700_000_000_000  # compacting prunes more
    again = assemble(conv, sent)
    assert again.cache_report.cause == "prune" and not again.cache_report.prefix_kept
    assert breaks() == 1  # step 2's body, sent: one break
    sent = again.cache_state
    conv.messages.append(convo.assistant("msg_007", convo.text("a7", "Done."),
                                         convo.tool("t7", "call_7", "read", {"path": "README"}, "y\n")))
    assert assemble(conv, sent).cache_report.prefix_kept
    assert breaks() == 1  # step 3 only appended
    changed = copy.deepcopy(conv)
    changed.messages[0].parts[0].text.text = "Fix the lexer."
    assert assemble(changed, sent).cache_report.cause == "other"
    assert assemble(changed, sent).cache_report.cause == "other"  # a retry of the same step
    assert breaks() == 2


def test_calls_in_flight_count_from_their_start_until_they_are_over(fresh):
    """contextsvc_rpcs_in_flight: a call whose request has not arrived yet is in flight; so is
    one the client then resets, until the server has seen the reset; answered calls are not."""
    from helpers.raw_h2 import RawH2
    from helpers.server import wait_for

    server, stub = fresh
    key = ("contextsvc_rpcs_in_flight", (("method", "Measure"),))
    # a call is over for the gauge once the server has sent its status (its done callback), which
    # may run a moment after the client has its answer: read until then (bounded)
    stub.Measure(convo.measure_request(), timeout=10)
    assert wait_for(lambda: scrape(server.metrics_port)[key] == 0, 5), scrape(server.metrics_port)[key]
    client = RawH2(server.port)
    try:
        waiting = [client.open("/contextsvc.v1.ContextService/Measure", None, end=False) for _ in range(3)]
        client.pump(0.2)
        assert wait_for(lambda: scrape(server.metrics_port)[key] == 3, 5), scrape(server.metrics_port)[key]
        stub.Measure(convo.measure_request(), timeout=10)  # answered beside them, and over
        assert wait_for(lambda: scrape(server.metrics_port)[key] == 3, 5), scrape(server.metrics_port)[key]
        client.reset(waiting[0])
        assert wait_for(lambda: (client.pump(0.05), scrape(server.metrics_port)[key])[1] == 2, 5)
    finally:
        client.close()
    assert wait_for(lambda: scrape(server.metrics_port)[key] == 0, 5)


def test_a_request_over_the_size_limit_counts_as_ended_not_as_bad_input_and_no_series_repeats():
    """grpc refuses a message over server.max_request_bytes itself: the caller gets
    RESOURCE_EXHAUSTED, and the service counted it as INVALID_ARGUMENT ("no request message
    sent"), so a dashboard's errors by code blamed the caller's input. grpc ends it before its
    message arrives, as it ends a call its caller cancels then: both count as CANCELLED (they
    cannot be told apart). A request with no message at all is still INVALID_ARGUMENT. No series
    appears twice in a scrape (the size histogram's 64 MiB bucket did)."""
    import urllib.request

    s = start_server(max_request_bytes=64 * 1024)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            big = convo.measure_request()
            big.conversation.messages[0].parts[0].text.text = "x" * 100_000
            with pytest.raises(grpc.RpcError) as e:
                stub.Measure(big, timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            empty = ch.stream_unary("/contextsvc.v1.ContextService/Measure")
            with pytest.raises(grpc.RpcError) as e:
                empty(iter(()), timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            stub.Measure(convo.measure_request(), timeout=10)
        samples = scrape(s.metrics_port)
        assert samples[("contextsvc_rpcs_total", (("code", "CANCELLED"), ("method", "Measure")))] == 1
        assert samples[("contextsvc_rpcs_total", (("code", "INVALID_ARGUMENT"), ("method", "Measure")))] == 1
        assert ("contextsvc_rpcs_total", (("code", "RESOURCE_EXHAUSTED"), ("method", "Measure"))) not in samples
        assert samples[("contextsvc_rpcs_total", (("code", "OK"), ("method", "Measure")))] == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=5) as r:
            lines = [x for x in r.read().decode().splitlines() if x and not x.startswith("#")]
        series = [x.rsplit(" ", 1)[0] for x in lines]
        assert len(series) == len(set(series)), sorted(x for x in set(series) if series.count(x) > 1)[:3]
    finally:
        s.stop(grace=1)


def test_the_memo_reports_its_lookups_its_bytes_and_what_it_could_not_keep():
    """Two sessions of 60 steps measured in turn against a memo smaller than both need: the
    lookups (hits and misses), the bytes charged (within server.memo_bytes) and the entries not
    kept (held for the other session) reach /metrics within a second."""
    import time

    bound = 300_000
    s = start_server(memo_bytes=bound)
    sessions = [[m for n in range(30) for m in (
        convo.user(f"u{n}", convo.text(f"u{n}p", f"session {k}: step {n}")),
        convo.assistant(f"a{n}", convo.tool(f"a{n}t", f"c{n}", "read", {"path": f"src/f{n}.py"},
                                            f"line {k} {n}\n" * 40)))]
                for k in range(2)]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for step in range(3):
                for k, msgs in enumerate(sessions):
                    conversation = pb.Conversation(session_id=f"s{k}", messages=msgs[:len(msgs) - 3 + step])
                    stub.Measure(pb.MeasureRequest(conversation=conversation, model=convo.model()), timeout=10)
            time.sleep(1.1)  # the memo's counts are synced at most once a second
            stub.Measure(convo.measure_request(), timeout=10)
            m = scrape(s.metrics_port)
    finally:
        s.stop(grace=1)
    hits = m[("contextsvc_memo_lookups_total", (("outcome", "hit"),))]
    misses = m[("contextsvc_memo_lookups_total", (("outcome", "miss"),))]
    assert hits > 0 and misses > 0
    assert m[("contextsvc_memo_refused_total", ())] > 0
    assert 0 < m[("contextsvc_memo_bytes", ())] <= bound
