"""Server CPU per 10 KB Measure beside the framework's floor, in one run over loopback.

16 concurrent callers (each on its own connection, each sending its own ~10 KB conversation grown
by one step per call, cycling through --variants steps) call Measure on a real `contextsvc serve`
process (metrics on), then the same request bytes on echo_server.py, a trivial grpc.aio service
built the same way (loop thread + thread pool) that answers with a response of the Measure
response's size, and on echo_server.py --measure ("bare"), the same trivial service whose worker
answers with contextsvc's own Measure (parse, step, serialization) and nothing else of its
transport. The three alternate for --rounds rounds of --seconds each (the order turns each
round, so a drift of the shared machine falls on all). Per round: requests/s and the server's CPU
(user + system of its processes, from /proc, before and after) per request, and the part of it
its worker threads used (the pool's threads, named alike on each side: the parse, the work and
the serialization, and the pool's handoff; the rest is mostly the transport, grpc's threads and
the event loop, and whatever other threads ran); printed: each side's median over the rounds and the medians of the rounds' ratios:
contextsvc / echo (the target), contextsvc / bare (what contextsvc's transport adds: admission,
deadlines, metrics, request-wait bookkeeping) and bare / echo (what the step costs in a server).
Beside them, the same step (bare's worker: parse, Measure, serialization) back to back in one
thread of this process, over the same requests in the order the callers send them: a worker in
a server runs it with the caches the transport's work between two calls has left.

--new-steps: every call is a step the server has not seen, as in a live session (by default the
callers' steps repeat once they have cycled, and a repeated step finds all its work in the memo):
each caller's session grows by one new answer and user message a call, and after --variants
steps the caller opens a new session (a conversation of its own, ~10 KB); each server gets the
callers' steps in order, from where its last round left off, --steps-per-caller of them in all.

--processes 2 serves contextsvc with --processes 2 and runs two echo (and bare) processes on one port
(SO_REUSEPORT, as the supervisor's processes share theirs); the callers run in this process.
Usage: python bench/bench_floor.py [--processes 1] [--rounds 3] [--seconds 5] [--new-steps]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import grown, step_answer, step_user  # noqa: E402
from echo_server import WORKER_NAME, measure  # noqa: E402
from contextsvc.serving_process import set_policies  # noqa: E402
from server_process import cpu_seconds, process_cpu_seconds, serve, thread_cpu_seconds  # noqa: E402


CALLERS = 16
SMALL_TEXT = 10_000
MEASURE = "/contextsvc.v1.ContextService/Measure"
ECHO = Path(__file__).with_name("echo_server.py")
ECHO_METHOD = "/bench.Echo/Echo"


def requests_per_caller(variants: int) -> list[list[bytes]]:
    """Each caller's own conversation, grown by 1..variants steps, serialized beforehand."""
    out = []
    for k in range(CALLERS):
        base = workload.measure_request(SMALL_TEXT)
        base.conversation.session_id = f"floor-{k}"
        out.append([r.SerializeToString() for r in grown(base, variants)])
    return out


def new_steps_per_caller(variants: int, count: int) -> list[list[bytes]]:
    """count steps of each caller, none seen before: sessions of variants steps each, every one
    with a conversation of its own (workload's seed) and step messages that name it."""
    out = []
    for k in range(CALLERS):
        own, session = [], 0
        while len(own) < count:
            name = f"floor-{k}-{session}"
            request = workload.measure_request(SMALL_TEXT)
            request.conversation.CopyFrom(workload.conversation(SMALL_TEXT, seed=k * 100_003 + session))
            request.conversation.session_id = name
            for step in range(min(variants, count - len(own))):
                answer, user = step_answer(step), step_user(step)
                answer.parts[0].text.text += f" ({name})"
                user.parts[0].text.text += f" ({name})"
                request.conversation.messages.extend((answer, user))
                own.append(request.SerializeToString())
            session += 1
        out.append(own)
    return out


class Echo:
    """processes echo_server.py processes sharing one port, answering as answer says (its
    arguments: --response-bytes N, or --measure)."""

    def __init__(self, processes: int, *answer: str):
        self.procs, self.port = [], 0
        for _ in range(processes):
            proc = subprocess.Popen([sys.executable, str(ECHO), *answer, "--port", str(self.port)],
                                    stdout=subprocess.PIPE, text=True)
            self.procs.append(proc)
            line = proc.stdout.readline()
            if not line.startswith("serving "):
                self.stop()
                raise SystemExit("echo server did not start")
            self.port = int(line.split()[1])

    def cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(p.pid) for p in self.procs)

    def worker_cpu_seconds(self) -> float:
        return sum(thread_cpu_seconds(p.pid, WORKER_NAME) for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(30)


async def load(port: int, method: str, requests: list[list[bytes]], seconds: float,
               cursors: list[int] | None = None) -> tuple[int, int]:
    """(answered, failed) calls of CALLERS callers, each on its own connection (the kernel
    spreads connections, not calls, over a shared port's processes), for seconds. cursors: where
    each caller goes on in its requests (moved past the ones sent); None: from the first."""
    end = time.perf_counter() + seconds
    options = [("grpc.use_local_subchannel_pool", 1)]
    cursors = cursors if cursors is not None else [0] * len(requests)

    async def caller(k: int, own: list[bytes]) -> tuple[int, int]:
        ok = failed = 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            call = channel.unary_unary(method)  # bytes in, bytes out
            await channel.channel_ready()
            while time.perf_counter() < end:
                try:
                    await call(own[cursors[k] % len(own)], timeout=30)
                    ok += 1
                except grpc.aio.AioRpcError:
                    failed += 1
                cursors[k] += 1
        return ok, failed

    counts = await asyncio.gather(*(caller(k, own) for k, own in enumerate(requests)))
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def measured(name, port, method, requests, seconds, server_cpu, worker_cpu, cursors=None) -> dict:
    """One round on one server: req/s, server CPU ms per request (of it, its workers'), client
    CPU share. cursors: where each caller goes on in its requests (load)."""
    asyncio.run(load(port, method, requests, min(1.0, seconds), cursors))  # connections up, caches warm
    cpu0, workers0, own0, t0 = server_cpu(), worker_cpu(), sum(os.times()[:2]), time.perf_counter()
    ok, failed = asyncio.run(load(port, method, requests, seconds, cursors))
    elapsed = time.perf_counter() - t0
    cpu, workers, own = server_cpu() - cpu0, worker_cpu() - workers0, sum(os.times()[:2]) - own0
    return {"name": name, "rps": ok / elapsed, "cpu_ms": cpu / max(ok, 1) * 1e3,
            "worker_ms": workers / max(ok, 1) * 1e3, "failed": failed,
            "server_share": cpu / elapsed, "client_share": own / elapsed}


def back_to_back_ms(requests: list[list[bytes]], new_steps: bool, passes: int = 3) -> float:
    """Thread CPU ms per call of bare's worker (parse, Measure, serialization) on the requests in
    the order the callers send them, back to back in this thread: the median of passes, after
    one pass that lets the memo see them, as the servers' warm-up does; new_steps: each pass on
    a worker of its own, whose memo has seen none of them, over the first NEW_STEPS_IN_PROCESS of
    each caller's."""
    set_policies()  # the serving process's (cli.serve): the step runs as there
    if new_steps:
        requests = [own[:NEW_STEPS_IN_PROCESS] for own in requests]
    order = [own[i] for i in range(max(map(len, requests))) for own in requests if i < len(own)]
    work = measure()
    if not new_steps:
        for r in order:
            work(r)
    times = []
    for _ in range(passes):
        if new_steps:
            work = measure()
        t0 = time.thread_time()
        for r in order:
            work(r)
        times.append((time.thread_time() - t0) / len(order) * 1e3)
    return statistics.median(times)


NEW_STEPS_IN_PROCESS = 96  # each caller's first steps back_to_back_ms times with new steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=1, help="contextsvc's --processes, and echo processes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="per round and server")
    ap.add_argument("--variants", type=int, default=32,
                    help="steps each caller's conversation cycles through (--new-steps: each session's steps)")
    ap.add_argument("--new-steps", action="store_true", help="every call a step the server has not seen")
    ap.add_argument("--steps-per-caller", type=int, default=2000, help="with --new-steps: the steps made")
    args = ap.parse_args()
    requests = (new_steps_per_caller(args.variants, args.steps_per_caller) if args.new_steps
                else requests_per_caller(args.variants))
    probe = workload.measure_request(SMALL_TEXT)  # the response's size, in a session of its own
    probe.conversation.session_id = "floor-probe"
    proc, port = serve("--metrics-port", "0", "--processes", str(args.processes))
    echoes = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            response = ch.unary_unary(MEASURE)(probe.SerializeToString(), timeout=30)
        echo = Echo(args.processes, "--response-bytes", str(len(response)))
        echoes.append(echo)
        bare = Echo(args.processes, "--measure")
        echoes.append(bare)
        print(f"{CALLERS} callers, Measure request {len(requests[0][0]):,}-{len(requests[0][-1]):,} B, "
              f"response {len(response)} B; {args.processes} server process(es) each side; "
              f"{args.rounds} rounds of {args.seconds:g} s; "
              + ("every step new" if args.new_steps else f"steps repeated after {args.variants}"))
        sides = {"contextsvc": (port, MEASURE, lambda: cpu_seconds(proc.pid),
                                lambda: thread_cpu_seconds(proc.pid, WORKER_NAME)),
                 "echo": (echo.port, ECHO_METHOD, echo.cpu_seconds, echo.worker_cpu_seconds),
                 "bare": (bare.port, ECHO_METHOD, bare.cpu_seconds, bare.worker_cpu_seconds)}
        # where each side's callers go on in their requests: with new steps, no server sees one twice
        cursors = {name: [0] * CALLERS if args.new_steps else None for name in sides}
        rounds = []
        for r in range(args.rounds):
            turn = r % len(sides)
            order = list(sides)[turn:] + list(sides)[:turn]
            row = {name: measured(name, *sides[name][:2], requests, args.seconds, *sides[name][2:], cursors[name])
                   for name in order}
            rounds.append(row)
            print("  round {}: ".format(r + 1) + "   ".join(
                f"{s['name']} {s['rps']:6.0f} req/s {s['cpu_ms']:.3f} CPU ms/req, workers {s['worker_ms']:.3f} "
                f"(server {s['server_share']:.0%}, client {s['client_share']:.0%} of a core)"
                for s in row.values()))
    finally:
        proc.terminate()
        proc.wait(30)
        for e in echoes:
            e.stop()
    failed = sum(s["failed"] for row in rounds for s in row.values())
    for row in rounds:
        for s in row.values():
            s["rest_ms"] = s["cpu_ms"] - s["worker_ms"]
    med = {name: {k: statistics.median(row[name][k] for row in rounds) for k in ("rps", "cpu_ms", "worker_ms", "rest_ms")}
           for name in sides}
    for name, m in med.items():
        print(f"{name:10} median: {m['rps']:6.0f} req/s   {m['cpu_ms']:.3f} server CPU ms/req: "
              f"{m['worker_ms']:.3f} in its workers, {m['rest_ms']:.3f} in the rest (the transport, other threads)")
    for a, b in (("contextsvc", "echo"), ("contextsvc", "bare"), ("bare", "echo")):
        cpu_ratio = statistics.median(row[a]["cpu_ms"] / row[b]["cpu_ms"] for row in rounds)
        rps_ratio = statistics.median(row[a]["rps"] / row[b]["rps"] for row in rounds)
        print(f"{a + ' / ' + b:17}: server CPU per request {cpu_ratio:.2f}x, req/s {rps_ratio:.2f}x "
              f"(median of the rounds' ratios)")
    print(f"bare's worker (parse, Measure, serialization) back to back in one thread of this process: "
          f"{back_to_back_ms(requests, args.new_steps):.3f} thread CPU ms/call")
    print(f"failed calls: {failed}")
    if args.new_steps:
        sent = max(max(c) for c in cursors.values() if c is not None and c is not cursors["echo"])
        if sent > args.steps_per_caller:  # the echo's requests are bytes to it: it may go round
            print(f"a caller sent {sent} steps, more than the {args.steps_per_caller} made: some were repeats "
                  "(raise --steps-per-caller)")
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
