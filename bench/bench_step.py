"""One agent step on a large history against a small one (issue 19): Measure, Assemble, Prune
(payload-limit) and Compact (the offline summarizer) over loopback on a ~1 MB conversation and a
~10 KB one, side by side in one run, medians; Measure and Assemble also on a ~1.2 MB one whose
body is over the payload guard (its prune marks the same 568 parts at every step: this client
does not store them); and in-process Measure of the ~1 MB one. Each call
sends the conversation grown by one more step (an assistant answer and a user message), so no
whole-response cache can win. Both Compact calls summarize a head; Prune frees 427 parts of the
~1 MB one and finds nothing to prune in the ~10 KB one (its cost there is the scan).
Also the floor: parsing, hashing and the compiled byte count of the same request; the
transport's: a trivial grpc.aio echo service answering the same requests with responses of
Measure's and Assemble's sizes; and, in process, the steps over the guard beside the same steps
with the guard raised above them.

--against DIR compares this tree with another checkout (DIR/server with its generated stubs and
compiled module in place, as in a worktree of this one): the loopback bench runs in a subprocess
per tree, alternating, --pairs times (the order flips each pair, so a drift of the machine falls
on both), and prints each tree's median of medians and, per RPC and size, the median of the
pairs' ratios with their range.
--agent-tools gives every conversation an agent's 30 tools and 20 KB system prompt instead of one
tool and two lines.
Usage: python bench/bench_step.py [--steps 40] [--config memo_off.toml] [--agent-tools]
                                  [--against DIR [--pairs 5]]
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from server_process import serve  # noqa: E402

from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402

# text bytes of workload.conversation for a body of about 1 MB (under the payload guard's
# 1.25 MB, which would prune: another path)
BIG_TEXT = 800_000
SMALL_TEXT = 10_000
# text bytes for a body of about 1.3 MB, over the payload guard (sent pruned to about 660 KB)
GUARD_TEXT = 1_000_000
SIZES = ("10 KB", "1 MB", "1.2 MB guard")
GUARDED_RPCS = ("Measure", "Assemble")  # the RPCs that run the payload guard
TREE = Path(__file__).resolve().parents[1]


def request_of(text_bytes: int, agent_tools: bool = False) -> pb.MeasureRequest:
    """workload.measure_request, with an agent's tool set and system prompt when asked."""
    r = workload.measure_request(text_bytes)
    if agent_tools:
        del r.tools[:]
        r.tools.extend(workload.agent_tools())
        r.system.CopyFrom(workload.agent_system())
    return r


def step_answer(k: int) -> pb.Message:
    """Step k's assistant answer, as grown adds it."""
    return pb.Message(id=f"step_{k}_a", role=pb.ROLE_ASSISTANT, time_completed_ms=1,
                      usage=pb.Usage(input=9000 + k, output=50),
                      parts=[pb.Part(id=f"s{k}a", text=pb.TextPart(text=f"Step {k}: read the next file."))])


def step_user(k: int) -> pb.Message:
    """Step k's user message, as grown adds it after the answer."""
    return pb.Message(id=f"step_{k}_u", role=pb.ROLE_USER,
                      parts=[pb.Part(id=f"s{k}u", text=pb.TextPart(text=f"go on {k}"))])


def grown(base: pb.MeasureRequest, steps: int) -> list:
    """base grown by 1..steps steps, one request each."""
    out = []
    req = pb.MeasureRequest()
    req.CopyFrom(base)
    for k in range(steps):
        req.conversation.messages.extend((step_answer(k), step_user(k)))
        r = pb.MeasureRequest()
        r.CopyFrom(req)
        out.append(r)
    return out


def assemble_of(r: pb.MeasureRequest) -> pb.AssembleRequest:
    return pb.AssembleRequest(conversation=r.conversation, model=r.model, tools=r.tools, system=r.system)


def prune_of(r: pb.MeasureRequest) -> pb.PruneRequest:
    return pb.PruneRequest(conversation=r.conversation, model=r.model, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)


def compact_of(r: pb.MeasureRequest) -> pb.CompactRequest:
    return pb.CompactRequest(conversation=r.conversation, model=r.model, tools=r.tools, system=r.system)


# each RPC timed, and its request made from the grown MeasureRequest
RPCS = (("Measure", lambda r: r), ("Assemble", assemble_of), ("Prune", prune_of), ("Compact", compact_of))


def timed(call, reqs) -> float:
    call(reqs[0])  # warm: the history is seen once, as the session's earlier steps would have
    times = []
    for r in reqs[1:]:
        t = time.perf_counter()
        call(r)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def prepared_call(channel, name: str):
    """The RPC name with bytes in and bytes out, as bench_reference.py and the echo floor below
    call theirs: the request serialized beforehand and the response left as received (a Python
    client's own serialization of a megabyte request, 1-3 ms, and its parse of a megabyte
    response, about 0.5 ms, are the client's, not the service's)."""
    return channel.unary_unary(f"/contextsvc.v1.ContextService/{name}", request_serializer=bytes,
                               response_deserializer=bytes)


def wires_of(request_of, requests: list) -> list:
    return [request_of(r).SerializeToString() for r in requests]


def loopback(small, big, guarded, config_path, show=print) -> dict:
    """{rpc: {size: median ms}} of each RPC against a `contextsvc serve` process (the one the
    interpreter's path finds); the last Assemble body and Measure response size, for the floors."""
    extra = ("--config", config_path) if config_path else ()
    proc, port = serve("--no-metrics", *extra)
    medians = {}
    try:
        opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            body = stub.Assemble(assemble_of(big[-1]), timeout=60).body
            measured = stub.Measure(big[-1], timeout=60).ByteSize()
            show(f"big: {big[-1].ByteSize():,} B request, {len(body):,} B body, "
                 f"{len(big[-1].conversation.messages)} msgs; small: {small[-1].ByteSize():,} B; "
                 f"over the guard: {guarded[-1].ByteSize():,} B")
            for name, request_of in RPCS:
                call = prepared_call(ch, name)
                # each RPC's requests serialized beforehand: only the round trip is timed
                s = timed(lambda r: call(r, timeout=60), wires_of(request_of, small))
                b = timed(lambda r: call(r, timeout=60), wires_of(request_of, big))
                medians[name] = {SIZES[0]: s, SIZES[1]: b}
                line = f"{name:8} loopback p50: 10 KB {s:7.2f} ms   1 MB {b:7.2f} ms   ratio {b / s:5.1f}x"
                if name in GUARDED_RPCS:
                    g = medians[name][SIZES[2]] = timed(lambda r: call(r, timeout=60), wires_of(request_of, guarded))
                    line += f"   1.2 MB over the guard {g:7.2f} ms   ratio {g / s:5.1f}x"
                show(line)
    finally:
        proc.terminate()
        proc.wait(30)
    return medians, body, measured


def floor(big, body, config_path):
    """In-process Measure of the 1 MB request, and what parsing, hashing and counting it cost."""
    from contextsvc import config, native
    from contextsvc.rpc import conversion, servicer
    from contextsvc.rpc.message_keys import message_keys, message_spans
    from contextsvc.serving_process import set_policies

    set_policies()  # the serving process's (cli.serve), so the step runs as there
    cfg = config.load(config_path) if config_path else config.Config()
    svc = servicer.ContextService(cfg)
    wires = {id(r): r.SerializeToString() for r in big}  # the request's bytes as the RPC receives them
    parse = conversion.parser(pb.MeasureRequest, svc.memo)  # the server's: with the memo
    measure = timed(lambda r: svc.Measure(parse(wires[id(r)]), None).SerializeToString(), big)
    print(f"in-process Measure 1 MB p50 (parse to response bytes): {measure:7.2f} ms")
    wire = big[-1].SerializeToString()
    parse = timed(lambda r: pb.MeasureRequest.FromString(wire), big[:20])
    hashing = timed(lambda r: [hashlib.blake2b(x.SerializeToString(), digest_size=16).digest()
                               for x in r.conversation.messages], big[:20])
    keys = timed(lambda r: message_keys(wires[id(r)], message_spans(wires[id(r)], 1)), big[:20])
    raw = hashlib.sha256
    sha = timed(lambda r: raw(wire).digest(), big[:20])
    doc = json.loads(body)
    size = timed(lambda r: native.json_size(doc), big[:20])
    print(f"floor: parse {parse:.2f} ms, serialize+blake2b per message {hashing:.2f} ms, "
          f"scan+blake2b per span (the keys) {keys:.2f} ms, sha256 of the request "
          f"{sha:.2f} ms, byte count of the body {size:.2f} ms")


def guard_in_process(guarded, config_path) -> None:
    """In process, Measure and Assemble of the steps over the payload guard beside the same steps
    with the guard raised above them ("a step over the guard costs no more than one under it"):
    two servicers, each with its own memo, alternating step by step, parse to response bytes."""
    from contextsvc import config
    from contextsvc.rpc import conversion, servicer
    from contextsvc.serving_process import set_policies

    set_policies()  # the serving process's (cli.serve)
    cfg = config.load(config_path) if config_path else config.Config()
    raised = dataclasses.replace(cfg, assemble=dataclasses.replace(cfg.assemble, request_prune_bytes=1 << 30))
    out = []
    for name, make in (("Measure", lambda r: r), ("Assemble", assemble_of)):
        wires = [make(r).SerializeToString() for r in guarded]
        sides = []
        for c in (cfg, raised):
            svc = servicer.ContextService(c)
            sides.append((conversion.parser(type(make(guarded[0])), svc.memo), svc.serialized(name)))
        times = ([], [])
        for i, wire in enumerate(wires):
            for side, (parse, call) in enumerate(sides):
                t = time.perf_counter()
                call(parse(wire), None)
                if i:  # the first: the history seen once, as the session's earlier steps would have
                    times[side].append((time.perf_counter() - t) * 1000)
        over, under = (statistics.median(x) for x in times)
        out.append(f"{name} {over:.2f} ms, the guard raised {under:.2f} ms ({over / under:.2f}x)")
    print("in-process p50 over the guard: " + "; ".join(out))


def transport_floor(small, big, guarded, measure_response: int, body: bytes) -> None:
    """What the transport alone costs at these sizes: bench/echo_server.py (a trivial grpc.aio
    service built as ours is) answering the same requests over loopback with a response of
    Measure's size and of Assemble's (the 1 MB body), the requests serialized beforehand as
    above."""
    echo = Path(__file__).with_name("echo_server.py")
    opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    out = []
    for name, size in (("Measure", measure_response), ("Assemble", len(body) + 64)):
        proc = subprocess.Popen([sys.executable, str(echo), "--response-bytes", str(size)],
                                stdout=subprocess.PIPE, text=True)
        try:
            port = int(proc.stdout.readline().split()[1])
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
                call = ch.unary_unary("/bench.Echo/Echo", request_serializer=bytes, response_deserializer=bytes)
                s, b, g = (timed(lambda r: call(r, timeout=60), wires_of(lambda r: r, reqs))
                           for reqs in (small, big, guarded))
            out.append(f"{name}-sized echo {s:.2f} ms (10 KB), {b:.2f} ms (1 MB), {g:.2f} ms (1.2 MB)")
        finally:
            proc.terminate()
            proc.wait(30)
    print("transport floor: " + "; ".join(out))


def run_tree(tree: Path, args) -> dict:
    """This script's loopback bench in a subprocess whose contextsvc (and server) is tree's."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tree / "server"), str(tree / "clients" / "python"))))
    cmd = [sys.executable, __file__, "--steps", str(args.steps), "--loopback-json"]
    if args.agent_tools:
        cmd.append("--agent-tools")
    if args.config:
        cmd += ["--config", args.config]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the bench failed on {tree}:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def compare(args):
    """Interleaved pairs of this tree and args.against: each side's median of its runs' medians,
    and per RPC and size the median of the pairs' ratios this / against (a pair's two runs are
    adjacent in time, so what the machine does meanwhile weighs on both) with their range, to
    tell a change from noise."""
    trees = {"this": TREE, "against": Path(args.against).resolve()}
    pairs = []
    for k in range(args.pairs):
        order = ("this", "against") if k % 2 == 0 else ("against", "this")
        pairs.append({side: run_tree(trees[side], args) for side in order})
        print(f"pair {k + 1}/{args.pairs} done", file=sys.stderr)
    print(f"this {trees['this']} against {trees['against']}: {args.pairs} interleaved pairs, "
          f"median of the runs' p50 (ms); ratio this / against, median of the pairs [range]")
    for name, _ in RPCS:
        for size in SIZES if name in GUARDED_RPCS else SIZES[:2]:
            mine = statistics.median(p["this"][name][size] for p in pairs)
            theirs = statistics.median(p["against"][name][size] for p in pairs)
            ratios = [p["this"][name][size] / p["against"][name][size] for p in pairs]
            print(f"{name:8} {size:12}  this {mine:8.2f}   against {theirs:8.2f}   "
                  f"ratio {statistics.median(ratios):5.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--config", default="")
    ap.add_argument("--against", default="", help="another checkout to compare with, in interleaved pairs")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--agent-tools", action="store_true",
                    help="30 tools of 1.3 KB schemas and a 20 KB system prompt (workload.agent_tools), not one tool")
    ap.add_argument("--loopback-json", action="store_true", help=argparse.SUPPRESS)  # one side of --against
    args = ap.parse_args()
    if args.against:
        compare(args)
        return
    big, small, guarded = (grown(request_of(size, args.agent_tools), steps) for size, steps in
                           ((BIG_TEXT, args.steps), (SMALL_TEXT, args.steps * 5), (GUARD_TEXT, args.steps)))
    if args.loopback_json:
        medians, _, _ = loopback(small, big, guarded, args.config, show=lambda line: None)
        print(json.dumps(medians))
        return
    from contextsvc import native
    print(f"hot path {native.IMPLEMENTATION}")
    _, body, measured = loopback(small, big, guarded, args.config)
    transport_floor(small, big, guarded, measured, body)
    floor(big, body, args.config)  # after the loopback: it sets the serving process's policies for this one
    guard_in_process(guarded, args.config)


if __name__ == "__main__":
    main()
