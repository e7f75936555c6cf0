"""What an honest client sees of a server under attack: a Health/Check and a small Measure,
each sent over and over on a channel of its own, with their latencies, and the server's RSS."""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers import convo
from server_process import rss_mb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

TIMEOUT = 5.0  # a call that takes longer counts as failed, at this latency


@dataclass
class Calls:
    latencies: list = field(default_factory=list)  # seconds, TIMEOUT for a failed call
    failed: int = 0
    codes: list = field(default_factory=list)  # the status of each failed call

    def summary(self) -> str:
        if not self.latencies:
            return "no calls"
        ms = sorted(x * 1000 for x in self.latencies)
        return (f"{len(ms)} calls, p50 {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms, "
                f"{self.failed} failed" + (f" ({', '.join(self.codes)})" if self.codes else ""))

    def worst(self) -> float:
        return max(self.latencies, default=0.0)


class Probe:
    """Runs the two kinds of call against port until stopped; rss_peak follows pid's RSS."""

    def __init__(self, port: int, pid: int | None = None, period: float = 0.1):
        self.check, self.measure = Calls(), Calls()
        self.rss_start = rss_mb(pid) if pid else 0.0
        self.rss_peak = self.rss_start
        self._port, self._pid, self._period = port, pid, period
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(kind,), daemon=True)
                         for kind in ("check", "measure")]

    def __enter__(self) -> "Probe":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(TIMEOUT + 5)

    def _run(self, kind: str) -> None:
        calls = getattr(self, kind)
        with grpc.insecure_channel(f"127.0.0.1:{self._port}") as ch:
            if kind == "check":
                call = lambda: health_pb2_grpc.HealthStub(ch).Check(  # noqa: E731
                    health_pb2.HealthCheckRequest(), timeout=TIMEOUT)
            else:
                request = convo.measure_request()
                call = lambda: pb_grpc.ContextServiceStub(ch).Measure(request, timeout=TIMEOUT)  # noqa: E731
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    call()
                    calls.latencies.append(time.monotonic() - start)
                except grpc.RpcError as e:
                    calls.failed += 1
                    calls.codes.append(f"{e.code().name} after {time.monotonic() - start:.2f} s")
                    calls.latencies.append(TIMEOUT)
                if self._pid and kind == "check":
                    self.rss_peak = max(self.rss_peak, rss_mb(self._pid))
                self._stop.wait(self._period)

    def report(self, attack: str) -> str:
        return (f"{attack}: Health/Check {self.check.summary()}; small Measure {self.measure.summary()}; "
                f"RSS {self.rss_start:.0f} MB before, {self.rss_peak:.0f} MB at peak")
