"""One agent step on a large history against a small one (issue 19): Measure and Assemble over
loopback on a ~1 MB conversation and a ~10 KB one, side by side in one run, medians; and
in-process Measure of the ~1 MB one. Each call sends the conversation grown by one more step
(an assistant answer and a user message), so no whole-response cache can win.
Also the floor: parsing, hashing and the compiled byte count of the same request.
Usage: python bench/bench_step.py [--steps 40] [--config memo_off.toml]
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from server_process import serve  # noqa: E402

from contextsvc import config, native  # noqa: E402
from contextsvc.rpc import servicer  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402

# text bytes of workload.conversation for a body of about 1 MB (under the payload guard's
# 1.25 MB, which would prune: another path)
BIG_TEXT = 800_000
SMALL_TEXT = 10_000


def grown(base: pb.MeasureRequest, steps: int) -> list:
    """base grown by 1..steps steps, one request each."""
    out = []
    req = pb.MeasureRequest()
    req.CopyFrom(base)
    for k in range(steps):
        req.conversation.messages.append(pb.Message(
            id=f"step_{k}_a", role=pb.ROLE_ASSISTANT, time_completed_ms=1, usage=pb.Usage(input=9000 + k, output=50),
            parts=[pb.Part(id=f"s{k}a", text=pb.TextPart(text=f"Step {k}: read the next file."))]))
        req.conversation.messages.append(pb.Message(
            id=f"step_{k}_u", role=pb.ROLE_USER, parts=[pb.Part(id=f"s{k}u", text=pb.TextPart(text=f"go on {k}"))]))
        r = pb.MeasureRequest()
        r.CopyFrom(req)
        out.append(r)
    return out


def assemble_of(r: pb.MeasureRequest) -> pb.AssembleRequest:
    return pb.AssembleRequest(conversation=r.conversation, model=r.model, tools=r.tools, system=r.system)


def timed(call, reqs) -> float:
    call(reqs[0])  # warm: the history is seen once, as the session's earlier steps would have
    times = []
    for r in reqs[1:]:
        t = time.perf_counter()
        call(r)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--config", default="")
    args = ap.parse_args()
    big = grown(workload.measure_request(BIG_TEXT), args.steps)
    small = grown(workload.measure_request(SMALL_TEXT), args.steps * 5)
    extra = ("--config", args.config) if args.config else ()
    proc, port = serve("--no-metrics", *extra)
    try:
        opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            body = stub.Assemble(assemble_of(big[-1]), timeout=60).body
            print(f"hot path {native.IMPLEMENTATION}; big: {big[-1].ByteSize():,} B request, {len(body):,} B body, "
                  f"{len(big[-1].conversation.messages)} msgs; small: {small[-1].ByteSize():,} B")
            for name, call in (("Measure", stub.Measure), ("Assemble", stub.Assemble)):
                conv = (lambda r: r) if name == "Measure" else assemble_of
                s = timed(lambda r: call(conv(r), timeout=60), small)
                b = timed(lambda r: call(conv(r), timeout=60), big)
                print(f"{name:8} loopback p50: 10 KB {s:7.2f} ms   1 MB {b:7.2f} ms   ratio {b / s:5.1f}x")
    finally:
        proc.terminate()
        proc.wait(30)
    cfg = config.load(args.config) if args.config else config.Config()
    svc = servicer.ContextService(cfg)
    print(f"in-process Measure 1 MB p50: {timed(lambda r: svc.Measure(r, None), big):7.2f} ms")
    wire = big[-1].SerializeToString()
    parse = timed(lambda r: pb.MeasureRequest.FromString(wire), big[:20])
    hashing = timed(lambda r: [hashlib.blake2b(x.SerializeToString(), digest_size=16).digest()
                               for x in r.conversation.messages], big[:20])
    raw = hashlib.sha256
    sha = timed(lambda r: raw(wire).digest(), big[:20])
    import json
    doc = json.loads(body)
    size = timed(lambda r: native.json_size(doc), big[:20])
    print(f"floor: parse {parse:.2f} ms, serialize+blake2b per message {hashing:.2f} ms, sha256 of the request "
          f"{sha:.2f} ms, byte count of the body {size:.2f} ms")


if __name__ == "__main__":
    main()
