"""A real Redis (Debian's `redis-server`) on a loopback port of its own, run with the shipped
deploy/redis/redis.conf: append-only file on, noeviction; and a Redis Sentinel watching one.
Missing binary: the test fails."""
from __future__ import annotations

import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest

from contextsvc.truncation import StoreUnavailable

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "redis" / "redis.conf"
START_SECONDS = 15.0


def free_port() -> int:
    return free_ports(1)[0]


# every port free_ports handed out in this process: the kernel may hand a port out again as
# soon as its socket closes, before the server it was chosen for has bound it
_HANDED_OUT: set = set()


def free_ports(n: int) -> list[int]:
    """n distinct free ports, none handed out before in this process: each socket stays bound
    until all are chosen, and a port an earlier call chose (its server may not have bound it
    yet: a Redis's own port is chosen apart from its TLS port) is passed over."""
    sockets, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                ports.append(port)
        _HANDED_OUT.update(ports)
        return ports
    finally:
        for s in sockets:
            s.close()


class RedisServer:
    """start() / kill() / stop() keep the port and the data directory, so a restart reloads
    what was written before (the append-only file)."""

    def __init__(self, directory: pathlib.Path, *args: str):
        """args: more redis-server options (``--replicaof 127.0.0.1 6379``)."""
        self.args = args
        binary = shutil.which("redis-server")
        assert binary, "redis-server not installed: run .ci/deps (the README's test command does)"
        self.binary = binary
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.log = open(self.dir / "redis.log", "ab")
        # a copy: Sentinel makes a Redis it reconfigures rewrite its config file
        config = self.dir / "redis.conf"
        config.write_text(CONFIG.read_text())
        self.proc = subprocess.Popen(
            [self.binary, str(config), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--daemonize", "no", *self.args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while not self.ping():
            assert self.proc.poll() is None, (self.dir / "redis.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.05)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up, whether or not it asks a password
        except OSError:
            return False

    def _end(self, sig) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()

    def pause(self) -> None:
        """SIGSTOP: a hung Redis. The kernel still accepts connections; nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, only what the append-only file already holds survives."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)


class SentinelServer(RedisServer):
    """`redis-server --sentinel` (Debian's redis-sentinel is the same binary) watching the master
    `name` at 127.0.0.1:master_port with quorum 1, marking it down after down_after_ms."""

    def __init__(self, directory: pathlib.Path, name: str, master_port: int, down_after_ms: int = 1000,
                 more: str = ""):
        """more: more lines of sentinel.conf (a password, TLS)."""
        super().__init__(directory)
        self.name = name
        # Sentinel rewrites its config file: one of its own, in its directory
        self.config = self.dir / "sentinel.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {name} 127.0.0.1 {master_port} 1\n"
            f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
            f"sentinel failover-timeout {name} 10000\n{more}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "SentinelServer":
        self.log = open(self.dir / "sentinel.log", "ab")
        self.proc = subprocess.Popen([self.binary, str(self.config), "--sentinel", "--daemonize", "no"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while not self.ping():
            assert self.proc.poll() is None, (self.dir / "sentinel.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "redis sentinel did not answer PING"
            time.sleep(0.05)
        return self


def refused_within(call, pattern: str, seconds: float = 2.0) -> None:
    """call() is refused StoreUnavailable (its message matching pattern) within seconds: what a
    store call meets while Redis is out of reach."""
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=pattern):
        call()
    assert time.monotonic() - started < seconds
