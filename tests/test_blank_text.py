"""Blank text, trailing whitespace, a conversation that sends nothing, and cache hints on a
message sent as nothing (docs/design.md §6, "What the body must pass" and "Cache breakpoints"),
through a real server on loopback, every body judged by its provider's library (tests/judges/).
"""
from __future__ import annotations

import dataclasses
import json

import grpc
import pytest

from contextsvc import assemble, breakpoints, config, conversation as m
from contextsvc.errors import BadInput
from contextsvc.lowering.registry import PROVIDERS
from contextsvc.v1 import context_pb2 as pb
from helpers import convo
from judges import judge_for

BASH = pb.ToolDefinition(name="bash", description="Run a command", input_schema_json='{"type":"object"}')
SYSTEM = pb.SystemPrompt(soul="You are a coding agent.")
# the providers whose refusal of a final assistant text ending in whitespace is known (the
# Messages API, and Claude behind Converse)
TRIMMED = (m.ANTHROPIC, m.BEDROCK)
NATIVE_MARKERS = (m.ANTHROPIC, m.BEDROCK)  # a marker on the message itself


def enum(provider: str) -> int:
    return pb.Provider.Value("PROVIDER_" + provider.upper().replace("-", "_"))


def step_start(pid):
    return pb.Part(id=pid, step_start=pb.StepStartPart())


def blank_step_conversation(second_step="\n\n", then_user=True) -> pb.Conversation:
    """The repro: step 1 says something and runs a command, step 2 is whitespace alone."""
    messages = [convo.user("m1", convo.text("p1", "fix it")),
                convo.assistant("m2", step_start("s1"), convo.text("p2", "Running the tests."),
                                convo.tool("p3", "call_1", "bash", {"cmd": "pytest"}, "2 passed"),
                                step_start("s2"), convo.text("p4", second_step))]
    if then_user:
        messages.append(convo.user("m3", convo.text("p5", "and now?")))
    return pb.Conversation(session_id="sess-blank", messages=messages)


def assembled(stub, conversation, provider, **kw):
    return stub.Assemble(pb.AssembleRequest(conversation=conversation, model=convo.model(provider=enum(provider)),
                                            tools=[BASH], system=SYSTEM, step=1, **kw), timeout=10)


def judged(stub, conversation, provider, **kw) -> dict:
    body = json.loads(assembled(stub, conversation, provider, **kw).body)
    assert judge_for(provider)(body) == []
    return body


def wire_messages(body: dict) -> list:
    return body.get("messages") or body.get("contents") or body.get("input")


def blocks(message: dict) -> list:
    content = message.get("content", message.get("parts"))
    return content if isinstance(content, list) else [{"text": content or ""}]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_step_of_whitespace_alone_sends_nothing(stub, provider):
    body = judged(stub, blank_step_conversation(), provider)
    text = json.dumps(body)
    assert "Running the tests." in text and "2 passed" in text and "and now?" in text
    assert not [x for x in wire_messages(body) if blank_only(x)]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("output", ["\r\n", "\n", "  \t"])
def test_a_tool_output_of_whitespace_alone_sends_no_blank_text(stub, provider, output):
    """A shell's "\r\n" went to Anthropic as a tool_result text block of whitespace alone, which
    the API refuses (reported by agents that met it), at every later request of the session."""
    conversation = pb.Conversation(session_id="sess-ws", messages=[
        convo.user("m1", convo.text("p1", "clear the screen")),
        convo.assistant("m2", convo.tool("p2", "call_1", "bash", {"cmd": "clear"}, output)),
        convo.user("m3", convo.text("p3", "and now?"))])
    body = judged(stub, conversation, provider)  # the judges refuse blank text inside a tool_result too
    assert "and now?" in json.dumps(body)


def blank_only(message: dict) -> bool:
    """The message sends blank text and nothing else."""
    if message.get("type", "message") != "message":  # a Responses item other than a message
        return False
    content = message.get("content", message.get("parts"))
    if content is None or isinstance(content, str):  # Chat Completions
        return not (content or "").strip() and not message.get("tool_calls")
    return all(isinstance(b.get("text"), str) and not b["text"].strip() for b in content)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_final_assistant_text_ends_without_whitespace_where_refused(stub, provider):
    final = blank_step_conversation("All green.\n\n", then_user=False)
    for _ in range(2):  # the second request takes the message's lowering from the memo
        last = wire_messages(judged(stub, final, provider))[-1]
        assert blocks(last)[-1]["text"] == ("All green." if provider in TRIMMED else "All green.\n\n")
    # followed by a user message, the same text is sent as it was written (the memo's lowering
    # was not changed by the cut)
    later = blank_step_conversation("All green.\n\n")
    assert "All green.\\n\\n" in json.dumps(judged(stub, later, provider))


@pytest.mark.parametrize("provider", TRIMMED)
def test_the_cut_is_the_same_without_the_memo(provider):
    conv = m.Conversation([m.Message("m1", m.USER, [m.Part("p1", m.Text("fix it"))]),
                           m.Message("m2", m.ASSISTANT, [m.Part("p2", m.Text("Done. \n"))], time_completed_ms=1)],
                          "sess-blank")
    inp = assemble.AssembleInput(conv, m.Model("claude-sonnet-4-5", provider), [], m.SystemPrompt(soul="s"),
                                 m.CompactionSettings())
    body = json.loads(assemble.assemble(inp, config.Config()).body)
    assert judge_for(provider)(body) == []
    assert blocks(body["messages"][-1])[-1]["text"] == "Done."


def all_ignored() -> pb.Conversation:
    return pb.Conversation(session_id="sess-blank", messages=[
        convo.user("m1", convo.text("p1", "hello", ignored=True)),
        convo.assistant("m2", convo.text("p2", "\n")),
        convo.user("m3", convo.text("p3", " ", synthetic=True), convo.text("p4", "again", ignored=True))])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_conversation_that_sends_nothing_is_invalid_argument(stub, provider):
    for call in (lambda: assembled(stub, all_ignored(), provider),
                 lambda: stub.Measure(pb.MeasureRequest(conversation=all_ignored(),
                                                        model=convo.model(provider=enum(provider))), timeout=10)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details().startswith("conversation.messages: nothing to send")


def errored_empty_reply() -> pb.Conversation:
    failed = convo.assistant("m2", step_start("s1"))
    failed.error.CopyFrom(pb.MessageError(name="APIError", message="overloaded"))
    return pb.Conversation(session_id="sess-blank", messages=[
        convo.user("m1", convo.text("p1", "fix it")), failed, convo.user("m3", convo.text("p3", "try again"))])


@pytest.mark.parametrize("provider", NATIVE_MARKERS)
def test_a_hint_on_a_message_sent_as_nothing_goes_to_the_nearest_one_sent(stub, provider):
    # the errored reply is dropped: its hint goes to the user message before it
    a = assembled(stub, errored_empty_reply(), provider,
                  cache_hints=[pb.CacheHint(message_id="m2", ttl=pb.CACHE_TTL_1H)])
    body = json.loads(a.body)
    assert judge_for(provider)(body) == []
    first = json.dumps(body["messages"][0])
    assert ('"ttl": "1h"' in first) if provider == m.ANTHROPIC else ("cachePoint" in first)
    assert "messages[0]" in [b.location for b in a.breakpoints]
    # with nothing sent before it, the hint goes to the message after it
    conv = errored_empty_reply()
    conv.messages[0].parts[0].text.ignored = True
    a = assembled(stub, conv, provider, cache_hints=[pb.CacheHint(message_id="m2")])
    assert judge_for(provider)(json.loads(a.body)) == []
    assert [b.location for b in a.breakpoints if b.location.startswith("messages")] == ["messages[0]"]
    # an id that is not in the conversation at all is still refused
    with pytest.raises(grpc.RpcError) as e:
        assembled(stub, errored_empty_reply(), provider, cache_hints=[pb.CacheHint(message_id="m9")])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "cache_hints[0].message_id" in e.value.details()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_hint_on_a_message_sent_as_nothing_is_never_refused(stub, provider):
    body = json.loads(assembled(stub, errored_empty_reply(), provider, cache_hints=[pb.CacheHint(message_id="m2")]).body)
    assert judge_for(provider)(body) == []


def test_a_hint_with_no_message_sent_near_it_is_left_unused():
    """Only the last-step message is sent, which stands for no stored message: the hint has no
    place and is dropped; the auto policy still marks what it marks."""
    conv = m.Conversation([m.Message("m1", m.USER, [m.Part("p1", m.Text("x", ignored=True))]),
                           m.Message("m2", m.ASSISTANT, [], error=m.MessageError("APIError"))], "sess-blank")
    inp = assemble.AssembleInput(conv, m.Model("claude-sonnet-4-5", m.ANTHROPIC), [], m.SystemPrompt(soul="s"),
                                 m.CompactionSettings(), step=3, max_steps=3,
                                 policy=breakpoints.Policy(hints=[breakpoints.Hint(message_id="m2")]))
    a = assemble.assemble(inp, config.Config())
    assert [b.location for b in a.breakpoints] == ["system[0]", "messages[0]"]
    with pytest.raises(BadInput):  # without the last-step message nothing is sent at all
        assemble.assemble(dataclasses.replace(inp, max_steps=0), config.Config())
