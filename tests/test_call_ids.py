"""Tool call ids an agent uses again (docs/design.md §6, "What the body must pass"), over a real
server: some agents number their calls afresh at every turn (`call_0`, `call_1`, ...), and every
provider that writes ids refuses a request in which two calls share one. For every provider, a
session that reuses its ids at every turn is accepted by the provider's judge at every step,
each call's result names that call, the first call with an id keeps it, the prefix of the body
stays byte-identical from step to step, and the memo changes nothing. conversation.Scanned finds
the ids used again step by step as a whole pass over the messages does.
"""
from __future__ import annotations

import json
import random

import grpc
import pytest

from contextsvc import conversation as m
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers import convo
from helpers.server import start_server
from judges import judge_for

PROVIDERS = convo.PROVIDERS
TOOLS = [pb.ToolDefinition(name=n, description=f"the {n} tool", input_schema_json='{"type":"object"}')
         for n in ("read", "bash")]


def turn(k: int) -> list:
    """Turn k of an agent that numbers its calls from call_0 at every turn: two parallel calls,
    the second turn also calling call_0 twice in one message."""
    calls = [convo.tool(f"a{k}-t{j}", f"call_{j}", "read" if j % 2 else "bash", {"k": k, "j": j}, f"out {k}.{j}")
             for j in range(2)]
    if k == 1:
        calls.append(convo.tool(f"a{k}-t2", "call_0", "read", {"again": True}, "once more"))
    return [convo.assistant(f"a{k}", convo.text(f"a{k}-x", f"Turn {k}."), *calls,
                            usage=pb.Usage(input=900 + 50 * k, output=20)),
            convo.user(f"u{k}", convo.text(f"u{k}-p", f"go on {k}"))]


def calls_and_results(provider: str, body: dict) -> tuple:
    """(the ids of the body's calls, the ids its results name), each in order."""
    if provider == "anthropic":
        blocks = [b for msg in body["messages"] for b in msg["content"] if isinstance(b, dict)]
        return ([b["id"] for b in blocks if b["type"] == "tool_use"],
                [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"])
    if provider == "bedrock":
        blocks = [b for msg in body["messages"] for b in msg["content"]]
        return ([b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b],
                [b["toolResult"]["toolUseId"] for b in blocks if "toolResult" in b])
    if provider == "openai-responses":
        items = body["input"]
        return ([x["call_id"] for x in items if x.get("type") == "function_call"],
                [x["call_id"] for x in items if x.get("type") == "function_call_output"])
    return ([c["id"] for msg in body["messages"] for c in msg.get("tool_calls") or []],
            [msg["tool_call_id"] for msg in body["messages"] if msg["role"] == "tool"])


@pytest.fixture(scope="module")
def memo_off():
    s = start_server(memo_bytes=0)
    yield s
    s.stop(grace=1)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_call_id_used_again_is_written_as_its_own_at_every_step(stub, memo_off, provider):
    with grpc.insecure_channel(f"127.0.0.1:{memo_off.port}") as off_channel:
        off = pb_grpc.ContextServiceStub(off_channel)
        messages = [convo.user("start", convo.text("start-p", "Fix the build"))]
        state, before = b"", None
        for k in range(4):
            messages += turn(k)
            request = pb.AssembleRequest(conversation=pb.Conversation(session_id=f"ids-{provider}", messages=messages),
                                         model=convo.model(provider=PROVIDERS[provider]), tools=TOOLS,
                                         previous_cache_state=state)
            a = stub.Assemble(request, timeout=10)
            assert a == off.Assemble(request, timeout=10)  # the memo changes nothing
            body = json.loads(a.body)
            assert judge_for(provider)(body) == []
            if before is not None:
                assert a.cache_report.prefix_kept, a.cache_report
            state, before = a.cache_state, a.body
            if provider == "gemini":  # no call ids on the wire: calls and results pair by name and place
                continue
            called, answered = calls_and_results(provider, body)
            assert len(called) == 2 * (k + 1) + (k >= 1) and len(set(called)) == len(called)
            assert answered == called  # each result names its call, in order
            assert called[:2] == ["call_0", "call_1"]  # the first calls keep the ids the agent gave
            assert all(c.startswith(("call_0_a", "call_1_a")) for c in called[2:])  # readable, with a hash


def message(i: int, ids: tuple) -> m.Message:
    parts = [m.Part(f"m{i}-p{j}", m.Tool(call, "read", m.COMPLETED)) for j, call in enumerate(ids)]
    return m.Message(f"m{i}", m.ASSISTANT if ids else m.USER, parts or [m.Part(f"m{i}-t", m.Text("hi"))])


def test_the_ids_used_again_are_found_step_by_step_as_by_a_whole_pass():
    """Scanned.extended (each step reads its new messages only, and what a rewind or an edit
    left of the earlier step's) against repeated_calls over the whole conversation."""
    r = random.Random(7)
    for _ in range(300):
        messages, scanned = [], m.NOTHING_SCANNED
        for _ in range(12):
            kept = len(messages) if r.random() < 0.7 else r.randrange(len(messages) + 1)  # a rewind or an edit
            messages = messages[:kept] + [message(len(messages) + j, tuple(f"c{r.randrange(6)}"
                                                                            for _ in range(r.randrange(4))))
                                          for j in range(r.randrange(1, 4))]
            scanned = scanned.extended(kept, messages)
            first, repeats = m.repeated_calls(messages)
            assert (scanned.first_calls, scanned.repeats) == (first, repeats)
            seen, expected = set(), []
            for i, msg in enumerate(messages):
                if len(set(msg.call_ids)) < len(msg.call_ids) or seen & set(msg.call_ids):
                    expected.append(i)
                seen |= set(msg.call_ids)
            assert list(repeats) == expected


def _assemble_ids(stub, provider, messages):
    request = pb.AssembleRequest(conversation=pb.Conversation(session_id=f"odd-{provider}", messages=messages),
                                 model=convo.model(provider=PROVIDERS[provider]), tools=TOOLS)
    a = stub.Assemble(request, timeout=10)
    body = json.loads(a.body)
    assert judge_for(provider)(body) == []
    return a, calls_and_results(provider, body)


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai-responses"])
def test_ids_stay_apart_for_odd_shapes(stub, memo_off, provider):
    """A client's id spelled like an id written again (it holds the joining NUL), and a summary
    holding a call whose id the kept tail (stored before it, sent after it) also uses: the body's
    ids are still all different, call and result agree, and the memo changes nothing."""
    lookalike = [convo.user("u0", convo.text("u0p", "go")),
                 convo.assistant("a1", convo.tool("a1t0", "x", "read", {"k": 1}, "one")),
                 convo.user("u1", convo.text("u1p", "more")),
                 convo.assistant("a2", convo.tool("a2t0", "x", "read", {"k": 2}, "two")),
                 convo.user("u2", convo.text("u2p", "more")),
                 convo.assistant("a3", convo.tool("a3t0", "x\x00a2\x000", "read", {"k": 3}, "three")),
                 convo.user("u3", convo.text("u3p", "more"))]
    summary_call = [convo.user("u0", convo.text("u0p", "go")),
                    convo.assistant("t1", convo.tool("t1t", "x", "read", {"k": 1}, "tail output")),
                    pb.Message(id="m1", role=pb.ROLE_USER, parts=[pb.Part(id="m1c", compaction=pb.CompactionPart(
                        auto=True, tail_start_id="t1"))]),
                    convo.assistant("s1", convo.text("s1p", "summary so far"), convo.tool("s1t", "x", "read", {}, "x"),
                                    summary=True, parent_id="m1"),
                    convo.user("u1", convo.text("u1p", "continue"))]
    with grpc.insecure_channel(f"127.0.0.1:{memo_off.port}") as off_channel:
        off = pb_grpc.ContextServiceStub(off_channel)
        for messages, calls in ((lookalike, 3), (summary_call, 2)):
            a, (called, answered) = _assemble_ids(stub, provider, messages)
            assert len(called) == len(set(called)) == calls and answered == called, called
            assert a == _assemble_ids(off, provider, messages)[0]
