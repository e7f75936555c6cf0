"""grpc.health.v1 Watch streams against a real server: watchers that come and go do not wedge
the server, a stop ends the open watches instead of waiting out its grace period on them, and
closed watches leave nothing behind (issue 28, item 2)."""
from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers.probe import Probe
from helpers.processes import launch, stop
from helpers.server import start_server
from server_process import rss_mb
from contextsvc.errors import Unavailable
from contextsvc.rpc.health import MAX_SERVICE_NAME_BYTES, Health

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


class _Context:
    """What Health.watch asks of a grpc.aio context: the updates it writes."""
    def __init__(self):
        self.sent = []

    async def write(self, message):
        self.sent.append(message.status)


def test_a_watch_opened_after_the_watches_were_ended_is_refused():
    """At stop, end_all ends the open watches; one that arrives after it is refused, or it would
    hold the stop for the whole grace period."""
    async def run():
        state = Health(asyncio.get_running_loop(), max_watches=4, idle_seconds=5)
        state.set("", SERVING)
        context = _Context()
        watch = asyncio.ensure_future(state.watch("", context))
        await asyncio.sleep(0.05)
        assert context.sent == [SERVING] and state.count_open() == 1
        state.end_all()
        with pytest.raises(Unavailable, match="shutting down"):
            await watch  # the open one ends
        with pytest.raises(Unavailable, match="shutting down"):
            await state.watch("", _Context())  # a new one is refused
        assert state.count_open() == 0 and state.names_watched() == 0

    asyncio.run(run())


def watch_and_hang_up(port: int, names: list) -> list:
    """Opens a Watch on each name at once, reads each first answer, then cancels them all at
    once; the status code of each (OK for a watch that answered)."""
    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 4 << 20)]) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        calls = [stub.Watch(health_pb2.HealthCheckRequest(service=name), timeout=30) for name in names]
        for call in calls:
            try:
                next(call)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        for call in calls:
            call.cancel()
    return codes


def test_closed_watches_on_long_names_leave_no_memory_behind(tmp_path):
    """150 watches on 1 MB service names (health needs no token), cancelled 50 at a time.
    Before: each name stayed in the servicer's table of watchers, +150 MB of RSS for ever."""
    proc, port, _, _ = launch(tmp_path=tmp_path)
    try:
        with Probe(port, proc.pid) as probe:
            time.sleep(1.0)
            before = rss_mb(proc.pid)
            codes = []
            for wave in range(3):
                codes += watch_and_hang_up(port, [f"{wave}-{i}-".ljust(1 << 20, "x") for i in range(50)])
            time.sleep(1.0)
            after = rss_mb(proc.pid)
        print(f"\n{probe.report('150 watches of 1 MB names')}; {after - before:+.0f} MB kept; "
              f"answers {sorted(set(c.name for c in codes))}")
        assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
        # the names are not kept (150 MB); what grpc's buffers and the allocator keep of the 150
        # MB received varies from run to run (35-70 MB)
        assert after - before < 100, (before, after)
        assert probe.check.worst() < 2.0 and probe.measure.worst() < 2.0
        assert probe.check.failed == probe.measure.failed == 0
    finally:
        stop(proc)


def test_closed_watches_leave_no_entry_in_the_table_of_watchers():
    """150 watches on distinct names of the longest length taken, cancelled 50 at a time: once
    they are closed the table of watchers is empty (the stock servicer kept all 150 names)."""
    s = start_server()
    try:
        for wave in range(3):
            names = [f"{wave}-{i}-".ljust(MAX_SERVICE_NAME_BYTES, "x") for i in range(50)]
            assert set(watch_and_hang_up(s.port, names)) == {grpc.StatusCode.OK}
        assert wait_until(lambda: s._health.names_watched() == 0), f"{s._health.names_watched()} names kept"
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            too_long = "x" * (MAX_SERVICE_NAME_BYTES + 1)
            with pytest.raises(grpc.RpcError) as e:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=too_long), timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "service: is 1025 bytes" in e.value.details()
    finally:
        s.stop(grace=1)
