"""The cost of a step by wire format: Measure and Assemble of a ~10 KB and a ~1 MB history, each
call the session's conversation grown by one step, for every provider format, in process.

bench_step.py holds the issue's targets for one format (Anthropic's) over loopback; a format's
own lowering, markers and cache state can add work that grows with the history only there (a
grouped cache state did: a Python loop over every element of a Responses body at every step).
Here each format's session runs through the server's own parse and servicer (the memo on,
responses serialized, as `serve` runs them), the two sizes interleaved step by step, and each
call is timed on its own (process CPU time). Printed per format and RPC: the first call of each
size (the history seen for the first time; the format's tokenizer loaded before, by another
session) and the median of the later ones, with the 1 MB to 10 KB ratio of the medians. The
~1 MB history is bench_step's, under the payload guard in every format.
Usage: python bench/bench_formats.py [--steps 30] [--formats anthropic,responses]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import BIG_TEXT, SMALL_TEXT, assemble_of, grown  # noqa: E402

from contextsvc import config  # noqa: E402
from contextsvc.rpc import conversion, servicer  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402

# format -> (provider, a model of it)
FORMATS = {
    "anthropic": (pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
    "openai-chat": (pb.PROVIDER_OPENAI, "gpt-4.1"),
    "responses": (pb.PROVIDER_OPENAI_RESPONSES, "gpt-5"),
    "compatible": (pb.PROVIDER_OPENAI_COMPATIBLE, "qwen3-coder"),
    "bedrock": (pb.PROVIDER_BEDROCK, "anthropic.claude-sonnet-4-5"),
    "gemini": (pb.PROVIDER_GEMINI, "gemini-2.5-pro"),
}
RPCS = {"Measure": (pb.MeasureRequest, lambda r: r), "Assemble": (pb.AssembleRequest, assemble_of)}


def session(provider: int, model_id: str, text_bytes: int, steps: int, make) -> list[bytes]:
    """The requests of one session, grown by one step each, serialized beforehand."""
    base = workload.measure_request(text_bytes)
    base.model.provider, base.model.id = provider, model_id
    base.conversation.session_id = f"{model_id}-{text_bytes}"
    return [make(r).SerializeToString() for r in grown(base, steps)]


def timed(fmt: str, rpc: str, steps: int) -> dict:
    """{size: (first call ms, median of the later calls ms)} of one format and RPC, the sizes'
    calls interleaved, each size on a servicer of its own (as two sessions of one server)."""
    provider, model_id = FORMATS[fmt]
    message_type, make = RPCS[rpc]
    warm = servicer.ContextService(config.Config())  # the format's tokenizer and tables loaded before
    first = session(provider, model_id, 2_000, 1, make)[0]
    warm.serialized(rpc)(conversion.parser(message_type, warm.memo)(first), None)
    sides = {}
    for size, text in (("10 KB", SMALL_TEXT), ("1 MB", BIG_TEXT)):
        service = servicer.ContextService(config.Config())
        sides[size] = (conversion.parser(message_type, service.memo), service.serialized(rpc),
                       session(provider, model_id, text, steps, make), [])
    for k in range(steps):
        for parse, call, requests, times in sides.values():
            t = time.process_time()
            call(parse(requests[k]), None)
            times.append((time.process_time() - t) * 1e3)
    return {size: (times[0], statistics.median(times[1:])) for size, (_, _, _, times) in sides.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--formats", default=",".join(FORMATS))
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps: at least 2 (the first call of each size is the history's first sight)")
    print(f"in process, each session grown by one step per call, {args.steps} calls a size; ms of CPU "
          "(first call / median of the rest)")
    for fmt in args.formats.split(","):
        for rpc in RPCS:
            t = timed(fmt, rpc, args.steps)
            (small_first, small), (big_first, big) = t["10 KB"], t["1 MB"]
            print(f"{fmt:12} {rpc:8}  10 KB {small_first:7.2f} / {small:5.2f}   1 MB {big_first:7.1f} / {big:5.2f}   "
                  f"1 MB / 10 KB {big / small:4.1f}x", flush=True)


if __name__ == "__main__":
    main()
