"""RedisStore against a real Redis run as the README tells operators (tests/helpers/redis_server.py)."""
from __future__ import annotations

import itertools
import threading
import time

import grpc
import pytest
import redis

from contextsvc.truncation import (
    InvalidOutputId, OutputNotFound, StoreUnavailable, TruncationSettings, output_id_created_ms,
    read_lines,
)
from contextsvc.truncation.redis_store import RedisStore
from helpers import convo
from helpers.redis_server import RedisServer, refused_within
from helpers.server import HeldAt, start_server, truncate_and_leave, wait_for
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

_prefixes = itertools.count()
DAY = 24 * 3600
BIG = "".join(f"line {i:05d} of a long build log\n" for i in range(5000))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


def make(redis_server, clock=time.time, prefix=None, on_evict=None, **overrides):
    """A store on its own key prefix (isolation between tests); same prefix = same store."""
    settings = TruncationSettings(backend="redis", redis_url=redis_server.url,
                                  redis_key_prefix=prefix or f"{{t{next(_prefixes)}}}:", **overrides)
    return RedisStore(settings, clock=clock, on_evict=on_evict)


def test_round_trip_list_usage_delete(redis_server):
    store = make(redis_server)
    texts = ["plain\n", "ünïcödé ✓ 😀\nline 2", "x" * 300_000, ""]
    ids = [store.put(t) for t in texts]
    assert [store.get(i) for i in ids] == texts
    assert store.get(store.put("bytes ✓".encode())) == "bytes ✓"
    assert store.list_ids()[:4] == ids  # oldest first
    count, total = store.usage()
    assert count == 5 and total == sum(len(t.encode()) for t in texts) + len("bytes ✓".encode())
    assert read_lines(store, ids[1], 1, 1).text == "line 2"
    assert store.get_bytes(ids[1]) == texts[1].encode()
    assert store.delete(ids[0]) is True and store.delete(ids[0]) is False
    with pytest.raises(OutputNotFound):
        store.get(ids[0])
    assert store.usage() == (4, total - len(texts[0]))


def test_malformed_ids_are_rejected_before_any_redis_access(redis_server):
    store = make(redis_server)
    store._redis = None  # any access would raise AttributeError
    for bad in ("", "tool_", "../etc/passwd", "tool_" + "g" * 26, "TOOL_" + "0" * 26):
        with pytest.raises(InvalidOutputId):
            store.get(bad)


def test_retention_is_key_expiry_and_read_from_the_id(redis_server):
    now = [time.time()]
    store = make(redis_server, clock=lambda: now[0])
    old = store.put("old")
    client = redis.Redis.from_url(redis_server.url)
    ttl_ms = client.pttl(store._key(old))
    assert 7 * DAY * 1000 - 60_000 < ttl_ms <= 7 * DAY * 1000 + 1  # Redis drops it by itself
    now[0] += 7 * DAY + 1  # past the retention by the id's clock: not found, before any cleanup
    with pytest.raises(OutputNotFound, match="expired"):
        store.get(old)
    fresh = store.put("fresh")
    assert store.list_ids() == [fresh]
    report = store.cleanup(now[0])
    assert (report.expired, report.remaining, report.remaining_bytes) == (1, 1, 5)
    assert store.usage() == (1, 5) and client.exists(store._key(old)) == 0


def test_size_cap_holds_across_replicas_oldest_first(redis_server):
    evictions = []
    record = lambda n, b: evictions.append((n, b))  # noqa: E731
    prefix = "{cap}:"
    a = make(redis_server, prefix=prefix, max_store_bytes=10_000, on_evict=record)
    b = make(redis_server, prefix=prefix, max_store_bytes=10_000, on_evict=record)
    ids = []
    for i in range(30):
        ids.append((a if i % 2 else b).put(f"{i:04d}" + "x" * 996))
        assert a.usage()[1] <= 10_000
    assert a.usage() == (10, 10_000)
    # the newest ten by id (the id carries the creation time) survive, whichever replica wrote
    # them; two replicas writing in the same millisecond may order their ids either way
    survivors = sorted(ids)[-10:]
    assert a.list_ids() == survivors
    text = {i: f"{n:04d}" for n, i in enumerate(ids)}
    assert b.get(survivors[-1]).startswith(text[survivors[-1]])
    assert a.get(survivors[0]).startswith(text[survivors[0]])
    with pytest.raises(OutputNotFound):
        b.get(sorted(ids)[-11])
    assert sum(n for n, _ in evictions) == 20 and sum(x for _, x in evictions) == 20_000
    # a single output larger than the cap is kept (its id is about to be handed out)
    big = a.put("y" * 20_000)
    assert a.list_ids() == [big] and b.get(big) == "y" * 20_000


def test_concurrent_puts_on_two_replicas_keep_index_and_counter_consistent(redis_server):
    prefix = "{conc}:"
    stores = [make(redis_server, prefix=prefix, max_store_bytes=50_000) for _ in range(2)]
    ids, errors = [], []

    def work(store, k):
        try:
            for i in range(60):
                ids.append((store.put(f"{k}-{i}\n" * (10 + i)), f"{k}-{i}\n" * (10 + i)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(stores[k % 2], k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    client = redis.Redis.from_url(redis_server.url)
    live = stores[0].list_ids()
    sizes = {k.decode(): int(v) for k, v in client.hgetall(prefix + "sizes").items()}
    assert sorted(sizes) == live
    assert stores[1].usage() == (len(live), sum(sizes.values())) and sum(sizes.values()) <= 50_000
    texts = dict(ids)
    for output_id in live:
        assert stores[1].get(output_id) == texts[output_id]
    assert len(texts) == 240  # no id collided


def test_redis_refusing_a_write_is_unavailable_and_changes_nothing(redis_server):
    store = make(redis_server)
    kept = store.put("kept")
    client = redis.Redis.from_url(redis_server.url)
    client.config_set("maxmemory", "1")  # every write is now refused (noeviction)
    try:
        with pytest.raises(StoreUnavailable, match="Redis refused: .*maxmemory"):
            store.put("z" * 1000)
        assert store.get(kept) == "kept"  # reads still work
    finally:
        client.config_set("maxmemory", "2gb")
    assert store.usage() == (1, 4) and store.list_ids() == [kept]


def test_outage_is_unavailable_fast_and_loses_nothing(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        store = make(server)
        ids = {store.put(f"before {i}\n" * 100): f"before {i}\n" * 100 for i in range(50)}
        server.kill()  # SIGKILL: only the append-only file survives
        for call in (lambda: store.put("during"), lambda: store.get(next(iter(ids)))):
            refused_within(call, "Redis unreachable")
        server.start()  # same port, same directory
        # the breaker lets a trial call through within redis_breaker_open_seconds, and the pool
        # reconnects on its own
        assert wait_for(lambda: _answers(store, next(iter(ids))), 5)
        assert {i: store.get(i) for i in ids} == ids
        assert store.usage() == (50, sum(len(t) for t in ids.values()))
        assert output_id_created_ms(store.put("after")) > 0
    finally:
        server.stop()


def _answers(store, output_id) -> bool:
    try:
        store.get(output_id)
        return True
    except StoreUnavailable:
        return False


def test_a_hung_redis_answers_store_calls_unavailable_within_a_second_and_refuses_nothing_else(tmp_path):
    """Redis SIGSTOPped for 10 s (it accepts connections and never answers) under more store callers
    than the server has slots: each store call gets UNAVAILABLE naming Redis within about a
    second, and Measure and Assemble, which never touch the store, are all answered."""
    redis_server = RedisServer(tmp_path / "redis").start()
    s = start_server(truncation_overrides=dict(backend="redis", redis_url=redis_server.url))
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    stub = pb_grpc.ContextServiceStub(channel)
    stored = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10).output_id
    store_calls, other_calls, hung = [], [], threading.Event()
    done = threading.Event()

    def store_caller():
        while not done.is_set():
            started = time.monotonic()
            try:
                stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10)
                code, details = "OK", ""
            except grpc.RpcError as e:
                code, details = e.code().name, e.details()
            if hung.is_set():
                store_calls.append((code, details, time.monotonic() - started))
            time.sleep(0.05)

    def other_caller(k):
        while not done.is_set():
            try:
                if k % 2:
                    stub.Measure(convo.measure_request(), timeout=5)
                else:
                    stub.Assemble(pb.AssembleRequest(conversation=convo.small_conversation(),
                                                     model=convo.model()), timeout=5)
                other_calls.append("OK")
            except grpc.RpcError as e:
                other_calls.append((e.code().name, e.details()))

    callers = ([threading.Thread(target=store_caller) for _ in range(s.cfg.server.max_concurrent_rpcs)]
               + [threading.Thread(target=other_caller, args=(k,)) for k in range(2)])
    try:
        redis_server.pause()
        hung.set()
        for t in callers:
            t.start()
        time.sleep(10)
        done.set()
        for t in callers:
            t.join(15)
    finally:
        redis_server.resume()
    try:
        print(f"\nhung Redis: {len(store_calls)} store calls, slowest {max(c[2] for c in store_calls):.2f} s; "
              f"{len(other_calls)} Measure/Assemble")
        assert len(other_calls) > 20 and set(other_calls) == {"OK"}, set(map(str, other_calls))
        assert len(store_calls) > 20 and {c[0] for c in store_calls} == {"UNAVAILABLE"}, store_calls[:5]
        assert all("Redis" in details for _, details, _ in store_calls), store_calls[:5]
        # the bulkhead answers at redis_call_timeout_seconds (1 s); without it a call would wait out
        # the socket timeout (redis_timeout_seconds, 2 s). The bound sits between the two: the
        # slowest calls read ~1.0 s alone and up to 1.52 s on a loaded 2-core machine (client and
        # server both measured from this process's clock)
        assert max(seconds for *_, seconds in store_calls) < 1.75, sorted(c[2] for c in store_calls)[-5:]
        # Redis back: the stored output is read again once the breaker's trial call succeeds
        assert wait_for(lambda: _reads(stub, stored), 5)
    finally:
        channel.close()
        s.stop(grace=1)
        redis_server.stop()


def test_a_store_call_answers_within_its_callers_deadline(tmp_path):
    """ReadTruncated with a 300 ms deadline while Redis is SIGSTOPped: the server itself answers
    (DEADLINE_EXCEEDED or UNAVAILABLE naming Redis) before the caller's deadline, instead of
    waiting out redis_call_timeout_seconds (1 s) while the caller's own clock ends the call."""
    redis_server = RedisServer(tmp_path / "redis").start()
    s = start_server(truncation_overrides=dict(backend="redis", redis_url=redis_server.url))
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    stub = pb_grpc.ContextServiceStub(channel)
    answers = []
    try:
        stored = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10).output_id
        redis_server.pause()
        for _ in range(6):
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=stored, limit=1), timeout=0.3)
            answers.append((e.value.code().name, e.value.details(), time.monotonic() - started))
    finally:
        redis_server.resume()
        channel.close()
        s.stop(grace=1)
        redis_server.stop()
    print("\n" + "\n".join(f"{code} after {seconds * 1000:.0f} ms: {details}" for code, details, seconds in answers))
    assert {code for code, _, _ in answers} <= {"DEADLINE_EXCEEDED", "UNAVAILABLE"}, answers
    # the server's answer, not the client library's "Deadline Exceeded" at its own deadline
    assert all("Redis" in details for _, details, _ in answers), answers
    assert max(seconds for *_, seconds in answers) < 0.4, answers


def test_an_output_whose_caller_cancels_while_redis_stores_it_is_deleted_again(tmp_path):
    """A tenant's TruncateToolOutput whose caller cancels while its output is put in Redis:
    deleted again under the tenant's key. Before, it stayed for the retention (7 days), an id no
    client has, counted against max_store_bytes. (A deadline that passes during the put: the
    next test.)"""
    token = [("authorization", "Bearer a-tenant-token")]
    redis_server = RedisServer(tmp_path / "redis").start()
    s = start_server(truncation_overrides=dict(backend="redis", redis_url=redis_server.url),
                     auth_token="a-tenant-token")
    held = s.store.put = HeldAt(s.store.put)
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    stub = pb_grpc.ContextServiceStub(channel)
    try:
        truncate_and_leave(s, stub, BIG, "cancels", held, metadata=token)
        assert wait_for(lambda: s.store.usage() == (0, 0), 10), s.store.list_ids()
        kept = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), metadata=token, timeout=10).output_id
        assert s.store.usage() == (1, len(BIG))
        assert _reads(stub, kept, token)
    finally:
        channel.close()
        s.stop(grace=1)
        redis_server.stop()


def test_a_put_redis_runs_after_its_callers_deadline_is_deleted_again(tmp_path):
    """Redis SIGSTOPped while a TruncateToolOutput with a 0.5 s deadline puts its output: the
    caller gets DEADLINE_EXCEEDED, and when Redis, resumed, runs the put after all, the output
    is deleted again. It used to stay, an id no client has."""
    redis_server = RedisServer(tmp_path / "redis").start()
    # the socket's timeout outlasts the pause: the put's answer comes once Redis runs again
    s = start_server(truncation_overrides=dict(backend="redis", redis_url=redis_server.url,
                                               redis_timeout_seconds=60))
    ran = s.store._put_script = HeldAt(s.store._put_script)
    ran.release.set()  # counts, holds nothing
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    stub = pb_grpc.ContextServiceStub(channel)
    try:
        kept = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=10).output_id
        ran.returned.clear()
        redis_server.pause()
        try:
            with pytest.raises(grpc.RpcError) as e:
                stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), timeout=0.5)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        finally:
            redis_server.resume()
        assert ran.returned.wait(30)  # Redis answered the put the caller had stopped waiting for
        assert wait_for(lambda: s.store.list_ids() == [kept], 10), s.store.list_ids()
        assert _reads(stub, kept)
    finally:
        channel.close()
        s.stop(grace=1)
        redis_server.stop()


def _reads(stub, output_id, metadata=None) -> bool:
    try:
        return stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id, limit=1), metadata=metadata,
                                  timeout=5).total_lines > 0
    except grpc.RpcError:
        return False


def test_backend_settings():
    assert TruncationSettings().backend == "local"  # the first README command needs no Redis
    s = TruncationSettings.from_mapping({"backend": "redis", "redis_url": "redis://:secret@h:6379/0"})
    assert (s.backend, s.redis_url) == ("redis", "redis://:secret@h:6379/0")
    for table, key in (({"backend": "memcached"}, "backend"), ({"backend": "redis"}, "redis_url"),
                       ({"redis_url": "http://h:6379"}, "redis_url"),
                       ({"redis_connect_timeout_seconds": 0}, "redis_connect_timeout_seconds"),
                       ({"redis_max_concurrent_calls": 0}, "redis_max_concurrent_calls"),
                       ({"redis_breaker_open_seconds": -1}, "redis_breaker_open_seconds"),
                       ({"redis_key_prefix": ""}, "redis_key_prefix")):
        with pytest.raises(ValueError, match=key):
            TruncationSettings.from_mapping(table)
    with pytest.raises(ValueError) as e:
        TruncationSettings.from_mapping({"redis_url": "http://:secret@h"})
    assert "secret" not in str(e.value)  # a URL may carry a password: never echoed
