"""Deterministic agent-like conversations of a given size, as protobuf requests."""
from __future__ import annotations

import json
import random

from contextsvc.v1 import context_pb2 as pb

_WORDS = ("the function returns a value when the test passes but the parser fails on nested input "
          "so we read the file again and fix the import error in src/app/main.py").split()
_CODE = 'def handle(request):\n    """Route one request."""\n    if not request.path:\n        raise ValueError("empty path")\n    return ROUTES[request.path](request)\n'


def _prose(rng, n):
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def agent_tools(n: int = 30) -> list:
    """n tool definitions the size a coding agent sends (with MCP servers, 30 or more): each a
    described object of 8 parameters, about 1.3 KB of schema."""
    tools = []
    for i in range(n):
        schema = {"type": "object", "required": ["p0"], "properties": {
            f"p{j}": {"type": "string", "description": f"parameter {j} of tool {i}: " + "the detail " * 8}
            for j in range(8)}}
        tools.append(pb.ToolDefinition(name=f"tool_{i}", description=f"Tool {i} reads, edits or runs things. " * 6,
                                       input_schema_json=json.dumps(schema)))
    return tools


def agent_system(target_bytes: int = 20_000) -> pb.SystemPrompt:
    """A system prompt the size a coding agent sends (instructions, rules, environment)."""
    rules = "Keep the change small, run the tests after every edit, and say what you changed. "
    return pb.SystemPrompt(soul="You are a coding agent working in a repository. " + rules * (target_bytes // len(rules)),
                           agent_prompt="Be precise.")


def conversation(target_bytes: int, seed: int = 7) -> pb.Conversation:
    """User/assistant turns with text, tool calls and outputs until about target_bytes of text."""
    rng = random.Random(seed)
    msgs, size, i = [], 0, 0
    while size < target_bytes:
        i += 1
        if i % 2:
            t = _prose(rng, rng.randint(8, 40))
            msgs.append(pb.Message(id=f"msg_{i:06d}", role=pb.ROLE_USER,
                                   parts=[pb.Part(id=f"p{i}a", text=pb.TextPart(text=t))]))
            size += len(t)
        else:
            out = _CODE * rng.randint(1, 12) + "你好，世界 😀\n" * rng.randint(0, 2)
            t = _prose(rng, rng.randint(10, 60))
            inp = json.dumps({"path": f"src/mod{rng.randint(1, 99)}.py", "limit": 200})
            msgs.append(pb.Message(
                id=f"msg_{i:06d}", role=pb.ROLE_ASSISTANT, time_completed_ms=1,
                usage=pb.Usage(input=1000 + i * 50, output=200),
                parts=[pb.Part(id=f"p{i}s", step_start=pb.StepStartPart()),
                       pb.Part(id=f"p{i}a", text=pb.TextPart(text=t)),
                       pb.Part(id=f"p{i}b", tool=pb.ToolPart(call_id=f"call_{i}", tool="read", state=pb.ToolState(
                           status=pb.TOOL_STATUS_COMPLETED, input_json=inp, output=out)))]))
            size += len(t) + len(out) + len(inp)
    if msgs[-1].role != pb.ROLE_USER:
        msgs.append(pb.Message(id=f"msg_{i + 1:06d}", role=pb.ROLE_USER,
                               parts=[pb.Part(id="plast", text=pb.TextPart(text="continue"))]))
    return pb.Conversation(session_id="bench", messages=msgs)


def measure_request(target_bytes: int) -> pb.MeasureRequest:
    return pb.MeasureRequest(
        conversation=conversation(target_bytes),
        model=pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                       limits=pb.ModelLimits(context=200_000, output=64_000)),
        tools=[pb.ToolDefinition(name="read", description="Read a file",
                                 input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')],
        system=pb.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be precise."),
    )
