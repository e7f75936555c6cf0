"""The agent-loop matrix: 60-step scripted coding sessions, 3 providers x 2 windows, then Gemini's two.

Each session replays a seeded script (tests/agent_loop/session.py) through the Python agent loop
(tests/agent_loop/loop.py) against a real in-process server and the fake provider, which refuses
any body whose count plus max_tokens exceeds the window (o200k for the OpenAI models, gpt-4o and
gpt-5, as the real API counts them; cl100k for the others). Prints, per session: the
compactions (tokens before -> after, outcome), requests refused (with the content classes still
in the conversation), prune runs that acted, the cache breaks by cause (from each body's
cache_report: the loop passes the last accepted body's cache_state back), the largest input the
provider counted, and elapsed time, then a table of the sessions; exits 1 if any session broke
the contract (a refusal, a compaction not under the limit, tokens_after != Measure after
applying, a tool call without its result, a cache break not explained by a compaction or a prune
that acted, or a step that neither compacted nor pruned whose previous body is not a prefix of
its body).

    PYTHONPATH=server:tests python bench/agent_loop.py [--steps 60] [--seed 1] [--node] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]  # the loop and fake provider; contextsvc is the installed package

import grpc  # noqa: E402

from agent_loop import loop, session  # noqa: E402
from agent_loop.fake_provider import FakeProvider  # noqa: E402
from helpers.server import start_server  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402

PROVIDERS = ("anthropic", "openai", "bedrock")
# sessions run after the matrix (their seeds follow it, so the matrix's rows stay comparable): the
# Python loop only
EXTRA = ("gemini",)
WINDOWS = (32_000, 200_000)


def violations(summary: dict, log: list | None = None) -> list[str]:
    """Every way a session broke the contract, as readable lines (log: the fake provider's entries
    of the session, for the cache checks)."""
    out = [f"refused at step {r['step']}: {json.dumps(r['error'])[:200]} (should_compact was "
           f"{r['should_compact']}, decision {r['decision']}, limit {r['limit']}; tool outputs in the "
           f"conversation by class {r.get('content')}, the last step's {r.get('last_step_kinds')})"
           for r in summary["refusals"]]
    for c in summary["compactions"]:
        if c["measured_after"] != c["tokens_after"]:
            out.append(f"step {c['step']}: tokens_after {c['tokens_after']} but Measure after applying "
                       f"says {c['measured_after']} ({c['outcome']})")
        if not c["under_limit"]:
            out.append(f"step {c['step']}: {c['outcome']} not under the limit "
                       f"({c['tokens_before']} -> {c['tokens_after']}, limit {c['limit']})")
    out += [f"step {u['step']}: unpaired tool calls {u['problems']}" for u in summary["unpaired"]]
    if summary["turns_ended"]:
        out.append(f"{summary['turns_ended']} turns ended by CONTEXT_OVERFLOW")
    if log is not None:
        out += loop.cache_violations(summary, log)
    return out


def causes(s: dict) -> str:
    by = loop.breaks_by_cause(s)
    return ", ".join(f"{k} {v}" for k, v in sorted(by.items())) or "none"


def node_session(script_path, address, url, provider, window) -> dict:
    out = subprocess.run(["node", "agent_loop.js", str(script_path), address, url, provider, str(window)],
                         cwd=ROOT / "clients" / "node", capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def report(label: str, s: dict, log: list | None = None) -> None:
    comp = s["compactions"]
    print(f"{label}: {s['steps']} steps, {s['requests']} requests, {len(comp)} compactions, "
          f"{len(s['refusals'])} refused, {len(s['prunes'])} prune runs acted "
          f"({sum(p['tokens_freed'] for p in s['prunes'])} tokens freed), cache breaks by cause: {causes(s)}, "
          f"largest input {s['max_input']}, {s['elapsed_s']:.1f} s")
    for c in comp:
        kind = "overflow" if c["overflow"] else "auto"
        print(f"    step {c['step']:>2} {kind:<8} {c['tokens_before']:>7} -> {c['tokens_after']:>6} "
              f"(limit {c['limit']}, Measure after {c['measured_after']}) {c['outcome'].removeprefix('COMPACT_OUTCOME_')}")
    for b in loop.cache_breaks(s):
        print(f"    step {b['step']:>2} cache break {b['cause']:<10} at {b['segment']}[{b['index']}], "
              f"rewrite {b['rewrite']} tokens (step changed: {', '.join(b['changed']) or 'nothing'})")
    for line in violations(s, log):
        print(f"    VIOLATION {line}")


def table(rows: list) -> None:
    print(f"{'session':<24} {'cmp':>3} {'tokens before -> after':<40} {'refused':>7} {'prunes':>6} "
          f"{'cache breaks by cause':<28}")
    for label, s in rows:
        moves = " ".join(f"{c['tokens_before']}->{c['tokens_after']}" for c in s["compactions"]) or "-"
        print(f"{label:<24} {len(s['compactions']):>3} {moves:<40} {len(s['refusals']):>7} {len(s['prunes']):>6} "
              f"{causes(s):<28}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1, help="first seed; session k uses seed + k")
    ap.add_argument("--node", action="store_true", help="run the Node loop (clients/node) instead")
    ap.add_argument("--json", help="also write every summary to this file")
    args = ap.parse_args()

    server = start_server()
    address = f"127.0.0.1:{server.port}"
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 256 << 20),
                                                      ("grpc.max_receive_message_length", 256 << 20)])
    stub = pb_grpc.ContextServiceStub(channel)
    summaries, bad = [], 0
    t0 = time.monotonic()
    try:
        with FakeProvider() as fp, tempfile.TemporaryDirectory() as tmp:
            k, rows = 0, []
            matrix = [(w, p) for w in WINDOWS for p in PROVIDERS]
            matrix += [] if args.node else [(w, p) for p in EXTRA for w in WINDOWS]
            for window, provider in matrix:
                script = session.generate(args.seed + k, steps=args.steps)
                k += 1
                first = len(fp.log)
                if args.node:
                    path = session.write(script, pathlib.Path(tmp) / f"script-{k}.json")
                    s = node_session(path, address, fp.url(provider, window), provider, window)
                else:
                    s = loop.run_session(stub, fp.url(provider, window), provider, window, script).as_dict()
                log = fp.log[first:]
                label = f"{provider:<9} {window:>6} seed {script['seed']}"
                report(label, s, log)
                bad += bool(violations(s, log))
                summaries.append(s)
                rows.append((label, s))
            table(rows)
            refused = sum(e.refused for e in fp.log)
            print(f"provider log: {len(fp.log)} requests, {refused} refused; total {time.monotonic() - t0:.1f} s")
    finally:
        channel.close()
        server.stop(grace=1)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summaries, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
