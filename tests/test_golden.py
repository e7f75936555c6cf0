"""Golden bodies: one conversation with every part kind and placeholder, lowered for each wire
format and compared byte for byte with a reviewed file in tests/golden/.

To regenerate after an intended change: CONTEXTSVC_WRITE_GOLDEN=1 python -m pytest tests/test_golden.py,
then review the diff of tests/golden/ before committing it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contextsvc import assemble, config, conversation as m
from contextsvc.lowering.registry import PROVIDERS

GOLDEN = Path(__file__).parent / "golden"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def conversation() -> m.Conversation:
    def p(pid, content):
        return m.Part(pid, content)

    return m.Conversation(session_id="sess-golden", messages=[
        m.Message("msg_01", m.USER, [p("a", m.Text("Fix the parser in src/parse.py")),
                                     p("b", m.Text("hidden note", ignored=True)),
                                     p("c", m.File("image/png", "screen.png", data=PNG))]),
        m.Message("msg_02", m.ASSISTANT, [
            p("d", m.StepStart()),
            p("e", m.Reasoning("Look at the file first.", signature="sig-abc")),
            p("f", m.Text("")),
            p("g", m.Reasoning("Then run tests.", signature="sig-def")),
            p("h", m.Tool("call_read", "read", m.COMPLETED, {"path": "src/parse.py"}, output="def parse(s):\n    return s\n")),
            p("i", m.Tool("call_old", "grep", m.COMPLETED, {"pattern": "TODO"}, output="x" * 50, time_compacted_ms=5)),
            p("j", m.StepFinish("tool-calls")),
            p("k", m.StepStart()),
            p("l", m.Text("Running the tests now.")),
            p("n", m.Tool("call_run", "bash", m.ERROR, {"command": "pytest -q"}, error="exit 1: 2 failed")),
            p("o", m.Tool("call_shot", "screenshot", m.COMPLETED, {}, output="captured",
                          attachments=[m.File("image/png", "shot.png", data=PNG)])),
            p("q", m.Tool("call_hang", "bash", m.RUNNING, {"command": "sleep 100"})),
        ], time_completed_ms=9, usage=m.Usage(input=1200, output=80)),
        m.Message("msg_03", m.ASSISTANT, [p("r", m.Text("partial answer"))], time_completed_ms=10,
                  error=m.MessageError("APIError", "boom")),
        m.Message("msg_04", m.USER, [p("s", m.Text("Also keep the API stable 你好 😀"))]),
    ])


def provider_compaction_conversation() -> m.Conversation:
    """A session OpenAI's server-side compaction ran in: the item it returned sits in the reply."""
    return m.Conversation(session_id="sess-golden", messages=[
        m.Message("msg_01", m.USER, [m.Part("a", m.Text("Fix the parser in src/parse.py"))]),
        m.Message("msg_02", m.ASSISTANT, [
            m.Part("b", m.StepStart()),
            m.Part("c", m.ProviderCompaction("openai-responses", "Y29tcGFjdGVkIGhpc3Rvcnk=")),
            m.Part("d", m.Text("Parser fixed.")),
        ], time_completed_ms=9, provider_id="openai-responses", model_id="model-x"),
        m.Message("msg_03", m.USER, [m.Part("e", m.Text("Now the tests"))]),
    ])


def body(provider: str, conv=conversation) -> bytes:
    inp = assemble.AssembleInput(
        conv(), m.Model("model-x", provider, m.ModelLimits(200_000, 0, 16_000)),
        [m.ToolDefinition("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})],
        m.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be brief.",
                       env=m.EnvInfo("/repo", True, "linux", "2026-12-02")),
        m.CompactionSettings())
    return assemble.assemble(inp, config.Config()).body


@pytest.mark.parametrize("provider", PROVIDERS)
def test_golden_body(provider):
    path = GOLDEN / f"{provider}.json"
    got = json.dumps(json.loads(body(provider)), ensure_ascii=False, indent=1) + "\n"
    if os.environ.get("CONTEXTSVC_WRITE_GOLDEN") == "1":
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic"])
def test_golden_provider_compaction(provider):
    """Verbatim to the provider that wrote it, dropped for another."""
    path = GOLDEN / f"provider-compaction.{provider}.json"
    got = json.dumps(json.loads(body(provider, provider_compaction_conversation)), ensure_ascii=False, indent=1) + "\n"
    if os.environ.get("CONTEXTSVC_WRITE_GOLDEN") == "1":
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
