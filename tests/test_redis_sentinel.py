"""RedisStore through Redis Sentinel with real processes: a master, a replica, one sentinel
(quorum 1), a kill -9 of the master and the failover; and the replica acknowledgement (WAIT) a
put waits for."""
from __future__ import annotations

import threading
import time

import pytest
import redis

from contextsvc.truncation import StoreUnavailable, TruncationSettings
from contextsvc.truncation.redis_store import RedisStore
from helpers.redis_server import RedisServer, SentinelServer
from helpers.server import wait_for

MASTER = "contextsvc"


def _replica_of(tmp_path, master: RedisServer, processes: list) -> RedisServer:
    replica = RedisServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(master.port))
    processes.append(replica.start())
    link = redis.Redis(port=replica.port)
    assert wait_for(lambda: link.info("replication")["master_link_status"] == "up", 10)
    link.close()
    return replica


def _text(i: int) -> str:
    return f"output {i}\n" * (1 + i % 50)


@pytest.fixture
def processes():
    """Redis processes a test starts, stopped at its end whatever happened."""
    started = []
    yield started
    for server in reversed(started):
        server.stop()


def test_a_failover_loses_no_acknowledged_output(tmp_path, processes):
    """Puts run without pause while the master is killed (-9), Sentinel promotes the replica and
    the old master comes back as its replica: every put acknowledged, before the kill or after
    the failover, is read back from the promoted replica."""
    master = RedisServer(tmp_path / "master")
    processes.append(master.start())
    replica = _replica_of(tmp_path, master, processes)
    sentinel = SentinelServer(tmp_path / "sentinel", MASTER, master.port)
    processes.append(sentinel.start())
    watcher = redis.Redis(port=sentinel.port)
    # the sentinel has found the replica (from the master's INFO) before the master dies
    assert wait_for(lambda: watcher.sentinel_slaves(MASTER), 15)
    store = RedisStore(TruncationSettings(backend="redis", redis_sentinels=(sentinel.address,),
                                          redis_sentinel_master=MASTER))
    assert store._replicas == 1  # Sentinel's default: a put waits for one replica
    acknowledged, refused, stop = {}, [], threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            try:
                acknowledged[store.put(_text(i))] = _text(i)
            except StoreUnavailable as e:
                refused.append(str(e))
                time.sleep(0.05)
            i += 1

    thread = threading.Thread(target=writer)
    try:
        thread.start()
        assert wait_for(lambda: len(acknowledged) >= 300, 10)
        before = len(acknowledged)
        killed = time.monotonic()
        master.kill()
        promoted = lambda: watcher.sentinel_get_master_addr_by_name(MASTER)[1] == replica.port  # noqa: E731
        assert wait_for(promoted, 20), (tmp_path / "sentinel" / "sentinel.log").read_text()[-2000:]
        failed_over = time.monotonic() - killed
        # the promoted master has no replica left to acknowledge a put until the old master
        # restarts and Sentinel makes it a replica of the new one
        master.start()
        after_failover = len(acknowledged)
        assert wait_for(lambda: len(acknowledged) >= after_failover + 100, 20), refused[-3:]
        resumed = time.monotonic() - killed
    finally:
        stop.set()
        thread.join(10)
    try:
        print(f"\nfailover: {before} puts acknowledged before the kill, Sentinel promoted the replica "
              f"{failed_over:.1f} s after it, puts acknowledged again {resumed:.1f} s after it (the old "
              f"master restarted as a replica); {len(refused)} puts refused meanwhile, "
              f"{len(acknowledged)} acknowledged in all")
        assert all("Redis" in r for r in refused), refused[:3]
        lost = [i for i, text in acknowledged.items() if store.get(i) != text]
        assert not lost, f"{len(lost)} acknowledged outputs lost, e.g. {lost[:3]}"
        assert store.usage()[0] >= len(acknowledged)  # a refused put may have been stored all the same
    finally:
        store.close()
        watcher.close()


def test_a_put_no_replica_acknowledged_is_unavailable(tmp_path, processes):
    """redis_min_replicas_acked = 1 with the replica SIGSTOPped: the put is answered UNAVAILABLE
    within the call's time, saying no replica had it; with the replica back it is acknowledged."""
    master = RedisServer(tmp_path / "master")
    processes.append(master.start())
    replica = _replica_of(tmp_path, master, processes)
    store = RedisStore(TruncationSettings(backend="redis", redis_url=master.url, redis_min_replicas_acked=1))
    try:
        kept = store.put("replicated\n")
        replica.pause()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"0 of the 1 replicas required .* not acknowledged"):
            store.put("not replicated\n")
        took = time.monotonic() - started
        replica.resume()
        assert took < TruncationSettings().redis_call_timeout_seconds, took
        assert store.get(store.put("replicated again\n")) == "replicated again\n"
        assert store.get(kept) == "replicated\n"
    finally:
        replica.resume()
        store.close()


def test_sentinel_settings():
    s = TruncationSettings.from_mapping({"backend": "redis", "redis_sentinels": ["10.0.0.1:26379", "[::1]:26379"],
                                         "redis_sentinel_master": "mymaster"})
    assert s.redis_sentinels == ("10.0.0.1:26379", "[::1]:26379") and s.replicas_to_ack == 1
    assert TruncationSettings(backend="redis", redis_url="redis://h/0").replicas_to_ack == 0
    assert TruncationSettings.from_mapping({"redis_min_replicas_acked": 2}).replicas_to_ack == 2
    for table, message in (
            ({"redis_sentinels": ["h"], "redis_sentinel_master": "m"}, "host:port"),
            ({"redis_sentinels": ["h:99999"], "redis_sentinel_master": "m"}, "host:port"),
            ({"redis_sentinels": ["h:26379"]}, "go together"),
            ({"redis_sentinels": ["h:26379"], "redis_sentinel_master": "m", "redis_url": "redis://h"}, "exclusive"),
            ({"redis_min_replicas_acked": -1}, "redis_min_replicas_acked")):
        with pytest.raises(ValueError, match=message):
            TruncationSettings.from_mapping(table)
