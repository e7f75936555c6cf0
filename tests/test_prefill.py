"""A body that ends with the model's turn, sent to a model that refuses to go on from it (Claude
from 4.6 on: "This model does not support assistant message prefill. The conversation must end
with a user message."): the closing user message goes last (docs/design.md §6, "What the body
must pass"). Through a real server on loopback, every body judged by its provider's library
with that model's rule (tests/judges/: refuses_prefill).
"""
from __future__ import annotations

import json

import grpc
import pytest

from contextsvc import assemble, config, conversation as m
from contextsvc.lowering.neutral import CLOSING_USER_TEXT
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers import convo
from helpers.server import start_server, stubs_with_and_without_memo
from judges import judge_for
from judges.bedrock_judge import judge as bedrock_judge

SYSTEM = pb.SystemPrompt(soul="You are a coding agent.")
BASH = pb.ToolDefinition(name="bash", description="Run a command", input_schema_json='{"type":"object"}')
# a Claude that refuses a last turn of its own, by each provider that serves it, as agents name it
REFUSING = {"anthropic": "claude-sonnet-4-6", "bedrock": "us.anthropic.claude-opus-4-6-v1:0",
            "openrouter": "anthropic/claude-sonnet-4.6", "copilot": "claude-opus-4.7",
            "openai-compatible": "claude-sonnet-5", "openai-responses": "claude-opus-4-6"}
# models that take a last turn of their own as the start of their answer
TAKING = {"anthropic": "claude-sonnet-4-5", "bedrock": "anthropic.claude-haiku-4-5-20251001-v1:0",
          "openai": "gpt-4o", "gemini": "gemini-2.5-pro", "openrouter": "anthropic/claude-3.7-sonnet"}
# Claude 1 and 2 take it too, under the names Bedrock gives them
LEGACY = ["anthropic.claude-v2:1", "anthropic.claude-instant-v1"]


def interrupted() -> pb.Conversation:
    """A reply cut off (the agent's stream failed): the next request goes out with it last."""
    cut = convo.assistant("m2", convo.text("p2", "Reading the test first. "), finished=False)
    cut.error.CopyFrom(pb.MessageError(name="MessageAbortedError", message="aborted"))
    return pb.Conversation(session_id="sess-prefill", messages=[
        convo.user("m1", convo.text("p1", "fix the failing test")), cut])


def blank_last_step() -> pb.Conversation:
    """The person's last step is whitespace alone, which is sent as nothing."""
    return pb.Conversation(session_id="sess-prefill-blank", messages=[
        convo.user("m1", convo.text("p1", "fix the failing test")),
        convo.assistant("m2", convo.text("p2", "Done: the assertion was off by one."),
                        convo.tool("p3", "call_1", "bash", {"cmd": "pytest"}, "1 passed")),
        convo.assistant("m3", convo.text("p4", "All green.")),
        convo.user("m4", convo.text("p5", " \n "))])


def reasoning_cut() -> pb.Conversation:
    """A reply cut off after its signed reasoning: a turn that carries no cache marker."""
    cut = convo.assistant("m2", pb.Part(id="r2", reasoning=pb.ReasoningPart(
        text="Look at the test first.", signature="EqQBCkYIBxgCKkD")), finished=False)
    cut.error.CopyFrom(pb.MessageError(name="MessageAbortedError", message="aborted"))
    return pb.Conversation(session_id="sess-prefill-thinking", messages=[
        convo.user("m1", convo.text("p1", "fix the failing test")), cut])


SHAPES = {"interrupted": interrupted, "blank-last-step": blank_last_step}


@pytest.fixture(scope="module")
def stubs():
    yield from stubs_with_and_without_memo()


def assembled(stub, conversation, provider, model_id, **kw) -> pb.AssembleResponse:
    model = convo.model(provider=convo.PROVIDERS[provider], id=model_id)
    return stub.Assemble(pb.AssembleRequest(conversation=conversation, model=model, tools=[BASH], system=SYSTEM,
                                            step=1, **kw), timeout=10)


def judged(body: dict, provider: str, model_id: str) -> list:
    return bedrock_judge(body, model_id=model_id) if provider == "bedrock" else judge_for(provider)(body)


def messages_of(body: dict) -> list:
    return [x for x in body.get("messages") or body.get("contents") or body.get("input") or []
            if x.get("role") not in ("system", "developer")]


def text_of(message: dict) -> str:
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b.get("text"), str))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("provider,model_id", REFUSING.items())
def test_a_body_ending_with_the_models_turn_is_closed_by_a_user_message(stubs, provider, model_id, shape):
    for stub in stubs + stubs[:1]:  # the memo's server twice (the second time from its memo), and none
        a = assembled(stub, SHAPES[shape](), provider, model_id)
        assert a.body == assembled(stubs[1], SHAPES[shape](), provider, model_id).body
        body = json.loads(a.body)
        assert judged(body, provider, model_id) == []
        wire = messages_of(body)
        assert wire[-1]["role"] == "user" and text_of(wire[-1]) == CLOSING_USER_TEXT
        assert wire[-2]["role"] == "assistant"
        # the figures are the body's: Measure of the same request counts the closing message
        measured = stub.Measure(pb.MeasureRequest(conversation=SHAPES[shape](), tools=[BASH], system=SYSTEM,
                                                  model=convo.model(provider=convo.PROVIDERS[provider], id=model_id)),
                                timeout=10)
        assert measured.body_bytes == a.body_bytes == len(a.body)


@pytest.mark.parametrize("provider,model_id", [*TAKING.items(), *(("bedrock", i) for i in LEGACY)])
def test_a_model_that_takes_its_own_turn_last_is_sent_it_last(stub, provider, model_id):
    body = json.loads(assembled(stub, interrupted(), provider, model_id).body)
    assert judged(body, provider, model_id) == []
    wire = messages_of(body)
    assert wire[-1]["role"] in ("assistant", "model") and CLOSING_USER_TEXT not in json.dumps(body)


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_the_same_without_the_memo(stub, provider):
    """The memo's put-together pieces and the whole request lowered at once give one body."""
    model_id = REFUSING[provider]
    served = json.loads(assembled(stub, blank_last_step(), provider, model_id).body)
    conv = m.Conversation([m.Message("m1", m.USER, [m.Part("p1", m.Text("fix the failing test"))]),
                           m.Message("m2", m.ASSISTANT, [m.Part("p2", m.Text("Done: the assertion was off by one.")),
                                                         m.Part("p3", m.Tool("call_1", "bash", m.COMPLETED,
                                                                             {"cmd": "pytest"}, "1 passed"))],
                                     time_completed_ms=1),
                           m.Message("m3", m.ASSISTANT, [m.Part("p4", m.Text("All green."))], time_completed_ms=1),
                           m.Message("m4", m.USER, [m.Part("p5", m.Text(" \n "))])], "sess-prefill-blank")
    tools = [m.ToolDefinition("bash", "Run a command", {"type": "object"})]
    inp = assemble.AssembleInput(conv, m.Model(model_id, provider, m.ModelLimits(200_000, 0, 64_000)), tools,
                                 m.SystemPrompt(soul="You are a coding agent."), m.CompactionSettings(), step=1)
    alone = json.loads(assemble.assemble(inp, config.Config()).body)
    assert alone == served


def test_the_marker_goes_on_the_models_turn_and_the_next_step_reads_it(stub):
    """The cache is written up to the model's turn before the closing message, and the next step,
    where the model's answer to it follows, keeps that prefix and the closing message after it
    (closing_between_replies)."""
    model_id = REFUSING["anthropic"]
    first = assembled(stub, blank_last_step(), "anthropic", model_id)
    body = json.loads(first.body)
    wire = body["messages"]
    assert text_of(wire[-1]) == CLOSING_USER_TEXT and wire[-2]["role"] == "assistant"
    assert "cache_control" not in json.dumps(wire[-1])
    assert "cache_control" in json.dumps(wire[-2]["content"][-1])  # the model's turn before it
    assert f"messages[{len(wire) - 2}]" in [b.location for b in first.breakpoints]
    later = blank_last_step()
    later.messages.append(convo.assistant("m5", convo.text("p6", "Anything else?")))
    later.messages.append(convo.user("m6", convo.text("p7", "commit it")))
    second = assembled(stub, later, "anthropic", model_id, previous_cache_state=first.cache_state)
    assert judged(json.loads(second.body), "anthropic", model_id) == []
    report = second.cache_report
    assert report.compared and report.reused_elements > 0
    # what the first request sent up to its marker is the second's prefix, byte for byte
    unmarked = [json.dumps(x).replace(', "cache_control": {"type": "ephemeral"}', "") for x in wire[:-1]]
    again = [json.dumps(x).replace(', "cache_control": {"type": "ephemeral"}', "")
             for x in json.loads(second.body)["messages"]]
    assert again[:len(wire)] == unmarked + [json.dumps(wire[-1])]  # the closing message stays
    assert report.prefix_kept and report.cause == "new_turn"


def test_a_person_answering_the_cut_reply_keeps_the_whole_prefix(stub):
    """The closing message stands for what the person sends next: once they have, the previous
    request's cached elements all reappear at the head of this one (the closing one is no
    element of the cache state)."""
    model_id = REFUSING["anthropic"]
    first = assembled(stub, interrupted(), "anthropic", model_id)
    answered = interrupted()
    answered.messages.append(convo.user("m3", convo.text("p3", "go on")))
    second = assembled(stub, answered, "anthropic", model_id, previous_cache_state=first.cache_state)
    report = second.cache_report
    assert report.compared and report.prefix_kept and report.cause == "new_turn"
    wire = json.loads(second.body)["messages"]
    assert wire[-1]["role"] == "user" and text_of(wire[-1]) == "go on"


def test_a_closing_after_a_turn_of_reasoning_alone_leaves_the_marker_on_the_last_user_message(stub):
    """Reasoning carries no marker: the auto marker goes where it would without the closing."""
    a = assembled(stub, reasoning_cut(), "anthropic", REFUSING["anthropic"])
    older = assembled(stub, reasoning_cut(), "anthropic", TAKING["anthropic"])
    assert judged(json.loads(a.body), "anthropic", REFUSING["anthropic"]) == []
    assert text_of(json.loads(a.body)["messages"][-1]) == CLOSING_USER_TEXT
    messages = [(b.location, b.segment) for b in a.breakpoints if b.location.startswith("messages")]
    assert messages == [(b.location, b.segment) for b in older.breakpoints if b.location.startswith("messages")]
    assert messages == [("messages[0]", "tail")]


@pytest.mark.parametrize("hint", [False, True])
def test_the_turn_before_the_closing_is_the_tail(stub, hint):
    """Marked by the auto policy or by a hint, the model's turn before the closing message is
    the request's tail (its newest stored message)."""
    kw = {"cache_hints": [pb.CacheHint(message_id="m2")]} if hint else {}
    a = assembled(stub, interrupted(), "anthropic", REFUSING["anthropic"], **kw)
    assert [(b.location, b.segment) for b in a.breakpoints if b.location.startswith("messages")] == \
        [("messages[1]", "tail")]


def test_a_body_sent_to_another_model_is_reported_written_again_whole(stub):
    """A provider caches per model: the same body sent to another model reads none of what the
    previous request's wrote, so the cache report says so (cause "model", from the first element),
    where it said the prefix was kept; a state written before the model was recorded (version 3)
    is read as before."""
    first = assembled(stub, blank_last_step(), "anthropic", "claude-sonnet-4-5")
    later = blank_last_step()
    later.messages.append(convo.user("m5", convo.text("p6", "commit it")))
    same = assembled(stub, later, "anthropic", "claude-sonnet-4-5", previous_cache_state=first.cache_state)
    assert same.cache_report.prefix_kept and same.cache_report.cause == "new_turn"
    other = assembled(stub, later, "anthropic", "claude-opus-4-5", previous_cache_state=first.cache_state)
    report = other.cache_report
    assert (report.prefix_kept, report.cause, report.segment, report.index, report.reused_elements) == \
        (False, "model", "tools", 0, 0)
    whole = json.loads(other.body)
    assert report.rewrite.tokens >= other.figures.decision.tokens - 1 > 0 and whole["model"] == "claude-opus-4-5"

    # a version 3 state holds no model: read as before (the body unchanged but for appended messages)
    older = start_server(assemble_overrides={"cache_state_version": 3})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{older.port}") as channel:
            v3 = assembled(pb_grpc.ContextServiceStub(channel), blank_last_step(), "anthropic", "claude-sonnet-4-5")
        report = assembled(stub, later, "anthropic", "claude-opus-4-5", previous_cache_state=v3.cache_state).cache_report
        assert report.compared and report.prefix_kept and report.cause == "new_turn"
    finally:
        older.stop(grace=1)


@pytest.mark.parametrize("provider,model_id", TAKING.items())
def test_a_cut_reply_holding_reasoning_is_closed_for_every_model(stub, provider, model_id):
    """A model that goes on from its own turn refuses one holding its reasoning there: "When
    thinking is disabled, an `assistant` message in the final position cannot contain `thinking`"
    (Claude Sonnet 4.5 and Haiku 4.5, on Anthropic and Bedrock); with thinking on, the turn would
    have to open with it. The closing user message goes after it, as for Claude from 4.6."""
    body = json.loads(assembled(stub, reasoning_cut(), provider, model_id).body)
    assert judged(body, provider, model_id) == []
    if provider in ("anthropic", "bedrock"):  # the formats that send the reasoning back
        assert text_of(messages_of(body)[-1]) == CLOSING_USER_TEXT


def test_claudes_cut_reply_behind_openrouter_is_closed_for_its_thinking(stubs):
    """Claude's signed thinking goes back through OpenRouter's reasoning_details: a cut reply
    holding it, last, is closed as on Anthropic ("an `assistant` message in the final position
    cannot contain `thinking`"), and the answer to the closing message keeps it before it."""
    model_id = "anthropic/claude-3.7-sonnet"  # takes its own turn last
    cut = convo.assistant("m2", pb.Part(id="r2", reasoning=pb.ReasoningPart(
        text="Look at the test first.", signature="EqQBCkYIBxgCKkD")), convo.text("t2", "Reading the test"),
        finished=False)
    cut.error.CopyFrom(pb.MessageError(name="MessageAbortedError", message="aborted"))
    first = pb.Conversation(session_id="sess-openrouter-thinking", messages=[
        convo.user("m1", convo.text("p1", "fix the failing test")), cut])
    bodies = [assembled(stub, first, "openrouter", model_id) for stub in stubs]
    assert bodies[0].body == bodies[1].body
    wire = messages_of(json.loads(bodies[0].body))
    assert judged(json.loads(bodies[0].body), "openrouter", model_id) == []
    assert wire[-2]["reasoning_details"][0]["signature"] == "EqQBCkYIBxgCKkD" and text_of(wire[-1]) == CLOSING_USER_TEXT
    later = pb.Conversation()
    later.CopyFrom(first)
    later.messages.append(convo.assistant("m3", convo.text("p3", "The test expects 3.")))
    later.messages.append(convo.user("m4", convo.text("p4", "go on")))
    second = [assembled(stub, later, "openrouter", model_id, previous_cache_state=b.cache_state)
              for stub, b in zip(stubs, bodies)]
    assert second[0].body == second[1].body
    assert [text_of(x) for x in messages_of(json.loads(second[0].body))] == [
        "fix the failing test", "Reading the test", CLOSING_USER_TEXT, "The test expects 3.", "go on"]
    assert all(s.cache_report.prefix_kept for s in second)


def test_the_judges_refuse_reasoning_in_the_final_assistant_turn():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "EqQBCkYIBxgCKkD"}]}]}
    assert any("final position" in x for x in judge_for("anthropic")(body))
    converse = {"messages": [{"role": "user", "content": [{"text": "go"}]}, {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "x", "signature": "EqQBCkYIBxgCKkD"}}}]}]}
    assert any("final position" in x for x in bedrock_judge(converse, model_id="anthropic.claude-haiku-4-5-20251001-v1:0"))


def answered_after_closing() -> pb.Conversation:
    """interrupted(), then the model's answer to the closing message sent after the cut reply,
    stored right after it (the client never stores the closing message), then the person's."""
    conv = interrupted()
    conv.messages.append(convo.assistant("m3", convo.text("p3", "The test expects 3; the code returns 2.")))
    conv.messages.append(convo.user("m4", convo.text("p4", "go on and fix it")))
    return conv


def unmarked(element: dict) -> str:
    """An element's JSON without its cache markers (a marker that moves changes no prefix; on the
    Chat formats a text alone is a string, and a list of its one block where marked)."""
    text = json.dumps(element)
    for marker in (', "cache_control": {"type": "ephemeral"}', ', "copilot_cache_control": {"type": "ephemeral"}',
                   ', {"cachePoint": {"type": "default"}}'):
        text = text.replace(marker, "")
    element = json.loads(text)
    content = element.get("content")
    if isinstance(content, list) and len(content) == 1 and content[0].keys() == {"type", "text"}:
        element["content"] = content[0]["text"]
    return json.dumps(element)


@pytest.mark.parametrize("provider,model_id", [*REFUSING.items(), ("gemini", "gemini-3.5-flash"),
                                               ("openai-compatible", "mistral-large-latest")])
def test_the_models_answer_to_the_closing_message_follows_it(stubs, provider, model_id):
    """The body that ended with the cut reply had the closing message after it, and the model
    answered that: the next body keeps the closing message between the two replies, so that
    body is this one's prefix (cache report: kept, a new turn), where the two turns used to join
    into one, a change at the cut reply (and two assistant messages in a row for Mistral)."""
    second = _answer_follows_closing(stubs, interrupted(), answered_after_closing(), provider, model_id)
    measured = stubs[0].Measure(pb.MeasureRequest(conversation=answered_after_closing(), tools=[BASH], system=SYSTEM,
                                                  model=convo.model(provider=convo.PROVIDERS[provider], id=model_id)),
                                timeout=10)
    assert measured.body_bytes == second[0].body_bytes == len(second[0].body)


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "gemini"])
def test_a_model_that_went_on_from_its_turn_keeps_the_two_replies_joined(stubs, provider):
    """A model that takes its own turn last continued the cut reply: the joined turn is what it
    wrote, as before."""
    model_id = TAKING[provider]
    bodies = [assembled(stub, answered_after_closing(), provider, model_id).body for stub in stubs]
    assert bodies[0] == bodies[1]
    body = json.loads(bodies[0])
    assert judged(body, provider, model_id) == [] and CLOSING_USER_TEXT not in bodies[0].decode()
    replies = [x for x in messages_of(body) if x["role"] in ("assistant", "model")]
    assert len(replies) == 1 and text_of(replies[0]) == "Reading the test first. The test expects 3; the code returns 2."


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_an_answer_after_a_cut_reply_closed_for_its_reasoning_follows_the_closing_message(stubs, provider):
    """A model that takes its own turn last, sent a cut reply holding its reasoning, was sent the
    closing message after it (a turn must not end with reasoning): the model's answer to it keeps
    that message before it in the next body, as for a model that refuses its own turn last, so
    the body before is this one's prefix, where the two replies used to join (reported "other")."""
    later = reasoning_cut()
    later.messages.append(convo.assistant("m3", convo.text("p3", "The test expects 3; the code returns 2.")))
    later.messages.append(convo.user("m4", convo.text("p4", "go on and fix it")))
    _answer_follows_closing(stubs, reasoning_cut(), later, provider, TAKING[provider])


def _answer_follows_closing(stubs, first_conversation, later, provider: str, model_id: str) -> list:
    """The AssembleResponses of later (first_conversation, whose body ended with the closing
    message, then the model's answer and the person's message), each server's given the cache
    state of first_conversation's body: the closing message stays before the answer, the body
    before is this one's prefix, and the report says so."""
    first = [assembled(stub, first_conversation, provider, model_id) for stub in stubs]
    second = [assembled(stub, later, provider, model_id, previous_cache_state=f.cache_state)
              for stub, f in zip(stubs, first)]
    assert second[0].body == second[1].body  # from the memo's pieces and lowered whole
    before, body = messages_of(json.loads(first[0].body)), json.loads(second[0].body)
    assert judged(body, provider, model_id) == []
    wire = messages_of(body)
    assert text_of(before[-1]) == CLOSING_USER_TEXT
    assert list(map(unmarked, wire[:len(before)])) == list(map(unmarked, before))
    assert text_of(wire[len(before)]) == "The test expects 3; the code returns 2."
    assert wire[len(before)]["role"] in ("assistant", "model")
    for s in second:
        report = s.cache_report
        assert (report.compared, report.prefix_kept, report.cause) == (True, True, "new_turn")
    return second


def test_a_summary_and_the_kept_reply_after_it_stay_one_turn(stubs):
    """A summary followed by the kept tail's first reply never ended a body: no closing message
    goes between them, for a model that refuses its own turn last too."""
    from contextsvc_client import apply_compaction

    mdl = convo.model(context=32_000, output=4_096, id=REFUSING["anthropic"])
    messages = [convo.user("u1", convo.text("u1p", "Refactor app/ to use Postgres."))]
    for i in range(12):
        out = "\n".join(f"{n:5}\tdef f{n}_{i}(x): return x * {n}" for n in range(450 if i == 11 else 150))
        messages.append(convo.assistant(
            f"a{i}", convo.text(f"a{i}t", f"Reading app/m{i}.py"),
            convo.tool(f"a{i}x", f"toolu_{i:03d}", "read", {"path": f"app/m{i}.py"}, out),
            usage=pb.Usage(input=2000 + 1500 * i, output=150), parent_id="u1"))
    r = stubs[0].Compact(pb.CompactRequest(conversation=pb.Conversation(session_id="sess-kept", messages=messages),
                                           model=mdl, auto=True), timeout=30)
    assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED and r.tail_start_id.startswith("a")
    conv = pb.Conversation(session_id="sess-kept", messages=apply_compaction(messages, r, drop_omittable=True))
    bodies = [stub.Assemble(pb.AssembleRequest(conversation=conv, model=mdl), timeout=10).body for stub in stubs]
    assert bodies[0] == bodies[1]
    wire = json.loads(bodies[0])["messages"]
    assert judge_for("anthropic")(json.loads(bodies[0])) == [] and CLOSING_USER_TEXT not in bodies[0].decode()
    summary_turn = next(x for x in wire if x["role"] == "assistant")
    assert any(b.get("type") == "tool_use" for b in summary_turn["content"])  # the kept reply joined to it


def reasoning_cut_unsigned() -> pb.Conversation:
    """A reply cut off in its thinking, before the signature: sent as nothing (no turn)."""
    cut = convo.assistant("m2", pb.Part(id="r2", reasoning=pb.ReasoningPart(text="Look at the test first.")),
                          finished=False)
    cut.error.CopyFrom(pb.MessageError(name="MessageAbortedError", message="aborted"))
    return pb.Conversation(session_id="sess-prefill-unsigned", messages=[
        convo.user("m1", convo.text("p1", "fix the failing test")), cut])


@pytest.mark.parametrize("provider,model_id", [*REFUSING.items(), ("gemini", "gemini-3.5-flash")])
def test_a_reply_sent_as_nothing_is_no_turn_to_close(stubs, provider, model_id):
    """The cut reply held unsigned reasoning alone, which the format sends as nothing: the first
    body ended with the person's message, so no closing message was sent and none goes before the
    answer stored after it; a reply of such reasoning between two others is no turn either (one
    closing message, not two). Both lowerings agree, and the prefix is kept."""
    later = reasoning_cut_unsigned()
    later.messages.append(convo.assistant("m3", convo.text("p3", "The test expects 3; the code returns 2.")))
    later.messages.append(convo.user("m4", convo.text("p4", "go on and fix it")))
    middle = answered_after_closing()
    middle.messages.insert(2, convo.assistant("m2b", pb.Part(id="r2b", reasoning=pb.ReasoningPart(text="Hmm."))))
    for stub in stubs:
        first = assembled(stub, reasoning_cut_unsigned(), provider, model_id)
        second = assembled(stub, later, provider, model_id, previous_cache_state=first.cache_state)
        assert CLOSING_USER_TEXT not in second.body.decode()
        report = second.cache_report
        assert (report.prefix_kept, report.cause) == (True, "new_turn")
        assert second.body == assembled(stubs[0], later, provider, model_id).body
        body = assembled(stub, middle, provider, model_id).body
        assert body.decode().count(CLOSING_USER_TEXT) == 1 and body == assembled(stubs[0], middle, provider, model_id).body
        assert judged(json.loads(body), provider, model_id) == []
