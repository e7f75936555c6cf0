"""A step of a session that loads many MCP tools against the same session with one tool, in
process, per wire format.

A session sends the same tool definitions at every step; each format takes their schemas its own
way (lowering/tool_schema.py: an object root, arrays given items, references under $defs), and
that should cost once per session, not once per step. Each call measures the ~10 KB conversation
of workload.measure_request grown by one more step (as bench_step.py does), with the memo; the
tools are --tools definitions of --properties nested properties each. Printed per format: the
median of the later calls with one tool and with the many, and their difference per step.
Usage: python bench/bench_tools.py [--tools 40] [--properties 8] [--steps 24]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import workload  # noqa: E402
from bench_step import grown  # noqa: E402

from in_process import timed  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402

FORMATS = (("anthropic", pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"), ("openai", pb.PROVIDER_OPENAI, "gpt-5"),
           ("openai-compatible", pb.PROVIDER_OPENAI_COMPATIBLE, "kimi-k2.5"),
           ("openai-responses", pb.PROVIDER_OPENAI_RESPONSES, "gpt-5"), ("gemini", pb.PROVIDER_GEMINI, "gemini-2.5-pro"),
           ("bedrock", pb.PROVIDER_BEDROCK, "us.anthropic.claude-sonnet-4-5-20250929-v1:0"))


def mcp_schema(properties: int) -> dict:
    """An MCP server's input schema: nested objects, an array without items, a reused definition."""
    inner = {f"field_{j}": {"type": "string", "description": "One of the record's fields, as the API names it."}
             for j in range(properties)}
    return {"type": "object", "properties": {
        **{f"group_{i}": {"type": "object", "properties": inner} for i in range(properties)},
        "tags": {"type": "array"}, "owner": {"$ref": "#/properties/group_0"}}, "required": ["group_0"]}


def with_tools(request: pb.MeasureRequest, count: int, properties: int) -> pb.MeasureRequest:
    out = pb.MeasureRequest()
    out.CopyFrom(request)
    schema = json.dumps(mcp_schema(properties))
    for k in range(count):
        out.tools.add(name=f"mcp__tracker__tool_{k}", description="Query the tracker. " * 12, input_schema_json=schema)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", type=int, default=40)
    ap.add_argument("--properties", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    args = ap.parse_args()
    print(f"in-process Measure, ~10 KB grown by 1 step a call, {args.steps} calls; {args.tools} tools of "
          f"{args.properties}x{args.properties} nested properties against 1 tool")
    for name, provider, model_id in FORMATS:
        base = workload.measure_request(10_000)
        base.model.provider, base.model.id = provider, model_id
        rows = [timed([r.SerializeToString() for r in grown(with_tools(base, n, args.properties), args.steps)])[1]
                for n in (0, args.tools)]
        print(f"  {name:18} 1 tool {rows[0]:6.3f} ms   {args.tools} tools {rows[1]:6.3f} ms   "
              f"difference {rows[1] - rows[0]:6.3f} ms a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
