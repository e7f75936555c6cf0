"""Provider rules each wire format must follow, checked on Assemble's body over loopback."""
from __future__ import annotations

import base64
import json

import grpc
import pytest

from helpers import convo
from judges import judge_for
from contextsvc.v1 import context_pb2 as pb

PDF = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 tiny").decode()


def body(stub, messages, provider):
    conv = pb.Conversation(session_id="sess-q", messages=messages)
    r = stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(provider=provider)), timeout=10)
    return json.loads(r.body)


def reasoning(pid, text, signature=""):
    return pb.Part(id=pid, reasoning=pb.ReasoningPart(text=text, signature=signature))


def turn(*assistant_parts):
    return [convo.user("m1", convo.text("p1", "Look at a.py")),
            convo.assistant("m2", *assistant_parts),
            convo.user("m3", convo.text("p9", "Go on"))]


def test_bedrock_drops_unsigned_reasoning_and_keeps_signed(stub):
    b = body(stub, turn(reasoning("r1", "unsigned thought"), reasoning("r2", "signed thought", "sig-abc"),
                        convo.text("p2", "Reading it.")), pb.PROVIDER_BEDROCK)
    assistant = b["messages"][1]["content"]
    assert "unsigned thought" not in json.dumps(b)
    assert assistant[0] == {"reasoningContent": {"reasoningText": {"text": "signed thought", "signature": "sig-abc"}}}
    assert assistant[1] == {"text": "Reading it."}


def test_bedrock_document_names_use_only_the_characters_converse_accepts(stub):
    for filename, expected in [("report.final_v2 (draft).pdf", "report-final-v2 (draft)"),
                               ("a  b\t.pdf", "a b"), ("日本語.pdf", "document"), ("", "document")]:
        part = pb.Part(id="f1", file=pb.FilePart(mime="application/pdf", filename=filename, url=PDF))
        b = body(stub, [convo.user("m1", convo.text("p1", "Summarize"), part)], pb.PROVIDER_BEDROCK)
        doc = b["messages"][0]["content"][1]["document"]
        assert doc["name"] == expected, filename
        assert doc["format"] == "pdf"


def test_gemini_replays_the_thought_signature_on_the_function_call(stub):
    call = convo.tool("t1", "call_1", "read", {"path": "a.py"}, "x = 1\n")
    b = body(stub, turn(reasoning("r1", "I should read it", "Z2VtLXNpZy0x"), call), pb.PROVIDER_GEMINI)
    model_parts = b["contents"][1]["parts"]
    assert model_parts[0] == {"functionCall": {"name": "read", "args": {"path": "a.py"}},
                              "thoughtSignature": "Z2VtLXNpZy0x"}
    assert "I should read it" not in json.dumps(b)  # the thought itself is not replayed


def test_gemini_signs_the_first_call_of_a_model_turn_two_answers_make(stub):
    """Two answers in a row (the person's blank message between them is not sent) are one model
    turn: the signature the first answer's text carries goes on the turn's first functionCall,
    which Gemini 3 refuses unsigned. It went on the second answer's call only within one message."""
    messages = [convo.user("m1", convo.text("p1", "Fix the bug")),
                convo.assistant("m2", reasoning("r1", "which file?", "c2lnbmF0dXJlMQ=="), convo.text("p2", "Which file?")),
                convo.user("m3", convo.text("p3", "  \n")),
                convo.assistant("m4", convo.tool("t1", "call_1", "read", {"path": "a.py"}, "x = 1\n")),
                convo.user("m5", convo.text("p5", "Go on"))]
    b = body(stub, messages, pb.PROVIDER_GEMINI)
    model_parts = b["contents"][1]["parts"]
    assert b["contents"][1]["role"] == "model" and len(b["contents"]) == 3
    assert model_parts == [{"text": "Which file?"}, {"functionCall": {"name": "read", "args": {"path": "a.py"}},
                                                     "thoughtSignature": "c2lnbmF0dXJlMQ=="}]
    assert judge_for("gemini")(b) == []
    assert body(stub, messages, pb.PROVIDER_GEMINI) == b  # the second time from the memo


def test_bedrock_sends_only_redacted_reasoning_it_can_read_as_a_blob(stub):
    """redactedContent is a blob (standard base64): another provider's state, such as an OpenAI
    Responses encrypted_content in its URL-safe alphabet, failed the whole request; it is left out."""
    for redacted, kept in (("gAAAAABox-_Yx-_Y", False), (base64.b64encode(b"\xfb\xef\xbe opaque").decode(), True)):
        b = body(stub, turn(pb.Part(id="r1", reasoning=pb.ReasoningPart(redacted_data=redacted)),
                            convo.text("p2", "Hello.")), pb.PROVIDER_BEDROCK)
        blocks = b["messages"][1]["content"]
        assert (blocks[0] == {"reasoningContent": {"redactedContent": redacted}}) == kept, blocks
        assert judge_for("bedrock")(b) == []


@pytest.mark.parametrize("provider, model_id", [
    (pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"), (pb.PROVIDER_OPENAI, "gpt-4o"),
    (pb.PROVIDER_OPENAI_RESPONSES, "gpt-5"), (pb.PROVIDER_BEDROCK, "anthropic.claude-sonnet-4-5-v1:0"),
    (pb.PROVIDER_GEMINI, "gemini-2.5-flash")])
def test_a_failed_call_whose_arguments_the_model_wrote_malformed_is_sent(stub, provider, model_id):
    """A model's arguments cut at its output limit, refused by the tool: the call failed with
    them. They refused every later request of the session (INVALID_ARGUMENT); the call now goes
    with {} and its error, and every provider's library accepts the body. A completed call's
    arguments must still be a JSON object."""
    def call(status, input_json):
        return pb.Part(id="t1", tool=pb.ToolPart(call_id="call_1", tool="read", state=pb.ToolState(
            status=status, input_json=input_json, error="invalid JSON arguments" if status == pb.TOOL_STATUS_ERROR
            else "", output="" if status == pb.TOOL_STATUS_ERROR else "x = 1\n")))

    name = {pb.PROVIDER_ANTHROPIC: "anthropic", pb.PROVIDER_OPENAI: "openai", pb.PROVIDER_OPENAI_RESPONSES:
            "openai-responses", pb.PROVIDER_BEDROCK: "bedrock", pb.PROVIDER_GEMINI: "gemini"}[provider]
    tools = [pb.ToolDefinition(name="read", input_schema_json='{"type":"object"}')]
    for malformed in ('{"path": "src/a.py", "lim', '["src/a.py"]'):
        conv = pb.Conversation(session_id="sess-q", messages=turn(call(pb.TOOL_STATUS_ERROR, malformed)))
        r = stub.Assemble(pb.AssembleRequest(conversation=conv, tools=tools, model=convo.model(provider=provider,
                                                                                                id=model_id)), timeout=10)
        b = json.loads(r.body)
        assert "invalid JSON arguments" in r.body.decode() and "src/a.py" not in r.body.decode()
        problems = judge_for(name)(b, dict(r.headers)) if name == "anthropic" else judge_for(name)(b)
        assert problems == [], problems
    completed = pb.Conversation(session_id="sess-q", messages=turn(call(pb.TOOL_STATUS_COMPLETED, '["src/a.py"]')))
    with pytest.raises(grpc.RpcError) as e:
        stub.Assemble(pb.AssembleRequest(conversation=completed, tools=tools, model=convo.model(provider=provider,
                                                                                                id=model_id)), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "input_json: must be a JSON object" in e.value.details()


def test_gemini_drops_reasoning_without_signature(stub):
    b = body(stub, turn(reasoning("r1", "plain thought"), convo.text("p2", "Done.")), pb.PROVIDER_GEMINI)
    assert b["contents"][1]["parts"] == [{"text": "Done."}]


def test_gemini_marks_a_failed_call_s_response_as_its_error(stub):
    """Gemini reads a functionResponse's "error" key as the call's failure (as Anthropic reads
    is_error and Bedrock status "error"); any other response is the call's output."""
    failed = pb.Part(id="t2", tool=pb.ToolPart(call_id="call_2", tool="bash", state=pb.ToolState(
        status=pb.TOOL_STATUS_ERROR, input_json='{"command": "make"}', error="make: *** No rule to make target")))
    b = body(stub, turn(convo.tool("t1", "call_1", "read", {"path": "a.py"}, "x = 1\n"), failed),
             pb.PROVIDER_GEMINI)
    responses = [p["functionResponse"]["response"] for c in b["contents"] for p in c["parts"] if "functionResponse" in p]
    assert responses == [{"name": "read", "content": "x = 1\n"},
                         {"name": "bash", "error": "make: *** No rule to make target"}]


def test_anthropic_rejects_a_1h_breakpoint_after_a_5m_one(stub):
    import grpc
    import pytest

    conv = convo.small_conversation()
    hints = [pb.CacheHint(system_block=0, ttl=pb.CACHE_TTL_5M), pb.CacheHint(message_id="msg_003", ttl=pb.CACHE_TTL_1H)]
    system = pb.SystemPrompt(soul="You are a careful coding agent.")
    with pytest.raises(grpc.RpcError) as e:
        stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(), system=system, cache_hints=hints),
                      timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cache_hints" in e.value.details() and "1h" in e.value.details()
    # longer first is what the API accepts
    hints = [pb.CacheHint(system_block=0, ttl=pb.CACHE_TTL_1H), pb.CacheHint(message_id="msg_003", ttl=pb.CACHE_TTL_5M)]
    b = json.loads(stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(), system=system,
                                                    cache_hints=hints), timeout=10).body)
    assert b["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert b["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_openai_data_url_media_costs_its_decoded_size(stub):
    """base64 padding is not payload: 4 chars with '==' decode to 1 byte."""
    def extra(payload):
        part = pb.Part(id="f1", file=pb.FilePart(mime="image/png", filename="a.png",
                                                 url="data:image/png;base64," + payload))
        conv = pb.Conversation(messages=[convo.user("m1", convo.text("p1", "Look"), part)])
        return stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(provider=pb.PROVIDER_OPENAI)),
                            timeout=10)
    def png(size: int) -> str:  # a PNG's signature, then zeros: size bytes in base64
        return base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(size - 8)).decode()

    assert len(png(21)) == len(png(19)) == 28 and png(19).endswith("==")
    assert len(png(18)) == len(png(16)) == 24 and png(16).endswith("==")
    # ceil(decoded bytes / 4): 28 chars are 21 bytes (6), or 19 with '==' (5); 24 chars are
    # 18 bytes (5), or 16 with '==' (4), where ignoring the padding said 18
    assert extra(png(21)).extra == 6 and extra(png(19)).extra == 5
    assert extra(png(18)).extra == 5 and extra(png(16)).extra == 4


WHOLE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(4)).decode()  # a PNG's signature: "iVBORw0KGgoAAAAA"


@pytest.mark.parametrize("payload", ["@@@", "QUJD=", "QUJD====", "QUI", "QUJD\nQUJD", "QUJD%0A"])
def test_a_data_url_that_is_not_base64_is_sent_as_the_attachment_note(stub, payload):
    """A corrupted copy of an image (not the alphabet, excess padding, cut short, a line break):
    a provider refuses the whole request over it, and every later one of the session, so it goes
    as the note a file the provider cannot take becomes; the same image whole goes as itself."""
    def sent(data):
        part = pb.Part(id="f1", file=pb.FilePart(mime="image/png", filename="a.png", url="data:image/png;base64," + data))
        return [convo.user("m1", convo.text("p1", "Look"), part)]

    note = "[Attached image/png: a.png]"
    for provider, name in ((pb.PROVIDER_ANTHROPIC, "anthropic"), (pb.PROVIDER_OPENAI, "openai"),
                           (pb.PROVIDER_OPENAI_RESPONSES, "openai-responses"), (pb.PROVIDER_BEDROCK, "bedrock"),
                           (pb.PROVIDER_GEMINI, "gemini")):
        broken, whole = body(stub, sent(payload), provider), body(stub, sent(WHOLE), provider)
        assert note in json.dumps(broken) and not judge_for(name)(broken), name
        assert note not in json.dumps(whole) and WHOLE in json.dumps(whole), name


def test_reasoning_of_the_snapshot_an_alias_answered_with_keeps_its_signature(stub):
    """Anthropic answers a request for claude-sonnet-4-5 as claude-sonnet-4-5-20250929: an agent
    storing that id replays the turn's thinking signed, as the API requires with tool use; a
    thought another model signed goes as text, and so does one of another snapshot."""
    def assistant_content(model_id):
        messages = turn(reasoning("r1", "check the import first", "sig-abc"), convo.text("p2", "Reading it."))
        messages[1].model_id = model_id
        return body(stub, messages, pb.PROVIDER_ANTHROPIC)["messages"][1]["content"]

    signed = {"type": "thinking", "thinking": "check the import first", "signature": "sig-abc"}
    assert convo.model().id == "claude-sonnet-4-5"
    for same in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", ""):
        assert assistant_content(same)[0] == signed, same
    for other in ("claude-opus-4-1", "claude-opus-4-1-20250805", "claude-sonnet-4"):
        assert assistant_content(other)[0] == {"type": "text", "text": "check the import first"}, other


def _tool_loop_compacted(stub, provider):
    """A tool loop of signed thinking compacted mid-turn, its kept tail one assistant message,
    the edits applied as the client helper applies them: the summary (an assistant message) and
    that message are joined into one element."""
    from contextsvc_client import apply_compaction

    mdl = convo.model(provider=provider, context=32_000, output=4_096)
    messages = [convo.user("u1", convo.text("u1p", "Refactor app/ to use Postgres."))]
    for i in range(12):
        out = "\n".join(f"{n:5}\tdef f{n}_{i}(x): return x * {n}" for n in range(450 if i == 11 else 150))
        messages.append(convo.assistant(
            f"a{i}", reasoning(f"a{i}r", f"I need to read file {i} next.", "EqQBCkYIBxgCKkD" + "x" * 40),
            convo.text(f"a{i}t", f"Reading app/m{i}.py"),
            convo.tool(f"a{i}x", f"toolu_{i:03d}", "read", {"path": f"app/m{i}.py"}, out),
            usage=pb.Usage(input=2000 + 1500 * i, output=150), parent_id="u1"))
    conv = pb.Conversation(session_id="sess-join", messages=messages)
    r = stub.Compact(pb.CompactRequest(conversation=conv, model=mdl, auto=True), timeout=30)
    assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED and r.tail_start_id.startswith("a")
    conv = pb.Conversation(session_id="sess-join", messages=apply_compaction(messages, r, drop_omittable=True))
    return json.loads(stub.Assemble(pb.AssembleRequest(conversation=conv, model=mdl), timeout=10).body)


def test_the_kept_assistant_message_joined_to_the_summary_opens_with_its_thinking(stub):
    """With extended thinking on, Anthropic refuses a final assistant message of a tool loop
    that does not open with a thinking block; the summary joined before the kept message made it
    open with text. Its thinking goes first (Bedrock's reasoningContent too), the rest in order."""
    b = _tool_loop_compacted(stub, pb.PROVIDER_ANTHROPIC)
    turns = [x["content"] for x in b["messages"] if x["role"] == "assistant"]
    assert b["messages"][-1]["content"][0]["type"] == "tool_result"
    assert all(t[0]["type"] == "thinking" for t in turns)  # the final one's above all
    joined = turns[0]  # the summary's text, then the kept message's own, after its thinking
    assert [x["type"] for x in joined] == ["thinking", "text", "text", "tool_use"]
    assert joined[2]["text"].startswith("Reading app/m") and not joined[1]["text"].startswith("Reading")

    b = _tool_loop_compacted(stub, pb.PROVIDER_BEDROCK)
    turns = [x["content"] for x in b["messages"] if x["role"] == "assistant"]
    assert all("reasoningContent" in t[0] for t in turns)
    assert "text" in turns[0][1] and turns[0][2]["text"].startswith("Reading app/m") and "toolUse" in turns[0][3]
