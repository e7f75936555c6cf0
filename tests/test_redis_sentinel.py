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
from helpers.redis_server import RedisServer, SentinelServer, refused_within
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
    within the call's time, saying no replica had it, and is not left on the master; with the replica back
    it is acknowledged."""
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
        assert store.list_ids() == [kept]  # the master had it: deleted again, its id handed to nobody
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


def test_sentinel_and_redis_that_ask_passwords_over_tls(tmp_path, processes):
    """A master and a sentinel that each ask a password of their own and speak TLS (the sentinel
    watches the master on its TLS port): outputs round-trip with the passwords from files and
    the CA; a wrong sentinel password, a wrong Redis password, or plain text to the sentinel's
    TLS port each get UNAVAILABLE naming Redis, within the call's bound."""
    from helpers.certificates import certificate, new_key, pem
    from helpers.redis_server import free_ports

    ca_key, server_key = new_key(), new_key()
    ca = certificate("contextsvc test CA", ca_key, ca=True)
    ca_file = pem(tmp_path / "ca.pem", ca)
    cert = pem(tmp_path / "server.pem", certificate("redis", server_key, issuer=ca.subject, issuer_key=ca_key))
    key = pem(tmp_path / "server.key", server_key)
    tls = ("--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca_file, "--tls-auth-clients", "no")
    master_tls, sentinel_tls = free_ports(2)
    master = RedisServer(tmp_path / "master", "--requirepass", "master-secret", "--tls-port", str(master_tls), *tls)
    processes.append(master.start())
    sentinel = SentinelServer(
        tmp_path / "sentinel", MASTER, master_tls,
        more=(f"requirepass sentinel-secret\nsentinel auth-pass {MASTER} master-secret\n"
              f"tls-port {sentinel_tls}\ntls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca_file}\n"
              "tls-auth-clients no\ntls-replication yes\n"))
    processes.append(sentinel.start())
    sentinel_link = redis.Redis(port=sentinel.port, password="sentinel-secret")
    assert sentinel_link.sentinel_get_master_addr_by_name(MASTER) == (b"127.0.0.1", master_tls)
    sentinel_link.close()
    passwords = {}
    for name, secret in (("redis", "master-secret\n"), ("sentinel", "sentinel-secret\n"), ("wrong", "guess\n")):
        passwords[name] = str(tmp_path / f"{name}.password")
        (tmp_path / f"{name}.password").write_text(secret)

    def store(redis_password="redis", sentinel_password="sentinel", use_tls=True) -> RedisStore:
        return RedisStore(TruncationSettings(
            backend="redis", redis_sentinels=(f"127.0.0.1:{sentinel_tls}",), redis_sentinel_master=MASTER,
            redis_min_replicas_acked=0, redis_sentinel_tls=use_tls, redis_tls_ca_file=ca_file if use_tls else "",
            redis_password_file=passwords[redis_password], redis_sentinel_password_file=passwords[sentinel_password]))

    good = store()
    text = "through Sentinel, over TLS ✓\n" * 500
    output_id = good.put(text)
    assert good.get(output_id) == text
    direct = redis.Redis(port=master.port, password="master-secret")
    assert direct.exists(TruncationSettings().redis_key_prefix + output_id) == 1  # stored on that master
    direct.close()
    good.close()
    for bad in (store(sentinel_password="wrong"), store(redis_password="wrong"), store(use_tls=False)):
        refused_within(lambda: bad.put("never stored"), "Redis")
        bad.close()


def test_passwords_and_tls_through_sentinel_need_sentinel():
    for key, value in (("redis_password_file", "/run/secrets/redis"), ("redis_sentinel_tls", True)):
        with pytest.raises(ValueError, match=key):
            TruncationSettings(backend="redis", redis_url="redis://h/0", **{key: value})
    with pytest.raises(ValueError, match="redis_sentinel_password_file.*cannot read"):
        RedisStore(TruncationSettings(backend="redis", redis_sentinels=("127.0.0.1:1",),
                                      redis_sentinel_master=MASTER, redis_sentinel_password_file="/nonexistent"))
