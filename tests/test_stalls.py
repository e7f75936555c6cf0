"""Stalls (issue 16, items 1, 2, 4, 5): idle streams, a trickling summarizer, SIGTERM with a
stuck call, and a concurrency limit full of abandoned work. Each runs against a real server;
where the process itself matters (peak memory, exit), a real `contextsvc serve` process.

Each test prints its figures (time to answer, the server's peak RSS) with `pytest -s`."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from helpers import convo
from helpers.server import start_server, wait_for
from server_process import peak_rss_mb
from contextsvc import config
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import FakeMessagesAPI, summarizer_server
from helpers.processes import launch, stop
from helpers.rpc import compact_request

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
WATCH = "/grpc.health.v1.Health/Watch"
TOKEN = "s3cret-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def timed(call):
    """(seconds, result or the RpcError's code)."""
    start = time.perf_counter()
    try:
        result = call()
    except grpc.RpcError as e:
        result = e.code()
    return time.perf_counter() - start, result


# ---- 1. idle streams -------------------------------------------------------------------------

def open_idle_streams(channel, method, count, metadata=AUTH):
    """count streams that send (at most) one message and then stay open until `release`."""
    release = threading.Event()
    calls = []
    for _ in range(count):
        if method == REFLECTION:
            def requests():
                release.wait(60)
                return
                yield  # a generator that sends nothing while it waits

            calls.append(channel.stream_stream(method)(requests(), metadata=metadata, timeout=60))
        else:
            calls.append(channel.unary_stream(method)(health_pb2.HealthCheckRequest().SerializeToString(),
                                                      metadata=metadata, timeout=60))
    return release, calls


def close_streams(release, calls):
    release.set()
    for c in calls:
        c.cancel()


@pytest.mark.parametrize("method", [REFLECTION, WATCH], ids=["reflection", "health-watch"])
def test_idle_streams_do_not_starve_unary_calls_or_health(tmp_path, method):
    """Workers plus ten idle streams (so that more workers do not pass it): an authorized
    Measure and Health/Check still answer at once."""
    workers = config.ServerConfig().workers
    proc, port, _, _ = launch(server_toml=f'auth_token = "{TOKEN}"', tmp_path=tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            release, calls = open_idle_streams(ch, method, workers + 10)
            try:
                time.sleep(1.0)  # every stream has reached the server
                stub = pb_grpc.ContextServiceStub(ch)
                t_measure, measured = timed(lambda: stub.Measure(convo.measure_request(), metadata=AUTH,
                                                                 timeout=5))
                t_health, health = timed(lambda: health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=5))
                print(f"\n{method}: {workers + 10} idle streams: Measure {t_measure:.3f} s, "
                      f"Health/Check {t_health:.3f} s, peak RSS {peak_rss_mb(proc.pid):.0f} MB")
                assert not isinstance(measured, grpc.StatusCode), measured
                assert measured.body_bytes > 0
                assert health.status == health_pb2.HealthCheckResponse.SERVING
                assert t_measure < 2 and t_health < 2
            finally:
                close_streams(release, calls)
    finally:
        assert stop(proc) == 0


def test_idle_stream_is_closed_after_the_limit():
    s = start_server(stream_idle_seconds=1.0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            for method in (REFLECTION, WATCH):
                release, calls = open_idle_streams(ch, method, 2, metadata=())
                try:
                    start = time.monotonic()
                    for call in calls:
                        with pytest.raises(grpc.RpcError) as e:
                            for _ in call:
                                pass
                        assert e.value.code() == grpc.StatusCode.CANCELLED
                    assert time.monotonic() - start < 5
                finally:
                    close_streams(release, calls)
            # an active reflection stream is answered
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            answers = list(ch.stream_stream(REFLECTION, response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)(
                iter([request.SerializeToString()]), timeout=5))
            assert "contextsvc.v1.ContextService" in {s.name for s in answers[0].list_services_response.service}
    finally:
        s.stop(grace=1)


def test_health_watches_are_bounded():
    """Watch holds no thread, but every open stream counts against the transport's bound
    (max_pending_rpcs): one watch beyond max_watch_streams is refused at once."""
    s = start_server(max_watch_streams=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            release, calls = open_idle_streams(ch, WATCH, 2, metadata=())
            try:
                for call in calls:
                    next(call)  # the first status: the watch is open
                with pytest.raises(grpc.RpcError) as e:
                    list(ch.unary_stream(WATCH)(health_pb2.HealthCheckRequest().SerializeToString(), timeout=5))
                assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "max_watch_streams" in e.value.details()
            finally:
                close_streams(release, calls)
            # the closed watches are forgotten: a new one is served
            assert wait_for(lambda: next(ch.unary_stream(WATCH)(
                health_pb2.HealthCheckRequest().SerializeToString(), timeout=5)) is not None)
    finally:
        s.stop(grace=1)


def test_reflection_can_be_turned_off_and_sits_behind_the_token():
    request = reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString()
    s = start_server(reflection=False)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                list(ch.stream_stream(REFLECTION)(iter([request]), timeout=5))
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        s.stop(grace=1)
    s = start_server(auth_token=TOKEN)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                list(ch.stream_stream(REFLECTION)(iter([request]), timeout=5))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert len(list(ch.stream_stream(REFLECTION)(iter([request]), metadata=AUTH, timeout=5))) == 1
            # health stays open for probes
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        s.stop(grace=1)


# ---- 2. a trickling summarizer ---------------------------------------------------------------

@pytest.fixture()
def trickle(api):
    api.mode = "trickle"
    return api


@pytest.fixture()
def model_trickle(model_api):
    model_api.mode = "trickle"
    return model_api


def test_trickling_summarizer_falls_back_within_the_callers_deadline(model_trickle):
    trickle = model_trickle
    s = summarizer_server(trickle, fallback=True, timeout=30.0, retries=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            t, r = timed(lambda: stub.Compact(compact_request(), timeout=4.0))
            print(f"\ntrickle, caller deadline 4 s, fallback: answered in {t:.2f} s: "
                  f"{r if isinstance(r, grpc.StatusCode) else 'OK fell_back=%s' % r.fell_back}")
            assert not isinstance(r, grpc.StatusCode), r
            assert r.fell_back and r.backend == "offline" and f"{trickle.BACKEND} summarizer" in r.fallback_reason
            assert t < 4.0
    finally:
        s.stop(grace=1)


def test_trickling_summarizer_stops_at_its_own_timeout(model_trickle):
    trickle = model_trickle
    s = summarizer_server(trickle, fallback=False, timeout=2.0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            t, r = timed(lambda: stub.Compact(compact_request(), timeout=20.0))
            print(f"\ntrickle, timeout_seconds 2, no deadline: {r} in {t:.2f} s")
            assert r == grpc.StatusCode.UNAVAILABLE
            assert t < 4.0
    finally:
        s.stop(grace=1)


def test_sixteen_trickling_compacts_leave_the_service_serving(trickle, tmp_path):
    """16 Compacts (the default limit) against the trickle, each with a 3 s deadline: every one
    answers by its deadline, and right after a Measure is answered, not refused."""
    env = dict(os.environ, CONTEXTSVC_TEST_KEY="sk-test-123")
    summarizer = (f'[summarizer]\nbackend = "anthropic"\nbase_url = "{trickle.url}"\n'
                  'api_key_env = "CONTEXTSVC_TEST_KEY"\ntimeout_seconds = 60.0\nfallback_to_offline = false\n')
    proc, port, _, _ = launch(server_toml="", config_text=summarizer, tmp_path=tmp_path, env=env)  # shipped [server]
    limit = config.ServerConfig().max_concurrent_rpcs
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            start = time.monotonic()
            futures = [stub.Compact.future(compact_request(), timeout=3.0) for _ in range(limit)]
            codes = [f.exception().code() if f.exception() else grpc.StatusCode.OK for f in futures]
            assert set(codes) <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}, codes
            time.sleep(0.5)  # the server's own end of each call, just after the caller's
            t, r = timed(lambda: stub.Measure(convo.measure_request(), timeout=5))
            print(f"\n{limit} trickling Compacts (3 s deadline): Measure after {time.monotonic() - start:.1f} s "
                  f"answered {r if isinstance(r, grpc.StatusCode) else 'OK'} in {t:.3f} s, "
                  f"peak RSS {peak_rss_mb(proc.pid):.0f} MB")
            assert not isinstance(r, grpc.StatusCode), r
    finally:
        trickle.release.set()
        assert stop(proc) == 0


# ---- 4. SIGTERM with a stuck call ------------------------------------------------------------

def test_sigterm_exits_after_the_grace_whatever_is_running(tmp_path):
    """A Compact stuck on a summarizer that never answers (no caller deadline, 60 s timeout):
    the process exits shortly after drain + grace, not when the call ends."""
    api = FakeMessagesAPI("hang")
    env = dict(os.environ, CONTEXTSVC_TEST_KEY="sk-test-123")
    summarizer = (f'[summarizer]\nbackend = "anthropic"\nbase_url = "{api.url}"\n'
                  'api_key_env = "CONTEXTSVC_TEST_KEY"\ntimeout_seconds = 60.0\nmax_retries = 0\n'
                  'fallback_to_offline = false\n')
    proc, port, _, _ = launch(server_toml="shutdown_grace_seconds = 2.0\ndrain_seconds = 0.2",
                              config_text=summarizer, tmp_path=tmp_path, env=env)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            stuck = stub.Compact.future(compact_request())
            assert wait_for(lambda: len(api.requests) == 1, seconds=10)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(15)
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - start
            print(f"\nSIGTERM with a stuck call (grace 2 s): exit {code} after {took:.1f} s")
            assert code == 0 and took < 5.0
            assert any("still running" in line for line in proc.log), "".join(proc.log)
            stuck.cancel()
    finally:
        api.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- 5. a concurrency limit full of abandoned work ---------------------------------------------

def healthz(port) -> int:
    """The HTTP status of the metrics port's /healthz."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_abandoned_calls_do_not_hold_the_concurrency_slots():
    """Two Compacts stuck on a hanging summarizer, then abandoned by their callers: the next
    Measure is answered, not refused. When abandoned work takes every thread the service can give,
    calls are refused naming it and health says NOT_SERVING, until that work ends."""
    api = FakeMessagesAPI("hang")
    os.environ.setdefault("CONTEXTSVC_TEST_KEY", "sk-test-123")
    s = summarizer_server(api, max_concurrent_rpcs=2, workers=5, max_streams=1)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            health = health_pb2_grpc.HealthStub(ch)

            def abandon(n, before):
                calls = [stub.Compact.future(compact_request()) for _ in range(n)]
                assert wait_for(lambda: len(api.requests) == before + n, seconds=10)
                for c in calls:
                    c.cancel()

            abandon(2, 0)
            t, r = timed(lambda: stub.Measure(convo.measure_request(), timeout=5))
            print(f"\n2 abandoned calls fill the limit of 2: Measure {r if isinstance(r, grpc.StatusCode) else 'OK'} "
                  f"in {t:.3f} s")
            assert not isinstance(r, grpc.StatusCode), r
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING
            abandon(2, 2)  # 4 threads of 5 taken by abandoned work: the last is kept for health
            with pytest.raises(grpc.RpcError) as e:
                stub.Measure(convo.measure_request(), timeout=5)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "abandoned" in e.value.details()
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.NOT_SERVING
            assert healthz(s.metrics_port) == 503  # the HTTP mirror of Health/Check says so too
            api.mode = "ok"
            api.release.set()
            assert wait_for(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5).status ==
                            health_pb2.HealthCheckResponse.SERVING, seconds=10)
            assert healthz(s.metrics_port) == 200
            assert stub.Measure(convo.measure_request(), timeout=5).body_bytes > 0
    finally:
        api.close()
        s.stop(grace=1)


def test_concurrent_large_requests_are_worked_on_within_the_byte_bound():
    """Requests being worked on cost a few times their bytes (32 Measures of 60 MB at once took
    2.8 GB, past the shipped 2 GiB pod limit). Four callers send a 10 MB Measure each at once on
    a server bounding the bytes worked on at 15 MB: one is worked on at a time, the others get
    RESOURCE_EXHAUSTED naming the bound as soon as their request has arrived (retry later), and
    every one that goes through, then or later, is answered."""
    s = start_server(max_working_request_bytes=15 * 2**20)
    big = convo.measure_request()
    big.conversation.messages.append(convo.user("big", convo.text("big-t", "a b c d " * (10 * 2**20 // 8))))
    assert 10 * 2**20 < big.ByteSize() < 15 * 2**20
    answers, start = [], threading.Barrier(4)
    options = [("grpc.max_send_message_length", 64 << 20)]

    def call():
        with grpc.insecure_channel(f"127.0.0.1:{s.port}", options=options) as ch:
            start.wait()
            try:
                r = pb_grpc.ContextServiceStub(ch).Measure(big, timeout=60)
                answers.append(("OK", r.body_bytes))
            except grpc.RpcError as e:
                answers.append((e.code().name, e.details()))
    try:
        callers = [threading.Thread(target=call) for _ in range(4)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(90)
        codes = sorted(code for code, _ in answers)
        assert len(answers) == 4 and "OK" in codes and "RESOURCE_EXHAUSTED" in codes, answers
        assert set(codes) == {"OK", "RESOURCE_EXHAUSTED"}, answers
        assert all("server.max_working_request_bytes" in d for c, d in answers if c != "OK"), answers
        # the bytes are given back: one at a time, every call goes through
        with grpc.insecure_channel(f"127.0.0.1:{s.port}", options=options) as ch:
            for _ in range(2):
                assert pb_grpc.ContextServiceStub(ch).Measure(big, timeout=60).body_bytes > 10 * 2**20
    finally:
        s.stop(grace=1)


def test_a_request_whose_caller_left_counts_against_the_byte_bound_until_its_worker_is_done(monkeypatch):
    """A caller whose deadline passes leaves its request with the worker, which goes on holding
    (and working on) it: its bytes were given back when the caller left, and under a 15 MB bound
    two 10 MB requests were worked on at once. They are given back when the worker is done."""
    from contextsvc.rpc import conversion
    release, real = threading.Event(), conversion.step_input

    def held(*args, **kwargs):  # the core's step, held until released
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(conversion, "step_input", held)
    s = start_server(max_working_request_bytes=15 * 2**20)
    big = convo.measure_request()
    big.conversation.messages.append(convo.user("big", convo.text("big-t", "a b c d " * (10 * 2**20 // 8))))
    options = [("grpc.max_send_message_length", 64 << 20)]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}", options=options) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            with pytest.raises(grpc.RpcError) as left:
                stub.Measure(big, timeout=1.5)
            assert left.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            with pytest.raises(grpc.RpcError) as refused:  # its worker still holds the first
                stub.Measure(big, timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "server.max_working_request_bytes" in refused.value.details()
            release.set()
            assert wait_for(lambda: _measures(stub, big), 10)  # the worker done: given back
    finally:
        release.set()
        s.stop(grace=1)


def _measures(stub, request) -> bool:
    try:
        return stub.Measure(request, timeout=10).body_bytes > 0
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
        return False
