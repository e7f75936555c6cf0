"""Faults over real sockets: deadlines, a hanging or dying summarizer, the concurrency limit,
a store that cannot be written, SIGTERM under load."""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers import convo
from helpers.server import HeldAt, start_server, truncate_and_leave, wait_for
from contextsvc import config, truncation
from contextsvc.app import Server
from contextsvc.rpc import conversion
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import summarizer_server
from helpers.processes import launch, started, stop
from helpers.rpc import compact_request
from helpers.metrics import scrape


def code_count(server, method, code):
    return scrape(server.metrics_port).get(
        ("contextsvc_rpcs_total", (("code", code), ("method", method))), 0)


def measure_ok(stub):
    try:
        return stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return False
        raise


# ---- deadlines ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fallback", [False, True])
def test_short_deadline_ends_a_hanging_compact_and_frees_its_worker(api, fallback):
    """The backend would hold the call 60 s; the caller allows 3 s. The server stops at the
    deadline (no fallback work for a caller who is gone), and its only slot is free again. With
    fallback_to_offline the backend gives up early enough for the offline summary to answer."""
    api.mode = "hang"
    s = summarizer_server(api, fallback=fallback, retries=2, max_concurrent_rpcs=1, workers=3)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            if fallback:
                r = stub.Compact(compact_request(), timeout=3.0)
                assert r.fell_back and r.backend == "offline"
                assert len(api.requests) == 1  # no retry in the time kept for the fallback
                return
            with pytest.raises(grpc.RpcError) as e:
                stub.Compact(compact_request(), timeout=3.0)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            # the server itself ended the call with DEADLINE_EXCEEDED (not a late answer or an error)
            assert wait_for(lambda: code_count(s, "Compact", "DEADLINE_EXCEEDED") == 1)
            assert code_count(s, "Compact", "OK") == 0
            # the single slot is free long before the backend would have answered
            assert wait_for(lambda: measure_ok(stub), seconds=10)
            assert len(api.requests) == 1  # no retry was sent past the deadline
    finally:
        s.stop(grace=1)


def test_compacts_their_callers_cancel_stop_waiting_on_a_hanging_summarizer(api):
    """Three Compacts with no deadline wait on a summarizer that holds every request 60 s; their
    callers cancel. The exchanges end within a moment, so their threads are free: they waited out
    the whole timeout, and 19 such calls had the server refuse every call (and report
    NOT_SERVING) for a minute."""
    api.mode = "hang"
    s = summarizer_server(api, max_concurrent_rpcs=3, workers=4)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            calls = [stub.Compact.future(compact_request()) for _ in range(3)]
            assert wait_for(lambda: len(api.requests) == 3)
            for c in calls:
                c.cancel()
            assert wait_for(lambda: measure_ok(stub), seconds=5)  # the three threads are free
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
            assert len(api.requests) == 3  # no retry for callers who are gone
    finally:
        api.release.set()
        s.stop(grace=1)


def big_session(turns=3000):
    """A long session: each turn a request, a failing test run and a decision."""
    msgs = []
    for t in range(turns):
        msgs.append(convo.user(f"msg_{2 * t:06d}", convo.text(f"u{t}", f"Please fix src/module_{t}.py")))
        msgs.append(convo.assistant(
            f"msg_{2 * t + 1:06d}",
            convo.tool(f"t{t}", f"call_{t}", "bash", {"command": f"pytest tests/test_module_{t}.py"},
                       f"FAILED tests/test_module_{t}.py::test_parse - ValueError\n" + "." * 3_000),
            convo.text(f"a{t}", f"Decided to rewrite parse_token in src/module_{t}.py")))
    msgs.append(convo.user(f"msg_{2 * turns:06d}", convo.text("last", "now run the whole suite")))
    return pb.Conversation(session_id="s", messages=msgs)


def test_short_deadline_ends_a_large_offline_compaction():
    """A compaction folding hundreds of chunks offline stops between chunks at the deadline."""
    s = start_server(max_concurrent_rpcs=1, workers=3)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}",
                                   options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            request = compact_request(big_session(), context=8_000)
            with pytest.raises(grpc.RpcError) as e:
                stub.Compact(request, timeout=0.4)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert wait_for(lambda: code_count(s, "Compact", "DEADLINE_EXCEEDED") == 1)
            assert wait_for(lambda: measure_ok(stub), seconds=10)
            # the same request with time to spare completes: the deadline, not the input, ended it
            r = stub.Compact(request, timeout=120)
            assert r.chunked and r.summary.parts[0].text.text
    finally:
        s.stop(grace=1)


# ---- the summarizer backend failing --------------------------------------------------------------

@pytest.mark.parametrize("mode", ["hang", "die", "reset", "garbage"])
def test_summarizer_hanging_or_dying_is_unavailable_or_falls_back(model_api, mode):
    api = model_api
    api.mode = mode
    strict = summarizer_server(api, fallback=False, timeout=0.5)
    lenient = summarizer_server(api, fallback=True, timeout=0.5)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{strict.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
            assert e.value.details().startswith(f"{api.BACKEND} summarizer: ")
            assert pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10).body_bytes > 0
        with grpc.insecure_channel(f"127.0.0.1:{lenient.port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
            assert r.fell_back and r.backend == "offline" and f"{api.BACKEND} summarizer" in r.fallback_reason
            assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED
    finally:
        strict.stop(grace=1)
        lenient.stop(grace=1)


def test_retries_stay_within_the_attempt_count(model_api):
    api = model_api
    api.mode = "reset"
    s = summarizer_server(api, fallback=False, timeout=5.0, retries=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert len(api.requests) == 3  # one attempt and two retries
    finally:
        s.stop(grace=1)


# ---- the concurrency limit -----------------------------------------------------------------------

def test_concurrency_limit_refuses_at_once_and_health_still_answers(api):
    api.mode = "hang"
    s = summarizer_server(api, max_concurrent_rpcs=2, workers=4)
    results = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)

            def hold():
                results.append(stub.Compact(compact_request(), timeout=60))

            holders = [threading.Thread(target=hold) for _ in range(2)]
            for t in holders:
                t.start()
            assert wait_for(lambda: len(api.requests) == 2)  # both slots are taken
            with pytest.raises(grpc.RpcError) as e:
                stub.Measure(convo.measure_request(), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_concurrent_rpcs" in e.value.details() and "Measure" in e.value.details()
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            api.mode = "ok"
            api.release.set()
            for t in holders:
                t.join(30)
            assert len(results) == 2 and all(r.backend == "anthropic" for r in results)
            assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0
        assert code_count(s, "Measure", "RESOURCE_EXHAUSTED") == 1
    finally:
        api.release.set()
        s.stop(grace=1)


def own_connection(port: int) -> grpc.Channel:
    """A channel on a connection of its own (grpc shares one between equal channels otherwise)."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


def test_a_connection_that_fills_the_limit_refuses_no_other_connection_s_call(api):
    """One connection's calls hold every slot of max_concurrent_rpcs: its next call is refused,
    but a call on another connection with none in flight takes the spare thread and is answered
    (a burst on one channel refused every other caller before); a third connection's call, with
    no spare thread left (workers - 1 kept for health), is refused."""
    api.mode = "hang"
    s = summarizer_server(api, max_concurrent_rpcs=2, workers=4)
    try:
        with own_connection(s.port) as burst, own_connection(s.port) as other, own_connection(s.port) as third:
            holders = [pb_grpc.ContextServiceStub(burst).Compact.future(compact_request(), timeout=60)
                       for _ in range(2)]
            assert wait_for(lambda: len(api.requests) == 2)
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ContextServiceStub(burst).Measure(convo.measure_request(), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert pb_grpc.ContextServiceStub(other).Measure(convo.measure_request(), timeout=10).body_bytes > 0
            held = pb_grpc.ContextServiceStub(other).Compact.future(compact_request(), timeout=60)
            assert wait_for(lambda: len(api.requests) == 3)  # the spare thread, held by other's call
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ContextServiceStub(third).Measure(convo.measure_request(), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_concurrent_rpcs" in e.value.details()
            api.mode = "ok"
            api.release.set()
            assert all(f.result(30).backend == "anthropic" for f in holders + [held])
            assert pb_grpc.ContextServiceStub(third).Measure(convo.measure_request(), timeout=10).body_bytes > 0
    finally:
        api.release.set()
        s.stop(grace=1)


def test_transport_bound_refuses_every_service_beyond_it(api):
    """max_pending_rpcs is grpc's own bound: beyond it even health checks are refused, which is
    why the service limit sits below it."""
    api.mode = "hang"
    s = summarizer_server(api, max_concurrent_rpcs=2, workers=4, max_pending_rpcs=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            errors = []

            def hold():
                try:
                    stub.Compact(compact_request(), timeout=60)
                except grpc.RpcError as e:
                    errors.append(e.code())

            holders = [threading.Thread(target=hold) for _ in range(2)]
            for t in holders:
                t.start()
            assert wait_for(lambda: len(api.requests) == 2)
            with pytest.raises(grpc.RpcError) as e:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            api.mode = "ok"
            api.release.set()
            for t in holders:
                t.join(30)
            assert not errors
            assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0
    finally:
        api.release.set()
        s.stop(grace=1)


def test_concurrency_settings_are_checked():
    with pytest.raises(ValueError, match="max_concurrent_rpcs"):
        config.from_mapping({"server": {"workers": 4, "max_concurrent_rpcs": 4}})
    assert config.from_mapping({"server": {"workers": 4, "max_concurrent_rpcs": 0}}).server.max_concurrent_rpcs == 0


# ---- the truncation store cannot be written ----------------------------------------------------

BIG = "".join(f"line {i:06d} of a long build log\n" for i in range(40_000))  # about 1.3 MB
SMALL = "".join(f"row {i}\n" for i in range(5_000))  # about 40 KB, over the 2000-line cut


def truncate(stub, text):
    return stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=30)


def assert_store_intact(stub, directory, ids_texts):
    """Only whole outputs in the directory (no temp file left), each read back byte for byte."""
    names = sorted(os.listdir(directory))
    assert names == sorted(i for i, _ in ids_texts), names
    for output_id, text in ids_texts:
        r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id, limit=10_000_000), timeout=30)
        assert r.text == text.rstrip("\n") and r.eof


def test_store_path_blocked_by_a_file_is_unavailable_and_nothing_is_lost(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where the store directory should be")
    base = config.Config()
    s = Server(dataclasses.replace(
        base, server=dataclasses.replace(base.server, port=0, metrics_port=0),
        truncation=dataclasses.replace(base.truncation, directory=str(blocker / "store")))).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                truncate(stub, SMALL)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "cannot store tool output" in e.value.details() and "not a directory" in e.value.details()
            short = truncate(stub, "fits in the preview\n")  # nothing to store: still answered
            assert not short.truncated and short.content == "fits in the preview\n"
            assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0
    finally:
        s.stop(grace=1)
    assert blocker.read_text().startswith("a regular file")


@pytest.mark.parametrize("leaves", ["cancels", "deadline"])
@pytest.mark.parametrize("at", ["store", "answer"])
def test_an_output_whose_caller_leaves_before_its_answer_is_deleted_again(monkeypatch, leaves, at):
    """A TruncateToolOutput whose caller cancels, or whose deadline passes, while its output is
    stored (at "store") or once it is stored but before the answer is handed to grpc (at
    "answer"): the output is deleted again. It used to stay for the retention (7 days), an id no
    client has, counted against max_store_bytes and evicting real outputs."""
    s = start_server()
    directory = s.cfg.truncation.directory
    if at == "store":
        held = s.store.put = HeldAt(s.store.put)
    else:
        held = HeldAt(conversion.truncate_response)
        monkeypatch.setattr(conversion, "truncate_response", held)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            truncate_and_leave(s, stub, BIG, leaves, held)
            assert wait_for(lambda: not os.listdir(directory) and s.store.usage() == (0, 0), 10), \
                (os.listdir(directory), s.store.usage())
            # a caller who stays gets its output, kept (held is released by now)
            kept = truncate(stub, BIG).output_id
            assert_store_intact(stub, directory, [(kept, BIG)])
    finally:
        s.stop(grace=1)


SERVING = re.compile(r"serving gRPC on 127\.0\.0\.1:(\d+)")


def serve_process(store_dir: Path, wrap=None, preexec=None):
    """`contextsvc serve` in a child process, optionally wrapped (e.g. in a mount namespace)."""
    cfg = store_dir.parent / "contextsvc.toml"
    cfg.write_text(f'[truncation]\ndirectory = "{store_dir}"\n')
    cmd = [sys.executable, "-m", "contextsvc", "serve", "--port", "0", "--no-metrics", "--config", str(cfg)]
    if wrap:
        cmd = wrap(cmd)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=preexec,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return proc, int(started(proc, SERVING).group(1))


def test_disk_full_by_file_size_limit_fails_the_write_cleanly(tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse a write past 512 KiB (EFBIG), even as root: the
    same path through the store as a full disk. The small output is stored, the big one is
    refused with no partial file, and the store keeps working."""
    store = tmp_path / "store"
    limit = 512 * 1024

    def cap_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc, port = serve_process(store, preexec=cap_file_size)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            first = truncate(stub, SMALL)
            assert first.truncated and first.output_id
            with pytest.raises(grpc.RpcError) as e:
                truncate(stub, BIG)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "cannot store tool output" in e.value.details() and "too large" in e.value.details().lower()
            assert_store_intact(stub, store, [(first.output_id, SMALL)])
            again = truncate(stub, SMALL + "one more\n")
            assert again.truncated
            assert_store_intact(stub, store, [(first.output_id, SMALL), (again.output_id, SMALL + "one more\n")])
    finally:
        assert stop(proc, 60) == 0


def _namespace_mounts_work() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = tempfile.mkdtemp()
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k none {probe}"],
                              capture_output=True, timeout=10).returncode == 0
    finally:
        os.rmdir(probe)


needs_mounts = pytest.mark.skipif(not _namespace_mounts_work(),
                                  reason="needs root and mount namespaces (unshare -m)")


def in_namespace(mount_cmds):
    def wrap(cmd):
        script = " && ".join(mount_cmds + ['exec "$@"'])
        return ["unshare", "-m", "sh", "-c", script, "sh", *cmd]
    return wrap


@needs_mounts
def test_real_full_disk_enospc(tmp_path):
    """A 1 MiB tmpfs as the store (a private mount namespace of the server process)."""
    store = tmp_path / "store"
    store.mkdir()
    proc, port = serve_process(store, wrap=in_namespace([f"mount -t tmpfs -o size=1m none {store}"]))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            first = truncate(stub, SMALL)
            with pytest.raises(grpc.RpcError) as e:
                truncate(stub, BIG + BIG)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "no space left on device" in e.value.details()
            r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=first.output_id, limit=10_000_000),
                                   timeout=30)
            assert r.text == SMALL.rstrip("\n")
            assert truncate(stub, SMALL).truncated  # the failed write left no space taken
    finally:
        assert stop(proc, 60) == 0


@needs_mounts
def test_read_only_store_reads_old_outputs_and_refuses_new_ones(tmp_path):
    store = tmp_path / "store"
    settings = config.Config().truncation
    old_id = truncation.LocalDiskStore(store, settings).put(SMALL)
    proc, port = serve_process(store, wrap=in_namespace(
        [f"mount --bind {store} {store}", f"mount -o remount,bind,ro {store}"]))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                truncate(stub, SMALL)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "read-only file system" in e.value.details()
            assert_store_intact(stub, store, [(old_id, SMALL)])
    finally:
        assert stop(proc, 60) == 0


# ---- SIGTERM under load --------------------------------------------------------------------------

def test_sigterm_under_load_finishes_in_flight_calls_and_refuses_new_ones(tmp_path):
    proc, port, _, _ = launch(tmp_path=tmp_path)
    big = convo.small_conversation()
    big.messages[2].parts[0].text.text = "the quick brown fox jumps over the lazy dog. " * 200_000
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    stub = pb_grpc.ContextServiceStub(ch)
    codes, refusals, long_results, stop = [], [], [], threading.Event()
    lock = threading.Lock()

    def steady():
        while not stop.is_set():
            try:
                stub.Measure(convo.measure_request(exact=True), timeout=30)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                refusals.append(e.details())
            with lock:
                codes.append(code)
            if code == grpc.StatusCode.UNAVAILABLE:
                return  # refused: the server is going away

    def long_call():
        long_results.append(stub.Measure(convo.measure_request(big, exact=True), timeout=120))

    callers = [threading.Thread(target=steady) for _ in range(6)]
    longs = [threading.Thread(target=long_call) for _ in range(2)]
    for t in callers + longs:
        t.start()
    assert wait_for(lambda: len(codes) >= 20)  # under load
    proc.send_signal(signal.SIGTERM)
    for t in longs:
        t.join(120)
    for t in callers:  # each calls on until the server refuses it (after its drain)
        t.join(60)
    stop.set()
    assert proc.wait(timeout=60) == 0
    assert len(long_results) == 2 and all(r.exact.tokens > 1_000_000 for r in long_results)
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, set(codes)
    # served through the drain, then every caller was refused by name, or (its call still
    # running when the refusals began) by the closed listener: UNAVAILABLE either way, none
    # cancelled by a closing listener
    assert len(refusals) == 6 and all("shutting down" in d or "failed to connect" in d.lower()
                                      for d in refusals), refusals
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(convo.measure_request(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()
