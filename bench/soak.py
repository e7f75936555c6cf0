"""Soak: a real `contextsvc serve` process under a steady mixed load, loopback.

Every RPC in the mix (Measure, Assemble, Prune, Compact, TruncateToolOutput + ReadTruncated) on
conversations of 10 KB to 1 MB, from a few concurrent callers. Reports, per minute (or per
--interval), the calls, errors by code, the median and p99 latency, and the server's RSS; at the
end the latency drift (last interval's median over the first's) and the RSS growth after warm-up.

    PYTHONPATH=server python bench/soak.py                # 10 minutes
    PYTHONPATH=server python bench/soak.py --seconds 60 --interval 10

tests/test_soak.py runs the 60-second version through run().
"""
from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402

STARTED = re.compile(r"serving gRPC on 127\.0\.0\.1:(\d+)")
MODEL = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                 limits=pb.ModelLimits(context=200_000, output=64_000))
SMALL_MODEL = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                       limits=pb.ModelLimits(context=30_000, output=4_000))


@dataclass
class Interval:
    start: float
    latencies: list = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    rss_kib: int = 0

    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else 0.0

    def p99_ms(self) -> float:
        if not self.latencies:
            return 0.0
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000


@dataclass
class SoakResult:
    intervals: list
    errors: Counter
    calls: int
    rss_start_kib: int  # after warm-up (the first interval)
    rss_end_kib: int
    rss_max_kib: int

    @property
    def latency_drift(self) -> float:
        first, last = self.intervals[0].median_ms(), self.intervals[-1].median_ms()
        return last / first if first else 0.0


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(store: str):
    cfg = Path(store) / "soak.toml"
    cfg.write_text(f'[truncation]\ndirectory = "{Path(store) / "outputs"}"\n')
    cmd = [sys.executable, "-m", "contextsvc", "serve", "--port", "0", "--no-metrics", "--config", str(cfg)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = STARTED.search(line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError("server did not start")


def mix():
    """The calls of one round, as (name, callable(stub)); built once, sent many times."""
    small, medium, large = (workload.conversation(n, seed=s) for n, s in ((10_000, 1), (100_000, 2), (1_000_000, 3)))
    log = "".join(f"line {i}: ok\n" for i in range(5_000))

    def truncate_and_read(stub):
        r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=log), timeout=30)
        stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=r.output_id, offset=100, limit=50), timeout=30)

    return [
        ("Measure", lambda s: s.Measure(pb.MeasureRequest(conversation=small, model=MODEL, exact=True), timeout=30)),
        ("Measure", lambda s: s.Measure(pb.MeasureRequest(conversation=medium, model=MODEL), timeout=30)),
        ("Assemble", lambda s: s.Assemble(pb.AssembleRequest(conversation=medium, model=MODEL, step=1), timeout=30)),
        ("Prune", lambda s: s.Prune(pb.PruneRequest(conversation=medium, reason=pb.PRUNE_REASON_POST_COMPACTION),
                                    timeout=30)),
        ("Compact", lambda s: s.Compact(pb.CompactRequest(conversation=medium, model=SMALL_MODEL), timeout=60)),
        ("Measure", lambda s: s.Measure(pb.MeasureRequest(conversation=large, model=MODEL), timeout=60)),
        ("TruncateToolOutput", truncate_and_read),
    ]


def run(seconds: float = 600, interval: float = 60, callers: int = 4, out=print) -> SoakResult:
    store = tempfile.mkdtemp(prefix="contextsvc-soak-")
    proc, port = start(store)
    calls = mix()
    intervals = [Interval(time.monotonic())]
    lock = threading.Lock()
    stop = threading.Event()
    total = [0]

    def caller(k: int):
        ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
        stub = pb_grpc.ContextServiceStub(ch)
        i = k
        while not stop.is_set():
            name, fn = calls[i % len(calls)]
            i += 1
            t = time.perf_counter()
            code = None
            try:
                fn(stub)
            except grpc.RpcError as e:
                code = f"{name}:{e.code().name}"
            dt = time.perf_counter() - t
            with lock:
                cur = intervals[-1]
                total[0] += 1
                if code:
                    cur.errors[code] += 1
                else:
                    cur.latencies.append(dt)
        ch.close()

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(callers)]
    for t in threads:
        t.start()
    out(f"soak: {seconds:.0f} s, {callers} callers, server pid {proc.pid}")
    out(f"{'t (s)':>6} {'calls':>6} {'errors':>6} {'median ms':>10} {'p99 ms':>8} {'RSS MiB':>8}")
    end = time.monotonic() + seconds
    began = time.monotonic()
    try:
        while time.monotonic() < end:
            time.sleep(min(interval, max(0.0, end - time.monotonic())))
            with lock:
                cur = intervals[-1]
                cur.rss_kib = rss_kib(proc.pid)
                if time.monotonic() < end - 1:
                    intervals.append(Interval(time.monotonic()))
            out(f"{cur.start - began + interval:6.0f} {len(cur.latencies) + sum(cur.errors.values()):6d} "
                f"{sum(cur.errors.values()):6d} {cur.median_ms():10.1f} {cur.p99_ms():8.1f} {cur.rss_kib / 1024:8.1f}")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        shutil.rmtree(store, ignore_errors=True)
    done = [x for x in intervals if x.rss_kib]
    errors = sum((x.errors for x in intervals), Counter())
    result = SoakResult(done, errors, total[0], done[0].rss_kib, done[-1].rss_kib, max(x.rss_kib for x in done))
    out(f"calls {result.calls}, errors {dict(errors) or 0}, latency drift (last/first median) "
        f"{result.latency_drift:.2f}x, RSS after warm-up {result.rss_start_kib / 1024:.1f} MiB -> "
        f"{result.rss_end_kib / 1024:.1f} MiB (max {result.rss_max_kib / 1024:.1f} MiB)")
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--interval", type=float, default=60)
    p.add_argument("--callers", type=int, default=4)
    a = p.parse_args()
    r = run(a.seconds, a.interval, a.callers)
    sys.exit(1 if r.errors else 0)


if __name__ == "__main__":
    main()
