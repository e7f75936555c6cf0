"""Compact's hot path and end-to-end latency, in process.

1. split_turns + select_tail on a 10,000-message history, compiled vs the Python twin
   (every implementation native.implementations() finds), sizes precomputed.
2. Sizing those 10,000 messages (lowering + JSON lengths), the part select pays once per call.
3. Offline compact of a ~1.25 MB conversation, end to end (select, serialize, summarize,
   post-compaction prune, measuring before and after).
Prints medians. Usage: python bench/bench_compact.py [--repeat 7]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402

from contextsvc import config, memo, conversation as m, native, prune, window  # noqa: E402
from contextsvc.rpc import conversion  # noqa: E402
from contextsvc.compact import run as cmod, head_tail  # noqa: E402


def median_ms(fn, repeat):
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def history(n):
    """n messages: user turns every few messages, assistant messages of varied size."""
    msgs = []
    for i in range(n):
        if i % 4 == 0:
            msgs.append(m.Message(f"msg_{i:06d}", m.USER, [m.Part(f"p{i}", m.Text("question " * (i % 7 + 1)))]))
        else:
            out = "line of output\n" * (i % 50)
            msgs.append(m.Message(f"msg_{i:06d}", m.ASSISTANT, [
                m.Part(f"p{i}", m.Text("answer")),
                m.Part(f"t{i}", m.Tool(f"c{i}", "read", m.COMPLETED, {"path": f"src/f{i}.py"}, output=out))],
                time_completed_ms=1))
    return msgs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    cfg = config.Config()
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000))
    usable = window.usable(mdl, m.CompactionSettings(), cfg)

    msgs = history(10_000)
    sizes = head_tail.sizes(msgs, mdl)
    flags = [head_tail.starts_turn(x) for x in msgs]
    budget = head_tail.budget(usable, m.CompactionSettings(), cfg)
    print(f"native.IMPLEMENTATION = {native.IMPLEMENTATION}")
    print("split_turns + select_tail, 10,000 messages (median):")
    for name, impl in native.implementations().items():
        def step(impl=impl):
            impl.select_tail(impl.split_turns(flags), sizes, cfg.compact.tail_turns, budget)
        print(f"  {name:7s} {median_ms(step, args.repeat * 10):8.3f} ms")
    print(f"sizing 10,000 messages (lowering + json_lengths): "
          f"{median_ms(lambda: head_tail.sizes(msgs, mdl), args.repeat):8.1f} ms")
    print(f"select() end to end, 10,000 messages:            "
          f"{median_ms(lambda: head_tail.select(msgs, mdl, usable, m.CompactionSettings(), cfg), args.repeat):8.1f} ms")

    req = workload.measure_request(1_250_000)
    conv = conversion.conversation(req.conversation)
    inp = cmod.CompactInput(conv, conversion.model(req.model), conversion.tools(req.tools),
                            conversion.system(req.system), m.CompactionSettings(), now_ms=1)
    result = cmod.compact(inp, cfg)
    # with a memo (memo.Memo, as the server runs): what each message gives is kept, so a
    # repeated call pays only for what depends on position
    step_memo = memo.Memo(cfg.server.memo_bytes)
    for label, mm in (("memo off", None), ("memo on ", step_memo)):
        print(f"offline compact, {len(conv.messages)} messages (~1.25 MB), {label}: "
              f"{median_ms(lambda mm=mm: cmod.compact(inp, cfg, memo=mm), args.repeat):8.1f} ms "
              f"(outcome {result.outcome}, tokens {result.tokens_before} -> {result.tokens_after}, "
              f"chunked {result.chunked})")
    for label, mm in (("memo off", None), ("memo on ", step_memo)):
        print(f"prune (payload-limit), ~1.25 MB, {label}: "
              f"{median_ms(lambda mm=mm: prune.prune(conv, prune.PAYLOAD_LIMIT, m.CompactionSettings(), cfg, memo=mm), args.repeat * 3):8.1f} ms")
    print(f"memo: {len(step_memo)} entries, {step_memo.size_bytes / 1e6:.2f} MB charged")
    profile(inp, cfg, step_memo)
    loopback(req, args.repeat)


def profile(inp, cfg, step_memo, top=12):
    """Where a memo-warm offline compact still spends its time (cProfile, by own time)."""
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3):
        cmod.compact(inp, cfg, memo=step_memo)
    pr.disable()
    print(f"profile of 3 memo-warm offline compacts, top {top} by cumulative time:")
    pstats.Stats(pr, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


def loopback(req, repeats):
    """Prune and Compact RPCs against a real `contextsvc serve` process."""
    import grpc

    from bench_measure import pct, start_server
    from contextsvc.v1 import context_pb2 as pb
    from contextsvc.v1 import context_pb2_grpc as pb_grpc

    proc, port = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            calls = (
                ("Prune (payload-limit)", stub.Prune,
                 pb.PruneRequest(conversation=req.conversation, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)),
                ("Compact (offline)", stub.Compact,
                 pb.CompactRequest(conversation=req.conversation, model=req.model, tools=req.tools,
                                   system=req.system)),
            )
            for name, call, message in calls:
                call(message, timeout=120)
                times = []
                for _ in range(max(5, repeats)):
                    t = time.perf_counter()
                    call(message, timeout=120)
                    times.append((time.perf_counter() - t) * 1000)
                print(f"{name} RPC over loopback, 1.25 MB: p50 {statistics.median(times):8.1f} ms  "
                      f"p99 {pct(times, 0.99):8.1f} ms")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
