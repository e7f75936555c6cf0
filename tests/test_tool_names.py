"""Tool names every provider accepts (docs/design.md §6, "What the body must pass"), over a real
server: MCP tools are named `github.create_issue`, `context7.resolve-library-id`, up to 128
characters, and Anthropic and the OpenAI family refuse the whole request for a name outside
^[a-zA-Z0-9_-]{1,64}$. For every provider the body passes the provider's judge, a tool is named
the same in its definition and in the history's calls, AssembleResponse.tool_names turns the
body's names back into the request's, and a name is written the same when the tool set changes
between steps.
"""
from __future__ import annotations

import json

import grpc
import pytest

from contextsvc.v1 import context_pb2 as pb
from contextsvc_client import client_tool_name
from helpers import convo
from judges import judge_for

LONG = ("acme-internal.browser_take_screenshot_of_the_current_page_" * 2)[:100]
MCP = ["github.create_issue", "context7.resolve-library-id", LONG]
PROVIDERS = convo.PROVIDERS
# The formats whose names are ^[a-zA-Z0-9_-]{1,64}$: every MCP name above is mapped there.
WORD_NAMES = ("anthropic", "openai", "openai-compatible", "openrouter", "alibaba", "copilot", "bedrock",
              "openai-responses")


def tools(names):
    return [pb.ToolDefinition(name=n, description=f"the {n} tool", input_schema_json='{"type":"object"}')
            for n in names]


def calls(mid, names):
    """An assistant step calling each of names, in order."""
    return convo.assistant(mid, *(convo.tool(f"{mid}-{k}", f"call_{mid}_{k}", n, {"k": k}, "done")
                                  for k, n in enumerate(names)), usage=pb.Usage(input=500, output=20))


def assemble(stub, provider, tool_names, *steps):
    """Assemble a conversation of a user message, then each of steps' tool calls."""
    messages = [convo.user("u1", convo.text("u1-p", "File the bug, then look up the docs"))]
    messages += [calls(f"a{n}", names) for n, names in enumerate(steps)]
    return stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="s-names", messages=messages),
                                            model=convo.model(provider=PROVIDERS[provider]),
                                            tools=tools(tool_names), step=len(steps) + 1), timeout=10)


def names_in(provider, body):
    """(the names of the tool definitions, the names of the history's calls and results) in order."""
    if provider == "anthropic":
        return ([t["name"] for t in body["tools"]],
                [b["name"] for msg in body["messages"] for b in msg["content"] if b["type"] == "tool_use"])
    if provider == "bedrock":
        return ([t["toolSpec"]["name"] for t in body["toolConfig"]["tools"] if "toolSpec" in t],
                [b["toolUse"]["name"] for msg in body["messages"] for b in msg["content"] if "toolUse" in b])
    if provider == "gemini":
        parts = [p for c in body["contents"] for p in c["parts"]]
        called = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        answered = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
        assert answered == called  # a response names the call it answers
        return [d["name"] for d in body["tools"][0]["functionDeclarations"]], called
    if provider == "openai-responses":
        return ([t["name"] for t in body["tools"]],
                [x["name"] for x in body["input"] if x.get("type") == "function_call"])
    return ([t["function"]["name"] for t in body["tools"]],
            [c["function"]["name"] for msg in body["messages"] for c in msg.get("tool_calls", [])])


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_mcp_names_are_accepted_alike_in_tools_and_history_and_mapped_back(stub, provider):
    names = MCP + ["read"]
    a = assemble(stub, provider, names, names)
    body = json.loads(a.body)
    assert judge_for(provider)(body) == []
    defined, called = names_in(provider, body)
    assert defined == called  # the definitions and the history's calls name each tool alike
    assert [client_tool_name(a, w) for w in defined] == names
    assert dict(a.tool_names) == {w: n for w, n in zip(defined, names) if w != n}  # only what changed
    assert defined[-1] == "read" and "read" not in a.tool_names
    if provider in WORD_NAMES:
        assert len(a.tool_names) == len(MCP)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_name_is_written_the_same_when_the_tool_set_changes(stub, provider):
    first = assemble(stub, provider, ["github.create_issue", "context7.resolve-library-id", "read"],
                     ["github.create_issue", "context7.resolve-library-id"])
    # the next step: an MCP server went away, two tools came, the model called one of them
    second = assemble(stub, provider, ["fs.read_file.v2", LONG, "github.create_issue", "read"],
                      ["github.create_issue", "context7.resolve-library-id"], ["fs.read_file.v2"])
    body1, body2 = json.loads(first.body), json.loads(second.body)
    assert judge_for(provider)(body2) == []
    called1, called2 = names_in(provider, body1)[1], names_in(provider, body2)[1]
    assert called2[:len(called1)] == called1  # the history is written as before
    back1 = {w: client_tool_name(first, w) for w in names_in(provider, body1)[0]}
    back2 = {w: client_tool_name(second, w) for w in names_in(provider, body2)[0]}
    for wire in back1.keys() & back2.keys():
        assert back1[wire] == back2[wire]
    assert {back1[w] for w in back1.keys() & back2.keys()} == {"github.create_issue", "read"}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_valid_names_are_unchanged_and_not_in_the_map(stub, provider):
    a = assemble(stub, provider, ["read", "create_issue", "x-1"], ["read"])
    assert names_in(provider, json.loads(a.body))[0] == ["read", "create_issue", "x-1"]
    assert dict(a.tool_names) == {}


@pytest.mark.parametrize("provider", WORD_NAMES)
def test_a_name_equal_to_another_ones_mapped_form_is_invalid_argument(stub, provider):
    """Two tools written alike would be one tool to the model: the request is refused, naming
    the field, rather than sent with the two merged."""
    mapped = next(iter(assemble(stub, provider, ["github.create_issue"]).tool_names))
    with pytest.raises(grpc.RpcError) as e:
        assemble(stub, provider, ["github.create_issue", mapped])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("tools[1].name:"), e.value.details()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_request_without_tools_whose_history_holds_calls_is_accepted(stub, provider):
    """A step without tools (a title, plan mode, every MCP server gone) after tool calls: every
    provider refuses calls in the history of a request that defines no tool, so the body defines
    one that stands for them, with the provider's "no tool use" choice where it has one, and
    the figures count it; a history without calls gets no tool."""
    with_calls = assemble(stub, provider, [], ["read"])
    body = json.loads(with_calls.body)
    assert judge_for(provider)(body) == []
    defined, called = names_in(provider, body)
    assert defined == ["_noop"] and called == ["read"]
    if provider != "bedrock":  # Converse has no "none" choice: the definition alone
        choice = body["toolConfig"] if provider == "gemini" else body["tool_choice"]
        assert choice in ("none", {"type": "none"}, {"functionCallingConfig": {"mode": "NONE"}})
    assert with_calls.figures.tools > 0
    assert not with_calls.tool_names  # its name is every provider's as it is
    measured = stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(session_id="s-names", messages=[
        convo.user("u1", convo.text("u1-p", "File the bug, then look up the docs")), calls("a0", ["read"])]),
        model=convo.model(provider=PROVIDERS[provider]), step=2), timeout=10)
    assert measured.tools == with_calls.figures.tools and measured.body_bytes == len(with_calls.body)
    without = json.loads(assemble(stub, provider, []).body)
    assert judge_for(provider)(without) == []
    assert "tools" not in without and "toolConfig" not in without
