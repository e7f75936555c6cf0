"""Sessions that together outgrow the memo, stepped in turn: a plain LRU beside the hold.

--sessions conversations of ~--size bytes each (their texts made distinct), each grown by one
step per turn, are measured round robin in process through the server's own parse and Measure
(the parse begins each step, as in `serve`), --steps turns each, under a memo of --memo-mib:
once with `server.memo_hold_seconds = 0` (a plain LRU: each step evicts the entries of the
session stepping next) and once with the shipped hold. Printed per side: CPU ms a step (mean,
p50, p90, from the third turn on), the memo's hit ratio and the entries it did not keep.
Usage: python bench/memo_sessions.py [--sessions 16] [--size 300000] [--memo-mib 96] [--steps 6]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import grown  # noqa: E402

from contextsvc import config  # noqa: E402
from contextsvc.rpc import conversion, servicer  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402


def sessions(count: int, size: int, steps: int) -> list[list[bytes]]:
    """Each session's requests, one per turn, serialized beforehand."""
    out = []
    for k in range(count):
        base = workload.measure_request(size)
        base.conversation.session_id = f"s{k}"
        for msg in base.conversation.messages:  # no message shared between sessions
            for part in msg.parts:
                if part.HasField("text"):
                    part.text.text = f"[{k}] " + part.text.text
        out.append([r.SerializeToString() for r in grown(base, steps)])
    return out


def run(requests: list[list[bytes]], memo_mib: int, hold: float) -> dict:
    cfg = config.Config()
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, memo_bytes=memo_mib << 20,
                                                              memo_hold_seconds=hold))
    svc = servicer.ContextService(cfg)
    parse = conversion.parser(pb.MeasureRequest, svc.memo)
    times = []
    for turn in range(len(requests[0])):
        for own in requests:
            t = time.process_time()
            svc.Measure(parse(own[turn]), None)
            if turn >= 2:  # the first turns fill the memo
                times.append((time.process_time() - t) * 1000)
    memo = svc.memo
    return {"mean": statistics.mean(times), "p50": statistics.median(times),
            "p90": statistics.quantiles(times, n=10)[-1], "hits": memo.hits / max(1, memo.hits + memo.misses),
            "refused": memo.refused}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--size", type=int, default=300_000, help="bytes of each session's history")
    ap.add_argument("--memo-mib", type=int, default=96)
    ap.add_argument("--steps", type=int, default=6, help="turns of each session")
    args = ap.parse_args()
    requests = sessions(args.sessions, args.size, args.steps)
    print(f"{args.sessions} sessions of {len(requests[0][0]):,} B request, {args.steps} turns each, "
          f"memo {args.memo_mib} MiB; CPU ms a step from the third turn on")
    shipped = config.ServerConfig().memo_hold_seconds
    for name, hold in (("plain LRU (hold 0)", 0.0), (f"hold {shipped:g} s", shipped)):
        r = run(requests, args.memo_mib, hold)
        print(f"  {name:20s} mean {r['mean']:6.1f}  p50 {r['p50']:6.1f}  p90 {r['p90']:6.1f}   "
              f"hit ratio {r['hits']:.2f}, entries not kept {r['refused']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
