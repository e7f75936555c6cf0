"""`contextsvc serve --processes N`: N real serving processes on one port under a supervisor."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import grpc

from helpers import convo
from helpers.server import wait_for
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.processes import launch

from server_process import process_cpu_seconds, process_tree

OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # one TCP connection per channel


def children(pid):
    return process_tree(pid)[1:]


def scrape_rpcs(metrics_port, method):
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(
        rf'^contextsvc_rpcs_total{{[^}}]*method="{method}"[^}}]*}} (\S+)$', text, re.M))


def big_measure_request():
    # a few hundred KB: each call costs a process milliseconds of CPU, visible in its ticks
    messages = []
    for i in range(150):
        messages.append(convo.user(f"u{i:04d}", convo.text(f"p{i}u", "please read the next file " * 20)))
        messages.append(convo.assistant(f"u{i:04d}a", convo.tool(f"p{i}t", f"call_{i}", "read", {"path": f"f{i}.py"},
                                                                  "def f():\n    return 1\n" * 60)))
    return convo.measure_request(pb.Conversation(session_id="s", messages=messages))


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    return proc.wait(60)


def test_connections_spread_over_processes_and_metrics_are_summed(tmp_path):
    proc, port, metrics_port, _ = launch("--processes", "2", tmp_path=tmp_path)
    try:
        workers = children(proc.pid)
        assert len(workers) == 2
        before = {w: process_cpu_seconds(w) for w in workers}
        request, calls = big_measure_request(), 0
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=OWN_CONNECTION) for _ in range(16)]
        try:
            for _ in range(3):
                for ch in channels:
                    assert pb_grpc.ContextServiceStub(ch).Measure(request, timeout=30).body_bytes > 0
                    calls += 1
        finally:
            for ch in channels:
                ch.close()
        # 16 connections: both processes got some (all on one would be a 1-in-32,768 draw)
        assert all(process_cpu_seconds(w) > before[w] for w in workers), "a serving process got no work"
        assert scrape_rpcs(metrics_port, "Measure") == calls  # summed over both processes
        # the supervisor's metrics port answers the proxies' health check too
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=10) as r:
            assert (r.status, r.read()) == (200, b"SERVING\n")
    finally:
        assert stop(proc) == 0
    assert children(proc.pid) == []


def test_a_dead_process_is_replaced_and_its_counts_are_kept(tmp_path):
    proc, port, metrics_port, _ = launch("--processes", "2", tmp_path=tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for _ in range(5):
                stub.Measure(convo.measure_request(), timeout=10)
        assert scrape_rpcs(metrics_port, "Measure") == 5
        victim = children(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        replaced = wait_for(lambda: (lambda c: c if len(c) == 2 and victim not in c else None)(children(proc.pid)),
                            30)
        assert replaced, "no replacement process"
        assert victim not in replaced
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            r = pb_grpc.ContextServiceStub(ch).Measure(convo.measure_request(), timeout=10, wait_for_ready=True)
            assert r.body_bytes > 0
        assert scrape_rpcs(metrics_port, "Measure") == 6  # the dead process's five still count
    finally:
        assert stop(proc) == 0


def in_flight(metrics_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r"^contextsvc_rpcs_in_flight{[^}]*} (\S+)$", text, re.M))


def test_the_calls_of_a_killed_process_leave_the_in_flight_gauge(tmp_path):
    """A serving process killed with calls in flight: its calls are over (their callers got
    UNAVAILABLE), and the supervisor's /metrics said otherwise for good: the dashboard's calls in
    flight read 6 for a replica doing nothing."""
    import threading

    proc, port, metrics_port, _ = launch("--processes", "2", tmp_path=tmp_path)
    release = threading.Event()

    def never_sent():  # a call whose request has not arrived is in flight
        release.wait(60)
        return
        yield

    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.stream_unary("/contextsvc.v1.ContextService/Measure").future(never_sent(), timeout=60)
            assert wait_for(lambda: in_flight(metrics_port) == 1, 10)
            workers = children(proc.pid)
            for victim in workers:
                os.kill(victim, signal.SIGKILL)
            assert wait_for(lambda: (lambda c: len(c) == 2 and not set(c) & set(workers))(children(proc.pid)), 30)
            assert wait_for(lambda: in_flight(metrics_port) == 0, 10), in_flight(metrics_port)
            release.set()
            assert call.exception(30) is not None
    finally:
        release.set()
        assert stop(proc) == 0


def test_processes_stop_when_the_supervisor_is_killed(tmp_path):
    # a killed supervisor leaves its metrics directory behind: it goes in the test's own
    proc, port, _, _ = launch("--processes", "2", tmp_path=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)})
    workers = children(proc.pid)
    assert len(workers) == 2
    proc.kill()
    proc.wait(10)
    # each gets SIGTERM from the kernel (parent-death signal) and drains: no orphan keeps the port
    assert wait_for(lambda: all(not os.path.exists(f"/proc/{w}") or _zombie(w) for w in workers), 30), \
        "the serving processes did not exit"


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_port_held_by_another_program_fails_the_start(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        taken = holder.getsockname()[1]
        config = tmp_path / "c.toml"
        config.write_text(f'[truncation]\ndirectory = "{tmp_path / "store"}"\n')
        r = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--processes", "2", "--port", str(taken),
                            "--metrics-port", "0", "--config", str(config)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert "Address already in use" in r.stderr
    finally:
        holder.close()


def test_a_second_supervisor_on_the_same_port_fails_the_start(tmp_path):
    (tmp_path / "first").mkdir()
    proc, port, _, _ = launch("--processes", "2", tmp_path=tmp_path / "first")
    try:
        config = tmp_path / "c.toml"
        config.write_text(f'[truncation]\ndirectory = "{tmp_path / "store"}"\n')
        r = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--processes", "2", "--port", str(port),
                            "--metrics-port", "0", "--config", str(config)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1  # SO_REUSEPORT must not let it join the running one's group
        assert "Address already in use" in r.stderr
    finally:
        assert stop(proc) == 0


def test_a_bad_token_file_fails_once_in_the_supervisor(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'[server]\nauth_token_file = "{tmp_path / "missing"}"\n'
                      f'[truncation]\ndirectory = "{tmp_path / "store"}"\n')
    r = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--processes", "2", "--port", "0",
                        "--metrics-port", "0", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("config:") == 1


def test_a_negative_process_count_is_a_config_error():
    r = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--processes", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "processes" in r.stderr
