"""Several serving processes on one port, for `server.processes` > 1.

The hot path holds the GIL, so one process uses one core. The supervisor reserves the port,
starts N `contextsvc serve --shared-port` processes that bind it with SO_REUSEPORT (the kernel
spreads connections over them), serves their metrics summed (prometheus_client multiprocess
mode), starts a new process when one dies, and on SIGTERM forwards it and waits for every
process to drain. Each process has its own caches, concurrency limit and prefix tracker; the
truncation store directory is shared (its writes are atomic across processes).
"""
from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from .app import SERVICE_NAME, start_line
from .config import Config
from .metrics import CollectedMetrics
from .signals import stop_on_signals, wait_for_stop
from .rpc.security import bearer_token, bearer_tokens, server_credentials

log = logging.getLogger("contextsvc")

READY_LINE = "ready"  # what a shared-port process prints on stdout once it serves
PARENT_ENV = "CONTEXTSVC_SUPERVISOR_PID"
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client at import
START_TIMEOUT_SECONDS = 60.0  # a process not serving by then is a failed start
# a process that died is started again after this pause, doubled for each death in a row
# (one that served STABLE_SECONDS resets it), up to the cap: a crash loop does not spin
RESTART_PAUSE_SECONDS = 1.0
RESTART_PAUSE_MAX_SECONDS = 60.0
STABLE_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def process_count(cfg: Config) -> int:
    """server.processes, or with 0 the CPUs this process may run on (a container's limit)."""
    return cfg.server.processes or len(os.sched_getaffinity(0)) or 1


def follow_parent() -> None:
    """In a shared-port process: get SIGTERM when the supervisor dies, so no orphan keeps
    serving the port (Linux prctl; elsewhere the supervisor's stop is the only way out)."""
    expected = os.environ.get(PARENT_ENV)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if expected and os.getppid() != int(expected):  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _reserve_port(host: str, port: int) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket: fixes the port number (port 0 picks one)
    for the serving processes and fails early when another program holds the port."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if port:
            # a plain bind first: SO_REUSEPORT alone would join another instance's group on the port
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot bind gRPC on {host}:{port} (server.port): {e.strerror or e}") from None
    return sock


class _Slot:
    """One serving process and what is known of it."""

    def __init__(self, index: int):
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.ready = threading.Event()
        self.started_at = 0.0
        self.died_at = None  # when the watch loop saw it exit
        self.deaths = 0  # in a row, without STABLE_SECONDS of serving between


class Supervisor:
    def __init__(self, cfg: Config, config_path: str | None, metrics_enabled: bool = True):
        # what the serving processes will read: a bad token file or certificate fails here, once
        self._token = bearer_token(cfg.server)
        self._tokens = len(bearer_tokens(cfg.server))
        server_credentials(cfg.server)
        self.cfg = cfg
        self.config_path = config_path
        self.exit_code = 0  # as Server's: its processes exit on their own
        self.count = process_count(cfg)
        self.port = None
        self.metrics_port = None
        self._metrics = None
        self._metrics_dir = None
        self._reserved = None
        self._slots = [_Slot(i) for i in range(self.count)]
        self._metrics_enabled = metrics_enabled
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> "Supervisor":
        s = self.cfg.server
        self._reserved = _reserve_port(s.host, s.port)
        self.port = self._reserved.getsockname()[1]
        if self._metrics_enabled:
            self._metrics_dir = tempfile.mkdtemp(prefix="contextsvc-metrics-")
            self._metrics = CollectedMetrics(self._metrics_dir)
        try:
            for slot in self._slots:
                self._spawn(slot)
            for slot in self._slots:
                self._await_ready(slot)
            if self._metrics is not None:
                self.metrics_port = self._metrics.serve(s.metrics_bind, s.metrics_port, health=self.serving,
                                                        token=self._token if s.metrics_auth else "")
        except BaseException:
            self._terminate_all(grace=5.0)
            self._release()
            raise
        threading.Thread(target=self._watch, name="supervisor", daemon=True).start()
        log.info("%s, %d processes", start_line(self.cfg, self.port, self.metrics_port, self._tokens),
                 self.count)
        return self

    def _command(self) -> list[str]:
        s = self.cfg.server
        cmd = [sys.executable, "-m", "contextsvc", "serve", "--shared-port",
               "--host", s.host, "--port", str(self.port)]
        if self.config_path:
            cmd += ["--config", self.config_path]
        if not self._metrics_enabled:
            cmd.append("--no-metrics")
        return cmd

    def _spawn(self, slot: _Slot) -> None:
        env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
        if self._metrics_dir:
            env[METRICS_DIR_ENV] = self._metrics_dir
        slot.ready.clear()
        slot.started_at = time.monotonic()
        # Its own process group: a terminal's Ctrl-C reaches the supervisor only, which then
        # stops the processes in order.
        slot.proc = subprocess.Popen(self._command(), env=env, stdout=subprocess.PIPE, text=True,
                                     process_group=0)
        threading.Thread(target=self._read_ready, args=(slot, slot.proc), daemon=True).start()

    @staticmethod
    def _read_ready(slot: _Slot, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            if line.strip() == READY_LINE:
                slot.ready.set()
        proc.stdout.close()

    def _await_ready(self, slot: _Slot) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not slot.ready.wait(0.05):
            code = slot.proc.poll()
            if code is not None:
                raise OSError(f"serving process {slot.index} exited with code {code} while starting")
            if time.monotonic() > deadline:
                raise OSError(f"serving process {slot.index} not serving after {START_TIMEOUT_SECONDS:g} s")

    def serving(self, service: str = "") -> bool:
        """For /healthz on the metrics port: not stopping and at least one process serving
        (the kernel sends new connections only to the live ones)."""
        if service not in ("", SERVICE_NAME):
            return False
        return not self._stopping.is_set() and any(
            slot.proc is not None and slot.proc.poll() is None and slot.ready.is_set()
            for slot in self._slots)

    # -- keep them running ---------------------------------------------------------------------

    def _watch(self) -> None:
        # Restarted processes are children of this thread (their parent-death signal follows
        # it), so it must outlive every failure of a round.
        while not self._stopping.wait(0.2):
            for slot in self._slots:
                try:
                    with self._lock:
                        if self._stopping.is_set():
                            return
                        self._restart_if_dead(slot)
                except Exception:
                    log.exception("supervising serving process %d failed; retrying", slot.index)

    def _restart_if_dead(self, slot: _Slot) -> None:
        code = slot.proc.poll()
        if code is None:
            return
        now = time.monotonic()
        if slot.died_at is None:
            slot.died_at = now
            slot.deaths = 1 if now - slot.started_at >= STABLE_SECONDS else slot.deaths + 1
            self._forget(slot.proc.pid)
        pause = min(RESTART_PAUSE_MAX_SECONDS, RESTART_PAUSE_SECONDS * 2 ** (slot.deaths - 1))
        if now - slot.died_at < pause:
            return
        log.warning("serving process %d (pid %d) exited with code %s (%d in a row); starting another",
                    slot.index, slot.proc.pid, code, slot.deaths)
        slot.died_at = None
        self._spawn(slot)

    def _forget(self, pid: int) -> None:
        if self._metrics_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self._metrics_dir)

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Forwards SIGTERM to every process (each drains as a single server does) and waits."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
        s = self.cfg.server
        self._terminate_all(grace=s.drain_seconds + s.shutdown_grace_seconds + 5.0)
        log.info("contextsvc: in-flight calls finished")
        self._release()
        log.info("contextsvc stopped")
        self._done.set()

    def _terminate_all(self, grace: float) -> None:
        procs = [slot.proc for slot in self._slots if slot.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("serving process pid %d did not stop in %.0f s; killing it", proc.pid, grace)
                proc.kill()
                proc.wait()

    def _release(self) -> None:
        if self._metrics is not None:
            self._metrics.stop()
        if self._metrics_dir:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
        if self._reserved is not None:
            self._reserved.close()

    def wait(self) -> None:
        wait_for_stop(self._done)

    def stop_on_signals(self) -> None:
        stop_on_signals(self.stop, f"stopping {self.count} serving processes")
