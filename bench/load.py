"""Load test: N concurrent agent sessions against a real `python -m contextsvc serve` process.

Each caller plays an agent whose conversation grows step by step (a tool call with its output,
then the next user turn): Assemble on every step (passing the previous response's cache_state
back as previous_cache_state, so every Assemble after a session's first compares the prefix) and
Measure, Prune every few steps, Compact now and then (a compacted session applies the edits with
contextsvc_client.apply_compaction, as an agent does), and big tool outputs go through
TruncateToolOutput and ReadTruncated. Loopback only, bounded callers and duration. Prints
requests/s, p50/p95/p99 per RPC, errors by code, the cache reports of the Assemble responses
(kept, or the break's cause; informational) and the server's RSS before and after. Exits 1 on
any error (speed is reported, never judged).

Usage: python bench/load.py [--callers 8] [--seconds 60] [--processes 1] [--json]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import tempfile
import threading
import time

import grpc

from server_process import cpu_seconds, rss_mb, serve

from contextsvc_client import apply_compaction
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

MAX_CALLERS = 64
MAX_SECONDS = 600
PRUNE_EVERY = 4  # steps between Prune calls
COMPACT_EVERY = 25  # steps between Compact calls
RESTART_BYTES = 400_000  # a session this large starts over (a new agent task)
BIG_OUTPUT_EVERY = 10  # every tenth tool output is a long log that gets truncated

MODEL = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                 limits=pb.ModelLimits(context=200_000, output=64_000))
TOOLS = [pb.ToolDefinition(name=n, description=f"{n} a file or run a command",
                           input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')
         for n in ("read", "edit", "bash", "grep")]
SYSTEM = pb.SystemPrompt(soul="You are a coding agent working in a repository.",
                         agent_prompt="Be precise; run the tests after every change.")
_WORDS = ("the parser fails on nested input so we read src/app/main.py again and fix the import "
          "error then run pytest tests/test_main.py to check the function returns a value").split()
_CODE = 'def handle(request):\n    if not request.path:\n        raise ValueError("empty path")\n    return ROUTES[request.path](request)\n'


def start_server(store_dir, memo_bytes, processes, redis_url=None):
    cfg = os.path.join(store_dir, "load.toml")
    with open(cfg, "w") as f:
        f.write(f'[truncation]\ndirectory = "{store_dir}/store"\n')
        if redis_url:
            f.write(f'backend = "redis"\nredis_url = "{redis_url}"\n')
        if memo_bytes is not None:
            f.write(f"[server]\nmemo_bytes = {memo_bytes}\n")
    return serve("--metrics-port", "0", "--config", cfg, "--processes", str(processes))


class Session:
    """One agent's conversation, grown one step at a time."""

    def __init__(self, rng, name):
        self.rng, self.name, self.n = rng, name, 0
        self.conv = pb.Conversation(session_id=name)
        self.bytes = 0
        self.cache_state = b""  # the previous Assemble response's, passed back with the next
        self.user("Fix the failing test in tests/test_main.py")

    def _id(self):
        self.n += 1
        return f"msg_{self.n:06d}"

    def user(self, text):
        self.conv.messages.append(pb.Message(id=self._id(), role=pb.ROLE_USER,
                                             parts=[pb.Part(id=f"p{self.n}", text=pb.TextPart(text=text))]))
        self.bytes += len(text)

    def assistant(self, output, tool):
        rng, i = self.rng, self.n + 1
        say = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40)))
        inp = json.dumps({"path": f"src/mod{rng.randint(1, 99)}.py"})
        self.conv.messages.append(pb.Message(
            id=self._id(), role=pb.ROLE_ASSISTANT, time_completed_ms=1,
            usage=pb.Usage(input=2_000 + self.bytes // 4, output=200),
            parts=[pb.Part(id=f"p{i}a", text=pb.TextPart(text=say)),
                   pb.Part(id=f"p{i}b", tool=pb.ToolPart(call_id=f"call_{i}", tool=tool, state=pb.ToolState(
                       status=pb.TOOL_STATUS_COMPLETED, input_json=inp, output=output)))]))
        self.bytes += len(say) + len(output) + len(inp)

    def compacted(self, r: pb.CompactResponse):
        """Apply the response's edits (marker, summary, continue message; omittable messages
        dropped), as an agent stores them: the next Assemble reports the break as a compaction."""
        messages = apply_compaction(list(self.conv.messages), r, drop_omittable=True)
        del self.conv.messages[:]
        self.conv.messages.extend(messages)
        self.bytes = sum(m.ByteSize() for m in self.conv.messages)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency = collections.defaultdict(list)
        self.errors = collections.Counter()
        self.reports = collections.Counter()  # Assemble cache reports: "kept" or the break's cause
        self.first_error = {}

    def call(self, stub, method, request):
        t = time.perf_counter()
        try:
            response = getattr(stub, method)(request, timeout=30)
        except grpc.RpcError as e:
            with self.lock:
                self.errors[(method, e.code().name)] += 1
                self.first_error.setdefault((method, e.code().name), e.details())
            return None
        elapsed = time.perf_counter() - t
        with self.lock:
            self.latency[method].append(elapsed)
        return response


def caller(port, seed, stop, stats):
    rng = random.Random(seed)
    # Its own connection, as a separate agent process has: the kernel spreads connections,
    # not calls, over the server's processes (grpc would otherwise share one between channels).
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        s, step = Session(rng, f"load-{seed}"), 0
        while not stop.is_set():
            step += 1
            if step % BIG_OUTPUT_EVERY == 0:
                log = "".join(f"{i:05d} INFO request handled in {rng.randint(1, 99)} ms\n" for i in range(3_000))
                t = stats.call(stub, "TruncateToolOutput", pb.TruncateToolOutputRequest(text=log))
                output = t.content if t else log[:2000]
                if t and t.truncated:
                    stats.call(stub, "ReadTruncated", pb.ReadTruncatedRequest(output_id=t.output_id, offset=100, limit=50))
            else:
                output = _CODE * rng.randint(1, 20)
            s.assistant(output, rng.choice(("read", "bash", "grep")))
            s.user(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 20))))
            a = stats.call(stub, "Assemble", pb.AssembleRequest(conversation=s.conv, model=MODEL, tools=TOOLS,
                                                               system=SYSTEM, step=1,
                                                               previous_cache_state=s.cache_state))
            if a is not None:
                s.cache_state = a.cache_state
                if a.cache_report.compared:
                    with stats.lock:
                        stats.reports["kept" if a.cache_report.prefix_kept else a.cache_report.cause] += 1
            stats.call(stub, "Measure", pb.MeasureRequest(conversation=s.conv, model=MODEL, tools=TOOLS, system=SYSTEM))
            if step % PRUNE_EVERY == 0:
                stats.call(stub, "Prune", pb.PruneRequest(conversation=s.conv, model=MODEL,
                                                         reason=pb.PRUNE_REASON_NORMAL,
                                                         compaction=pb.CompactionSettings(prune=True)))
            if step % COMPACT_EVERY == 0:
                r = stats.call(stub, "Compact", pb.CompactRequest(conversation=s.conv, model=MODEL, auto=True))
                if r is not None and r.outcome == pb.COMPACT_OUTCOME_COMPACTED:
                    s.compacted(r)
            if s.bytes > RESTART_BYTES:
                s = Session(rng, f"load-{seed}-{step}")


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--callers", type=int, default=8, help=f"concurrent agent sessions (1..{MAX_CALLERS})")
    p.add_argument("--seconds", type=float, default=60, help=f"duration (at most {MAX_SECONDS})")
    p.add_argument("--memo-bytes", type=int,
                   help="the server's [server] memo_bytes (default: the config default)")
    p.add_argument("--processes", type=int, default=1,
                   help="the server's serving processes (--processes of contextsvc serve)")
    p.add_argument("--redis-url", help="store tool outputs in this Redis (truncation.backend = redis)")
    p.add_argument("--json", action="store_true", help="also print a JSON summary as the last line")
    args = p.parse_args(argv)
    if not 1 <= args.callers <= MAX_CALLERS or not 0 < args.seconds <= MAX_SECONDS:
        p.error("callers and seconds are bounded")

    with tempfile.TemporaryDirectory(prefix="contextsvc-load-") as tmp:
        proc, port = start_server(tmp, args.memo_bytes, args.processes, args.redis_url)
        try:
            rss_before, cpu_before = rss_mb(proc.pid), cpu_seconds(proc.pid)
            stats, stop = Stats(), threading.Event()
            threads = [threading.Thread(target=caller, args=(port, seed, stop, stats), daemon=True)
                       for seed in range(args.callers)]
            start, own_cpu = time.perf_counter(), sum(os.times()[:2])
            for t in threads:
                t.start()
            time.sleep(args.seconds)
            stop.set()
            for t in threads:
                t.join(60)
            elapsed = time.perf_counter() - start
            own_cpu = sum(os.times()[:2]) - own_cpu
            rss_after, cpu = rss_mb(proc.pid), cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.terminate()
            proc.wait(30)

    total = sum(len(v) for v in stats.latency.values()) + sum(stats.errors.values())
    print(f"{args.callers} callers, {elapsed:.1f} s: {total} requests, {total / elapsed:.0f} req/s")
    print(f"{'rpc':<20}{'count':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    per_rpc = {}
    for method in sorted(stats.latency):
        v = stats.latency[method]
        row = {"count": len(v), "rps": len(v) / elapsed,
               "p50_ms": pct(v, 0.5) * 1e3, "p95_ms": pct(v, 0.95) * 1e3, "p99_ms": pct(v, 0.99) * 1e3}
        per_rpc[method] = row
        print(f"{method:<20}{row['count']:>8}{row['rps']:>9.0f}{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}"
              f"{row['p99_ms']:>9.2f}")
    errors = {f"{m} {c}": n for (m, c), n in sorted(stats.errors.items())}
    print("errors by code:", errors or "none")
    reports = dict(sorted(stats.reports.items()))
    print("Assemble cache reports (kept, or the break's cause):", reports or "none")
    for key, detail in stats.first_error.items():
        print(f"  first {key[0]} {key[1]}: {detail}")
    print(f"server RSS: {rss_before:.1f} MB before, {rss_after:.1f} MB after "
          f"({rss_after - rss_before:+.1f} MB); server CPU {cpu / elapsed:.0%} of one core "
          f"({args.processes} process{'es' if args.processes > 1 else ''}), "
          f"load generator CPU {own_cpu / elapsed:.0%}")
    # a step is one Assemble with the Measure, Prune, Compact and truncation calls around it
    steps = len(stats.latency.get("Assemble", ()))
    cpu_ms_per_step = cpu / steps * 1e3 if steps else 0.0
    print(f"{steps} steps, server CPU {cpu_ms_per_step:.2f} ms per step")
    if args.json:
        print(json.dumps({"callers": args.callers, "seconds": elapsed, "requests": total,
                          "steps": steps, "server_cpu_ms_per_step": cpu_ms_per_step,
                          "rps": total / elapsed, "per_rpc": per_rpc, "errors": errors,
                          "cache_reports": reports,
                          "rss_before_mb": rss_before, "rss_after_mb": rss_after,
                          "server_cpu_share": cpu / elapsed, "processes": args.processes}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
