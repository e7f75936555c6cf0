"""Three replicas behind each shipped proxy at once, under load, while replicas restart or die.

HAProxy runs deploy/haproxy/haproxy.cfg as is and Envoy deploy/envoy/envoy.yaml with only its
ports and endpoints changed (tests/helpers/replicas.py), both in front of the same three
`contextsvc serve` processes. The load is sized for two cores: two callers through each proxy,
each a plain stub on a channel of its own, no client retry policy, one Measure after another.
Whatever a caller sees is what an agent would see.
"""
from __future__ import annotations

import collections
import signal
import threading
import time

import grpc
import pytest

from helpers import convo
from helpers.replicas import Envoy, HAProxy, Replica
from helpers.server import wait_for
from contextsvc.v1 import context_pb2_grpc as pb_grpc

CALLERS_PER_PROXY = 2
# longer than the shipped proxies take to see a NOT_SERVING replica (about 1.3 s HAProxy, 2 s
# Envoy), shorter than the shipped 5 s to keep the test short
DRAIN_SECONDS = 3.0


class Load:
    """CALLERS_PER_PROXY callers through each proxy; outcomes counted per proxy."""

    def __init__(self, proxies):
        self.calls = collections.Counter()
        self.failures = collections.defaultdict(list)  # proxy name -> (code, details)
        self.starts = []  # when each call began (time.monotonic())
        self._stop = threading.Event()
        self._channels = []
        self._threads = []
        for proxy in proxies:
            for _ in range(CALLERS_PER_PROXY):
                channel = grpc.insecure_channel(f"127.0.0.1:{proxy.port}")
                self._channels.append(channel)
                self._threads.append(threading.Thread(
                    target=self._call, args=(proxy.name, pb_grpc.ContextServiceStub(channel)), daemon=True))

    def _call(self, name, stub):
        request = convo.measure_request()
        while not self._stop.is_set():
            self.starts.append(time.monotonic())
            try:
                stub.Measure(request, timeout=10)
            except grpc.RpcError as e:
                self.failures[name].append((e.code().name, e.details()))
            self.calls[name] += 1

    def begun_between(self, start: float, end: float) -> int:
        return sum(start <= t <= end for t in list(self.starts))

    def failed(self) -> dict:
        """Proxy name -> how many calls failed, by status code."""
        return {n: dict(collections.Counter(code for code, _ in f)) for n, f in self.failures.items()}

    def total(self) -> int:
        return sum(self.calls.values())

    def __enter__(self):
        for t in self._threads:
            t.start()
        assert wait_for(lambda: all(self.calls[n] >= 20 for n in ("haproxy", "envoy")), 20), self.calls
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(15)
        for c in self._channels:
            c.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proxies")
    replicas, proxies = [], []
    try:
        replicas = [Replica(tmp, f"replica{i}", drain_seconds=DRAIN_SECONDS) for i in (1, 2, 3)]
        for r in replicas:
            r.wait_ready()
        proxies = [HAProxy(tmp, replicas), Envoy(tmp, replicas)]
        for p in proxies:
            p.wait_all_up(replicas)
        yield replicas, proxies
    finally:
        for p in proxies:
            p.stop()
        for r in replicas:
            r.stop()


def _detect(proxies, replica, since, seconds=10) -> dict:
    """Proxy name -> seconds from `since` until it had taken replica out."""
    seen = {}
    end = time.monotonic() + seconds
    while len(seen) < len(proxies) and time.monotonic() < end:
        for p in proxies:
            if p.name not in seen and not p.up(replica):
                seen[p.name] = round(time.monotonic() - since, 2)
        time.sleep(0.02)
    return seen


def test_a_rolling_restart_under_load_fails_no_call(cluster):
    replicas, proxies = cluster
    detected = []
    with Load(proxies) as load:
        for r in replicas:
            since = time.monotonic()
            r.proc.send_signal(signal.SIGTERM)
            detected.append(_detect(proxies, r, since))
            r.stop()  # waits for the drain and the exit
            r.start().wait_ready()
            for p in proxies:
                p.wait_all_up(replicas)
            before = load.total()
            assert wait_for(lambda: load.total() >= before + 20, 10)  # served with all three back
    print(f"\nrolling restart: calls {dict(load.calls)}, failed {load.failed()}, "
          f"taken out after SIGTERM (s) {detected}")
    assert all(len(d) == len(proxies) and max(d.values()) < DRAIN_SECONDS for d in detected), detected
    assert not any(load.failures.values()), (load.failed(), {n: f[:3] for n, f in load.failures.items()})


def test_kill_9_of_a_replica_fails_at_most_the_calls_in_flight_on_it(cluster):
    replicas, proxies = cluster
    victim = replicas[1]
    with Load(proxies) as load:
        served_before = victim.calls("Measure")
        read_at = time.monotonic()
        in_flight = victim.in_flight()  # its own count, read just before the kill
        since = time.monotonic()
        victim.stop(signal.SIGKILL)
        # calls begun while the count was read could have reached the victim too
        begun_since = load.begun_between(read_at, since)
        detected = _detect(proxies, victim, since)
        before = load.total()
        assert wait_for(lambda: load.total() >= before + 40, 10)  # served by the other two
    failed = sum(len(f) for f in load.failures.values())
    print(f"\nkill -9: calls {dict(load.calls)}, failed {load.failed()}, in flight on the victim "
          f"{in_flight} (+{begun_since} begun while it was read), taken out after the kill (s) {detected}")
    assert served_before > 0  # the victim was taking its share
    assert len(detected) == len(proxies), detected
    assert failed <= in_flight + begun_since, (in_flight, begun_since, dict(load.failures))
    for name in ("haproxy", "envoy"):
        # refused, or reset by the proxy (INTERNAL "Stream removed (RST_STREAM ...)"); never
        # UNKNOWN: a response leaves with its status in one write, so no proxy sees one without it
        assert all(code == "UNAVAILABLE" or (code == "INTERNAL" and "RST_STREAM" in details)
                   for code, details in load.failures[name]), load.failures[name]
    victim.start().wait_ready()
    for p in proxies:
        p.wait_all_up(replicas)
