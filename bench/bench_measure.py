"""Measure over loopback against a real `contextsvc serve` process.

Prints p50/p99 latency for a 10 KB and a 1.25 MB conversation, and requests per second with 16
concurrent callers on the 10 KB one. Also the in-process core time, to show the RPC overhead.
Usage: python bench/bench_measure.py [--seconds 5] [--processes 2]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from server_process import serve  # noqa: E402

from contextsvc import config, measure, native  # noqa: E402
from contextsvc.rpc import conversion  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402


def start_server(processes: int = 1):
    return serve("--no-metrics", "--processes", str(processes))


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def latency(stub, req, n):
    stub.Measure(req, timeout=30)  # warm up
    times = []
    for _ in range(n):
        t = time.perf_counter()
        stub.Measure(req, timeout=30)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), pct(times, 0.99)


def in_process(req, n):
    cfg = config.Config()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        inp = measure.MeasureInput(conversion.conversation(req.conversation), conversion.model(req.model),
                                   conversion.tools(req.tools), conversion.system(req.system),
                                   conversion.compaction_settings(req.compaction))
        measure.measure(inp, cfg)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def throughput(port, req, callers, seconds):
    count, errors = [0] * callers, [0] * callers
    stop = time.perf_counter() + seconds

    def worker(k):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            while time.perf_counter() < stop:
                try:
                    stub.Measure(req, timeout=30)
                    count[k] += 1
                except grpc.RpcError:
                    errors[k] += 1

    t = time.perf_counter()
    with futures.ThreadPoolExecutor(callers) as pool:
        list(pool.map(worker, range(callers)))
    return sum(count) / (time.perf_counter() - t), sum(errors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--processes", type=int, default=1, help="serving processes (server.processes)")
    args = ap.parse_args()
    proc, port = start_server(args.processes)
    try:
        small, big = workload.measure_request(10_000), workload.measure_request(1_250_000)
        print(f"hot path: {native.IMPLEMENTATION}; requests: 10 KB = {small.ByteSize()} B "
              f"({len(small.conversation.messages)} msgs), 1.25 MB = {big.ByteSize()} B "
              f"({len(big.conversation.messages)} msgs)")
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for name, req, n in (("10 KB", small, args.repeats * 5), ("1.25 MB", big, args.repeats)):
                p50, p99 = latency(stub, req, n)
                core = in_process(req, max(20, n // 5))
                print(f"Measure {name:>7} over loopback: p50 {p50:7.3f} ms  p99 {p99:7.3f} ms   "
                      f"in-process core p50 {core:7.3f} ms")
        rps, errors = throughput(port, small, 16, args.seconds)
        print(f"Measure 10 KB, 16 concurrent callers, {args.seconds:.0f} s, {args.processes} serving "
              f"process(es): {rps:,.0f} requests/s, {errors} errors")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
