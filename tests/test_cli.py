"""`contextsvc serve` as a real process: startup line, answers, SIGTERM drains in-flight work."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers import convo
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.metrics import scrape
from helpers.processes import launch, stop
from helpers.server import wait_for


def test_serve_logs_one_start_line_and_answers(tmp_path):
    proc, port, metrics_port, impl = launch(tmp_path=tmp_path)
    try:
        assert impl == ("python" if os.environ.get("CONTEXTSVC_NO_EXTENSIONS") == "1" else "cython")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10)
            assert r.body_bytes > 0
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def _thread_names(pid: int) -> list:
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names from /proc")
def test_the_workers_and_the_loop_are_named_where_the_os_shows_threads(tmp_path):
    """top -H and /proc show a thread by its OS name: the core's workers and the transport's loop
    carry theirs (before: every thread of the process read "python")."""
    proc, port, *_ = launch(tmp_path=tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10).body_bytes > 0
        names = _thread_names(proc.pid)
        assert "grpc-loop" in names
        assert any(name.startswith("rpc_") for name in names), names  # the worker that answered
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_sigterm_finishes_in_flight_calls_and_refuses_new_ones(tmp_path):
    proc, port, metrics_port, _ = launch(tmp_path=tmp_path)
    conv = convo.small_conversation()
    # a call that takes a while: exact counting of 12 MB of prose
    conv.messages[2].parts[0].text.text = "the quick brown fox jumps over the lazy dog. " * 280_000
    results, errors = [], []
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    stub = pb_grpc.ContextServiceStub(ch)

    def call():
        try:
            results.append(stub.Measure(convo.measure_request(conv, exact=True), timeout=60))
        except grpc.RpcError as e:
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    # the requests are in flight: both read by the server (its request-size histogram counts
    # them as it decodes them, a moment before the call is admitted)
    read = ("contextsvc_request_bytes_count", (("method", "Measure"),))
    assert wait_for(lambda: scrape(metrics_port).get(read, 0) == 2, seconds=30)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert proc.wait(timeout=60) == 0
    assert not errors and len(results) == 2 and all(r.exact.tokens > 2_000_000 for r in results)
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(convo.measure_request(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()


def test_bad_config_fails_fast_with_a_message(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[measure]\noutput_token_maxx = 5\n")
    p = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--config", str(path)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown key 'output_token_maxx'" in p.stderr


@pytest.mark.parametrize("which", ["port", "metrics-port"])
def test_a_port_in_use_fails_the_start_with_one_line_naming_the_setting(tmp_path, which):
    """It was grpc's traceback ("set GRPC_VERBOSITY=debug"), or "[Errno 98] Address already in
    use" without the port."""
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        taken = str(holder.getsockname()[1])
        ports = ["--port", taken, "--metrics-port", "0"] if which == "port" else ["--port", "0", "--metrics-port", taken]
        config = tmp_path / "c.toml"
        config.write_text(f'[truncation]\ndirectory = "{tmp_path / "store"}"\n')
        r = subprocess.run([sys.executable, "-m", "contextsvc", "serve", *ports, "--config", str(config)],
                           capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    setting = "server.port" if which == "port" else "server.metrics_port"
    assert last.startswith("contextsvc: cannot") and taken in last and setting in last, r.stderr
    assert "Address already in use" in last


def test_config_file_values_take_effect(tmp_path):
    proc, port, _, _ = launch(config_text="[measure]\noutput_token_max = 4096\n", tmp_path=tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10)
            assert r.max_output_tokens == 4096 and r.usable == 200_000 - 4096
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_sigusr1_writes_every_threads_stack_and_the_server_keeps_serving(tmp_path):
    """What an operator reads when a call or a stop seems stuck."""
    proc, port, _, _ = launch(tmp_path=tmp_path)
    try:
        proc.send_signal(signal.SIGUSR1)
        # the main thread waits for the stop; grpc's poller serves
        assert wait_for(lambda: any("contextsvc/cli.py" in line and " in main" in line for line in proc.log))
        assert any("asyncio/base_events.py" in line and " in run_forever" in line for line in proc.log)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10).body_bytes > 0
    finally:
        assert stop(proc) == 0


def _tgkill(pid: int, tid: int, sig: int) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_tgkill = 234  # x86_64
    assert libc.syscall(SYS_tgkill, pid, tid, sig) == 0, ctypes.get_errno()


def _blocks(pid: int, tid: int, sig: int) -> bool:
    """Whether thread tid blocks sig (a signal sent to it alone would then wait for ever)."""
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    return bool(mask >> (sig - 1) & 1)


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="tgkill through its x86_64 syscall number")
@pytest.mark.parametrize("args", [(), ("--processes", "2")], ids=["server", "supervisor"])
def test_sigterm_handed_to_another_thread_still_stops_the_server(args, tmp_path):
    """The kernel may hand a process's signal to any thread; CPython runs the handler in the
    main thread, which must not sit in an untimed wait (before: the signal was lost, the
    process kept serving)."""
    proc, *_ = launch(*args, tmp_path=tmp_path)
    try:
        others = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")
                  if int(t) != proc.pid and not _blocks(proc.pid, int(t), signal.SIGTERM)]
        assert others
        _tgkill(proc.pid, others[-1], signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
