"""grpc.health.v1 Watch streams against a real server: watchers that come and go do not wedge
the server, and a stop ends the open watches instead of waiting out its grace period on them."""
from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from helpers.server import start_server
from contextsvc.errors import Unavailable
from contextsvc.rpc.health_watches import HealthWatches
from contextsvc.rpc.standard_services import _Registering

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def stop_within(server, seconds, grace):
    """Seconds server.stop(grace) took, or None when it had not returned after `seconds`."""
    start = time.monotonic()
    stopper = threading.Thread(target=server.stop, kwargs={"grace": grace}, daemon=True)
    stopper.start()
    stopper.join(seconds)
    return None if stopper.is_alive() else time.monotonic() - start


def churn(port, until, opened):
    """Opens a Watch, reads its first update, hangs up; again until `until`."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < until:
            call = stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)
            try:
                next(call)
                opened.append(1)
            except grpc.RpcError:
                pass
            call.cancel()


def test_watchers_hanging_up_while_others_open_and_a_stop_comes_do_not_wedge_the_server():
    s = start_server()
    opened: list[int] = []
    until = time.monotonic() + 4.0
    threads = [threading.Thread(target=churn, args=(s.port, until, opened), daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == SERVING
    took = stop_within(s, 20, grace=10)  # the stop comes while watchers still open and hang up
    for t in threads:
        t.join(10)
    print(f"\n{len(opened)} watches opened and closed; stop took {took}")
    assert len(opened) > 50
    assert took is not None and took < 10, took


def test_stop_ends_open_watches_after_telling_them_not_serving():
    s = start_server(drain_seconds=0.5)
    seen: list = []
    with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
        call = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=30)

        def read():
            try:
                for response in call:
                    seen.append(response.status)
            except grpc.RpcError as e:
                seen.append(e.code())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert wait_until(lambda: seen == [SERVING])
        took = stop_within(s, 20, grace=15)
        reader.join(5)
    assert took is not None and took < 5, took  # not the 15 s grace
    assert seen == [SERVING, NOT_SERVING, grpc.StatusCode.UNAVAILABLE], seen


def wait_until(predicate, seconds=5.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end and not predicate():
        time.sleep(0.02)
    return predicate()


class _Call:
    """What the watch code asks of a grpc context; `ended`: the client left before the handler
    registered its callbacks (grpc's add_callback then answers False and never calls them)."""
    def __init__(self, ended=False):
        self.ended = ended

    def is_active(self):
        return not self.ended

    def cancel(self):
        pass

    def add_callback(self, callback):
        return not self.ended


def test_a_watch_whose_client_left_before_registering_is_not_kept():
    """The stock servicer ignores add_callback's False: without our context wrapper it would keep
    that watch's send callback (and the call behind it) for the life of the process."""
    servicer = health.HealthServicer()
    sent = []
    servicer.Watch(health_pb2.HealthCheckRequest(), _Registering(_Call(ended=True)), send_response_callback=sent.append)
    assert sent == [health_pb2.HealthCheckResponse(status=SERVING), None]  # its status, then the end
    assert not servicer._send_response_callbacks.get("")  # its table of watchers to update
    servicer.set("", NOT_SERVING)
    assert len(sent) == 2


def test_a_watch_opened_after_the_watches_were_ended_is_refused():
    """At stop, end_all ends the open watches; one that arrives after it (its handler queued
    behind busy workers) is refused, or it would hold the stop for the whole grace period."""
    watches = HealthWatches(limit=4)
    assert watches.open(_Call(), lambda r: None) is not None
    watches.end_all("stopping")
    with pytest.raises(Unavailable, match="shutting down"):
        watches.open(_Call(), lambda r: None)
