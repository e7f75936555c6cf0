"""Builders of protobuf requests for tests: small, readable conversations."""
from __future__ import annotations

import json

from contextsvc.v1 import context_pb2 as pb


# every provider, by the name its judge (judges.judge_for) and lowering.registry give it -> its enum
PROVIDERS = {name[len("PROVIDER_"):].lower().replace("_", "-"): value
             for name, value in pb.Provider.items() if value != pb.PROVIDER_UNSPECIFIED}


def text(pid, s, **kw):
    return pb.Part(id=pid, text=pb.TextPart(text=s, **kw))


def tool(pid, call_id, name, inp, output="", status=pb.TOOL_STATUS_COMPLETED, compacted=0):
    return pb.Part(id=pid, tool=pb.ToolPart(call_id=call_id, tool=name, state=pb.ToolState(
        status=status, input_json=json.dumps(inp), output=output, time_compacted_ms=compacted)))


def user(mid, *parts):
    return pb.Message(id=mid, role=pb.ROLE_USER, parts=list(parts))


def assistant(mid, *parts, usage=None, finished=True, summary=False, parent_id=""):
    return pb.Message(id=mid, role=pb.ROLE_ASSISTANT, parts=list(parts),
                      usage=usage or pb.Usage(), time_completed_ms=1 if finished else 0,
                      summary=summary, parent_id=parent_id)


def model(provider=pb.PROVIDER_ANTHROPIC, context=200_000, input=0, output=64_000, id="claude-sonnet-4-5"):
    return pb.Model(id=id, provider=provider, limits=pb.ModelLimits(context=context, input=input, output=output))


def small_conversation():
    return pb.Conversation(session_id="sess-1", messages=[
        user("msg_001", text("p1", "Fix the failing test in tests/test_app.py")),
        assistant("msg_002", text("p2", "Reading the test."),
                  tool("p3", "call_1", "read", {"path": "tests/test_app.py"}, "def test_x():\n    assert f() == 2\n"),
                  usage=pb.Usage(input=1200, output=80)),
        user("msg_003", text("p4", "Also keep the public API stable 你好 😀")),
    ])


def measure_request(conversation=None, **kw):
    kw.setdefault("model", model())
    return pb.MeasureRequest(conversation=conversation or small_conversation(), **kw)


def tiny_message(n: int) -> pb.Message:
    """A user message of a few bytes: per-object overhead dominates what it costs in memory."""
    return user(f"m{n}", text(f"p{n}", "ok"))


def large_message(n: int) -> pb.Message:
    """An assistant step of about 70 KB (text and a tool output): its strings dominate."""
    return assistant(f"m{n}", text(f"a{n}", f"step {n} " + "log line\n" * 3000),
                     tool(f"t{n}", f"c{n}", "bash", {"cmd": f"make {n}", "args": list(range(50))},
                          "output line\n" * 3000))
