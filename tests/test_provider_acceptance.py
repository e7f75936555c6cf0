"""Regression tests for bodies Anthropic and the OpenAI Chat family refused (docs/design.md §6,
"What the body must pass"), plus the shared pieces every format uses: tool ids and the media table."""
from __future__ import annotations

import base64
import json
import re

import pytest

from contextsvc import assemble, breakpoints, config, conversation as m
from contextsvc.errors import BadInput
from contextsvc.lowering import anthropic, bedrock, gemini, media, registry, tool_ids
from contextsvc.lowering.neutral import CLOSING_USER_TEXT
from judges import judge_for

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
PNG64 = base64.b64encode(PNG).decode()
CHAT = (m.OPENAI, m.OPENAI_COMPATIBLE, m.OPENROUTER, m.ALIBABA, m.COPILOT)
MARKED = (m.ANTHROPIC, m.BEDROCK, m.OPENAI_COMPATIBLE, m.OPENROUTER, m.ALIBABA, m.COPILOT)
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
READ = m.ToolDefinition("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})


def user(mid, *contents):
    return m.Message(mid, m.USER, [m.Part(f"{mid}-{k}", c) for k, c in enumerate(contents)])


def assistant(mid, *contents, model_id="model-x", provider_id=""):
    return m.Message(mid, m.ASSISTANT, [m.Part(f"{mid}-{k}", c) for k, c in enumerate(contents)],
                     time_completed_ms=1, model_id=model_id, provider_id=provider_id)


def read(call_id, output="x = 1\n", attachments=()):
    return m.Tool(call_id, "read", m.COMPLETED, {"path": "a.py"}, output=output, attachments=list(attachments))


def run(provider, messages, *, tools=(READ,), hints=(), model_id="model-x", **kw):
    inp = assemble.AssembleInput(m.Conversation(messages, "sess-acc"), m.Model(model_id, provider),
                                 list(tools), m.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be brief."),
                                 m.CompactionSettings(), policy=breakpoints.Policy(hints=list(hints)), **kw)
    return assemble.assemble(inp, config.Config())


def body(provider, messages, **kw):
    a = run(provider, messages, **kw)
    assert len(a.body) == a.measurement.body_bytes  # Measure's bytes are still Assemble's
    return json.loads(a.body)


def tool_turn(*calls):
    return [user("m1", m.Text("Look at a.py")), assistant("m2", *calls), user("m3", m.Text("Go on"))]


# ---- last step: tools stay, the provider's "no tool use" choice -------------------------------

NO_TOOL_USE = {m.ANTHROPIC: ("tool_choice", {"type": "none"}),
               m.GEMINI: ("toolConfig", {"functionCallingConfig": {"mode": "NONE"}}),
               **{p: ("tool_choice", "none") for p in (*CHAT, m.OPENAI_RESPONSES)}}


LAST_STEP, ASKED = dict(step=5, max_steps=5), dict(tools_disabled=True)


# Anthropic's last step keeps its tool choice (test_anthropic_keeps_the_tool_choice_on_the_last_step...)
@pytest.mark.parametrize("provider,how", [(p, how) for p in sorted(NO_TOOL_USE) for how in (LAST_STEP, ASKED)
                                          if not (p == m.ANTHROPIC and how is LAST_STEP)])
def test_disabled_tools_stay_defined_with_the_no_tool_choice(provider, how):
    b = body(provider, tool_turn(read("call_1")), **how)
    key, value = NO_TOOL_USE[provider]
    assert b["tools"] and b[key] == value
    assert '"read"' in json.dumps(b[next(k for k in b if k in ("messages", "contents", "input"))])  # the history's call


def test_bedrock_keeps_tool_config_on_the_last_step_and_relies_on_the_message():
    b = body(m.BEDROCK, tool_turn(read("call_1")), step=5, max_steps=5)
    assert b["toolConfig"]["tools"][0]["toolSpec"]["name"] == "read" and "toolChoice" not in b["toolConfig"]
    assert "MAXIMUM STEPS REACHED" in json.dumps(b["messages"][-1])


def test_anthropic_keeps_the_tool_choice_on_the_last_step_and_relies_on_the_message():
    """A changed tool_choice invalidates Anthropic's cached messages; the caller's own
    tools_disabled still sets it."""
    b = body(m.ANTHROPIC, tool_turn(read("call_1")), step=5, max_steps=5)
    assert b["tools"][0]["name"] == "read" and "tool_choice" not in b
    assert "MAXIMUM STEPS REACHED" in json.dumps(b["messages"][-1]) and judge_for(m.ANTHROPIC)(b) == []
    asked = body(m.ANTHROPIC, tool_turn(read("call_1")), step=5, max_steps=5, tools_disabled=True)
    assert asked["tool_choice"] == {"type": "none"}


def test_no_tool_choice_without_tools():
    b = body(m.ANTHROPIC, [user("m1", m.Text("hi"))], tools=(), tools_disabled=True)
    assert "tools" not in b and "tool_choice" not in b


# ---- tool call ids ----------------------------------------------------------------------------

def test_anthropic_maps_foreign_ids_alike_in_call_and_result():
    b = body(m.ANTHROPIC, tool_turn(read("functions.read:1"), read("functions.read:2")))
    uses = [x["id"] for x in b["messages"][1]["content"] if x["type"] == "tool_use"]
    results = [x["tool_use_id"] for x in b["messages"][2]["content"] if x["type"] == "tool_result"]
    assert uses == results and len(set(uses)) == 2
    assert all(ANTHROPIC_ID.match(i) for i in uses)


@pytest.mark.parametrize("provider", CHAT)
def test_openai_family_ids_fit_40_characters(provider):
    long_id = "fc_" + "0123456789" * 6
    b = body(provider, tool_turn(read(long_id), read("call_ok")))
    call, tool_a, tool_b = b["messages"][3]["tool_calls"], b["messages"][4], b["messages"][5]
    assert [c["id"] for c in call] == [tool_a["tool_call_id"], tool_b["tool_call_id"]]
    assert len(call[0]["id"]) <= 40 and call[1]["id"] == "call_ok"


@pytest.mark.parametrize("provider", registry.PROVIDERS)
def test_wire_ids_are_a_function_of_the_id_alone(provider):
    ids = ["call_1", "toolu_01AbC", "functions.read:1", "functions.read_1", "a b", "a/b", "x" * 100,
           "x" * 99 + "y", "é", "call_1 "]
    fmt = registry.FORMATS[provider]
    wire = [tool_ids.wire_id(fmt, i) for i in ids]
    assert len(set(wire)) == len(ids)  # no two ids merge
    assert tool_ids.wire_id(fmt, "call_1") == "call_1" and tool_ids.wire_id(fmt, "toolu_01AbC") == "toolu_01AbC"
    rule = fmt.ids
    assert all(len(w) <= rule.max_len and rule.valid.fullmatch(w) for w in wire)
    assert wire == [tool_ids.wire_id(fmt, i) for i in ids]


def test_a_new_id_never_rewrites_an_old_one():
    first = body(m.ANTHROPIC, tool_turn(read("functions.read:1")))
    later = body(m.ANTHROPIC, tool_turn(read("functions.read:1"), read("functions.read:1 ")))
    assert later["messages"][1]["content"][0] == first["messages"][1]["content"][0]



GATEWAYS = (m.OPENAI_COMPATIBLE, m.OPENROUTER, m.ALIBABA, m.COPILOT)


@pytest.mark.parametrize("provider", GATEWAYS)
def test_gateway_ids_keep_to_the_upstreams_alphabet(provider):
    # the gateways forward to Claude and Bedrock upstreams: ^[a-zA-Z0-9_-]+$, and OpenAI's 40
    b = body(provider, tool_turn(read("functions.read:1"), read("functions_read_1"), read("fc_" + "9" * 60)))
    calls = [c["id"] for c in b["messages"][3]["tool_calls"]]
    assert calls == [b["messages"][k]["tool_call_id"] for k in (4, 5, 6)]
    assert all(ANTHROPIC_ID.match(i) and len(i) <= 40 for i in calls) and len(set(calls)) == 3
    assert calls[1] == "functions_read_1"  # a valid id passes unchanged
    assert calls[0] == tool_ids.wire_id(registry.FORMATS[provider], "functions.read:1")  # a function of the id alone


def test_plain_openai_keeps_its_own_id_rule():
    b = body(m.OPENAI, tool_turn(read("functions.read:1")))
    assert b["messages"][3]["tool_calls"][0]["id"] == "functions.read:1" == b["messages"][4]["tool_call_id"]


# ---- the first message is the user's --------------------------------------------------------

HIDDEN_FIRST = [user("m1", m.Text("hidden", ignored=True)), assistant("m2", m.Text("Summary so far.")),
                user("m3", m.Text("Go on"))]


def test_anthropic_body_starts_with_a_user_message():
    b = body(m.ANTHROPIC, HIDDEN_FIRST)
    assert [x["role"] for x in b["messages"]] == ["user", "assistant", "user"]
    assert unmarked(b["messages"][0]["content"]) == [{"type": "text", "text": "[Conversation start]"}]


@pytest.mark.parametrize("provider", CHAT)
def test_openai_family_body_starts_with_a_user_message_after_the_system(provider):
    b = body(provider, HIDDEN_FIRST)
    roles = [x["role"] for x in b["messages"]]
    first = roles.index("user")
    assert set(roles[:first]) == {"system"} and roles[first:] == ["user", "assistant", "user"]
    content = b["messages"][first]["content"]
    assert (content if isinstance(content, str) else content[0]["text"]) == "[Conversation start]"


@pytest.mark.parametrize("provider", registry.PROVIDERS)
def test_the_lead_message_is_constant_and_only_when_needed(provider):
    later = HIDDEN_FIRST + [assistant("m4", m.Text("Done.")), user("m5", m.Text("Thanks"))]
    a, b = conversation(body(provider, HIDDEN_FIRST)), conversation(body(provider, later))
    assert json.dumps(a).count("[Conversation start]") == 1 and "[Conversation start]" in json.dumps(a[0])
    assert unmarked_any(a[0]) == unmarked_any(b[0])
    assert "[Conversation start]" not in json.dumps(body(provider, tool_turn(read("call_1"))))


def conversation(b):
    """The body's messages after any system messages."""
    if "contents" in b:
        return b["contents"]
    if "input" in b:
        return [x for x in b["input"] if x.get("role") != "developer"]
    return [x for x in b["messages"] if x["role"] != "system"]


def unmarked_any(value):
    """value without any cache marker, at any depth."""
    if isinstance(value, dict):
        return {k: unmarked_any(v) for k, v in value.items() if k not in ("cache_control", "copilot_cache_control", "cachePoint")}
    if isinstance(value, list):
        return [unmarked_any(v) for v in value if not (isinstance(v, dict) and set(v) == {"cachePoint"})]
    return value

# ---- media ----------------------------------------------------------------------------------

def file_(mime, url="", data=None, name="a.bin"):
    return m.File(mime, name, url=url, data=data)


def unmarked(blocks):
    return [{k: v for k, v in x.items() if k != "cache_control"} for x in blocks]


def anthropic_user_blocks(*files):
    return unmarked(body(m.ANTHROPIC, [user("m1", m.Text("Look"), *files)])["messages"][0]["content"][1:])


def test_anthropic_sends_only_the_images_it_takes():
    svg = file_("image/svg+xml", data=b"<svg/>", name="a.svg")
    heic = file_("image/heic", data=b"\x00\x00", name="a.heic")
    assert anthropic_user_blocks(svg, heic) == [{"type": "text", "text": "[Attached image/svg+xml: a.svg]"},
                                               {"type": "text", "text": "[Attached image/heic: a.heic]"}]


def test_anthropic_data_url_parameters_are_not_the_media_type():
    part = file_("image/png", url=f"data:image/png;name=a.png;base64,{PNG64}")
    assert anthropic_user_blocks(part) == [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                        "data": PNG64}}]


def test_anthropic_non_base64_data_url_is_content_not_a_url():
    png = file_("image/png", url="data:image/png," + "".join(f"%{b:02X}" for b in PNG))
    svg = file_("image/svg+xml", url="data:image/svg+xml,%3Csvg%2F%3E", name="b.svg")
    blocks = anthropic_user_blocks(png, svg)
    assert blocks[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}}
    assert blocks[1] == {"type": "text", "text": "[Attached image/svg+xml: b.svg]"}
    assert "data:" not in json.dumps(blocks)


def test_anthropic_refused_media_in_tool_results_becomes_the_note():
    shot = file_("image/svg+xml", data=b"<svg/>", name="s.svg")
    b = body(m.ANTHROPIC, tool_turn(read("call_1", attachments=[shot])))
    result = b["messages"][2]["content"][0]
    assert result["content"] == [{"type": "text", "text": "x = 1\n"},
                                 {"type": "text", "text": "[Attached image/svg+xml: s.svg]"}]


@pytest.mark.parametrize("provider", CHAT)
def test_openai_family_pdf_by_web_url_is_not_file_data(provider):
    pdf = file_("application/pdf", url="https://example.com/a.pdf", name="a.pdf")
    inline = file_("application/pdf", data=b"%PDF-1.4", name="b.pdf")
    parts = body(provider, [user("m1", m.Text("Read"), pdf, inline)])["messages"][2]["content"]
    assert parts[1] == {"type": "text", "text": "[Attached application/pdf: a.pdf]"}
    assert parts[2]["type"] == "file" and parts[2]["file"]["file_data"].startswith("data:application/pdf;base64,")


@pytest.mark.parametrize("provider", CHAT)
def test_openai_family_image_url_only_for_images_it_takes(provider):
    svg = file_("image/svg+xml", url="data:image/svg+xml;base64,PHN2Zy8+", name="a.svg")
    text_png = file_("image/png", url="data:image/png," + "".join(f"%{b:02X}" for b in PNG))
    named = file_("image/png", url=f"data:image/png;name=a.png;base64,{PNG64}")
    parts = body(provider, [user("m1", m.Text("Look"), svg, text_png, named)])["messages"][2]["content"]
    assert parts[1] == {"type": "text", "text": "[Attached image/svg+xml: a.svg]"}
    assert parts[2]["image_url"]["url"] == parts[3]["image_url"]["url"] == f"data:image/png;base64,{PNG64}"


def test_media_table_answers_per_provider():
    assert media.accepts(anthropic.FORMAT, "image/png") and media.accepts(anthropic.FORMAT, "IMAGE/JPG")
    assert not media.accepts(anthropic.FORMAT, "image/svg+xml") and not media.accepts(anthropic.FORMAT, "image/heic")
    assert media.accepts(gemini.FORMAT, "image/heic") and not media.accepts(gemini.FORMAT, "image/gif")
    assert media.accepts(bedrock.FORMAT, "text/csv") and bedrock.MEDIA_FORMATS["text/markdown"] == "md"
    assert all(media.accepts(f, "application/pdf") for f in registry.FORMATS.values())
    parsed = media.parse_data_url("data:image/png;name=a.png;base64,AAAA")
    assert (parsed.mime, parsed.is_base64, parsed.payload) == ("image/png", True, "AAAA")
    assert media.parse_data_url("data:,hello").mime == "" and not media.parse_data_url("data:,hello").is_base64


# ---- Anthropic reasoning ----------------------------------------------------------------------

def signed(text, sig="sig-1"):
    return m.Reasoning(text, signature=sig)


def test_anthropic_never_marks_a_thinking_block():
    conv = [user("m1", m.Text("Q")), assistant("m2", signed("a"), m.Text("answer"), signed("b"), signed("only thinking")),
            user("m4", m.Text("Go on"))]
    a = run(m.ANTHROPIC, conv, hints=[breakpoints.Hint(message_id="m2"), breakpoints.Hint(message_id="m4")])
    b = json.loads(a.body)
    blocks = b["messages"][1]["content"]
    assert [x["type"] for x in blocks] == ["thinking", "text", "thinking", "thinking"]
    assert "cache_control" in blocks[1]  # the nearest block that takes one
    assert all("cache_control" not in x for x in blocks if x["type"] in ("thinking", "redacted_thinking"))
    conv[1] = assistant("m2", signed("only thinking"))
    a = run(m.ANTHROPIC, conv, hints=[breakpoints.Hint(message_id="m2")])
    # the hint has nowhere to go: dropped; the auto policy still fills the other places
    assert "cache_control" not in json.dumps(json.loads(a.body)["messages"][1])
    assert [b.location for b in a.breakpoints] == ["tools[0]", "system[1]", "messages[2]"]


def test_anthropic_sends_reasoning_another_model_signed_as_plain_text():
    conv = [user("m1", m.Text("Q")),
            assistant("m2", signed("mine"), m.Text("one")),
            assistant("m3", signed("theirs"), m.Text("two"), model_id="gpt-5"),
            assistant("m4", m.Reasoning("", redacted_data="opaque"), m.Text("three"), provider_id=m.BEDROCK),
            user("m5", m.Text("Go on"))]
    b = body(m.ANTHROPIC, conv)
    # the reply holding this model's signed thinking would have been closed had it been sent last:
    # the closing message goes after it (neutral.closing_between_replies); the others join
    mine, closing, theirs = (x["content"] for x in b["messages"][1:4])
    assert mine[0] == {"type": "thinking", "thinking": "mine", "signature": "sig-1"}
    assert closing == [{"type": "text", "text": CLOSING_USER_TEXT}]
    assert theirs == [{"type": "text", "text": "theirs"}, {"type": "text", "text": "two"},
                      {"type": "text", "text": "three"}]


# ---- OpenAI Responses ---------------------------------------------------------------------------

ENCRYPTED = "gAAAAABpX1a78BDqk_J4uGoxtDucvs8h"  # encrypted_content as Responses returns it


def responses_step(provider_id=m.OPENAI_RESPONSES):
    """A Responses step: encrypted reasoning (with its summary), text, a tool call."""
    return assistant("m2", m.Reasoning("Read the file first.", redacted_data=ENCRYPTED), m.Text("Reading."),
                     read("call_1"), provider_id=provider_id)


def test_responses_carries_encrypted_reasoning_back_to_the_provider_that_wrote_it():
    b = body(m.OPENAI_RESPONSES, [user("m1", m.Text("Look at a.py")), responses_step(), user("m3", m.Text("Go on"))])
    assert judge_for(m.OPENAI_RESPONSES)(b) == []
    assert conversation(b)[1:5] == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Read the file first."}],
         "encrypted_content": ENCRYPTED},  # no item id: with store false it is looked up and not found
        {"role": "assistant", "content": "Reading."},
        {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": '{"path":"a.py"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "x = 1\n"}]


@pytest.mark.parametrize("stored_as", (m.OPENAI_RESPONSES, "openai", "OpenAI"))
def test_encrypted_reasoning_stored_under_openai_goes_back_to_responses(stored_as):
    """Agents store a Responses answer under their own provider id, `openai` (the AI SDK's):
    Chat Completions returns no reasoning to encrypt, so that reasoning is the Responses API's
    and goes back to it."""
    b = body(m.OPENAI_RESPONSES, [user("m1", m.Text("Look at a.py")), responses_step(stored_as),
                                  user("m3", m.Text("Go on"))])
    assert judge_for(m.OPENAI_RESPONSES)(b) == []
    assert conversation(b)[1]["encrypted_content"] == ENCRYPTED


@pytest.mark.parametrize("provider", (m.OPENAI_RESPONSES, m.OPENAI, m.ANTHROPIC))
def test_encrypted_reasoning_goes_to_another_provider_as_text(provider):
    """Reasoning another provider encrypted (a gateway's, here) goes as its text."""
    source = m.OPENROUTER if provider == m.OPENAI_RESPONSES else m.OPENAI_RESPONSES
    b = body(provider, [user("m1", m.Text("Look at a.py")), responses_step(source), user("m3", m.Text("Go on"))])
    assert judge_for(provider)(b) == []
    text = json.dumps(b)
    assert ENCRYPTED not in text and "Read the file first." in text
    if provider == m.OPENAI_RESPONSES:
        assert conversation(b)[1] == {"role": "assistant", "content": "Read the file first.Reading."}


def test_responses_drops_reasoning_it_cannot_resume():
    b = body(m.OPENAI_RESPONSES, [user("m1", m.Text("Q")), assistant("m2", m.Reasoning("thoughts"), m.Text("A"),
                                                                      provider_id=m.OPENAI_RESPONSES),
                                  user("m3", m.Text("Go on"))])
    assert conversation(b)[1] == {"role": "assistant", "content": "A"} and "thoughts" not in json.dumps(b)


def test_responses_body_is_stateless_and_keyed_by_the_session():
    b = body(m.OPENAI_RESPONSES, tool_turn(read("call_1")))
    assert b["store"] is False and "previous_response_id" not in b and "instructions" not in b
    assert b["prompt_cache_key"] == "sess-acc" and isinstance(b["max_output_tokens"], int)
    assert [x["content"] for x in b["input"][:2]] == ["You are a coding agent.", "Be brief."]
    assert b["tools"] == [{"type": "function", "name": "read", "description": "Read a file", "strict": False,
                           "parameters": READ.input_schema}]
    inp = assemble.AssembleInput(m.Conversation(tool_turn(read("call_1")), "s" * 100),
                                 m.Model("gpt-5", m.OPENAI_RESPONSES), [READ], m.SystemPrompt(soul="s"),
                                 m.CompactionSettings())
    key = json.loads(assemble.assemble(inp, config.Config()).body)["prompt_cache_key"]
    assert len(key) == 64 and key.startswith("sid-")  # OpenAI refuses a longer key


def test_responses_call_ids_fit_64_characters_alike_in_call_and_output():
    long_id = "codex_mcp__hermes-tools__kanban_complete_exec-" + "0123456789" * 4
    b = body(m.OPENAI_RESPONSES, tool_turn(read(long_id), read("functions.read:2")))
    calls = [x["call_id"] for x in b["input"] if x.get("type") == "function_call"]
    outputs = [x["call_id"] for x in b["input"] if x.get("type") == "function_call_output"]
    assert calls == outputs and len(calls[0]) <= 64 and calls[1] == "functions.read:2"
    assert judge_for(m.OPENAI_RESPONSES)(b) == []


def test_responses_tool_media_goes_in_the_output():
    b = body(m.OPENAI_RESPONSES, tool_turn(read("call_1", "shot", [m.File("image/png", "a.png", data=PNG),
                                                                  m.File("application/pdf", "r.pdf",
                                                                         url="https://example.com/r.pdf")])))
    output = next(x for x in b["input"] if x.get("type") == "function_call_output")["output"]
    assert output == [{"type": "input_text", "text": "shot"},
                      {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}", "detail": "auto"},
                      {"type": "input_file", "filename": "r.pdf", "file_url": "https://example.com/r.pdf"}]
    assert judge_for(m.OPENAI_RESPONSES)(b) == []


# ---- cache markers ----------------------------------------------------------------------------

@pytest.mark.parametrize("provider", MARKED)
def test_more_than_four_hints_is_refused_for_every_marked_provider(provider):
    conv = [user(f"m{i}", m.Text(f"q{i}")) if i % 2 else assistant(f"m{i}", m.Text(f"a{i}")) for i in range(1, 8)]
    hints = [breakpoints.Hint(message_id=f"m{i}") for i in (1, 3, 5, 7)] + [breakpoints.Hint(system_block=0)]
    with pytest.raises(BadInput) as e:
        run(provider, conv, hints=hints)
    assert e.value.field == "cache_hints"
    assert len(run(provider, conv, hints=hints[:4]).breakpoints) == 4


@pytest.mark.parametrize("provider", (m.OPENAI_COMPATIBLE, m.OPENROUTER, m.ALIBABA, m.COPILOT))
def test_gateway_markers_sit_on_the_last_content_part(provider):
    # behind a gateway only the models that honor markers get them (Claude by default)
    b = body(provider, tool_turn(read("call_1"))[:2], model_id="claude-sonnet-4-5")  # ends: tool call, result
    key = "copilot_cache_control" if provider == m.COPILOT else "cache_control"
    messages = b["messages"]
    assert not any(key in msg for msg in messages)  # never on the message object
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1",
                            "content": [{"type": "text", "text": "x = 1\n", key: {"type": "ephemeral"}}]}
    assert messages[0]["content"][-1][key] == {"type": "ephemeral"}


@pytest.mark.parametrize("provider", GATEWAYS)
def test_gateways_refuse_a_last_tool_hint_and_say_why(provider):
    # the Chat Completions tool schema refuses cache_control on a tool definition
    hints = [breakpoints.Hint(system_block=0), breakpoints.Hint(last_tool=True)]
    with pytest.raises(BadInput) as e:
        run(provider, tool_turn(read("call_1")), hints=hints)
    assert e.value.field == "cache_hints[1].last_tool" and "message content parts only" in str(e.value)
    b = body(provider, tool_turn(read("call_1")), hints=hints[:1])
    assert all(set(t) == {"type", "function"} for t in b["tools"])


@pytest.mark.parametrize("provider", (m.ANTHROPIC, m.BEDROCK))
def test_native_formats_still_mark_the_last_tool(provider):
    b = body(provider, tool_turn(read("call_1")), hints=[breakpoints.Hint(last_tool=True)])
    tools = b["tools"] if provider == m.ANTHROPIC else b["toolConfig"]["tools"]
    assert ("cache_control" in tools[-1]) if provider == m.ANTHROPIC else tools[-1] == {"cachePoint": {"type": "default"}}
