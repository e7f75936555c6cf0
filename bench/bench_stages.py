"""Where a 1 MB Measure step's time goes, by stage, with the floor of the same request beside it.

The history is bench_step.py's ~1 MB conversation grown by one step per call (--steps calls, the
first unmeasured: the memo has seen the history, as at a session's later steps). In process, the
servicer's Measure from the request bytes, each stage timed by wrapping the function that does
it (the code that runs is the server's own):
  parse        MeasureRequest.FromString of the bytes (the transport's parse)
  conversion   rpc.conversion.step_input: protobuf -> core types (digests for the memo)
  validation   step.check: the request's own checks
  lowering     step.run.build: the lowered request from the memo, breakpoints, element lengths
  figures      step.run.figures: every estimate of the request
  decision     step.run.decide
  response     rpc.conversion.measure_response and its serialization
  other        the rest of the in-process call (plan, inject, output budget, body bytes)
  transport    Measure over loopback (a real server, request bytes prepared) minus in process
Steps back to back in process find their data in the processor's caches; in a server the
transport's copies have filled them between two steps of a caller. The same steps are timed
again with the caches disturbed before each: part of "transport" is that difference.
Medians per stage over the steps. The floor: the parse above, SHA-256 of the request bytes, and
the compiled byte count of the body (native.json_size of the Assemble body of the last step).
Usage: python bench/bench_stages.py [--steps 40]
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_reference import loopback  # noqa: E402
from bench_step import BIG_TEXT, assemble_of, grown  # noqa: E402

from contextsvc import config, native, step  # noqa: E402
from contextsvc.rpc import conversion, servicer  # noqa: E402
from contextsvc.serving_process import set_policies  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402

step_run = importlib.import_module("contextsvc.step.run")  # the package's `run` is the function

# (stage, module, attribute): where the servicer's call finds the function that does the stage
WRAPPED = (("conversion", conversion, "step_input"), ("validation", step, "check"),
           ("lowering", step_run, "build"), ("figures", step_run, "figures"),
           ("decision", step_run, "decide"), ("response", conversion, "measure_response"))


_spent = None  # ms of each stage of the step being timed, once the stages are wrapped


def timed_stages() -> collections.Counter:
    """The counter each stage's time (in ms) adds to: the stages' functions wrapped at the first
    call."""
    global _spent
    if _spent is not None:
        return _spent
    spent = _spent = collections.Counter()
    for stage, module, name in WRAPPED:
        original = getattr(module, name)

        def wrapper(*args, _original=original, _stage=stage, **kwargs):
            t = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_stage] += (time.perf_counter() - t) * 1000

        setattr(module, name, wrapper)
    return spent


# what a server's transport copies between two steps of one caller (a megabyte request and its
# response, each through several buffers), written and read again before a step when disturbed
DISTURB_BYTES = 16 << 20


def in_process(wires: list, disturbed: bool = False) -> dict:
    """{stage: [ms per step]} of the servicer's Measure from each request's bytes, under the
    serving process's policies (cli.serve sets them: the step runs as there). disturbed:
    the processor's caches are filled with other bytes before each step, as a server's transport
    fills them between one step and the next (steps back to back find theirs still there)."""
    set_policies()
    scratch = bytearray(DISTURB_BYTES) if disturbed else None
    svc = servicer.ContextService(config.Config())
    spent = timed_stages()
    per_stage = collections.defaultdict(list)

    parse = conversion.parser(pb.MeasureRequest, svc.memo)  # the server's: the message with its bytes

    def measure(wire: bytes) -> None:
        t = time.perf_counter()
        request = parse(wire)
        spent["parse"] += (time.perf_counter() - t) * 1000
        response = svc.Measure(request, None)
        r = time.perf_counter()
        response.SerializeToString()
        spent["response"] += (time.perf_counter() - r) * 1000
        spent["total"] += (time.perf_counter() - t) * 1000

    measure(wires[0])  # the history seen once
    for wire in wires[1:]:
        if scratch is not None:
            scratch[::4096] = bytes(len(range(0, DISTURB_BYTES, 4096)))
            bytes(scratch)
        spent.clear()
        measure(wire)
        for stage, ms in spent.items():
            per_stage[stage].append(ms)
        per_stage["other"].append(spent["total"] - sum(v for k, v in spent.items() if k != "total"))
    return per_stage


def floor(wire: bytes, body: bytes) -> dict:
    """Median ms of the floor's three operations on the last step's request and body."""
    doc = json.loads(body)

    def median_of(fn) -> float:
        times = []
        for _ in range(20):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    return {"protobuf parse": median_of(lambda: pb.MeasureRequest.FromString(wire)),
            "SHA-256 of the request bytes": median_of(lambda: hashlib.sha256(wire).digest()),
            "compiled byte count of the body": median_of(lambda: native.json_size(doc))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    requests = grown(workload.measure_request(BIG_TEXT), args.steps)
    wires = [r.SerializeToString() for r in requests]
    over_loopback, _ = loopback(wires)
    stages = in_process(wires)
    disturbed = statistics.median(in_process(wires, disturbed=True)["total"])
    body = servicer.ContextService(config.Config()).Assemble(assemble_of(requests[-1]), None).body
    base = floor(wires[-1], body)
    total = statistics.median(stages["total"])
    print(f"hot path {native.IMPLEMENTATION}; {len(wires[-1]):,} B request, {len(body):,} B body, "
          f"{len(requests[-1].conversation.messages)} messages; medians over {args.steps - 1} steps (ms)")
    order = ("parse", "conversion", "validation", "lowering", "figures", "decision", "response", "other")
    for stage in order:
        print(f"  {stage:12} {statistics.median(stages[stage]):7.2f}")
    print(f"  {'in process':12} {total:7.2f}   (the median of the whole call: medians need not add up)")
    print(f"  {'transport':12} {over_loopback - total:7.2f}   (Measure over loopback {over_loopback:.2f})")
    print(f"  in process with the caches disturbed before each step ({DISTURB_BYTES >> 20} MiB written "
          f"and read, as a server's transport does): {disturbed:.2f}")
    print("floor of the same request (ms):")
    for name, ms in base.items():
        print(f"  {name:32} {ms:6.2f}")
    print(f"  {'sum':32} {sum(base.values()):6.2f}   Measure over loopback is "
          f"{over_loopback / sum(base.values()):.1f}x of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
