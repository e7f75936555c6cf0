"""The message cache on a growing conversation: Measure and Assemble, cache on vs off.

An agent's step resends the whole history plus one new message. Two `contextsvc serve`
processes, one with `server.memo_bytes = 0`, get the same sequence of requests, each one
message longer than the last; prints p50/p99 per server and the ratio.
Usage: python bench/bench_message_cache.py [--size 1250000] [--steps 40]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from server_process import serve  # noqa: E402

from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402


def start_server(*args):
    return serve("--no-metrics", *args)


def steps(size: int, n: int):
    """n requests, each the previous one plus one new user message."""
    conv = workload.conversation(size)
    model = workload.measure_request(10_000).model
    for k in range(n):
        conv.messages.append(pb.Message(id=f"zz{k:04d}", role=pb.ROLE_USER, parts=[
            pb.Part(id=f"zz{k:04d}p", text=pb.TextPart(text=f"step {k}: go on with the refactor " * 20))]))
        c = pb.Conversation()
        c.CopyFrom(conv)
        yield c, model


def run(port, requests, method):
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20),
                                                            ("grpc.max_receive_message_length", 64 << 20)]) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        call = stub.Measure if method == "Measure" else stub.Assemble
        make = pb.MeasureRequest if method == "Measure" else pb.AssembleRequest
        times = []
        for conv, model in requests:
            req = make(conversation=conv, model=model)
            t = time.perf_counter()
            call(req, timeout=60)
            times.append((time.perf_counter() - t) * 1000)
    times = times[1:]  # the first request fills the cache
    return statistics.median(times), sorted(times)[int(0.99 * (len(times) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1_250_000)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:  # the config is read at start: it can go after
        off_cfg = Path(tmp) / "nocache.toml"
        off_cfg.write_text("[server]\nmemo_bytes = 0\n")
        on, on_port = start_server()
        off, off_port = start_server("--config", str(off_cfg))
    try:
        requests = list(steps(args.size, args.steps))
        print(f"{args.size:,} B conversation, {args.steps} steps, each one message longer")
        for method in ("Measure", "Assemble"):
            a = run(on_port, requests, method)
            b = run(off_port, requests, method)
            print(f"{method:8} cache on  p50 {a[0]:7.1f} ms p99 {a[1]:7.1f} ms | cache off p50 {b[0]:7.1f} ms "
                  f"p99 {b[1]:7.1f} ms | off/on {b[0] / a[0]:.2f}x")
    finally:
        for p in (on, off):
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()
