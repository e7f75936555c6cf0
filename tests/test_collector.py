"""The serving process's cycle collector policy (collector.py): full collections rare, which is
sound because a step leaves no reference cycle, even as the memo evicts what it kept, and what
a call leaves in the transport is a few KB that never holds its request. Each check runs in a
process of its own: DEBUG_SAVEALL and the thresholds are the whole process's."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextsvc.v1 import context_pb2 as pb

TESTS = str(Path(__file__).parent)


def run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, TESTS, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


STEPS = textwrap.dedent("""
    import dataclasses, gc, json, sys
    sys.path.insert(0, sys.argv[1])
    from helpers import convo
    from contextsvc import config
    from contextsvc.rpc import conversion, servicer
    from contextsvc.v1 import context_pb2 as pb

    provider, model_id = int(sys.argv[2]), sys.argv[3]

    def steps(session, n):
        # one session's conversations, each with one new step (a tool call and its output, then
        # the user's next message) whose bytes name the session: no step repeats another's
        conv = pb.Conversation(session_id=session, messages=[convo.user(f"{session}-u0", convo.text("p0", "Fix it"))])
        out = []
        for k in range(n):
            conv.messages.extend([
                convo.assistant(f"{session}-a{k}", convo.text(f"a{k}", f"Step {k} of {session}: reading."),
                                convo.tool(f"t{k}", f"call_{k}", "read", {"path": f"src/{session}/{k}.py"},
                                           f"def f{k}():\\n    return {k}\\n" * 40),
                                usage=pb.Usage(input=2000 + 300 * k, output=60)),
                convo.user(f"{session}-u{k + 1}", convo.text(f"u{k}", f"go on ({session}, {k})"))])
            out.append(pb.Conversation(session_id=conv.session_id, messages=conv.messages))
        return out

    cfg = config.Config()
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, memo_bytes=1 << 20))
    svc = servicer.ContextService(cfg)
    mdl = convo.model(provider=provider, id=model_id)
    makers = [(pb.MeasureRequest, "Measure", lambda c: pb.MeasureRequest(conversation=c, model=mdl,
                                                                         want_cache_state=True)),
              (pb.AssembleRequest, "Assemble", lambda c: pb.AssembleRequest(conversation=c, model=mdl)),
              (pb.PruneRequest, "Prune", lambda c: pb.PruneRequest(conversation=c, model=mdl,
                                                                   reason=pb.PRUNE_REASON_PAYLOAD_LIMIT))]
    methods = [(conversion.parser(t, svc.memo), svc.serialized(name)) for t, name, _ in makers]
    wires = [[[make(c).SerializeToString() for c in steps(f"s{n}", 12)] for _, _, make in makers]
             for n in range(12)]

    def run(first, last):
        for k in range(first, last):
            for per_method in wires:
                for (parse, call), wire in zip(methods, per_method):
                    assert call(parse(wire[k]), None)

    run(0, 4)  # what a process makes once (caches, the memo's first entries) is not a step's
    early = set(svc.memo.keys())
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be seen
    run(4, 12)
    gc.collect()
    print(json.dumps({"garbage": sorted({type(o).__name__ for o in gc.garbage}),
                      "evicted": len(early - set(svc.memo.keys()))}))
""")


@pytest.mark.parametrize("provider, model_id", [(pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
                                                (pb.PROVIDER_OPENAI, "gpt-5")])
def test_steps_leave_no_reference_cycle_while_the_memo_evicts(provider, model_id):
    """Measure, Assemble and Prune over sessions of new steps, through the transport's parse
    with the memo, on a memo small enough to evict all along: nothing they leave needs the
    cycle collector (the full collections it skips would find nothing of theirs)."""
    out = run(STEPS, str(provider), model_id)
    assert out["evicted"] > 0  # entries of the first steps were evicted meanwhile
    assert out["garbage"] == []


SERVED = textwrap.dedent("""
    import gc, json, sys
    sys.path.insert(0, sys.argv[1])
    import grpc
    from helpers import convo
    from helpers.server import start_server
    from contextsvc.v1 import context_pb2 as pb
    from contextsvc.v1 import context_pb2_grpc as pb_grpc

    BIG = 300_000  # characters of the calls' requests: garbage holding one shows a text this long
    server = start_server()
    output = "\\n".join(f"line {i} " + "x" * 60 for i in range(BIG // 66))
    conv = convo.small_conversation()
    conv.messages[-1].parts[0].text.text += "y" * BIG
    calls = 0
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = pb_grpc.ContextServiceStub(ch)

        def each():
            global calls
            assert stub.Measure(convo.measure_request(conv), timeout=10).body_bytes > BIG
            try:  # refused: a conversation without messages
                stub.Measure(pb.MeasureRequest(model=convo.model()), timeout=10)
                raise AssertionError("not refused")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
            cut = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=output), timeout=10)
            assert stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=cut.output_id, limit=10), timeout=10).text
            calls += 4

        for _ in range(5):
            each()
        gc.collect()
        calls = 0
        gc.set_debug(gc.DEBUG_SAVEALL)
        for _ in range(40):
            each()
        gc.collect()
    # texts are not tracked by the collector: what garbage holds of them is what it refers to
    texts = [r.nbytes if isinstance(r, memoryview) else len(r) for o in gc.garbage
             for r in gc.get_referents(o) if isinstance(r, (str, bytes, bytearray, memoryview))]
    kept = sum(sys.getsizeof(o) for o in gc.garbage) + sum(texts)
    gc.set_debug(0)
    gc.garbage.clear()
    server.stop(grace=1)
    print(json.dumps({"calls": calls, "bytes": kept, "longest_text": max(texts, default=0)}))
""")


def test_what_calls_leave_in_the_transport_is_small_and_never_their_request():
    """Real calls over a real server (answered, refused, truncation): the cycles grpc's call
    state and an error's traceback make, which the young collections take, are a few KB a call
    and hold none of the request's text, whichever generation they reach."""
    out = run(SERVED)
    assert out["calls"] == 160
    assert out["bytes"] / out["calls"] < 16_000, out  # client and server together
    assert out["longest_text"] < 100_000, out


PROBE = textwrap.dedent("""
    import collections, gc, json, sys, time, weakref
    from contextsvc.collector import rare_full_collections

    mode = sys.argv[2]
    if mode != "default":
        rare_full_collections(float(mode))
    counts = collections.Counter()
    gc.callbacks.append(lambda phase, info: counts.update([info["generation"]]) if phase == "stop" else None)

    class Node:
        pass

    lru, cycles = collections.OrderedDict(), []
    for i in range(400_000):
        lru[i] = (str(i), [i], {"i": i})  # long-lived objects turning over, as the memo's do
        if len(lru) > 150_000:
            lru.popitem(last=False)
        if i % 100 == 0:  # a cycle such as a call leaves
            a, b = Node(), Node()
            a.b, b.a = b, a
            cycles.append(weakref.ref(a))
            del a, b
    busy = {"full": counts[2], "young": counts[0], "cycles": len(cycles),
            "cycles_left": sum(r() is not None for r in cycles)}
    time.sleep(1.5)  # idle: only the periodic full collection may run now
    busy["idle_full"] = counts[2] - busy["full"]
    print(json.dumps(busy))
""")


def test_full_collections_wait_and_young_cycles_are_collected_as_before():
    default, policy = run(PROBE, "default"), run(PROBE, "3600")
    assert default["full"] >= 2  # the interpreter's thresholds walk the long-lived objects again and again
    assert policy["full"] == 0
    assert policy["young"] >= default["young"] * 0.9  # the young generation is collected as often
    assert policy["cycles_left"] < policy["cycles"] * 0.1  # and the cycles calls leave with it
    assert policy["idle_full"] == 0


def test_a_full_collection_still_comes_at_least_every_so_often():
    """A server whose load never reaches FULL_AFTER middle-generation collections still collects
    the cycles that reached the oldest generation."""
    out = run(PROBE, "0.5")
    assert out["idle_full"] >= 1
