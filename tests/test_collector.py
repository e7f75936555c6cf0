"""The serving process's cycle collector policy (collector.py): full collections rare, which is
sound because a step leaves no reference cycle, even as the memo evicts what it kept."""
from __future__ import annotations

import dataclasses
import gc
import json
import subprocess
import sys
import textwrap

import pytest

from helpers import convo
from contextsvc import config
from contextsvc.rpc import conversion, servicer
from contextsvc.v1 import context_pb2 as pb


def _steps(session: str, steps: int, provider: int, model_id: str) -> list:
    """One session's requests, each with one new step (a tool call and its output, then the
    user's next message) whose bytes name the session: no step repeats another's."""
    conv = pb.Conversation(session_id=session, messages=[convo.user(f"{session}-u0", convo.text("p0", "Fix the build"))])
    out = []
    for k in range(steps):
        conv.messages.extend([
            convo.assistant(f"{session}-a{k}", convo.text(f"a{k}", f"Step {k} of {session}: reading."),
                            convo.tool(f"t{k}", f"call_{k}", "read", {"path": f"src/{session}/{k}.py"},
                                       f"def f{k}():\n    return {k}\n" * 40),
                            usage=pb.Usage(input=2000 + 300 * k, output=60)),
            convo.user(f"{session}-u{k + 1}", convo.text(f"u{k}", f"go on ({session}, {k})"))])
        out.append(pb.Conversation(session_id=conv.session_id, messages=conv.messages))
    return [(c, convo.model(provider=provider, id=model_id)) for c in out]


@pytest.mark.parametrize("provider, model_id", [(pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
                                                (pb.PROVIDER_OPENAI, "gpt-5")])
def test_steps_leave_no_reference_cycle_while_the_memo_evicts(provider, model_id):
    """Measure, Assemble and Prune over sessions of new steps, through the transport's parse
    with the memo, on a memo small enough to evict all along: nothing they leave needs the
    cycle collector (the full collections it skips would find nothing of theirs)."""
    cfg = config.Config()
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, memo_bytes=1 << 20, memo_hold_seconds=0))
    svc = servicer.ContextService(cfg)
    calls = [(pb.MeasureRequest, "Measure", lambda c, m: pb.MeasureRequest(conversation=c, model=m,
                                                                             want_cache_state=True)),
             (pb.AssembleRequest, "Assemble", lambda c, m: pb.AssembleRequest(conversation=c, model=m)),
             (pb.PruneRequest, "Prune", lambda c, m: pb.PruneRequest(
                 conversation=c, model=m, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT))]
    methods = [(conversion.parser(t, svc.memo), svc.serialized(name), make) for t, name, make in calls]
    sessions = [_steps(f"s{n}", 12, provider, model_id) for n in range(12)]
    wires = [[[make(c, m).SerializeToString() for c, m in steps] for _, _, make in methods] for steps in sessions]

    def run(first: int, last: int) -> None:
        for k in range(first, last):
            for per_method in wires:
                for (parse, call, _), wire in zip(methods, per_method):
                    assert call(parse(wire[k]), None)

    run(0, 4)  # what a process makes once (caches, the memo's first entries) is not a step's
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be seen
    try:
        run(4, 12)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    assert svc.memo.refused or svc.memo.size_bytes > (1 << 20) * 0.8  # the memo was full: it evicted
    assert left == []


PROBE = textwrap.dedent("""
    import collections, gc, json, sys, weakref
    from contextsvc.collector import rare_full_collections

    if sys.argv[1] == "policy":
        rare_full_collections()
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
    print(json.dumps({"full": counts[2], "young": counts[0], "cycles": len(cycles),
                      "cycles_left": sum(r() is not None for r in cycles)}))
""")


def probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_full_collections_wait_and_young_cycles_are_collected_as_before():
    default, policy = probe("default"), probe("policy")
    assert default["full"] >= 2  # the interpreter's thresholds walk the long-lived objects again and again
    assert policy["full"] == 0
    assert policy["young"] >= default["young"] * 0.9  # the young generation is collected as often
    assert policy["cycles_left"] < policy["cycles"] * 0.1  # and the cycles calls leave with it
