"""The judges themselves: each accepts a known-good body and refuses each known-bad one for the
rule it breaks, so a judge that accepts everything (or refuses everything) fails here.

Every known-bad body is the known-good one with one change; the test names the rule the judge
must report.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from contextsvc.lowering.registry import FORMATS, PROVIDERS
from contextsvc.lowering.tool_ids import wire_name
from judges import judge_for
from judges.bedrock_judge import judge as bedrock_judge
from judges._common import parse_data_url

PNG64 = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
PDF64 = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()
SVG64 = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()
GOLDEN = Path(__file__).parent / "golden"
MCP_NAME = "github.create_issue"  # an MCP tool's name: the dot is refused by Anthropic and OpenAI


def rules(problems) -> set:
    return {p.split(":", 1)[0] for p in problems}


def refuses(provider, body, rule, where=""):
    problems = judge_for(provider)(body)
    assert rule in rules(problems), f"{provider} judge accepted a body breaking {rule}: {problems}"
    if where:
        assert any(where in p for p in problems if p.startswith(rule + ":")), problems
    return problems


# ---- Anthropic Messages ---------------------------------------------------------------------

def anthropic_body():
    return {
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tools": [{"name": "read", "description": "Read a file",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                   "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fix it"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "c2lnbmF0dXJl"},
                                              {"type": "text", "text": " "},
                                              {"type": "thinking", "thinking": "u", "signature": "c2lnbmF0dXJm"},
                                              {"type": "tool_use", "id": "toolu_01A", "name": "read", "input": {"path": "a", "n": 1.5}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                          "content": [{"type": "text", "text": "ok"},
                                                      {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": PNG64}}]},
                                         {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64}},
                                         {"type": "text", "text": "Go on", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}, {"type": "text", "text": "Done."}]},
            {"role": "user", "content": "Thanks"},
            {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]},
        ],
    }


def test_anthropic_accepts_good_body():
    assert judge_for("anthropic")(anthropic_body()) == []


def test_anthropic_accepts_no_tool_choice():
    body = anthropic_body()
    body["tool_choice"] = {"type": "none"}
    assert judge_for("anthropic")(body) == []


def _a(change):
    body = anthropic_body()
    change(body)
    return body


@pytest.mark.parametrize("change,rule,where", [
    (lambda b: b["messages"][0]["content"][1]["source"].update(extra=1), "schema", "messages[0].content[1].source.extra"),
    (lambda b: b["messages"][2]["content"][0]["content"][0].update(citations_x=[]), "schema", "content[0].content[0].citations_x"),
    (lambda b: b.update(stream_mode="x"), "schema", "stream_mode"),
    (lambda b: b.update(max_tokens="1024"), "schema", "max_tokens"),
    (lambda b: b["messages"].__setitem__(4, {"role": "user", "content": 5}), "schema", "messages[4]"),
    (lambda b: b["messages"][3]["content"].append({"type": "frobnicate"}), "schema", "messages[3].content[2]"),
    (lambda b: b["messages"][2]["content"].__setitem__(1, {"type": "image", "source": {
        "type": "base64", "media_type": "image/svg+xml", "data": SVG64}}), "image-media-type", "messages[2].content[1]"),
    (lambda b: b["messages"][0]["content"][1]["source"].update(data="not base64!"), "base64", "messages[0].content[1]"),
    (lambda b: b["messages"][5]["content"][0]["source"].update(url="data:image/png,abc"), "media-url", "messages[5]"),
    (lambda b: b["messages"][2]["content"][1]["source"].update(media_type="application/pdf;name=a.pdf"),
     "document-media-type", "messages[2].content[1]"),
    (lambda b: b["messages"][0]["content"][0].update(text=""), "empty-text", "messages[0].content[0]"),
    (lambda b: b["messages"][2]["content"][0]["content"][0].update(text=""), "empty-text", "messages[2].content[0].content[0]"),
    (lambda b: b["messages"][4].update(content=" \n"), "blank-text", "messages[4]"),
    (lambda b: b["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "So "}]}),
     "trailing-whitespace", "messages[6]"),
    # a step of whitespace alone, as its own message between a tool result and the next user turn
    (lambda b: b["messages"].insert(3, {"role": "assistant", "content": [{"type": "text", "text": "\n\n"}]}),
     "blank-text", "messages[3].content[0]"),
    (lambda b: b["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "All green."},
                                                                       {"type": "text", "text": "Done.\n\n"}]}),
     "trailing-whitespace", "messages[6]"),
    (lambda b: b["messages"].clear(), "messages-empty", "messages"),
    (lambda b: b["messages"].insert(0, {"role": "assistant", "content": "Hi"}), "first-user", "messages[0]"),
    (lambda b: b["messages"][2]["content"][0].update(tool_use_id="toolu_02B"), "tool-pairing", "toolu_02B"),
    (lambda b: b["messages"][2]["content"].reverse(), "tool-result-first", "messages[2]"),
    (lambda b: b["messages"][2]["content"].pop(0), "tool-pairing", "toolu_01A"),
    (lambda b: b.pop("tools"), "tools-defined", "tools"),
    (lambda b: (b["messages"][1]["content"][3].update(id="functions.read:1"),
                b["messages"][2]["content"][0].update(tool_use_id="functions.read:1")), "tool-id", "messages[1].content[3]"),
    (lambda b: b["messages"][3]["content"].insert(0, dict(b["messages"][1]["content"][3])), "tool-id-unique", "messages[3]"),
    (lambda b: b["messages"][1]["content"][0].update(cache_control={"type": "ephemeral"}), "marker-on-thinking",
     "messages[1].content[0]"),
    (lambda b: b["messages"][3]["content"][0].update(cache_control={"type": "ephemeral"}), "marker-on-thinking",
     "messages[3].content[0]"),
    (lambda b: [x.update(cache_control={"type": "ephemeral"}) for x in
                (b["messages"][0]["content"][0], b["messages"][3]["content"][1])], "marker-count", "body"),
    (lambda b: b["messages"][0]["content"][0].update(cache_control={"type": "ephemeral", "ttl": "1h"}) or
     b["system"][0]["cache_control"].pop("ttl"), "marker-ttl-order", "messages[0].content[0]"),
    (lambda b: b["messages"][4].update(cache_control={"type": "ephemeral"}), "marker-place", "messages[4]"),
    (lambda b: b["tools"][0].update(name=MCP_NAME), "tool-name", "tools[0].name"),
    (lambda b: b["tools"][0].update(name="r" * 65), "tool-name", "tools[0].name"),
    (lambda b: b["messages"][1]["content"][3].update(name=MCP_NAME), "tool-name", "messages[1].content[3].name"),
])
def test_anthropic_refuses(change, rule, where):
    refuses("anthropic", _a(change), rule, where)


def test_anthropic_accepts_a_mapped_mcp_name_in_tools_and_history():
    wire = wire_name(FORMATS["anthropic"], MCP_NAME)
    body = _a(lambda b: (b["tools"][0].update(name=wire), b["messages"][1]["content"][3].update(name=wire)))
    assert wire != MCP_NAME and judge_for("anthropic")(body) == []


def test_lazy_iterables_are_forced():
    """The SDK types declare lists as Iterable, which pydantic alone validates only when someone
    consumes it: the judge must see the bad block inside anyway."""
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from pydantic import TypeAdapter

    body = anthropic_body()
    body["messages"][3]["content"].append({"type": "text", "text": 5})
    TypeAdapter(MessageCreateParamsNonStreaming).validate_python(body)  # lazy: passes
    refuses("anthropic", body, "schema", "messages[3].content[2].text")


# ---- OpenAI Chat Completions and the gateways -------------------------------------------------

CHAT = ("openai", "openai-compatible", "openrouter", "alibaba", "copilot")
MARKER = {"openai-compatible": "cache_control", "openrouter": "cache_control", "alibaba": "cache_control",
          "copilot": "copilot_cache_control"}


def chat_body(provider="openai"):
    body = {
        "model": "gpt-5", "max_completion_tokens": 1000, "tool_choice": "auto",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are a coding agent."}]},
            {"role": "user", "content": "Fix it"},
            {"role": "assistant", "content": "Which file?"},
            {"role": "user", "content": [{"type": "text", "text": "This one"},
                                         {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                                         {"type": "file", "file": {"filename": "r.pdf",
                                                                   "file_data": f"data:application/pdf;base64,{PDF64}"}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "fine"}]},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "read", "description": "Read a file",
                                                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
        "prompt_cache_key": "sess-1",
    }
    if provider in MARKER:
        key = MARKER[provider]
        body["messages"][0]["content"][-1][key] = {"type": "ephemeral"}
        body["messages"][8]["content"][-1][key] = {"type": "ephemeral"}
    return body


@pytest.mark.parametrize("provider", CHAT)
def test_chat_accepts_good_body(provider):
    assert judge_for(provider)(chat_body(provider)) == []


def test_chat_gateway_extensions_taken_off_and_checked():
    body = chat_body("openrouter")
    body["provider"] = {"order": ["anthropic"]}
    body["reasoning"] = {"effort": "high"}
    assert judge_for("openrouter")(body) == []
    refuses("openai", {**chat_body("openai"), "provider": {"order": ["anthropic"]}}, "schema", "provider")
    refuses("openrouter", {**body, "transforms": "middle-out"}, "extension", "transforms")
    alibaba = {**chat_body("alibaba"), "enable_thinking": True}
    assert judge_for("alibaba")(alibaba) == []
    refuses("alibaba", {**alibaba, "enable_thinking": "yes"}, "extension", "enable_thinking")


def test_chat_judge_does_not_change_the_body():
    body = chat_body("copilot")
    before = json.dumps(body, sort_keys=True)
    judge_for("copilot")(body)
    assert json.dumps(body, sort_keys=True) == before


def test_openai_takes_foreign_id_alphabet_but_not_long_ids():
    body = chat_body("openai")
    body["messages"][4]["tool_calls"][0]["id"] = body["messages"][5]["tool_call_id"] = "functions.read:1"
    assert judge_for("openai")(body) == []
    refuses("openrouter", _c("openrouter", lambda b: (b["messages"][4]["tool_calls"][0].update(id="functions.read:1"),
                                                      b["messages"][5].update(tool_call_id="functions.read:1"))),
            "tool-id", "messages[4].tool_calls[0]")


def _c(provider, change):
    body = chat_body(provider)
    change(body)
    return body


CHAT_BAD = [
    (lambda b: b["messages"][3]["content"][1]["image_url"].update(detail_level="high"), "schema",
     "messages[3].content[1].image_url.detail_level"),
    (lambda b: b.update(max_completion_tokens="1000"), "schema", "max_completion_tokens"),
    (lambda b: b["messages"][6]["content"].append({"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
     "schema", "messages[6]"),
    (lambda b: b["messages"][3]["content"][1]["image_url"].update(url=f"data:image/svg+xml;base64,{SVG64}"),
     "image-url", "messages[3].content[1]"),
    (lambda b: b["messages"][3]["content"][1]["image_url"].update(url="data:image/png,rawbytes"), "image-url",
     "messages[3].content[1]"),
    (lambda b: b["messages"][3]["content"][1]["image_url"].update(url=f"data:image/png;name=a.png;base64,{PNG64}"),
     "image-url", "messages[3].content[1]"),
    (lambda b: b["messages"][3]["content"][1]["image_url"].update(url="data:image/png;base64,@@@"), "image-url",
     "messages[3].content[1]"),
    (lambda b: b["messages"][3]["content"][3]["file"].update(file_data="https://example.com/r.pdf"), "file-data",
     "messages[3].content[3]"),
    (lambda b: b["messages"].insert(1, {"role": "assistant", "content": "Hello"}), "first-user", "messages[1]"),
    (lambda b: b["messages"].pop(6), "tool-pairing", "call_2"),
    (lambda b: b["messages"][5].update(tool_call_id="call_9"), "tool-pairing", "call_9"),
    (lambda b: b["messages"].insert(6, {"role": "user", "content": "wait"}), "tool-pairing", "call_2"),
    (lambda b: b["messages"][4]["tool_calls"][1].update(id="call_1"), "tool-id-unique", "messages[4].tool_calls[1]"),
    (lambda b: (b["messages"][4]["tool_calls"][0].update(id="call_" + "x" * 40),
                b["messages"][5].update(tool_call_id="call_" + "x" * 40)), "tool-id", "messages[4].tool_calls[0]"),
    (lambda b: b.pop("tools"), "tools-defined", "tools"),
    (lambda b: b["tools"][0]["function"].update(name="read file"), "tool-name", "tools[0]"),
    (lambda b: b["tools"][0]["function"].update(name=MCP_NAME), "tool-name", "tools[0].function.name"),
    (lambda b: b["messages"][4]["tool_calls"][1]["function"].update(name=MCP_NAME), "tool-name",
     "messages[4].tool_calls[1].function.name"),
]


@pytest.mark.parametrize("provider", CHAT)
@pytest.mark.parametrize("change,rule,where", CHAT_BAD)
def test_chat_refuses(provider, change, rule, where):
    refuses(provider, _c(provider, change), rule, where)


@pytest.mark.parametrize("provider", CHAT)
def test_chat_accepts_a_mapped_mcp_name_in_tools_and_history(provider):
    wire = wire_name(FORMATS[provider], MCP_NAME)
    body = _c(provider, lambda b: [x.update(name=wire) for x in
                                   (b["tools"][0]["function"], *(c["function"] for c in b["messages"][4]["tool_calls"]))])
    assert wire != MCP_NAME and judge_for(provider)(body) == []


@pytest.mark.parametrize("provider", sorted(MARKER))
def test_gateway_marker_rules(provider):
    key = MARKER[provider]

    def five(b):
        for i in (1, 2, 3):
            b["messages"][i]["content"] = [{"type": "text", "text": "x", key: {"type": "ephemeral"}}]
    refuses(provider, _c(provider, five), "marker-count", "body")
    refuses(provider, _c(provider, lambda b: b["messages"][1].update({key: {"type": "ephemeral"}})), "marker-place",
            "messages[1]")
    refuses(provider, _c(provider, lambda b: b["messages"][0]["content"][0].update({key: {"type": "persistent"}})),
            "marker-value", "messages[0].content[0]")
    refuses(provider, _c(provider, lambda b: b["tools"][0].update({key: {"type": "ephemeral"}})), "schema", "tools[0]")
    other = "copilot_cache_control" if key == "cache_control" else "cache_control"
    refuses(provider, _c(provider, lambda b: b["messages"][1].update(
        content=[{"type": "text", "text": "x", other: {"type": "ephemeral"}}])), "schema", "messages[1].content[0]")


def test_openai_takes_no_markers():
    refuses("openai", chat_body("openai-compatible"), "schema", "messages[0].content[0].cache_control")


# ---- OpenAI Responses ---------------------------------------------------------------------------

def responses_body():
    return {
        "model": "gpt-5", "max_output_tokens": 1000, "store": False, "tool_choice": "none",
        "input": [
            {"role": "developer", "content": "You are a coding agent."},
            {"role": "user", "content": [{"type": "input_text", "text": "Fix it"},
                                         {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}",
                                          "detail": "auto"},
                                         {"type": "input_image", "image_url": "https://example.com/a.jpg",
                                          "detail": "auto"},
                                         {"type": "input_file", "filename": "r.pdf",
                                          "file_data": f"data:application/pdf;base64,{PDF64}"},
                                         {"type": "input_file", "filename": "s.pdf",
                                          "file_url": "https://example.com/s.pdf"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}], "encrypted_content": "ZW5j"},
            {"role": "assistant", "content": "Reading."},
            {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"path\":\"a\"}"},
            {"type": "function_call", "call_id": "functions.read:2", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
            {"type": "function_call_output", "call_id": "functions.read:2",
             "output": [{"type": "input_text", "text": "fine"},
                        {"type": "input_image", "image_url": f"data:image/webp;base64,{PNG64}", "detail": "auto"}]},
            {"role": "assistant", "content": "Done."},
            {"type": "compaction", "encrypted_content": "Y29tcGFjdGVk"},
            {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
        ],
        "context_management": [{"type": "compaction", "compact_threshold": 150000}],
        "tools": [{"type": "function", "name": "read", "description": "Read a file", "strict": False,
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "prompt_cache_key": "sess-1",
    }


def test_responses_accepts_good_body():
    assert judge_for("openai-responses")(responses_body()) == []


def _r(change):
    body = responses_body()
    change(body)
    return body


@pytest.mark.parametrize("change,rule,where", [
    (lambda b: b.update(max_output_tokens="1000"), "schema", "max_output_tokens"),
    (lambda b: b.update(max_tokens=1000), "schema", "max_tokens"),
    (lambda b: b["input"][1]["content"][1].update(detail_level="high"), "schema", "input[1].content[1].detail_level"),
    (lambda b: b["input"][1]["content"][1].pop("detail"), "schema", "input[1].content[1].detail"),
    (lambda b: b["tools"][0].pop("strict"), "schema", "tools[0].strict"),
    (lambda b: b["tools"][0].update(function={"name": "read"}), "schema", "tools[0].function"),
    (lambda b: b["input"][0].update(cache_control={"type": "ephemeral"}), "schema", "input[0].cache_control"),
    (lambda b: b.update(max_output_tokens=15), "max-output", "max_output_tokens"),
    (lambda b: b.update(prompt_cache_key="k" * 65), "prompt-cache-key", "prompt_cache_key"),
    (lambda b: b["input"][2].update(id="rs_01"), "item-id", "input[2]"),
    (lambda b: b["input"][3].update(id="msg_01"), "item-id", "input[3]"),
    (lambda b: b["input"][2].pop("encrypted_content"), "reasoning-state", "input[2]"),
    (lambda b: b["input"][3].update(content=[{"type": "input_text", "text": "Reading."}]), "assistant-content",
     "input[3].content[0]"),
    (lambda b: b["input"][1]["content"][1].update(image_url=f"data:image/svg+xml;base64,{SVG64}"), "image-url",
     "input[1].content[1]"),
    (lambda b: b["input"][1]["content"][1].update(image_url=f"data:image/png;name=a.png;base64,{PNG64}"),
     "image-url", "input[1].content[1]"),
    (lambda b: b["input"][7]["output"][1].update(image_url="data:image/png;base64,@@@"), "image-url",
     "input[7].output[1]"),
    (lambda b: b["input"][1]["content"][3].update(file_data="https://example.com/r.pdf"), "file-data",
     "input[1].content[3]"),
    (lambda b: b["input"][1]["content"][4].update(file_url="file:///etc/passwd"), "file-url", "input[1].content[4]"),
    (lambda b: b["input"].pop(7), "tool-pairing", "functions.read:2"),
    (lambda b: b["input"][6].update(call_id="call_9"), "tool-pairing", "call_9"),
    (lambda b: b["input"].insert(4, b["input"].pop(6)), "tool-pairing", "call_1"),
    (lambda b: b["input"][5].update(call_id="call_1"), "tool-id-unique", "input[5]"),
    (lambda b: (b["input"][4].update(call_id="call_" + "x" * 60), b["input"][6].update(call_id="call_" + "x" * 60)),
     "tool-id", "input[4]"),
    (lambda b: b.pop("tools"), "tools-defined", "tools"),
    (lambda b: b["tools"][0].update(name=MCP_NAME), "tool-name", "tools[0].name"),
    (lambda b: b["input"][5].update(name=MCP_NAME), "tool-name", "input[5].name"),
    # the provider's compaction item and its server-side compaction settings
    (lambda b: b["input"][9].pop("encrypted_content"), "schema", "input[9].encrypted_content"),
    (lambda b: b["input"][9].update(encrypted_content=""), "compaction-state", "input[9]"),
    (lambda b: b["input"][9].update(id="cmp_01"), "item-id", "input[9]"),
    (lambda b: b["input"][9].update(summary="what happened"), "schema", "input[9].summary"),
    (lambda b: b["context_management"][0].update(type="clear_tool_uses"), "context-management",
     "context_management[0].type"),
    (lambda b: b["context_management"][0].update(compact_threshold=0), "context-management",
     "context_management[0].compact_threshold"),
    (lambda b: b["context_management"][0].update(compact_threshold="150000"), "schema",
     "context_management[0].compact_threshold"),
])
def test_responses_refuses(change, rule, where):
    refuses("openai-responses", _r(change), rule, where)


def test_responses_judge_does_not_change_the_body():
    body = responses_body()
    before = json.dumps(body, sort_keys=True)
    judge_for("openai-responses")(body)
    assert json.dumps(body, sort_keys=True) == before


# ---- Bedrock Converse -------------------------------------------------------------------------

def bedrock_body():
    return {
        "messages": [
            {"role": "user", "content": [{"text": "Fix it"}, {"image": {"format": "png", "source": {"bytes": PNG64}}},
                                         {"document": {"format": "pdf", "name": "report (1)", "source": {"bytes": PDF64}}}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "t", "signature": "c2ln"}}},
                {"text": "Reading."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "read", "input": {"path": "a", "n": 1.5}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_1", "status": "success",
                                "content": [{"text": "ok"}, {"image": {"format": "webp", "source": {"bytes": PNG64}}}]}},
                {"text": "Go on"}, {"cachePoint": {"type": "default"}}]},
            {"role": "assistant", "content": [{"reasoningContent": {"redactedContent": "ZW5j"}}, {"text": "Done."}]},
            {"role": "user", "content": [{"text": "Thanks"}]},
        ],
        "system": [{"text": "You are a coding agent."}, {"cachePoint": {"type": "default"}}],
        "inferenceConfig": {"maxTokens": 1000},
        "toolConfig": {"tools": [{"toolSpec": {"name": "read", "description": "Read a file",
                                               "inputSchema": {"json": {"type": "object", "properties": {}}}}},
                                 {"cachePoint": {"type": "default"}}]},
    }


def test_bedrock_accepts_good_body():
    assert judge_for("bedrock")(bedrock_body()) == []


def _b(change):
    body = bedrock_body()
    change(body)
    return body


@pytest.mark.parametrize("change,rule,where", [
    (lambda b: b["messages"][0]["content"][1]["image"]["source"].update(uri="x"), "schema", "image.source"),
    (lambda b: b.update(modelId="m"), "schema", "modelId"),
    (lambda b: b["inferenceConfig"].update(maxTokens="1000"), "schema", "maxTokens"),
    (lambda b: b["messages"][4]["content"][0].update(image={"format": "png", "source": {"bytes": PNG64}}), "schema",
     "messages[4].content[0]"),
    (lambda b: b["messages"][1]["content"][1].update(text=" "), "blank-text", "messages[1].content[1]"),
    (lambda b: b["messages"][2]["content"][0]["toolResult"]["content"][0].update(text="\n"), "blank-text",
     "toolResult.content[0]"),
    (lambda b: b["messages"][0]["content"][1]["image"].update(format="svg+xml"), "enum", "image.format"),
    (lambda b: b["messages"][0]["content"][1]["image"]["source"].update(bytes="%%%"), "base64", "image.source.bytes"),
    (lambda b: b["messages"][4]["content"].append({"document": {"format": "pdf", "name": "report (1)",
                                                                "source": {"bytes": PDF64}}}),
     "document-name-unique", "messages[4].content[1]"),
    (lambda b: b["messages"][0]["content"][2]["document"].update(name="report.pdf"), "document-name", "messages[0]"),
    (lambda b: b["messages"][0]["content"][2]["document"].update(name="a" * 201), "document-name", "messages[0]"),
    (lambda b: b["messages"][0]["content"].pop(0), "document-needs-text", "messages[0]"),
    (lambda b: b["messages"].insert(0, {"role": "assistant", "content": [{"text": "Hi"}]}), "first-user", "messages[0]"),
    (lambda b: b["messages"][0]["content"].extend([{"cachePoint": {"type": "default"}}] * 2), "marker-count", "body"),
    (lambda b: b.pop("toolConfig"), "tools-defined", "toolConfig"),
    (lambda b: b["messages"][2]["content"].pop(0), "tool-pairing", "tooluse_1"),
    (lambda b: b["messages"][2]["content"][0]["toolResult"].update(toolUseId="tooluse_9"), "tool-pairing", "tooluse_9"),
    (lambda b: (b["messages"][1]["content"][2]["toolUse"].update(toolUseId="t" * 65),
                b["messages"][2]["content"][0]["toolResult"].update(toolUseId="t" * 65)), "length", "toolUseId"),
    (lambda b: (b["messages"][1]["content"][2]["toolUse"].update(toolUseId="tool use"),
                b["messages"][2]["content"][0]["toolResult"].update(toolUseId="tool use")), "pattern", "toolUseId"),
    (lambda b: b["messages"].insert(1, {"role": "user", "content": [{"text": "and"}]}), "alternate", "messages[1]"),
    (lambda b: b["messages"].append({"role": "assistant", "content": [{"text": "All green.\n\n"}]}),
     "trailing-whitespace", "messages[5]"),
    (lambda b: b["messages"].clear(), "messages-empty", "messages"),
])
def test_bedrock_refuses(change, rule, where):
    refuses("bedrock", _b(change), rule, where)


@pytest.mark.parametrize("provider,model_id,refused", [
    ("anthropic", "claude-sonnet-4-6", True), ("anthropic", "claude-opus-4-7", True),
    ("anthropic", "claude-sonnet-5", True), ("anthropic", "claude-next", True),
    ("anthropic", "claude-sonnet-4-5", False), ("anthropic", "claude-opus-4-20250514", False),
    ("bedrock", "us.anthropic.claude-opus-4-6-v1:0", True), ("bedrock", "anthropic.claude-haiku-4-5-20251001-v1:0", False),
    ("bedrock", "", False),
    ("openrouter", "anthropic/claude-sonnet-4.6", True), ("copilot", "claude-opus-4.7", True),
    ("openrouter", "anthropic/claude-3.7-sonnet", False), ("openai", "gpt-5", False),
])
def test_a_last_turn_of_the_models_own_where_the_model_refuses_it(provider, model_id, refused):
    """Claude from 4.6 on refuses a conversation that ends with its own turn (a prefill)."""
    if provider == "anthropic":
        body = anthropic_body()
        body["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "All green."}]})
        problems = judge_for(provider)({**body, "model": model_id})
    elif provider == "bedrock":
        body = bedrock_body()
        body["messages"].append({"role": "assistant", "content": [{"text": "All green."}]})
        problems = bedrock_judge(body, model_id=model_id)
    else:
        body = chat_body(provider)
        body["messages"].append({"role": "assistant", "content": "All green."})
        problems = judge_for(provider)({**body, "model": model_id})
    assert ("prefill" in rules(problems)) == refused, problems
    assert rules(problems) <= {"prefill"}, problems


# ---- Gemini -------------------------------------------------------------------------------------

def gemini_body():
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "Fix it"}, {"inlineData": {"mimeType": "image/png", "data": PNG64}},
                                       {"inlineData": {"mimeType": "application/pdf", "data": PDF64}}]},
            {"role": "model", "parts": [{"text": "Reading."},
                                        {"functionCall": {"name": "read", "args": {"path": "a", "n": 1.5}},
                                         "thoughtSignature": "c2lnbmF0dXJl"},
                                        {"functionCall": {"name": "bash", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {"content": "ok"}}},
                                       {"functionResponse": {"name": "bash", "response": {"content": "ok"}}}]},
            {"role": "model", "parts": [{"text": "Done."}]},
            {"role": "user", "parts": [{"text": "Thanks"}]},
        ],
        "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
        "tools": [{"functionDeclarations": [
            {"name": "read", "description": "Read a file",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                             "n": {"type": "number", "minimum": 1e-07}},
                            "required": ["path"]}},
            {"name": "bash", "description": "Run a command",
             "parametersJsonSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                      "additionalProperties": False}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
        "generationConfig": {"maxOutputTokens": 1000},
    }


def test_gemini_accepts_good_body():
    assert judge_for("gemini")(gemini_body()) == []


def _g(change):
    body = gemini_body()
    change(body)
    return body


PARAMS = ("tools", 0, "functionDeclarations", 0, "parameters")


def _params(b):
    return b["tools"][0]["functionDeclarations"][0]["parameters"]


@pytest.mark.parametrize("change,rule,where", [
    (lambda b: b["contents"][0]["parts"][1]["inlineData"].update(displayName2="a"), "schema", "inlineData.displayName2"),
    (lambda b: b.update(cachedContents="x"), "schema", "cachedContents"),
    (lambda b: b["generationConfig"].update(maxOutputTokens="1000"), "schema", "maxOutputTokens"),
    (lambda b: b["contents"][0]["parts"][1]["inlineData"].update(data="@@@"), "base64", "contents[0].parts[1]"),
    (lambda b: _params(b).update({"$schema": "http://json-schema.org/draft-07/schema#"}), "openapi-schema", "$schema"),
    (lambda b: _params(b)["properties"]["path"].update(additionalProperties=False), "openapi-schema",
     "properties.path.additionalProperties"),
    (lambda b: _params(b)["properties"].update(x={"$ref": "#/definitions/x"}), "openapi-schema", "$ref"),
    (lambda b: b["tools"][0]["functionDeclarations"][0].update(parametersJsonSchema={"type": "object"}),
     "openapi-schema", "functionDeclarations[0]"),
    (lambda b: b["contents"][0]["parts"][1]["inlineData"].update(mimeType="image/gif"), "inline-media-type",
     "contents[0].parts[1]"),
    (lambda b: b["contents"][0]["parts"][1]["inlineData"].update(mimeType="image/svg+xml"), "inline-media-type",
     "contents[0].parts[1]"),
    (lambda b: b["contents"][1]["parts"][2].update(thoughtSignature=b["contents"][1]["parts"][1].pop("thoughtSignature")),
     "thought-signature", "contents[1].parts[1]"),
    (lambda b: b["contents"][1]["parts"][0].update(thoughtSignature=b["contents"][1]["parts"][1].pop("thoughtSignature")),
     "thought-signature", "contents[1].parts[1]"),
    (lambda b: b["contents"][2]["parts"].pop(), "tool-pairing", "contents[1]"),
    (lambda b: b["contents"][2]["parts"][1]["functionResponse"].update(name="grep"), "tool-pairing", "contents[1]"),
    (lambda b: b["contents"][4]["parts"].append({"functionResponse": {"name": "read", "response": {}}}),
     "tool-pairing", "contents[4]"),
    (lambda b: b["contents"].insert(0, {"role": "model", "parts": [{"text": "Hi"}]}), "first-user", "contents[0]"),
    (lambda b: b["contents"][3].update(role="assistant"), "role", "contents[3]"),
    (lambda b: b["contents"][3].update(parts=[]), "empty-parts", "contents[3]"),
    (lambda b: b["contents"][3]["parts"][0].update(text=""), "empty-text", "contents[3].parts[0]"),
    (lambda b: b.pop("tools"), "tools-defined", "tools"),
    (lambda b: b["tools"][0]["functionDeclarations"][0].update(name="1read"), "function-name", "functionDeclarations[0]"),
])
def test_gemini_refuses(change, rule, where):
    refuses("gemini", _g(change), rule, where)


# ---- shared pieces ------------------------------------------------------------------------------

def test_every_provider_has_a_judge():
    for provider in PROVIDERS:
        assert callable(judge_for(provider))
    with pytest.raises(KeyError):
        judge_for("nobody")


def test_data_urls_parse_as_rfc_2397():
    assert parse_data_url("data:image/png;name=a.png;base64,QUJD") == ("image/png", True, "QUJD")
    assert parse_data_url("data:,hello") == ("text/plain", False, "hello")
    assert parse_data_url("data:image/svg+xml,%3Csvg%3E") == ("image/svg+xml", False, "%3Csvg%3E")
    assert parse_data_url("https://x/y.png") is None


def test_judges_refuse_a_non_object():
    for provider in PROVIDERS:
        assert rules(judge_for(provider)([])) == {"schema"}


# ---- the committed goldens ----------------------------------------------------------------------

@pytest.mark.parametrize("provider", PROVIDERS)
def test_golden_body_is_accepted(provider):
    body = json.loads((GOLDEN / f"{provider}.json").read_text(encoding="utf-8"))
    assert judge_for(provider)(body) == []


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic"])
def test_golden_provider_compaction_is_accepted(provider):
    body = json.loads((GOLDEN / f"provider-compaction.{provider}.json").read_text(encoding="utf-8"))
    assert judge_for(provider)(body) == []


# ---- Anthropic context editing (a beta: checked with the SDK's beta type, header required) -----

CONTEXT_EDITS = {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 90000},
                            "keep": {"type": "tool_uses", "value": 5},
                            "clear_at_least": {"type": "input_tokens", "value": 5000}, "exclude_tools": ["read"]}]}
BETA = {"anthropic-beta": "context-management-2025-06-27"}


def test_anthropic_accepts_context_editing_with_its_beta():
    assert judge_for("anthropic")({**anthropic_body(), "context_management": CONTEXT_EDITS}, BETA) == []


@pytest.mark.parametrize("change,headers,rule,where", [
    (lambda e: None, {}, "beta-header", "context_management"),
    (lambda e: None, {"anthropic-beta": "prompt-caching-2024-07-31"}, "beta-header", "context_management"),
    (lambda e: e["edits"][0].update(keep={"type": "turns", "value": 5}), BETA, "schema", "context_management.edits[0].keep"),
    (lambda e: e["edits"][0].update(trigger={"type": "input_tokens", "value": "90000"}), BETA, "schema",
     "context_management.edits[0].trigger"),
    (lambda e: e["edits"][0].update(exclude="read"), BETA, "schema", "context_management.edits[0].exclude"),
])
def test_anthropic_refuses_context_editing(change, headers, rule, where):
    edits = json.loads(json.dumps(CONTEXT_EDITS))
    change(edits)
    problems = judge_for("anthropic")({**anthropic_body(), "context_management": edits}, headers)
    assert rule in rules(problems) and any(where in p for p in problems if p.startswith(rule + ":")), problems
