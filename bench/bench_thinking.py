"""A step of a session with signed thinking against the same session without it, in process.

Signed thinking is opaque state: the figures read a lowering of their own (placeholders for the
signatures; for Claude before Opus 4.5, without the thinking of earlier turns), and the cost of a
step should follow what is new there too. Each call measures the ~1 MB conversation of
workload.measure_request grown by one more step (as bench_step.py does), with the memo; with
--thinking-chars N every assistant message opens with N characters of signed thinking. Printed per
model: the first call (nothing kept) and the median of the later ones, with and without thinking,
and their ratio.
Usage: python bench/bench_thinking.py [--text-bytes 800000] [--steps 12] [--thinking-chars 920]
"""
from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import grown  # noqa: E402

from in_process import timed  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402

# Claude that has its earlier turns' thinking stripped, and one that keeps it
MODELS = ("claude-sonnet-4-5", "claude-opus-4-6")
SIGNATURE = base64.b64encode(bytes(300)).decode()


def with_thinking(request: pb.MeasureRequest, chars: int) -> pb.MeasureRequest:
    """request with chars characters of signed thinking opening each assistant message."""
    out = pb.MeasureRequest()
    out.CopyFrom(request)
    thought = ("Weigh the options before reading the module. " * (chars // 45 + 1))[:chars]
    for i, msg in enumerate(out.conversation.messages):
        if msg.role == pb.ROLE_ASSISTANT:
            msg.parts.insert(0, pb.Part(id=f"th{i}", reasoning=pb.ReasoningPart(text=thought, signature=SIGNATURE)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--text-bytes", type=int, default=800_000)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--thinking-chars", type=int, default=920)
    args = ap.parse_args()
    print(f"in-process Measure, ~{args.text_bytes // 1000} KB of text grown by 1 step a call, {args.steps} calls; "
          f"thinking: {args.thinking_chars} characters and a signature per assistant message")
    for model_id in MODELS:
        base = workload.measure_request(args.text_bytes)
        base.model.id = model_id
        rows = []
        for thinking in (False, True):
            req = with_thinking(base, args.thinking_chars) if thinking else base
            requests = [r.SerializeToString() for r in grown(req, args.steps)]
            first, later = timed(requests)
            rows.append(later)
            print(f"  {model_id:18} {'with' if thinking else 'without':7} thinking {len(requests[-1]) / 1e6:5.2f} MB: "
                  f"first {first:7.1f} ms, later median {later:6.2f} ms")
        print(f"  {model_id:18} with / without thinking, later steps: {rows[1] / rows[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
