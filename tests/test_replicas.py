"""Three replicas behind a real gRPC-aware proxy with a real shared store (docs/design.md §11).

HAProxy (Debian's `haproxy`) runs the shipped deploy/haproxy/haproxy.cfg as is, its addresses
given in the environment (tests/helpers/replicas.py); Redis runs the shipped
deploy/redis/redis.conf (tests/helpers/redis_server.py).
Each replica is a `contextsvc serve` process with a local directory and cache of its own, so only
Redis can make a stored output visible to the others. Which replica answered a call is read from its
own /metrics counters. Missing binaries fail the tests (.ci/deps installs them).
"""
from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest

from helpers import convo
from helpers.server import start_server, wait_for
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.redis_server import RedisServer
from helpers.replicas import HAProxy, Replica, healthz as _healthz
from helpers.rpc import TOOLS, cache_steps

BIG = "".join(f"line {i:05d} of a long build log\n" for i in range(5000))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replicas")
    redis = RedisServer(tmp / "redis").start()
    replicas, proxy, channel = [], None, None
    try:
        replicas = [Replica(tmp, f"replica{i}", redis.url) for i in (1, 2, 3)]
        for r in replicas:
            r.wait_ready()
        proxy = HAProxy(tmp, replicas)
        proxy.wait_all_up(replicas)
        channel = grpc.insecure_channel(f"127.0.0.1:{proxy.port}")
        yield redis, replicas, proxy, pb_grpc.ContextServiceStub(channel)
    finally:
        if channel is not None:
            channel.close()
        if proxy is not None:
            proxy.stop()
        for r in replicas:
            r.stop()
        redis.stop()


def test_healthz_mirrors_grpc_health():
    s = start_server()
    try:
        assert _healthz(s.metrics_port) == (200, b"SERVING\n")
        assert _healthz(s.metrics_port, "contextsvc.v1.ContextService")[0] == 200
        assert _healthz(s.metrics_port, "no.such.Service")[0] == 503
        stopping = threading.Thread(target=s.stop, kwargs=dict(grace=1, drain=1.0))
        stopping.start()
        assert wait_for(lambda: _healthz(s.metrics_port)[0] == 503, 5)  # draining: taken out
        stopping.join(10)
    finally:
        s.stop(grace=1)


def test_an_output_stored_by_one_replica_is_read_back_from_the_other(cluster):
    _, replicas, _, stub = cluster
    before = [r.calls("TruncateToolOutput") for r in replicas]
    t = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10)
    assert t.truncated and t.output_id
    writer = [r.calls("TruncateToolOutput") - b for r, b in zip(replicas, before)].index(1)
    others = [r for i, r in enumerate(replicas) if i != writer]
    reads_before = sum(r.calls("ReadTruncated") for r in others)
    for _ in range(9):  # the proxy spreads calls; a few reads are enough to reach another one
        got = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=t.output_id, offset=4000, limit=1000), timeout=10)
        assert got.text == BIG.rstrip("\n").split("\n", 4000)[4000] and got.eof
        if sum(r.calls("ReadTruncated") for r in others) > reads_before:
            break
    assert sum(r.calls("ReadTruncated") for r in others) > reads_before, "no read reached another replica"
    # nothing of it on either replica's disk: Redis alone made it visible
    assert not any(p.is_file() and "tool_" in p.name for r in replicas for p in r.home.rglob("*"))


def test_a_session_spread_over_both_replicas_gets_the_same_cache_reports_as_on_one(cluster):
    _, replicas, _, stub = cluster
    direct_channel = grpc.insecure_channel(f"127.0.0.1:{replicas[0].port}")
    direct = pb_grpc.ContextServiceStub(direct_channel)
    before = [r.calls("Assemble") for r in replicas]
    try:
        runs = []
        for target in (stub, direct):
            state, got = b"", []
            for label, conv, system, _ in cache_steps(pb.PROVIDER_ANTHROPIC):
                r = target.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(), tools=TOOLS,
                                                       system=system, previous_cache_state=state), timeout=10)
                got.append((label, r.body, r.cache_state, r.cache_report))
                state = r.cache_state
            runs.append(got)
    finally:
        direct_channel.close()
    assert runs[0] == runs[1]
    assert sum(1 for *_, report in runs[0] if report.compared and not report.prefix_kept) >= 3  # breaks seen
    steps = len(runs[0])
    via_proxy = [r.calls("Assemble") - b for r, b in zip(replicas, before)]
    via_proxy[0] -= steps  # the direct run
    assert sum(via_proxy) == steps and sum(v > 0 for v in via_proxy) >= 2, via_proxy  # it crossed replicas


def test_redis_outage_fails_only_the_store_calls_and_loses_nothing(cluster):
    redis, replicas, _, stub = cluster
    stored = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10).output_id
    redis.kill()
    try:
        for call in (lambda: stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10),
                     lambda: stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=stored), timeout=10)):
            for _ in range(3):  # once on each replica (the proxy alternates idle replicas)
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "Redis unreachable" in e.value.details()
                assert time.monotonic() - started < 3
        assert all(r.calls("TruncateToolOutput", "UNAVAILABLE") >= 1 for r in replicas)  # both answered so
        for _ in range(6):  # everything else serves as before
            stub.Measure(convo.measure_request(), timeout=10)
            small = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text="short\n"), timeout=10)
            assert not small.truncated  # under the limits nothing is stored
        assert all(_healthz(r.metrics_port)[0] == 200 for r in replicas)  # no replica taken out
    finally:
        redis.start()  # same port, same append-only file
    # each replica's breaker lets a trial call through within a second of Redis coming back
    assert wait_for(lambda: all(_reads_back(stub, stored) for _ in replicas), 10)
    for _ in range(6):
        r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=stored, limit=5000), timeout=10)
        assert r.text == BIG.rstrip("\n")


def _reads_back(stub, output_id) -> bool:
    try:
        return stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id, limit=1), timeout=10).total_lines > 0
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE and "Redis" in e.details(), e
        return False


def test_killing_a_replica_mid_load_loses_no_stored_output(cluster):
    _, replicas, proxy, stub = cluster
    stored, failures, details, stop = {}, [], [], threading.Event()

    def load(k):
        i = 0
        while not stop.is_set():
            text = f"worker {k} output {i}\n" + BIG
            try:
                r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=10)
                stored[r.output_id] = text
            except grpc.RpcError as e:
                failures.append(e.code())
                details.append(e.details())
            i += 1

    workers = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    try:
        assert wait_for(lambda: len(stored) >= 40, 20)
        assert replicas[1].calls("TruncateToolOutput") > 0  # the victim was taking its share
        replicas[1].stop(signal.SIGKILL)
        assert wait_for(lambda: proxy.status().get(replicas[1].port, "").startswith("DOWN"), 10), proxy.status()
        after_down = len(stored) + len(failures)
        assert wait_for(lambda: len(stored) + len(failures) >= after_down + 40, 20)
    finally:
        stop.set()
        for w in workers:
            w.join(15)
    # calls in flight on the killed replica may fail (UNAVAILABLE); none after it was taken out
    print(f"stored {len(stored)} outputs, {len(failures)} calls failed")
    assert set(failures) <= {grpc.StatusCode.UNAVAILABLE}, failures
    assert len(failures) <= 8, details
    before = [r.calls("ReadTruncated") for r in (replicas[0], replicas[2])]
    for output_id, text in stored.items():
        r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id, limit=1), timeout=10)
        assert r.text == text.split("\n", 1)[0] and r.total_lines == 5001
    # the survivors answered all
    assert sum(r.calls("ReadTruncated") - b for r, b in zip((replicas[0], replicas[2]), before)) == len(stored)
