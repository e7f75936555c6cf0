"""Measure over loopback on a ~1 MB history beside the reference agent's own sizing of the same
step in Node (reference_size.js: JSON.stringify of the lowered messages, chars / 4), in one run.

The history is bench_step.py's ~1 MB conversation grown by one step per call (--steps calls).
Measure: each step's request serialized beforehand, sent as bytes to a real `contextsvc serve`
process (metrics on) over loopback, the first call unmeasured (the history is seen once, as the
session's earlier steps would have), the median round trip of the others. The reference: the
same steps sized in process from its message list, the median of a run before and a run after
the loopback one (so a drift of the shared machine falls on both). The target is a ratio of at
most 1.0.
Usage: python bench/bench_reference.py [--steps 40]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import BIG_TEXT, grown  # noqa: E402
from server_process import serve  # noqa: E402

MEASURE = "/contextsvc.v1.ContextService/Measure"
NODE_SCRIPT = Path(__file__).with_name("reference_size.js")


def reference_input(requests: list) -> dict:
    """What reference_size.js reads: the last step's messages, each step's message count, the
    system texts and the tool definitions as the reference counts them."""
    last = requests[-1]
    return {"messages": MessageToDict(last.conversation)["messages"],
            "steps": [len(r.conversation.messages) for r in requests],
            "system": [t for t in (last.system.soul, last.system.agent_prompt) if t],
            "tools": [{"name": t.name, "description": t.description, "inputSchema": json.loads(t.input_schema_json)}
                      for t in last.tools]}


def reference(path: str) -> dict:
    done = subprocess.run(["node", str(NODE_SCRIPT), path], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def loopback(wires: list) -> tuple[float, int]:
    """(median ms of Measure over loopback, the last response's size)."""
    proc, port = serve("--metrics-port", "0")
    try:
        opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
            call = ch.unary_unary(MEASURE)  # bytes in, bytes out: the request is serialized beforehand
            call(wires[0], timeout=60)
            times = []
            for wire in wires[1:]:
                t = time.perf_counter()
                response = call(wire, timeout=60)
                times.append((time.perf_counter() - t) * 1000)
    finally:
        proc.terminate()
        proc.wait(30)
    return statistics.median(times), len(response)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    requests = grown(workload.measure_request(BIG_TEXT), args.steps)
    wires = [r.SerializeToString() for r in requests]
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="reference-") as f:
        json.dump(reference_input(requests), f)
        f.flush()
        before = reference(f.name)
        measure_ms, _ = loopback(wires)
        after = reference(f.name)
    node_ms = statistics.median(before["ms"][1:] + after["ms"][1:])
    print(f"history: {len(wires[-1]):,} B request, {len(requests[-1].conversation.messages)} messages, "
          f"{args.steps} steps; the reference's figure {after['chars']:,} chars, estimate {after['estimate']:,}")
    print(f"reference (Node, in process, lowering + JSON.stringify + chars/4): p50 {node_ms:7.2f} ms "
          f"(runs {before['median_ms']:.2f}, {after['median_ms']:.2f})")
    print(f"Measure over loopback (request bytes prepared):                   p50 {measure_ms:7.2f} ms")
    print(f"Measure / reference: {measure_ms / node_ms:.2f}x (target at most 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
