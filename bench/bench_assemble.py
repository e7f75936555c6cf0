"""Assemble: p50/p99 over loopback and in-process, with where the time goes.

Two workloads: a 1.25 MB conversation and 200 small messages. Phases (in-process): protobuf
conversion, lowering (history projection + provider format + cache markers), byte counting
(the compiled json_lengths walk), serialization of the body.
Usage: python bench/bench_assemble.py [--repeats 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_measure import pct, start_server  # noqa: E402

from contextsvc import assemble, breakpoints, config, conversation as m, native  # noqa: E402
from contextsvc.step import Plan, pieces, request  # noqa: E402
from contextsvc.rpc import conversion  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402


def assemble_request(target_bytes: int) -> pb.AssembleRequest:
    m = workload.measure_request(target_bytes)
    return pb.AssembleRequest(conversation=m.conversation, model=m.model, tools=m.tools, system=m.system,
                              editor=pb.EditorContext(current_time="2026-12-02T17:00:00+00:00", working_directory="/w"))


def small_messages(n=200) -> pb.AssembleRequest:
    req = assemble_request(1)
    msgs = []
    for i in range(n):
        role = pb.ROLE_USER if i % 2 == 0 else pb.ROLE_ASSISTANT
        msgs.append(pb.Message(id=f"msg_{i:05d}", role=role, time_completed_ms=1 if role == pb.ROLE_ASSISTANT else 0,
                               parts=[pb.Part(id=f"p{i}", text=pb.TextPart(text=f"short message number {i}"))]))
    req.conversation.ClearField("messages")
    req.conversation.messages.extend(msgs)
    return req


def phases(req, cfg, n):
    out = {"convert": [], "lower": [], "count": [], "serialize": [], "total": []}
    for _ in range(n):
        t0 = time.perf_counter()
        conv, mdl = conversion.conversation(req.conversation), conversion.model(req.model)
        tools, system = conversion.tools(req.tools), conversion.system(req.system)
        t1 = time.perf_counter()
        lowered = pieces.lower_request(conv, Plan.of(mdl, tools, system, m.CompactionSettings(), cfg)).lowered
        bps = breakpoints.choose(lowered, mdl.provider, tools, breakpoints.Policy(), 4, 3)
        breakpoints.place(lowered, mdl.provider, bps)
        t2 = time.perf_counter()
        for parent, key in lowered.lists:
            for e in parent[key]:
                native.json_lengths(e)
        t3 = time.perf_counter()
        request.Request(lowered, None, {}, bps).body_json()
        t4 = time.perf_counter()
        inp = assemble.AssembleInput(conv, mdl, tools, system, conversion.compaction_settings(req.compaction),
                                     editor=conversion.editor(req.editor))
        t5 = time.perf_counter()
        assemble.assemble(inp, cfg)
        t6 = time.perf_counter()
        for k, v in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, (t1 - t0) + (t6 - t5))):
            out[k].append(v * 1000)
    return {k: statistics.median(v) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    cfg = config.Config()
    proc, port = start_server()
    try:
        print(f"hot path: {native.IMPLEMENTATION}")
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20),
                                                                ("grpc.max_receive_message_length", 64 << 20)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for name, req in (("~1.2 MB", assemble_request(1_080_000)), ("200 small msgs", small_messages())):
                stub.Assemble(req, timeout=60)
                times = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    r = stub.Assemble(req, timeout=60)
                    times.append((time.perf_counter() - t) * 1000)
                ph = phases(req, cfg, max(5, args.repeats // 3))
                total = ph["total"]
                print(f"Assemble {name:>15} ({r.body_bytes:,} B body): loopback p50 {statistics.median(times):7.2f} ms "
                      f"p99 {pct(times, 0.99):7.2f} ms | in-process {total:7.2f} ms: "
                      + ", ".join(f"{k} {v:.2f} ms ({v / total:.0%})" for k, v in ph.items() if k != "total"))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
