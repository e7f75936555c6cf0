"""A step of one long turn on Responses with encrypted reasoning, against the same turn without it,
in process.

An agent running on its own makes hundreds of steps in one turn; OpenAI counts the turn's
reasoning items within it, so the figures read each step's reported reasoning for the items the
body sends (step.figures.held_reasoning), a walk of the turn. Each call measures the ~1 MB
conversation of workload.measure_request turned into one turn (its first user message, then its
assistant messages as the turn's steps) grown by one more step, with the memo; with reasoning,
each step opens with an encrypted item of --item-chars characters and reports --reasoning tokens.
Printed: the median of the later calls with and without reasoning, and their ratio.
Usage: python bench/bench_long_turn.py [--text-bytes 800000] [--steps 14] [--item-chars 400]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402

from in_process import timed  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402


def one_turn(text_bytes: int, reasoning: int, item_chars: int) -> pb.MeasureRequest:
    """workload's request as one turn of gpt-5 on Responses: its first user message, then its
    assistant messages, each opening with an encrypted reasoning item (reasoning > 0)."""
    request = workload.measure_request(text_bytes)
    request.model.provider, request.model.id = pb.PROVIDER_OPENAI_RESPONSES, "gpt-5"
    messages = list(request.conversation.messages)
    steps = [messages[0]] + [x for x in messages[1:] if x.role == pb.ROLE_ASSISTANT]
    del request.conversation.messages[:]
    for i, msg in enumerate(steps):
        if msg.role == pb.ROLE_ASSISTANT and reasoning:
            msg.parts.insert(0, pb.Part(id=f"r{i}", reasoning=pb.ReasoningPart(
                redacted_data="gAAAAB" + "x" * item_chars)))
            msg.usage.reasoning = reasoning
        request.conversation.messages.append(msg)
    return request


def grown_steps(request: pb.MeasureRequest, steps: int) -> list:
    """request and the same turn grown by 1..steps-1 more steps, serialized."""
    last = request.conversation.messages[-1]
    out = []
    for k in range(steps):
        r = pb.MeasureRequest()
        r.CopyFrom(request)
        for j in range(k):
            step = r.conversation.messages.add()
            step.CopyFrom(last)
            step.id = f"step{j}"
            for part in step.parts:
                part.id += f"-{j}"
        out.append(r.SerializeToString())
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--text-bytes", type=int, default=800_000)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--item-chars", type=int, default=400)
    args = ap.parse_args()
    rows = []
    for reasoning in (0, 500):
        request = one_turn(args.text_bytes, reasoning, args.item_chars)
        requests = grown_steps(request, args.steps)
        rows.append(timed(requests)[1])
        print(f"one turn of {len(request.conversation.messages)} messages, {len(requests[-1]) / 1e6:.2f} MB, "
              f"{'with' if reasoning else 'without'} reasoning items: later median {rows[-1]:.2f} ms")
    print(f"with / without: {rows[1] / rows[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
