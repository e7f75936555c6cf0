"""A step whose last user message gets an injection against the same step without one: in
process, Assemble on the ~1 MB conversation (bench_step's), grown one step per call, medians.

The injections an agent's steps carry (step.inject): a plan reminder at every step, the
environment block passed back (editor.environment_details) or made by the service and stored by
the client (the persist parts applied before the next call). Two shapes of session: a user message
after every answer (each step's injection goes to a newer message), and a tool loop (one user
message, then an answer per step: the injection stays on that message). Each scenario runs on its
own servicer (the memo at its default bound), the history seen once first; the scenarios
alternate for --rounds rounds. Printed: each scenario's median ms and its ratio to the same shape
without injections (the target: about 1x, a step costs what is new whatever it injects).
Usage: python bench/bench_injected.py [--steps 30] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import BIG_TEXT, assemble_of, step_answer, step_user  # noqa: E402

from contextsvc import config  # noqa: E402
from contextsvc.rpc import conversion, servicer  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc_client import apply_persist  # noqa: E402

REMINDER = "Plan mode is active: read and plan, do not edit files."
BLOCK = "<environment_details>\n# Current Time\n2026-12-06T10:00:00+00:00\n# Working Directory\n/repo\n</environment_details>"
# scenario -> (shape, plan reminder, environment block: "" none, "passed" back, "stored" by the client)
SCENARIOS = {
    "user message every step, none": ("chat", False, ""),
    "user message every step, plan reminder": ("chat", True, ""),
    "user message every step, block passed back": ("chat", False, "passed"),
    "user message every step, block stored": ("chat", False, "stored"),
    "tool loop, none": ("loop", False, ""),
    "tool loop, plan reminder + block passed back": ("loop", True, "passed"),
    "tool loop, block stored": ("loop", False, "stored"),
}


def steps_ms(base: pb.AssembleRequest, steps: int, shape: str, reminder: bool, block: str) -> list:
    """ms of each Assemble (parse, step, serialization) of the session after its first."""
    svc = servicer.ContextService(config.Config())
    parse = conversion.parser(pb.AssembleRequest, svc.memo)
    request = pb.AssembleRequest()
    request.CopyFrom(base)
    if reminder:
        request.plan_reminder = REMINDER
    if block == "passed":
        request.editor.environment_details = BLOCK
    elif block == "stored":
        request.editor.current_time = "2026-12-06T10:00:00+00:00"
    out = []
    for k in range(steps + 1):
        messages = request.conversation.messages
        messages.append(step_answer(k))
        if shape == "chat":
            messages.append(step_user(k))
        data = request.SerializeToString()
        t = time.perf_counter()
        answer = svc.Assemble(parse(data), None)
        answer.SerializeToString()
        if k:
            out.append((time.perf_counter() - t) * 1000)
        if block == "stored" and answer.persist:  # into the message it names (the last user message)
            target = next(msg for msg in reversed(messages) if msg.id == answer.persist[0].message_id)
            target.CopyFrom(apply_persist([target], answer)[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    base = assemble_of(workload.measure_request(BIG_TEXT))
    timings = {name: [] for name in SCENARIOS}
    names = list(SCENARIOS)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # the lead turns each round
            timings[name] += steps_ms(base, args.steps, *SCENARIOS[name])
    print(f"in process, Assemble on a {base.ByteSize():,} B request grown one step per call; "
          f"{args.rounds} rounds of {args.steps} steps; median ms")
    for name in names:
        shape = SCENARIOS[name][0]
        plain = statistics.median(timings[next(n for n in names if SCENARIOS[n] == (shape, False, ""))])
        ms = statistics.median(timings[name])
        print(f"  {name:48} {ms:7.2f}   {ms / plain:5.2f}x of the same shape without injections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
