"""Shapes agents send that a provider refuses, each sent as the provider takes it. Through real
servers on loopback, with the memo and without (the same bodies), each body judged by its
provider's judge (tests/judges), which knows the refusal.
"""
from __future__ import annotations

import base64
import json

import grpc
import pytest

from contextsvc.v1 import context_pb2 as pb
from contextsvc.lowering.neutral import BRIDGE_ASSISTANT_TEXT, CLOSING_USER_TEXT
from helpers import convo
from helpers.server import stubs_with_and_without_memo
from judges import judge_for
from judges.bedrock_judge import judge as bedrock_judge
from judges.gemini_judge import judge as gemini_judge

BASH = pb.ToolDefinition(name="bash", description="Run a command", input_schema_json='{"type":"object"}')


@pytest.fixture(scope="module")
def stubs():
    yield from stubs_with_and_without_memo()


def assembled(stubs, provider: str, model_id: str, messages: list, tools=(BASH,), **request) -> dict:
    """The body both servers assemble (equal), judged by the provider's judge (Bedrock's and
    Gemini's given the model, which their URL names)."""
    bodies = [stub.Assemble(pb.AssembleRequest(
        conversation=pb.Conversation(session_id=f"refused-{provider}-{model_id}", messages=messages),
        model=convo.model(convo.PROVIDERS[provider], id=model_id, output=16_000), tools=list(tools), **request),
        timeout=30).body for stub in stubs]
    assert bodies[0] == bodies[1], "the memo changed the body"
    body = json.loads(bodies[0])
    judged = bedrock_judge(body, model_id=model_id) if provider == "bedrock" else \
        gemini_judge(body, model_id=model_id) if provider == "gemini" else judge_for(provider)(body)
    assert judged == [], (provider, model_id)
    return body


def session() -> list:
    return [convo.user("m1", convo.text("p1", "fix the failing test")),
            convo.assistant("m2", convo.text("p2", "Running it."),
                            convo.tool("p3", "call_1", "bash", {"cmd": "pytest"}, "1 failed")),
            convo.user("m3", convo.text("p4", "go on"))]


# OpenAI's reasoning models, as agents name them on Copilot and on Azure's OpenAI-compatible endpoint
REASONING = ["gpt-5.1", "gpt-5-codex", "o3", "o4-mini", "azure/gpt-5.1", "gpt-5.1-codex-max"]


@pytest.mark.parametrize("provider", ["copilot", "openai-compatible", "openai"])
@pytest.mark.parametrize("model_id", REASONING)
def test_an_openai_reasoning_model_gets_its_output_cap_as_max_completion_tokens(stubs, provider, model_id):
    """"Unsupported parameter: 'max_tokens' is not supported with this model. Use
    'max_completion_tokens' instead.": the first request of every such session, on Copilot's
    gpt-5.x and o-series and on Azure's gpt-5.1."""
    body = assembled(stubs, provider, model_id, session())
    assert "max_tokens" not in body and body["max_completion_tokens"] == 16_000


@pytest.mark.parametrize("provider,model_id", [("copilot", "gpt-4o"), ("openai-compatible", "qwen3-coder"),
                                               ("openai-compatible", "gpt-oss-120b"), ("openrouter", "openai/gpt-5.1"),
                                               ("alibaba", "qwen3-max")])
def test_other_models_and_routing_gateways_keep_max_tokens(stubs, provider, model_id):
    body = assembled(stubs, provider, model_id, session())
    assert "max_completion_tokens" not in body and body["max_tokens"] == 16_000


def test_the_judge_refuses_max_tokens_for_a_reasoning_model():
    body = {"model": "gpt-5.1", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    assert any("max_tokens" in x for x in judge_for("copilot")(body))
    assert judge_for("openrouter")(body) == []
    assert judge_for("copilot")({**body, "model": "gpt-4o"}) == []


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "openai", "gemini", "openai-responses"])
@pytest.mark.parametrize("error", ["", "\n", " \r\n "])
def test_a_failed_call_whose_error_is_blank_says_error(stubs, provider, error):
    """A tool that failed with nothing but a newline on stderr: Anthropic refuses the empty result
    it lowered to ("content cannot be empty if `is_error` is true"), at every later request too."""
    messages = session()
    messages[1] = convo.assistant("m2", convo.text("p2", "Running it."),
                                  convo.tool("p3", "call_1", "bash", {"cmd": "pytest"}, status=pb.TOOL_STATUS_ERROR))
    messages[1].parts[1].tool.state.error = error
    model_id = {"anthropic": "claude-sonnet-4-5", "bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0",
                "gemini": "gemini-2.5-pro"}.get(provider, "gpt-4o")
    assert "error" in set(strings(assembled(stubs, provider, model_id, messages)))


def strings(v):
    """Every string value in a JSON value."""
    if isinstance(v, str):
        yield v
    for x in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()):
        yield from strings(x)


def test_the_judge_refuses_an_empty_error_result():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [],
                                                       "is_error": True}]}]}
    assert any("is_error" in x for x in judge_for("anthropic")(body))


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 12345\n"
ERROR_PAGE = b"<!DOCTYPE html><html><body>403 Forbidden</body></html>"
MODELS = {"anthropic": "claude-sonnet-4-5", "bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0",
          "gemini": "gemini-2.5-pro", "openai": "gpt-4o", "openai-responses": "gpt-4o", "openrouter": "openai/gpt-4o"}


@pytest.mark.parametrize("provider", sorted(MODELS))
@pytest.mark.parametrize("in_tool", [False, True], ids=["file", "tool-output"])
def test_bytes_that_are_no_image_under_an_image_type_are_the_note(stubs, provider, in_tool):
    """A Git LFS pointer checked out as logo.png, a 403 page saved as shot.jpg: sent under their
    image type, Anthropic answered "Could not process image", OpenAI "The image data you provided
    does not represent a valid image", at every later request of the session too."""
    files = [pb.FilePart(mime="image/png", filename="logo.png", data=LFS_POINTER),
             pb.FilePart(mime="image/jpeg", filename="shot.jpg", data=ERROR_PAGE)]
    messages = session()
    if in_tool:
        messages[1].parts[1].tool.state.attachments.extend(files)
    else:
        messages[0].parts.extend(pb.Part(id=f"f{i}", file=f) for i, f in enumerate(files))
    body = assembled(stubs, provider, MODELS[provider], messages)
    text = json.dumps(body)
    assert "logo.png" in text and "shot.jpg" in text and "its bytes are not a image/png image" in text
    assert base64.b64encode(LFS_POINTER).decode()[:40] not in text


SCREENSHOT = pb.FilePart(mime="image/png", filename="s.png", data=b"\x89PNG\r\n\x1a\n" + bytes(32))
PAPER = pb.FilePart(mime="application/pdf", filename="spec.pdf", data=b"%PDF-1.4\n1 0 obj<</Type/Page>>endobj\n%%EOF")


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "deepseek-chat"),
                                               ("openai-compatible", "deepseek-v4-flash"),
                                               ("openrouter", "deepseek/deepseek-r1-0528"),
                                               ("openai-compatible", "deepseek-reasoner")])
def test_deepseeks_text_models_get_the_note_for_every_medium(stubs, provider, model_id):
    """"Failed to deserialize the JSON body into the target type: messages[3]: unknown variant
    `image_url`, expected `text`" (DeepSeek V3, R1 and V4: Zoo-Code, hermes-webui, rikkahub), at
    every request once a screenshot is in the history: each medium is its attachment note."""
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(SCREENSHOT)
    messages[0].parts.append(pb.Part(id="f1", file=PAPER))
    text = json.dumps(assembled(stubs, provider, model_id, messages))
    assert "image_url" not in text and '"file"' not in text
    assert f"s.png (not sent: {model_id} takes text alone)" in text and f"spec.pdf (not sent: {model_id} takes text alone)" in text
    measured = stubs[0].Measure(pb.MeasureRequest(conversation=pb.Conversation(messages=messages),
                                                  model=convo.model(convo.PROVIDERS[provider], id=model_id)), timeout=10)
    assert measured.media_count == 0


def test_compaction_sizes_a_text_models_media_as_their_notes():
    """Compact's head and tail split sizes each message as the body sends it: a screenshot sent to
    deepseek-chat as its note is not 2,048 tokens of the tail's budget."""
    from contextsvc import conversation as m
    from contextsvc.compact.head_tail import message_size
    shot = m.Message("u1", m.USER, [m.Part("p1", m.Text("see the screenshot")),
                                    m.Part("f1", m.File("image/png", "s.png", data=SCREENSHOT.data))])
    sizes = {mid: message_size(shot, m.Model(mid, m.OPENAI_COMPATIBLE, m.ModelLimits(128_000, 0, 8_000)), per_medium=2_048)
             for mid in ("deepseek-chat", "gpt-4o")}
    assert sizes["deepseek-chat"] < 200 and sizes["gpt-4o"] >= 2_048


# text-only by their makers' model cards, and refused an image where served: OpenRouter's "No
# endpoints found that support image input", vLLM's "is not a multimodal model", Z.ai's code 1210
# (opencode #2944), DashScope's "Unexpected item type in content" (aliyun/iac-code #54)
TEXT_MODELS = ["moonshotai/kimi-k2-instruct-0905", "kimi-k2-thinking", "moonshot-v1-32k", "z-ai/glm-4.6", "glm-4.5-air",
               "glm-5.1", "MiniMax-M2.1", "minimax/minimax-m1", "qwen/qwen3-coder", "qwen3-235b-a22b-2507", "qwen3-max",
               "qwen3.7-max", "grok-code-fast-1", "codestral-2508", "meta-llama/llama-3.3-70b-instruct",
               "meta.llama3-3-70b-instruct-v1:0", "llama3.1:8b"]
SEEING_MODELS = ["deepseek-vl2", "deepseek-ocr", "deepseek-flash", "qwen3-vl-235b-a22b", "moonshotai/kimi-k2.5",
                 "accounts/fireworks/models/kimi-k2p6", "kimi-k2-5", "moonshot-v1-8k-vision-preview", "z-ai/glm-4.6v",
                 "glm-5v-turbo", "MiniMax-VL-01", "qwen3-omni-flash", "qwen3.6-plus", "meta-llama/llama-3.2-11b-vision-instruct",
                 "us.meta.llama3-2-90b-instruct-v1:0", "meta-llama/llama-4-maverick", "grok-4", "pixtral-large-latest"]


def test_text_models_are_known_by_their_ids():
    from contextsvc import model_ids
    assert [x for x in TEXT_MODELS if not model_ids.takes_text_alone(x)] == []
    assert [x for x in SEEING_MODELS if model_ids.takes_text_alone(x)] == []


@pytest.mark.parametrize("model_id", ["z-ai/glm-4.6", "qwen/qwen3-coder", "minimax/minimax-m2", "moonshotai/kimi-k2-0905"])
def test_other_text_models_get_the_note(stubs, model_id):
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(SCREENSHOT)
    text = json.dumps(assembled(stubs, "openrouter", model_id, messages))
    assert "image_url" not in text and f"s.png (not sent: {model_id} takes text alone)" in text


@pytest.mark.parametrize("model_id", ["deepseek-vl2", "deepseek-ocr", "qwen3-vl-235b-a22b", "deepseek-flash",
                                      "moonshotai/kimi-k2.5", "z-ai/glm-4.6v"])
def test_deepseeks_vision_models_and_others_get_the_image(stubs, model_id):
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(SCREENSHOT)
    assert "image_url" in json.dumps(assembled(stubs, "openai-compatible", model_id, messages))


def test_the_judge_refuses_an_image_to_deepseeks_text_models():
    judged = judge_for("openai-compatible")({"model": "deepseek-chat", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]})
    assert any("expected `text`" in x for x in judged)


@pytest.mark.parametrize("model_id", ["mistral.pixtral-large-2502-v1:0", "us.qwen.qwen3-vl-235b-a22b-v1:0",
                                      "us.meta.llama3-2-90b-instruct-v1:0"])
def test_bedrock_models_but_claude_nova_and_llama_4_get_tool_media_in_a_turn_of_their_own(stubs, model_id):
    """Converse takes an image inside a toolResult for Claude, Nova and Llama 4 alone; Pixtral,
    Qwen3-VL and the others refuse it ("This model doesn't support the image field for user
    messages": opencode #49443): a screenshot tool's output goes after the tool results, in a user
    turn of its own (the assistant turn of lowers_whole between), each call's named where two
    calls have media."""
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(SCREENSHOT)
    messages[1].parts.append(convo.tool("p3b", "call_2", "bash", {"cmd": "shot B"}, "window B"))
    messages[1].parts[2].tool.state.attachments.append(PAPER)
    wire = assembled(stubs, "bedrock", model_id, messages)["messages"]
    results = next(i for i, x in enumerate(wire) if any("toolResult" in b for b in x["content"]))
    assert '"image"' not in json.dumps(wire[results]) and '"document"' not in json.dumps(wire[results])
    bridge, moved = wire[results + 1], wire[results + 2]
    assert bridge == {"role": "assistant", "content": [{"text": BRIDGE_ASSISTANT_TEXT}]}
    kinds = [next(iter(b)) for b in moved["content"]]
    assert moved["role"] == "user" and kinds[:4] == ["text", "image", "text", "document"], kinds
    assert moved["content"][0]["text"] == "Media of tool call call_1:"


@pytest.mark.parametrize("model_id", ["us.anthropic.claude-sonnet-4-5-20250929-v1:0", "us.amazon.nova-pro-v1:0",
                                      "us.meta.llama4-maverick-17b-instruct-v1:0"])
def test_claude_nova_and_llama_4_keep_tool_media_in_the_tool_result(stubs, model_id):
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(SCREENSHOT)
    wire = assembled(stubs, "bedrock", model_id, messages)["messages"]
    result = next(b["toolResult"] for x in wire for b in x["content"] if "toolResult" in b)
    assert any("image" in b for b in result["content"])


def test_gpt_oss_takes_text_alone():
    """gpt-oss reads text alone, on Bedrock ("This model doesn't support the image field") and elsewhere."""
    from contextsvc import model_ids
    assert model_ids.takes_text_alone("openai.gpt-oss-120b-1:0") and model_ids.takes_text_alone("openai/gpt-oss-20b")
    assert not model_ids.takes_text_alone("gpt-5.1") and not model_ids.takes_text_alone("deepseek-vl2-small")
    judged = bedrock_judge({"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [
        {"image": {"format": "png", "source": {"bytes": base64.b64encode(SCREENSHOT.data).decode()}}}]}}]}]},
        model_id="mistral.pixtral-large-2502-v1:0")
    assert any("image field" in x for x in judged)


def test_the_judges_refuse_bytes_that_are_no_image():
    data = base64.b64encode(ERROR_PAGE).decode()
    anthropic = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": data}}]}]}
    assert any("Could not process image" in x for x in judge_for("anthropic")(anthropic))
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}}]}]}
    assert any("does not represent a valid image" in x for x in judge_for("openai")(chat))


SYSTEM = pb.SystemPrompt(soul="You are a coding agent.")


def cache_points(body: dict) -> list:
    """Where the body's cachePoint blocks are: "tools", "system" or "messages"."""
    found = ["tools" for t in body.get("toolConfig", {}).get("tools", []) if "cachePoint" in t]
    found += ["system" for b in body.get("system", []) if "cachePoint" in b]
    return found + ["messages" for msg in body["messages"] for b in msg["content"] if "cachePoint" in b]


@pytest.mark.parametrize("model_id", ["qwen.qwen3-coder-480b-a35b-v1:0", "meta.llama4-maverick-17b-instruct-v1:0",
                                      "us.deepseek.r1-v1:0", "openai.gpt-oss-120b-1:0", "mistral.mistral-large-2407-v1:0",
                                      "anthropic.claude-3-5-sonnet-20240620-v1:0", "anthropic.claude-3-haiku-20240307-v1:0",
                                      "anthropic.claude-3-5-sonnet-20241022-v2:0"])
def test_a_bedrock_model_without_prompt_caching_gets_no_cache_point(stubs, model_id):
    """"You invoked an unsupported model or your request did not allow prompt caching": every
    request of a session on Qwen, DeepSeek or Claude 3 behind Bedrock, while each was marked."""
    assert cache_points(assembled(stubs, "bedrock", model_id, session(), system=SYSTEM)) == []


@pytest.mark.parametrize("model_id", ["us.amazon.nova-pro-v1:0", "amazon.nova-premier-v1:0"])
def test_nova_gets_no_cache_point_in_its_tools(stubs, model_id):
    """Nova caches system and messages; its tools take none ("extraneous key [cachePoint] is not permitted")."""
    found = cache_points(assembled(stubs, "bedrock", model_id, session(), system=SYSTEM))
    assert "tools" not in found and {"system", "messages"} <= set(found)


@pytest.mark.parametrize("model_id", ["anthropic.claude-3-7-sonnet-20250219-v1:0", "anthropic.claude-3-5-haiku-20241022-v1:0",
                                      "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                                      "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3"])
def test_claude_that_caches_on_bedrock_keeps_its_cache_points(stubs, model_id):
    """Claude from 3.7 Sonnet and 3.5 Haiku on; an inference profile's ARN names no model, and most front Claude."""
    assert {"tools", "system", "messages"} <= set(cache_points(assembled(stubs, "bedrock", model_id, session(),
                                                                          system=SYSTEM)))


def test_the_bedrock_judge_refuses_a_cache_point_the_model_takes_none_at():
    body = {"system": [{"text": "x"}, {"cachePoint": {"type": "default"}}],
            "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    assert any("prompt caching" in x for x in bedrock_judge(body, model_id="qwen.qwen3-coder-480b-a35b-v1:0"))
    assert bedrock_judge(body, model_id="anthropic.claude-3-7-sonnet-20250219-v1:0") == []


def cut_reply() -> list:
    """A reply cut off (the agent's stream failed): the next request goes out with it last."""
    cut = convo.assistant("m2", convo.text("p2", "Reading the test first."), finished=False)
    cut.error.CopyFrom(pb.MessageError(name="MessageAbortedError", message="aborted"))
    return [convo.user("m1", convo.text("p1", "fix the failing test")), cut]


@pytest.mark.parametrize("model_id", ["gemini-3.6-flash", "gemini-3.5-flash-lite", "gemini-3.8-flash",
                                      "gemini-flash-latest"])
def test_gemini_from_3_5_gets_a_closing_user_turn(stubs, model_id):
    """"Requests ending with a model turn are not supported unless the last part is a function
    response." (Gemini 3.5 Flash-Lite and 3.6 Flash on, and all later releases)."""
    contents = assembled(stubs, "gemini", model_id, cut_reply())["contents"]
    assert contents[-1] == {"role": "user", "parts": [{"text": "Continue."}]}
    assert contents[-2]["role"] == "model"


@pytest.mark.parametrize("model_id", ["gemini-2.5-pro", "gemini-3-pro-preview", "gemini-3.1-pro-preview"])
def test_earlier_gemini_go_on_from_their_own_turn(stubs, model_id):
    assert assembled(stubs, "gemini", model_id, cut_reply())["contents"][-1]["role"] == "model"


@pytest.mark.parametrize("model_id", ["gemini-2.5-pro", "gemini-3-flash-preview", "gemini-3.8-flash", "gemini-flash-latest"])
def test_what_the_person_says_after_tool_results_goes_before_the_function_responses(stubs, model_id):
    """A person's message right after a tool step (sent mid-run) joins the tool results' user
    turn: after the function responses, Gemini 3 Flash refused it ("Requests ending with a model
    turn are not supported"); before them, every model takes it. Gemini 2.5 keeps it after them,
    where the turn's start stays as the last request sent it (its implicit cache)."""
    messages = session()
    messages[2] = convo.user("m3", convo.text("p4", "stop, use tox instead"))
    turn = assembled(stubs, "gemini", model_id, messages)["contents"][-1]
    assert turn["role"] == "user"
    order = ["functionResponse", "text"] if model_id.startswith("gemini-2") else ["text", "functionResponse"]
    assert [next(iter(p)) for p in turn["parts"]] == order
    assert {"text": "stop, use tox instead"} in turn["parts"]


@pytest.mark.parametrize("model_id", ["gemini-2.5-pro", "gemini-3.8-flash"])
def test_a_tool_output_image_sent_as_its_note_goes_before_the_function_responses_on_gemini_3(stubs, model_id):
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(pb.FilePart(mime="image/png", filename="x.png", data=LFS_POINTER))
    turn = assembled(stubs, "gemini", model_id, messages[:2])["contents"][-1]
    order = ["functionResponse", "text"] if model_id.startswith("gemini-2") else ["text", "functionResponse"]
    assert [next(iter(p)) for p in turn["parts"]] == order


def test_the_gemini_judge_knows_both_rules():
    ends_with_model = {"contents": [{"role": "user", "parts": [{"text": "hi"}]},
                                    {"role": "model", "parts": [{"text": "Hel"}]}]}
    assert any("model turn" in x for x in gemini_judge(ends_with_model, model_id="gemini-3.6-flash"))
    assert gemini_judge(ends_with_model, model_id="gemini-2.5-pro") == []
    assert gemini_judge(ends_with_model, model_id="gemini-3.5-flash") == []  # measured taking it
    after = {"contents": [{"role": "user", "parts": [{"text": "go"}]},
                          {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {}}}]},
                          {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"content": "ok"}}},
                                                     {"text": "now stop"}]}],
             "tools": [{"functionDeclarations": [{"name": "bash"}]}]}
    assert any("function responses" in x for x in gemini_judge(after, model_id="gemini-3-flash-preview"))
    assert gemini_judge(after, model_id="gemini-2.5-pro") == []


def thinking_session(model_id: str) -> list:
    """A thinking model's turn: its reasoning, then a tool call; then the person goes on."""
    messages = session()
    reasoning = pb.Part(id="r2", reasoning=pb.ReasoningPart(text="The test runner first."))
    messages[1] = convo.assistant("m2", reasoning, *messages[1].parts)
    messages[1].model_id = model_id
    return messages


@pytest.mark.parametrize("provider,model_id", [
    ("openai-compatible", "deepseek-reasoner"), ("openai-compatible", "deepseek-v4-flash"),
    ("openai-compatible", "kimi-k2-thinking"), ("openai-compatible", "moonshotai/Kimi-K2.5"),
    # DeepSeek V4.1's ids; Kimi Code's (Kilo Code #10986, opencode #10996) and Fireworks'
    ("openai-compatible", "deepseek-flash"), ("openai-compatible", "deepseek-pro"),
    ("openai-compatible", "kimi-for-coding"), ("openai-compatible", "k2p5"),
    ("openai-compatible", "accounts/fireworks/models/kimi-k2p6"),
    # through OpenRouter too (LibreChat #13366, inspect_ai #4079)
    ("openrouter", "deepseek/deepseek-v4-flash"), ("openrouter", "moonshotai/kimi-k2.6")])
def test_a_thinking_model_that_wants_its_reasoning_back_gets_it_on_its_turns(stubs, provider, model_id):
    """DeepSeek's thinking mode and Kimi refuse a turn with tool calls that leaves out its
    reasoning: "Missing `reasoning_content` field in the assistant message at message index 2",
    at the second request of every tool-using session. It goes back as reasoning_content, ""
    where none was kept."""
    body = assembled(stubs, provider, model_id, thinking_session(model_id))
    turns = [x for x in body["messages"] if x["role"] == "assistant"]
    assert turns[0]["reasoning_content"] == "The test runner first."
    kept_none = assembled(stubs, provider, model_id, session())
    assert [x["reasoning_content"] for x in kept_none["messages"] if x["role"] == "assistant"] == [""]


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "qwen3-coder"), ("openai", "gpt-4o"),
                                               ("openrouter", "deepseek/deepseek-r1"),
                                               ("openai-compatible", "moonshotai/kimi-k2-instruct-0905"),
                                               ("openai-compatible", "deepseek-r1-distill-llama-70b"),
                                               ("openai-compatible", "deepseek-r1")])
def test_other_models_and_endpoints_get_no_reasoning_content(stubs, provider, model_id):
    """Groq and Cerebras serve Kimi's instruct and DeepSeek's distilled models, with no thinking to
    give back, and refuse the field ("property 'reasoning_content' is unsupported"); DeepSeek R1
    refused it in its input."""
    body = assembled(stubs, provider, model_id, thinking_session(model_id))
    assert "reasoning_content" not in json.dumps(body)


@pytest.mark.parametrize("provider,model_id", [("openrouter", "google/gemini-3-pro-preview"),
                                               ("openrouter", "google/gemini-3-flash-preview"),
                                               ("openai-compatible", "gemini-3.6-flash"),
                                               ("openai-compatible", "gemini-3-pro-preview")])
def test_gemini_3_behind_an_openai_endpoint_gets_its_thought_signature_back(stubs, provider, model_id):
    """"Function call is missing a thought_signature in functionCall parts" at every request of a
    session with a tool call, through OpenRouter ("Gemini models require OpenRouter reasoning
    details to be preserved in each request": LibreChat-AI/agents #37, claude-code-router #1024)
    and Google's OpenAI-compatible endpoint (securo-finance/securo #884): the step's signature
    goes back on its first call as each takes it, the stand-in where none was kept, as the native
    format does (gemini.UNSIGNED_CALL)."""
    from contextsvc.lowering.gemini import UNSIGNED_CALL
    messages = thinking_session(model_id)
    messages[1].parts[0].reasoning.signature = "CiQBjz1rX0sigAAA"

    def signatures(body):
        out = []
        for x in body["messages"]:
            if x["role"] == "assistant" and x.get("tool_calls"):
                first = x["tool_calls"][0]
                out.append(first["extra_content"]["google"]["thought_signature"] if provider == "openai-compatible"
                           else next(d["data"] for d in x["reasoning_details"] if d["id"] == first["id"]))
        return out
    assert signatures(assembled(stubs, provider, model_id, messages)) == ["CiQBjz1rX0sigAAA"]
    assert signatures(assembled(stubs, provider, model_id, session())) == [UNSIGNED_CALL]


def test_claude_behind_openrouter_gets_its_signed_thinking_back(stubs):
    """With thinking on, Claude refuses a tool loop whose last turn does not open with its
    thinking ("a final `assistant` message must start with a thinking block": OpenRouter's
    ai-sdk-provider #162); OpenRouter rebuilds the blocks from the turn's reasoning_details: the
    signed thinking as a reasoning.text item with its signature, redacted thinking as an
    encrypted one. Unsigned reasoning (another model's) is no block Claude signed."""
    model_id = "anthropic/claude-sonnet-4.5"
    messages = thinking_session(model_id)
    messages[1].parts[0].reasoning.signature = "EqQBCkYIBxgCKkD"
    messages[1].parts.insert(1, pb.Part(id="r3", reasoning=pb.ReasoningPart(redacted_data="EmwKAhgBEgy3va3pzix")))
    turn = next(x for x in assembled(stubs, "openrouter", model_id, messages)["messages"] if x["role"] == "assistant")
    assert turn["reasoning_details"] == [
        {"type": "reasoning.text", "text": "The test runner first.", "signature": "EqQBCkYIBxgCKkD",
         "format": "anthropic-claude-v1", "index": 0},
        {"type": "reasoning.encrypted", "data": "EmwKAhgBEgy3va3pzix", "format": "anthropic-claude-v1", "index": 1}]
    unsigned = next(x for x in assembled(stubs, "openrouter", model_id, thinking_session(model_id))["messages"]
                    if x["role"] == "assistant")
    assert "reasoning_details" not in unsigned


@pytest.mark.parametrize("provider,model_id", [("openrouter", "google/gemini-2.5-pro"), ("openrouter", "openai/gpt-5"),
                                               ("openai-compatible", "qwen3-coder"), ("openai", "gpt-4o")])
def test_other_models_get_no_thought_signature(stubs, provider, model_id):
    messages = thinking_session(model_id)
    messages[1].parts[0].reasoning.signature = "CiQBjz1rX0sigAAA"
    text = json.dumps(assembled(stubs, provider, model_id, messages))
    assert "thought_signature" not in text and "reasoning_details" not in text


def test_the_judge_refuses_a_gemini_3_call_without_its_signature():
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    body = {"model": "google/gemini-3-pro-preview", "tools": [{"type": "function", "function": {"name": "bash"}}],
            "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    assert any("thought_signature" in x for x in judge_for("openrouter")(body))
    assert any("thought_signature" in x for x in judge_for("openai-compatible")({**body, "model": "gemini-3.6-flash"}))
    assert judge_for("openrouter")({**body, "model": "google/gemini-2.5-pro"}) == []
    body["messages"][1]["reasoning_details"] = [{"type": "reasoning.encrypted", "data": "x", "id": "c1",
                                                 "format": "google-gemini-v1", "index": 0}]
    assert judge_for("openrouter")(body) == []


def test_the_judge_refuses_a_deepseek_tool_turn_without_reasoning_content():
    body = {"model": "deepseek-reasoner", "tools": [{"type": "function", "function": {"name": "bash"}}], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    assert any("reasoning_content" in x for x in judge_for("openai-compatible")(body))
    body["messages"][1]["reasoning_content"] = ""
    assert judge_for("openai-compatible")(body) == []


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "openai", "gemini"])
def test_a_system_prompt_of_whitespace_alone_is_no_system_block(stubs, provider):
    """An agent's soul left as a newline: a text block of whitespace alone, which Anthropic
    refuses as it does in a message."""
    body = assembled(stubs, provider, MODELS[provider], session(), system=pb.SystemPrompt(soul="\n \n"))
    assert "\n \n" not in set(strings(body))


LOOSE = pb.ToolDefinition(name="read_many", description="Reads files",
                          input_schema_json='{"type":"object","properties":{"paths":{"type":"array"},'
                                            '"mode":{"anyOf":[{"type":"array"},{"type":"string"}]}}}')


@pytest.mark.parametrize("provider,model_id", [("openai", "gpt-4o"), ("openai-responses", "gpt-5.1"),
                                               ("copilot", "gpt-5.1")])
def test_an_array_schema_without_items_gets_any_items_for_openai(stubs, provider, model_id):
    """An MCP server's `{"type": "array"}`: "Invalid schema for function 'read_many': In
    context=('properties', 'paths'), array schema missing items", at every request while the
    server is loaded. `items: {}` says the same: an array of anything."""
    body = assembled(stubs, provider, model_id, session(), tools=(BASH, LOOSE))
    text = json.dumps(body)
    assert '"paths": {"type": "array", "items": {}}' in text
    assert '{"type": "array", "items": {}}, {"type": "string"}' in text


def test_the_tool_definition_as_given_goes_to_other_providers(stubs):
    body = assembled(stubs, "anthropic", "claude-sonnet-4-5", session(), tools=(BASH, LOOSE))
    assert '"paths": {"type": "array"}' in json.dumps(body)


# Notion's remote MCP server's attachment tool (August 2026): a root of alternatives, no root properties
CHOICES = pb.ToolDefinition(name="notion-create-attachment", description="Attach a file", input_schema_json=json.dumps({
    "type": "object", "anyOf": [
        {"properties": {"content": {"type": "string"}}, "required": ["content"]},
        {"properties": {"source_url": {"type": "string"}, "content": {"type": "integer"}}, "required": ["source_url"]}]}))
UNTYPED = pb.ToolDefinition(name="get_status", description="Status of a job",
                            input_schema_json='{"properties":{"id":{"type":"string"}},"required":["id"]}')
BOTH = pb.ToolDefinition(name="merge", description="d", input_schema_json=json.dumps({
    "properties": {"a": {"type": "string"}}, "required": ["a"],
    "allOf": [{"properties": {"b": {"type": "number"}}, "required": ["b"]}, True]}))
# alternatives that all need one argument: it stays required
SHARED = pb.ToolDefinition(name="create-page", description="Create a page", input_schema_json=json.dumps({
    "properties": {"parent": {"type": "string"}}, "oneOf": [
        {"properties": {"title": {"type": "string"}}, "required": ["title", "parent"]},
        {"properties": {"template": {"type": "string"}}, "required": ["parent", "template"]}]}))
# Linear-style alternatives told apart by a constant, and an allOf that narrows the root's own
VARIANTS = pb.ToolDefinition(name="issue", description="Create or delete an issue", input_schema_json=json.dumps({
    "type": "object", "properties": {"q": {"type": "string"}},
    "oneOf": [{"properties": {"action": {"const": "create"}, "title": {"type": "string"}}, "required": ["action"]},
              {"properties": {"action": {"const": "delete"}, "id": {"type": "string"}}, "required": ["action", "id"]}],
    "allOf": [{"properties": {"q": {"maxLength": 256}}}]}))
ROOT_PROVIDERS = [("anthropic", "claude-sonnet-4-5"), ("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
                  ("bedrock", "us.amazon.nova-pro-v1:0"), ("openai", "gpt-4o"), ("openai-responses", "gpt-5.1"),
                  ("openrouter", "anthropic/claude-sonnet-4.5"), ("copilot", "gpt-5.1")]


def schemas(body: dict) -> dict:
    """Each tool's input schema in a body, by name."""
    out = {}
    for t in body.get("tools") or (body.get("toolConfig") or {}).get("tools") or []:
        if "toolSpec" in t:
            out[t["toolSpec"]["name"]] = t["toolSpec"]["inputSchema"]["json"]
        elif "function" in t:
            out[t["function"]["name"]] = t["function"]["parameters"]
        elif "name" in t:  # not a cachePoint
            out[t["name"]] = t.get("input_schema", t.get("parameters"))
    return out


@pytest.mark.parametrize("provider,model_id", ROOT_PROVIDERS)
def test_a_root_of_alternatives_or_without_a_type_becomes_an_object(stubs, provider, model_id):
    """"input_schema does not support oneOf, allOf, or anyOf at the top level" (Notion's MCP
    server broke every Claude Code, Kiro and opencode session that loaded it) and a root without
    `type` ("input_schema.type: Field required", Bedrock's "must be one of the following: object",
    OpenAI's "got 'type: \"None\"'"): the tool's input is an object, with every branch's
    properties (the root's own first; one the branches give differently takes any of theirs,
    not the first branch's alone); those the branches require stay required under allOf, where
    every branch applies, and those every branch of an anyOf or oneOf requires."""
    body = assembled(stubs, provider, model_id, session(), tools=(BASH, CHOICES, UNTYPED, BOTH, SHARED, VARIANTS))
    found = schemas(body)
    assert found["notion-create-attachment"] == {"type": "object", "properties": {
        "content": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "source_url": {"type": "string"}}}
    assert found["get_status"] == {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    assert found["merge"] == {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
                              "required": ["a", "b"]}
    # a property the branches give differently takes any of theirs (each variant can be sent),
    # and the root's own with allOf's together
    assert found["issue"] == {"type": "object", "properties": {
        "q": {"allOf": [{"type": "string"}, {"maxLength": 256}]},
        "action": {"anyOf": [{"const": "create"}, {"const": "delete"}]},
        "title": {"type": "string"}, "id": {"type": "string"}}, "required": ["action"]}
    assert found["create-page"] == {"type": "object", "properties": {
        "parent": {"type": "string"}, "title": {"type": "string"}, "template": {"type": "string"}},
        "required": ["parent"]}


NO_ARGUMENTS = pb.ToolDefinition(name="namespaces_list", description="List the namespaces",
                                 input_schema_json='{"type":"object"}')


@pytest.mark.parametrize("provider,model_id", [("openai", "gpt-4o"), ("openai-responses", "gpt-5.1"),
                                               ("copilot", "gpt-5.1"), ("openrouter", "openai/gpt-5")])
def test_a_tool_without_arguments_gets_empty_properties_for_openai(stubs, provider, model_id):
    """"Invalid schema for function 'namespaces_list': In context=(), object schema missing
    properties" (kubernetes-mcp-server, mongodb-mcp-server, forgecode on gpt-5): an MCP tool that
    takes no arguments, refused at every request while its server is loaded."""
    found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, NO_ARGUMENTS)))
    assert found["namespaces_list"] == {"type": "object", "properties": {}}


def test_a_tool_without_arguments_goes_as_given_to_other_models(stubs):
    for provider, model_id in (("openrouter", "google/gemini-2.5-pro"), ("anthropic", "claude-sonnet-4-5")):
        found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, NO_ARGUMENTS)))
        assert found["namespaces_list"] == {"type": "object"}
    judged = judge_for("openai")({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}]})
    assert any("object schema missing properties" in x for x in judged)


def test_gemini_keeps_a_root_of_alternatives_and_gets_its_type(stubs):
    """Gemini's parametersJsonSchema takes anyOf at the root: only the missing type is added."""
    body = assembled(stubs, "gemini", "gemini-2.5-pro", session(), tools=(BASH, CHOICES, UNTYPED))
    declared = {d["name"]: d["parametersJsonSchema"] for t in body["tools"] for d in t["functionDeclarations"]}
    assert declared["notion-create-attachment"] == json.loads(CHOICES.input_schema_json)
    assert declared["get_status"]["type"] == "object"


@pytest.mark.parametrize("judge,body", [
    (judge_for("anthropic"), {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"name": "x", "input_schema": {"type": "object", "anyOf": []}}]}),
    (judge_for("anthropic"), {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"name": "x", "input_schema": {"properties": {}}}]}),
    (judge_for("openai"), {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"type": "function", "function": {"name": "x", "parameters": {"oneOf": []}}}]}),
    (lambda b: bedrock_judge(b, model_id="us.amazon.nova-pro-v1:0"),
     {"messages": [{"role": "user", "content": [{"text": "hi"}]}],
      "toolConfig": {"tools": [{"toolSpec": {"name": "x", "inputSchema": {"json": {"properties": {}}}}}]}}),
])
def test_the_judges_refuse_a_root_that_is_no_plain_object(judge, body):
    assert any("tool-schema" in x for x in judge(body))


DOCUMENTED = pb.ToolDefinition(name="search_issues", description="Search the tracker. " + "Qualifiers: is:open, label:x. " * 60,
                               input_schema_json='{"type":"object"}')


@pytest.mark.parametrize("provider,model_id", [("openai", "gpt-4o"), ("copilot", "gpt-5.1"),
                                               ("openai-compatible", "azure/gpt-5.1"), ("openrouter", "openai/gpt-5")])
def test_a_long_tool_description_is_cut_for_openai_models(stubs, provider, model_id):
    """"Invalid 'tools[1].function.description': string too long. Expected a string with maximum
    length 1024" (OpenHands, sentry-mcp, LibreChat: an MCP server's tool documented at length),
    at every request of the session: the first 1,023 characters and an ellipsis."""
    body = assembled(stubs, provider, model_id, session(), tools=(BASH, DOCUMENTED))
    text = body["tools"][1]["function"]["description"]
    assert len(text) == 1024 and text == DOCUMENTED.description[:1023] + "\u2026"
    assert body["tools"][0]["function"]["description"] == BASH.description


def test_a_long_description_of_emoji_is_cut_within_the_limit_in_utf16_units_too(stubs):
    wide = pb.ToolDefinition(name="react", description="\U0001F600" * 700, input_schema_json='{"type":"object"}')
    text = assembled(stubs, "openai", "gpt-4o", session(), tools=(BASH, wide))["tools"][1]["function"]["description"]
    assert len(text.encode("utf-16-le")) // 2 <= 1024 and text == "\U0001F600" * 511 + "\u2026"


def test_a_root_typed_object_or_null_and_a_referenced_branch_are_read(stubs):
    """`type: ["object", "null"]` is an object input; a root allOf of a local $ref brings the
    referenced properties and their required ones."""
    nullable = pb.ToolDefinition(name="nullable", description="d", input_schema_json=json.dumps(
        {"type": ["object", "null"], "properties": {"q": {"type": "string"}}}))
    referenced = pb.ToolDefinition(name="referenced", description="d", input_schema_json=json.dumps(
        {"allOf": [{"$ref": "#/$defs/Args"}], "$defs": {"Args": {"type": "object", "properties": {"path": {
            "type": "string"}}, "required": ["path"]}}}))
    for provider, model_id in (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o")):
        found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, nullable, referenced)))
        assert found["nullable"]["type"] == "object"
        assert found["referenced"]["properties"] == {"path": {"type": "string"}}
        assert found["referenced"]["required"] == ["path"] and "allOf" not in found["referenced"]


# zod-to-json-schema: a named schema (a root reference into draft-07 definitions), and a schema
# used twice, written as a reference to where it first appears (figma-mcp-bridge's colours)
NAMED = pb.ToolDefinition(name="create_page", description="d", input_schema_json=json.dumps({
    "$ref": "#/definitions/CreatePage", "$schema": "http://json-schema.org/draft-07/schema#",
    "definitions": {"CreatePage": {"type": "object", "properties": {
        "title": {"type": "string"}, "parent": {"$ref": "#/definitions/Parent"}}, "required": ["title"]},
        "Parent": {"type": "object", "properties": {"id": {"type": "string"}}}}}))
REUSED = pb.ToolDefinition(name="set_fill", description="d", input_schema_json=json.dumps({
    "type": "object", "properties": {"fillHex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
                                     "strokeHex": {"$ref": "#/properties/fillHex"},
                                     "children": {"type": "array", "items": {"$ref": "#"}}}}))


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "kimi-k2.5"), ("openrouter", "moonshotai/kimi-k2.5"),
                                               ("openai-compatible", "kimi-for-coding")])
def test_a_schema_s_references_go_under_defs_for_kimi(stubs, provider, model_id):
    """"tools.function.parameters is not a valid moonshot flavored json schema. At path
    'properties.strokeHex.$ref': references must start with #/$defs/" (figma-mcp-bridge,
    ms-365-mcp-server: an MCP server's Zod schema used twice), at every request while the server
    is loaded: the referenced schemas are moved under $defs, the same schema still. A root that is
    a reference is the schema it names (the type added beside it said nothing of its properties)."""
    found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, NAMED, REUSED)))
    named, reused = found["create_page"], found["set_fill"]
    assert named["type"] == "object" and named["required"] == ["title"] and "$ref" not in named
    assert named["properties"]["parent"] == {"$ref": "#/$defs/Parent"}
    assert named["$defs"]["Parent"] == {"type": "object", "properties": {"id": {"type": "string"}}, "required": []}
    assert reused["properties"]["strokeHex"] == {"$ref": "#/$defs/properties_fillHex"}
    assert reused["$defs"]["properties_fillHex"] == reused["properties"]["fillHex"]
    assert reused["properties"]["children"]["items"] == {"$ref": "#/$defs/root"}
    assert reused["$defs"]["root"]["properties"]["children"]["items"] == {"$ref": "#/$defs/root"}


def test_a_root_reference_is_resolved_for_every_format(stubs):
    for provider, model_id in (("anthropic", "claude-sonnet-4-5"), ("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
                               ("openai-responses", "gpt-5.1")):
        named = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, NAMED)))["create_page"]
        assert named["type"] == "object" and "title" in named["properties"] and "$ref" not in named, provider
    # elsewhere the references stay where they point (only Moonshot asks for $defs)
    for provider, model_id in (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o")):
        reused = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, REUSED)))["set_fill"]
        assert reused == json.loads(REUSED.input_schema_json), provider


def test_a_root_reference_keeps_every_definition_and_what_is_said_beside_it():
    """The root's definitions join the target's own (the target's replaced them: a reference to
    one of the root's led nowhere); what a root says beside the reference joins the target (2020-12
    applies both: a `required` list beside it was left with `type` and OpenAI's `properties: {}`
    added, the model told the tool takes nothing), unless the two say different things of one
    keyword or define a name differently: it then stays as written; a `$ref` inside data (`const`,
    `enum`, `default`) is no reference."""
    from contextsvc.lowering.tool_schema import object_root, with_refs_under_defs
    nested = {"$ref": "#/$defs/Args", "$defs": {
        "Args": {"type": "object", "properties": {"mode": {"$ref": "#/$defs/Mode"}}, "$defs": {"Local": {"type": "string"}}},
        "Mode": {"enum": ["fast", "safe"]}}}
    out = object_root(nested)
    assert out["properties"] == {"mode": {"$ref": "#/$defs/Mode"}} and set(out["$defs"]) == {"Args", "Mode", "Local"}
    beside = {"$ref": "#/$defs/A", "required": ["b"], "title": "Args", "minProperties": 1, "$defs": {"A": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "title": "A"}}}
    assert object_root(beside, properties=True) == {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"], "title": "A",
        "minProperties": 1, "$defs": beside["$defs"]}
    other = {"$ref": "#/$defs/A", "type": "array", "$defs": {"A": {"type": "object"}}}
    assert object_root(other) == other
    clash = {"$ref": "#/$defs/A", "$defs": {"A": {"type": "object", "$defs": {"B": {"type": "string"}}}, "B": {"type": "integer"}}}
    assert object_root(clash) == {"type": "object", **clash}
    data = {"type": "object", "properties": {"b": {"type": "string"}, "c": {"const": {"$ref": "#/properties/b"}},
                                             "d": {"$ref": "#/properties/b", "default": {"$ref": "#/nowhere"}}}}
    moved = with_refs_under_defs(data)
    assert moved["properties"]["c"] == data["properties"]["c"]
    assert moved["properties"]["d"] == {"$ref": "#/$defs/properties_b", "default": {"$ref": "#/nowhere"}}


def test_folding_and_rewriting_keep_what_the_tool_accepts():
    """What a review found the rewriting got wrong: a branch that is a chain of references, or a
    reference with properties beside it, lost its variant; a `false` branch (nothing matches it)
    emptied the names every branch requires; properties beside a root reference joined a target
    that bounds its properties (the tool refuses `extra`, the rewriting accepted it); an empty
    tuple became an empty `prefixItems`, which 2020-12 refuses; a `$schema` naming draft 4 was left
    on a schema holding 2020-12's `exclusiveMinimum: 0`."""
    import jsonschema
    from contextsvc.lowering.tool_schema import as_2020_12, object_root
    chain = {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}], "$defs": {
        "A": {"$ref": "#/$defs/A2"}, "A2": {"properties": {"p": {"const": 1}}}, "B": {"properties": {"p": {"const": 2}}}}}
    assert object_root(chain)["properties"] == {"p": {"anyOf": [{"const": 1}, {"const": 2}]}}
    beside = {"oneOf": [{"$ref": "#/$defs/Base", "properties": {"action": {"const": "create"}}, "required": ["action"]},
                        {"$ref": "#/$defs/Base", "properties": {"action": {"const": "delete"}}, "required": ["action"]}],
              "$defs": {"Base": {"properties": {"id": {"type": "string"}}}}}
    folded = object_root(beside)
    assert folded["properties"]["action"] == {"anyOf": [{"const": "create"}, {"const": "delete"}]}
    assert folded["required"] == ["action"] and folded["properties"]["id"] == {"type": "string"}
    never = {"properties": {"a": {"type": "string"}}, "oneOf": [False, {"required": ["a"]}]}
    assert object_root(never)["required"] == ["a"]
    bounded = {"$ref": "#/$defs/A", "properties": {"extra": {"type": "string"}},
               "$defs": {"A": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}}}
    assert object_root(bounded) == {"type": "object", **bounded}
    empty = {"type": "object", "properties": {"tags": {"type": "array", "items": []}}}
    assert as_2020_12(empty)["properties"]["tags"] == {"type": "array"}
    old = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
           "properties": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}}}
    new = as_2020_12(old)
    assert new["$schema"] == "https://json-schema.org/draft/2020-12/schema" and new["properties"]["n"] == {
        "type": "integer", "exclusiveMinimum": 0}
    for schema in (new, as_2020_12(empty)):
        jsonschema.validators.validator_for(schema).check_schema(schema)
    plain = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
    assert as_2020_12(plain) is plain  # nothing rewritten: its draft stands


def test_a_tool_object_s_schema_is_taken_once_per_format_and_its_own_kept():
    """A session's tool definitions are the same objects at every step (the memo keeps them), so
    each format's reading of a schema is made once for the object (40 MCP tools' schemas walked at
    every step cost 5 ms of it on the OpenAI formats: bench/bench_tools.py); each format and
    model kind keeps its own, the request's schema stays as it was, and a copy of the definition
    with another schema does not inherit it."""
    import dataclasses
    from contextsvc import conversation as cm
    from contextsvc.lowering import MediaLedger, lower
    schema = {"properties": {"paths": {"type": "array"}, "also": {"$ref": "#/properties/paths"}}}
    tool = cm.ToolDefinition("read_many", "Read files", schema)
    given = json.dumps(schema)

    def taken(provider, model_id, t=tool):
        body = lower(provider, model_id=model_id, system=[], messages=[], tools=[t], max_output=1,
                     ledger=MediaLedger()).body
        return schemas(body)["read_many"]

    for _ in range(2):  # the second time from the object's own
        assert taken("openai-compatible", "kimi-k2.5") == {"type": "object", "properties": {
            "paths": {"type": "array", "items": {}}, "also": {"$ref": "#/$defs/properties_paths"}},
            "$defs": {"properties_paths": {"type": "array", "items": {}}}, "required": []}
        assert taken("openai", "gpt-4o") == {"type": "object", "properties": {
            "paths": {"type": "array", "items": {}}, "also": {"$ref": "#/properties/paths"}}}
        assert taken("anthropic", "claude-sonnet-4-5") == {"type": "object", **schema}
    assert json.dumps(schema) == given and len(tool.taken) == 3
    other = dataclasses.replace(tool, input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    assert taken("anthropic", "claude-sonnet-4-5", other) == other.input_schema


# An MCP server's schema of an older draft (Dokploy's, fastapi_mcp's): draft 4's boolean
# exclusiveMinimum, draft 3's required on a property, the tuple form of items
OLD_DRAFT = pb.ToolDefinition(name="set_port", description="d", input_schema_json=json.dumps({
    "type": "object", "properties": {
        "port": {"type": "integer", "minimum": 1024, "exclusiveMinimum": True, "maximum": 65536, "exclusiveMaximum": True},
        "host": {"type": "string", "required": True}, "note": {"type": "string", "required": False},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False}},
    "required": ["port"]}))


@pytest.mark.parametrize("provider,model_id", [("anthropic", "claude-sonnet-4-5"),
                                               ("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
                                               ("openrouter", "anthropic/claude-sonnet-4.5"), ("copilot", "claude-sonnet-4.5"),
                                               ("openai", "gpt-4o"), ("openai-responses", "gpt-5.1"),
                                               ("copilot", "gpt-5.1"), ("openrouter", "openai/gpt-5"),
                                               ("openai-compatible", "devstral-medium-2507"),
                                               ("openrouter", "mistralai/mistral-large-2411")])
def test_a_schema_of_an_older_draft_is_written_as_2020_12_for_claude_openai_and_mistral(stubs, provider, model_id):
    """"tools.18.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft
    2020-12" (Dokploy's MCP server, fastapi_mcp, Claude Code #586; on Bedrock too), at every
    request while the server is loaded; OpenAI's "Invalid schema for function 'x': True is not of
    type 'array'" and Mistral's "Invalid tool schema: {... 'exclusiveMinimum': True, 'minimum': 0
    ...} is not valid under any of the given schemas" likewise: the same constraints as 2020-12
    writes them."""
    found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, OLD_DRAFT)))["set_port"]
    assert found["properties"]["port"] == {"type": "integer", "exclusiveMinimum": 1024, "exclusiveMaximum": 65536}
    assert found["required"] == ["port", "host"] and "required" not in found["properties"]["note"]
    assert found["properties"]["pair"] == {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                                           "items": False}


def test_other_models_get_an_older_draft_s_schema_as_written(stubs):
    for provider, model_id in (("gemini", "gemini-2.5-pro"), ("bedrock", "us.amazon.nova-pro-v1:0"),
                               ("openrouter", "qwen/qwen3-coder")):
        body = assembled(stubs, provider, model_id, session(), tools=(BASH, OLD_DRAFT))
        found = schemas(body).get("set_port") or next(
            d["parametersJsonSchema"] for t in body["tools"] for d in t["functionDeclarations"] if d["name"] == "set_port")
        assert found["properties"]["port"]["exclusiveMinimum"] is True, provider
    judged = judge_for("anthropic")({"model": "claude-sonnet-4-5", "max_tokens": 10,
                                     "messages": [{"role": "user", "content": "hi"}],
                                     "tools": [{"name": "x", "input_schema": json.loads(OLD_DRAFT.input_schema_json)}]})
    assert any("draft 2020-12" in x for x in judged)
    for model in ("gpt-4o", "devstral-medium-2507"):
        judged = judge_for("openai")({"model": model, "messages": [{"role": "user", "content": "hi"}], "tools": [
            {"type": "function", "function": {"name": "x", "parameters": json.loads(OLD_DRAFT.input_schema_json)}}]})
        assert any("draft 2020-12" in x for x in judged), model


IDENTIFIED = pb.ToolDefinition(name="lookup", description="d", input_schema_json=json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "$id": "https://example.com/lookup.json",
    "type": "object", "properties": {"q": {"type": "string"}}}))


def test_mistral_gets_a_schema_without_its_id_and_draft_uri(stubs):
    """Mistral's API refuses `$id` and `$schema` in a function's parameters ("Grammar error: at
    3(11): failed to compile JSON schema", August 2025): its models get the schema without them;
    others as written."""
    for provider, model_id in (("openai-compatible", "devstral-medium-2507"), ("openrouter", "mistralai/codestral-2508")):
        assert schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, IDENTIFIED)))["lookup"] == {
            "type": "object", "properties": {"q": {"type": "string"}}}
    assert schemas(assembled(stubs, "openai", "gpt-4o", session(), tools=(BASH, IDENTIFIED)))["lookup"]["$id"]
    judged = judge_for("openai-compatible")({"model": "devstral-medium-2507", "messages": [{"role": "user", "content": "hi"}],
                                             "tools": [{"type": "function", "function": {
                                                 "name": "x", "parameters": json.loads(IDENTIFIED.input_schema_json)}}]})
    assert any("$schema" in x for x in judged) and any("$id" in x for x in judged)


# what MCP servers write and Moonshot's validator refuses (vercel/ai #18921, hermes-agent #27104 and
# #68154, kimi-cli #2531): type beside a nested anyOf, a tuple, a property's description beside a
# reference, an object without required, null among a type's or an enum's values
FLAVOURS = pb.ToolDefinition(name="browser_act", description="d", input_schema_json=json.dumps({
    "type": "object", "properties": {
        "target": {"type": "string", "anyOf": [{"format": "uri"}, {"pattern": "^#"}]},
        "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False},
        "options": {"$ref": "#/$defs/Options", "description": "how to act"},
        "mode": {"type": ["string", "null"], "enum": ["fast", "safe", None]},
        "timeout": {"type": ["integer", "string", "null"], "description": "ms, or a duration"}},
    "$defs": {"Options": {"type": "object", "properties": {"wait": {"type": "integer", "nullable": True}}}}}))


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "kimi-k2.5"), ("openrouter", "moonshotai/kimi-k2.5"),
                                               ("openai-compatible", "kimi-k3")])
def test_kimi_gets_a_schema_in_moonshot_s_flavour(stubs, provider, model_id):
    """"tools.function.parameters is not a valid moonshot flavored json schema, details: <At path
    'properties.target': when using anyOf, type should be defined in anyOf items instead of the
    parent schema>", "items must be an object", "required must be an array": refused at every
    request while the MCP server is loaded. Each is written as Moonshot's validator takes it, the
    same input accepted but null (which the model then does not send)."""
    found = schemas(assembled(stubs, provider, model_id, session(), tools=(BASH, FLAVOURS)))["browser_act"]
    props = found["properties"]
    assert props["target"] == {"anyOf": [{"format": "uri", "type": "string"}, {"pattern": "^#", "type": "string"}]}
    assert props["point"] == {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]}
    assert props["options"] == {"$ref": "#/$defs/Options"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "safe"]}
    assert props["timeout"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "description": "ms, or a duration"}
    assert found["required"] == [] and found["$defs"]["Options"] == {
        "type": "object", "properties": {"wait": {"type": "integer"}}, "required": []}
    judged = judge_for("openai-compatible")({"model": "kimi-k2.5", "messages": [{"role": "user", "content": "hi"}],
                                             "tools": [{"type": "function", "function": {
                                                 "name": "x", "parameters": json.loads(FLAVOURS.input_schema_json)}}]})
    assert len(judged) >= 6, judged
    # the others take it as written
    assert schemas(assembled(stubs, "openrouter", "qwen/qwen3-coder", session(), tools=(BASH, FLAVOURS)))[
        "browser_act"]["properties"]["mode"] == {"type": ["string", "null"], "enum": ["fast", "safe", None]}


def test_the_judges_refuse_a_reference_moonshot_refuses_or_none_resolves():
    def tools(schema, model="kimi-k2.5"):
        return {"model": model, "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "x", "parameters": schema}}]}
    reused = json.loads(REUSED.input_schema_json)
    assert any("must start with #/$defs/" in x for x in judge_for("openai-compatible")(tools(reused)))
    assert judge_for("openai-compatible")(tools(reused, "gpt-4o")) == []
    dangling = {"type": "object", "properties": {"f": {"$ref": "#/$defs/Filter"}}}
    assert any("can't be resolved" in x for x in judge_for("openai")(tools(dangling, "gpt-4o")))


def test_a_long_tool_description_goes_whole_to_other_models(stubs):
    for provider, model_id in (("openrouter", "anthropic/claude-sonnet-4.5"), ("anthropic", "claude-sonnet-4-5")):
        body = assembled(stubs, provider, model_id, session(), tools=(BASH, DOCUMENTED))
        assert DOCUMENTED.description in json.dumps(body)
    judged = judge_for("openai")({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "x", "description": "d" * 1025, "parameters": {"type": "object"}}}]})
    assert any("maximum length 1024" in x for x in judged)


@pytest.mark.parametrize("provider,model_id,most", [("openai", "gpt-4o", 128), ("openai-responses", "gpt-5.1", 128),
                                                    ("copilot", "gpt-5.1", 128), ("gemini", "gemini-2.5-pro", 512)])
def test_more_tools_than_the_provider_takes_is_refused_naming_the_field(stubs, provider, model_id, most):
    """"Invalid 'tools': array too long. Expected an array with maximum length 128" (Copilot's
    gpt-5.1 with many MCP servers loaded): refused here with the field and the limit, at Measure
    too, where the provider would refuse every request."""
    many = [pb.ToolDefinition(name=f"t{i}", description="d", input_schema_json='{"type":"object"}')
            for i in range(most + 1)]
    for stub in stubs:
        with pytest.raises(grpc.RpcError) as e:
            stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(messages=session()),
                                           model=convo.model(convo.PROVIDERS[provider], id=model_id), tools=many),
                         timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"{most + 1} tool definitions" in e.value.details() and f"at most {most}" in e.value.details()
    assembled(stubs, provider, model_id, session(), tools=many[:most])  # as many as it takes: judged, accepted
    assembled(stubs, "anthropic", "claude-sonnet-4-5", session(), tools=many)  # Anthropic names no such limit


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "devstral-small-latest"),
                                               ("openai-compatible", "mistralai/mistral-small-4-119b-2603"),
                                               ("openrouter", "mistralai/mistral-medium-3.1")])
def test_mistral_gets_an_assistant_turn_after_tool_results_and_ids_of_9(stubs, provider, model_id):
    """"Unexpected role 'user' after role 'tool'": a person's message sent mid-run, or a tool
    output's screenshot (sent as a user message after the tool messages), at every later request;
    and "Tool call id was call_1 but must be a-z, A-Z, 0-9, with a length of 9"."""
    messages = session()
    messages[1].parts[1].tool.state.attachments.append(
        pb.FilePart(mime="image/png", filename="s.png", data=b"\x89PNG\r\n\x1a\n" + bytes(32)))
    messages[2] = convo.user("m3", convo.text("p4", "stop, use tox instead"))
    wire = assembled(stubs, provider, model_id, messages)["messages"]
    roles = [x["role"] for x in wire]
    assert roles == ["user", "assistant", "tool", "assistant", "user"], roles  # the two user turns as one
    assert wire[3]["content"] == BRIDGE_ASSISTANT_TEXT and [x["type"] for x in wire[4]["content"]] == ["image_url", "text"]
    call_id = wire[roles.index("tool")]["tool_call_id"]
    assert len(call_id) == 9 and call_id.isalnum() and wire[roles.index("tool") - 1]["tool_calls"][0]["id"] == call_id


def test_other_models_keep_their_tool_turns_and_ids(stubs):
    messages = session()
    messages[2] = convo.user("m3", convo.text("p4", "stop, use tox instead"))
    wire = assembled(stubs, "openai-compatible", "qwen3-coder", messages)["messages"]
    assert [x["role"] for x in wire] == ["user", "assistant", "tool", "user"]
    assert wire[2]["tool_call_id"] == "call_1"


@pytest.mark.parametrize("model_id,url,sent", [
    ("gemini-2.5-pro", "https://example.com/d.png", True),
    ("gemini-2.5-pro", "http://example.com/d.png", False),
    ("gemini-2.0-flash", "https://example.com/d.png", False),
    ("gemini-2.0-flash", "https://generativelanguage.googleapis.com/v1beta/files/abc123", True),
    ("gemini-3.8-flash", "https://example.com/d.png", True)])
def test_gemini_gets_a_file_by_url_only_where_it_fetches_it(stubs, model_id, url, sent):
    """Gemini fetches a file from any site from 2.5 on, over https alone; earlier ones answer
    "Unsupported file uri" for one that is not its own Files API's."""
    messages = session()
    messages[0].parts.append(pb.Part(id="u", file=pb.FilePart(mime="image/png", filename="d.png", url=url)))
    first = assembled(stubs, "gemini", model_id, messages)["contents"][0]["parts"]
    assert any("fileData" in p for p in first) == sent
    assert sent or any(p.get("text", "").startswith("[Attached image/png: d.png (not sent:") for p in first)


@pytest.mark.parametrize("model_id", ["devstral-small-latest", "open-mistral-nemo"])
def test_mistral_gets_a_closing_user_turn_after_a_cut_reply(stubs, model_id):
    """"Expected last role User or Tool (or Assistant with prefix True) for serving but got
    assistant": every Mistral model, without its own prefix flag."""
    wire = assembled(stubs, "openai-compatible", model_id, cut_reply())["messages"]
    assert wire[-1] == {"role": "user", "content": CLOSING_USER_TEXT}


@pytest.mark.parametrize("model_id", ["us-gov.meta.llama3-8b-instruct-v1:0",
                                      "arn:aws:bedrock:us-east-1::foundation-model/meta.llama3-3-70b-instruct-v1:0",
                                      "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.deepseek.r1-v1:0"])
def test_a_bedrock_arn_or_region_that_names_an_uncached_model_gets_no_cache_point(stubs, model_id):
    assert cache_points(assembled(stubs, "bedrock", model_id, session(), system=SYSTEM)) == []


def test_an_array_schema_in_tuple_form_gets_any_items_too(stubs):
    pair = pb.ToolDefinition(name="pair", description="d", input_schema_json=(
        '{"type":"object","properties":{"pair":{"type":"array","items":[{"type":"array"},{"type":"string"}]}}}'))
    text = json.dumps(assembled(stubs, "openai", "gpt-4o", session(), tools=(BASH, pair)))
    assert '"prefixItems": [{"type": "array", "items": {}}, {"type": "string"}]' in text  # 2020-12's tuple


@pytest.mark.parametrize("provider,model_id", [("openai-compatible", "gpt-5.1"), ("openrouter", "openai/gpt-5.1")])
def test_an_openai_model_behind_a_gateway_takes_128_tools_too(stubs, provider, model_id):
    many = [pb.ToolDefinition(name=f"t{i}", description="d", input_schema_json='{"type":"object"}') for i in range(129)]
    with pytest.raises(grpc.RpcError) as e:
        stubs[0].Measure(pb.MeasureRequest(conversation=pb.Conversation(messages=session()),
                                           model=convo.model(convo.PROVIDERS[provider], id=model_id), tools=many),
                         timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 128" in e.value.details()
    assembled(stubs, provider, "qwen3-coder", session(), tools=many)  # another model there: none known


@pytest.mark.parametrize("model_id,apart", [("meta.llama4-maverick-17b-instruct-v1:0", True),
                                            ("anthropic.claude-3-opus-20240229-v1:0", True),
                                            ("us.amazon.nova-pro-v1:0", True),
                                            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", False)])
def test_bedrock_models_but_claude_from_3_5_get_tool_results_in_a_turn_of_their_own(stubs, model_id, apart):
    """"Conversation blocks and tool result blocks cannot be provided in the same turn" (Llama 4,
    Claude 3 Opus): a message sent mid-run joined the tool results' turn. An assistant turn goes
    between them there; Claude from 3.5 takes them joined, as before."""
    messages = session()
    messages[2] = convo.user("m3", convo.text("p4", "stop, use tox instead"))
    wire = assembled(stubs, "bedrock", model_id, messages)["messages"]
    kinds = [(x["role"], sorted({next(iter(b)) for b in x["content"]} - {"cachePoint"})) for x in wire]
    if apart:
        assert kinds[2:] == [("user", ["toolResult"]), ("assistant", ["text"]), ("user", ["text"])], kinds
        assert wire[3]["content"] == [{"text": BRIDGE_ASSISTANT_TEXT}]
    else:
        assert kinds[2:] == [("user", ["text", "toolResult"])], kinds


def test_nova_gets_no_cache_point_right_after_a_tool_result(stubs):
    """Nova takes a cachePoint in a turn of tool results, but not right after one
    (aws-samples/bedrock-engineer #71): a step that ends with tool results, the usual state of a
    tool loop, leaves that turn unmarked for Nova; Claude's is marked there, as before."""
    for model_id, marked in (("us.amazon.nova-pro-v1:0", False), ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", True)):
        last = assembled(stubs, "bedrock", model_id, session()[:2], system=SYSTEM)["messages"][-1]
        assert "toolResult" in last["content"][0]
        assert ("cachePoint" in last["content"][-1]) == marked, model_id
