"""The bad-input battery, over loopback, for every RPC: each bad request gets a defined status
naming the field (never UNKNOWN or INTERNAL), and the server answers a valid request right after."""
from __future__ import annotations

import json

import grpc
import pytest

from helpers import convo
from contextsvc.v1 import context_pb2 as pb
from helpers.rpc import GARBAGE, OK, RESPONSES, call, request_for

INVALID = grpc.StatusCode.INVALID_ARGUMENT
CONVERSATION_RPCS = ("Measure", "Assemble", "Compact", "Prune")


REQUESTS = {"Measure": pb.MeasureRequest, "Assemble": pb.AssembleRequest, "Compact": pb.CompactRequest,
            "Prune": pb.PruneRequest, "TruncateToolOutput": pb.TruncateToolOutputRequest,
            "ReadTruncated": pb.ReadTruncatedRequest}


def valid_request(rpc):
    if rpc in CONVERSATION_RPCS:
        return request_for(rpc)
    if rpc == "TruncateToolOutput":
        return pb.TruncateToolOutputRequest(text="short output\n")
    return None


def assert_still_serving(channel, stub):
    """A valid request right after: the server is still up and answering correctly."""
    code, r = call(channel, "Measure", request_for("Measure"))
    assert code == OK and r.body_bytes > 300
    code, r = call(channel, "TruncateToolOutput", valid_request("TruncateToolOutput"))
    assert code == OK and r.content == "short output\n"


def mutated(rpc, mutate):
    req = request_for(rpc)
    mutate(req)
    return req


def msgs(req):
    return req.conversation.messages


def set_tool(req, **state):
    for k, v in state.items():
        setattr(msgs(req)[1].parts[1].tool.state, k, v)


def clear(name):
    return lambda r: r.ClearField(name)


# (label, mutation, expected code, fragment of the details naming the field)
CONVERSATION_CASES = [
    ("empty conversation", clear("conversation"), INVALID, "conversation: is required"),
    ("no messages", lambda r: r.conversation.ClearField("messages"), INVALID, "conversation.messages"),
    ("message without id", lambda r: setattr(msgs(r)[0], "id", ""), INVALID, "conversation.messages[0].id"),
    ("duplicate message id", lambda r: setattr(msgs(r)[2], "id", "msg_002"), INVALID,
     "conversation.messages[2].id: 'msg_002' duplicates"),
    ("id repeating an older message's", lambda r: setattr(msgs(r)[2], "id", msgs(r)[0].id), INVALID,
     "duplicates conversation.messages[0].id"),
    ("duplicate part id", lambda r: setattr(msgs(r)[2].parts[0], "id", "p1"), INVALID,
     "conversation.messages[2].parts[0].id: 'p1' duplicates"),
    ("unknown role", lambda r: setattr(msgs(r)[0], "role", 7), INVALID, "conversation.messages[0].role: unknown value 7"),
    ("unset role", lambda r: setattr(msgs(r)[0], "role", 0), INVALID, "conversation.messages[0].role: is required"),
    ("part with no kind", lambda r: msgs(r)[0].parts.append(pb.Part(id="px")), INVALID,
     "conversation.messages[0].parts[1].kind"),
    ("unknown tool status", lambda r: set_tool(r, status=42), INVALID,
     "conversation.messages[1].parts[1].tool.state.status: unknown value 42"),
    # Prune, the payload guard and Compact mark a tool part by its id: refused at every call, not
    # at the first prune of a session (Assemble once failed there, a hundred steps in)
    ("tool part without id", lambda r: setattr(msgs(r)[1].parts[1], "id", ""), INVALID,
     "conversation.messages[1].parts[1].id: is required on a tool part"),
    ("tool part without call id", lambda r: setattr(msgs(r)[1].parts[1].tool, "call_id", ""), INVALID,
     "conversation.messages[1].parts[1].tool.call_id"),
    ("tool part without tool name", lambda r: setattr(msgs(r)[1].parts[1].tool, "tool", ""), INVALID,
     "conversation.messages[1].parts[1].tool.tool"),
    ("tool result in a user message (no call)",
     lambda r: msgs(r)[2].parts.append(convo.tool("px", "call_9", "read", {}, "orphan output")), INVALID,
     "conversation.messages[2].parts[1].tool: tool calls belong to assistant messages"),
    ("invalid JSON in tool input", lambda r: set_tool(r, input_json="{nope"), INVALID,
     "conversation.messages[1].parts[1].tool.state.input_json: not valid JSON"),
    ("tool input not an object", lambda r: set_tool(r, input_json="[1, 2]"), INVALID,
     "input_json: must be a JSON object"),
    ("deeply nested tool input", lambda r: set_tool(r, input_json='{"a":' * 200_000 + "1" + "}" * 200_000),
     INVALID, "input_json: JSON nested too deeply"),
    # named, not Python's hint to raise sys.set_int_max_str_digits (test_long_integers_...)
    ("integer too long to keep exactly", lambda r: set_tool(r, input_json='{"n":' + "9" * 5000 + "}"), INVALID,
     "conversation.messages[1].parts[1].tool.state.input_json: has an integer of 5000 digits; integers are kept "
     "exactly as written up to"),
    ("negative usage", lambda r: setattr(msgs(r)[1].usage, "input", -1), INVALID,
     "conversation.messages[1].usage.input: must not be negative"),
    ("negative time", lambda r: setattr(msgs(r)[0], "time_created_ms", -1), INVALID,
     "conversation.messages[0].time_created_ms"),
    ("negative compacted time", lambda r: set_tool(r, time_compacted_ms=-5), INVALID, "time_compacted_ms"),
    ("threshold percent zero", lambda r: setattr(r.compaction, "threshold_percent", 0.0), INVALID,
     "compaction.threshold_percent"),
    ("threshold percent NaN", lambda r: setattr(r.compaction, "threshold_percent", float("nan")), INVALID,
     "compaction.threshold_percent"),
    ("negative tail turns", lambda r: setattr(r.compaction, "tail_turns", -1), INVALID, "compaction.tail_turns"),
    ("negative reserved", lambda r: setattr(r.compaction, "reserved", -1), INVALID, "compaction.reserved"),
    ("no compaction attempt", lambda r: setattr(r.compaction, "max_attempts", 0), INVALID, "compaction.max_attempts"),
    ("negative attempts cap", lambda r: setattr(r.compaction, "max_attempts", -1), INVALID, "compaction.max_attempts"),
]

MODEL_CASES = [  # Prune takes no model limits into account; the three others require a model
    ("missing model", clear("model"), INVALID, "model: is required"),
    ("model without id", lambda r: setattr(r.model, "id", ""), INVALID, "model.id: is required"),
    ("unset provider", lambda r: setattr(r.model, "provider", 0), INVALID, "model.provider: is required"),
    ("unknown provider", lambda r: setattr(r.model, "provider", 99), INVALID, "model.provider: unknown value 99"),
    ("negative context limit", lambda r: setattr(r.model.limits, "context", -1), INVALID,
     "model.limits.context: must not be negative"),
    ("negative output limit", lambda r: setattr(r.model.limits, "output", -64000), INVALID,
     "model.limits.output: must not be negative"),
    ("negative input limit", lambda r: setattr(r.model.limits, "input", -1), INVALID, "model.limits.input"),
    ("tool definition without name", lambda r: r.tools.append(pb.ToolDefinition(description="x")), INVALID,
     "tools[0].name: is required"),
    ("tool defined twice", lambda r: r.tools.extend([pb.ToolDefinition(name="read"), pb.ToolDefinition(name="read")]),
     INVALID, "tools[1].name: 'read' is defined twice"),
    ("deeply nested tool schema",
     lambda r: r.tools.append(pb.ToolDefinition(name="t", input_schema_json='{"a":' * 200_000 + "1" + "}" * 200_000)),
     INVALID, "tools[0].input_schema_json"),
]


@pytest.mark.parametrize("rpc", CONVERSATION_RPCS)
@pytest.mark.parametrize("label,mutate,code,fragment", CONVERSATION_CASES, ids=[c[0] for c in CONVERSATION_CASES])
def test_bad_conversation(channel, stub, rpc, label, mutate, code, fragment):
    got, details = call(channel, rpc, mutated(rpc, mutate))
    assert (got, fragment in str(details)) == (code, True), details
    assert_still_serving(channel, stub)


@pytest.mark.parametrize("rpc", ("Measure", "Assemble", "Compact"))
@pytest.mark.parametrize("label,mutate,code,fragment", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_bad_model_and_tools(channel, stub, rpc, label, mutate, code, fragment):
    got, details = call(channel, rpc, mutated(rpc, mutate))
    assert (got, fragment in str(details)) == (code, True), details
    assert_still_serving(channel, stub)


@pytest.mark.parametrize("rpc,fragment", [
    ("Measure", "conversation: is required"), ("Assemble", "conversation: is required"),
    ("Compact", "conversation: is required"), ("Prune", "conversation: is required"),
    ("ReadTruncated", "output_id: is required"),
])
def test_empty_request(channel, stub, rpc, fragment):
    got, details = call(channel, rpc, b"")
    assert got == INVALID and fragment in details
    assert_still_serving(channel, stub)


def test_empty_truncate_request_is_an_empty_output(channel):
    got, r = call(channel, "TruncateToolOutput", b"")
    assert got == OK and not r.truncated and r.content == "" and not r.output_id


# ---- questionable but well-formed conversations: a real answer --------------------------------

def _call_without_result(r):
    set_tool(r, status=pb.TOOL_STATUS_RUNNING, output="")


def _summary_without_parent(r):
    msgs(r).insert(2, convo.assistant("msg_002~summary", convo.text("ps", "## Goal\n- earlier work"),
                                      summary=True, parent_id="msg_404"))


def _zero_limits(r):
    r.model.limits.CopyFrom(pb.ModelLimits())


WELL_FORMED_ODDITIES = [
    ("tool call without a result (still running)", _call_without_result),
    ("summary whose parent does not exist", _summary_without_parent),
    ("zero model limits (unknown window)", _zero_limits),
    ("two tool parts sharing a call id",
     lambda r: msgs(r)[1].parts.append(convo.tool("p9", "call_1", "read", {"path": "b"}, "second"))),
    ("empty text parts", lambda r: msgs(r)[0].parts.append(convo.text("pe", ""))),
    ("message with no parts", lambda r: msgs(r)[1].ClearField("parts")),
]


@pytest.mark.parametrize("rpc", CONVERSATION_RPCS)
@pytest.mark.parametrize("label,mutate", WELL_FORMED_ODDITIES, ids=[c[0] for c in WELL_FORMED_ODDITIES])
def test_well_formed_oddities_get_a_real_answer(channel, stub, rpc, label, mutate):
    got, r = call(channel, rpc, mutated(rpc, mutate))
    assert got == OK, r
    if rpc == "Measure":
        assert r.body_bytes > 0 and r.estimate.tokens > 0
    elif rpc == "Assemble":
        assert json.loads(r.body) and r.body_bytes == len(r.body)
    elif rpc == "Compact":
        assert r.outcome != pb.COMPACT_OUTCOME_UNSPECIFIED
    assert_still_serving(channel, stub)


def test_call_without_result_is_closed_in_the_provider_body(channel):
    got, r = call(channel, "Assemble", mutated("Assemble", _call_without_result))
    assert got == OK
    body = json.loads(r.body)
    uses = [b for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    results = [b for m in body["messages"] for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    # every call the provider sees has its result: a dangling call would be refused by the API
    assert {u["id"] for u in uses} == {x["tool_use_id"] for x in results}


# ---- enums and fields of the other RPCs ---------------------------------------------------------

@pytest.mark.parametrize("label,rpc,req,fragment", [
    ("prune reason unset", "Prune", pb.PruneRequest(conversation=convo.small_conversation()), "reason: is required"),
    ("prune reason unknown", "Prune", pb.PruneRequest(conversation=convo.small_conversation(), reason=99),
     "reason: unknown value 99"),
    ("cache ttl unknown", "Assemble", pb.AssembleRequest(conversation=convo.small_conversation(), model=convo.model(),
                                                         cache_ttl=77), "cache_ttl"),
    ("cache hint with no target", "Assemble", pb.AssembleRequest(
        conversation=convo.small_conversation(), model=convo.model(), cache_hints=[pb.CacheHint()]),
     "cache_hints[0].target"),
    ("negative attempts", "Compact", pb.CompactRequest(conversation=convo.small_conversation(), model=convo.model(),
                                                       attempts=-1), "attempts: must not be negative"),
    ("negative max_lines", "TruncateToolOutput", pb.TruncateToolOutputRequest(text="x", max_lines=-1), "max_lines"),
    ("negative max_bytes", "TruncateToolOutput", pb.TruncateToolOutputRequest(text="x", max_bytes=-1), "max_bytes"),
    ("unknown direction", "TruncateToolOutput", pb.TruncateToolOutputRequest(text="x", direction=9),
     "direction: unknown value 9"),
    ("malformed output id", "ReadTruncated", pb.ReadTruncatedRequest(output_id="../../etc/passwd"),
     "output_id: malformed output id"),
    ("negative offset", "ReadTruncated", pb.ReadTruncatedRequest(output_id="x", offset=-1), "offset"),
    ("negative limit", "ReadTruncated", pb.ReadTruncatedRequest(output_id="x", limit=-1), "limit"),
])
def test_bad_fields_of_each_rpc(channel, stub, label, rpc, req, fragment):
    got, details = call(channel, rpc, req)
    assert got == INVALID and fragment in details, details
    assert_still_serving(channel, stub)


def test_long_integers_are_written_as_sent_up_to_the_limit_and_refused_by_name_past_it(channel, stub):
    """SPEC: integers beyond 2**53 are kept exactly as written. Python converts at most
    sys.get_int_max_str_digits() digits (4300 by default): up to that the body holds the
    caller's digits, past it the refusal names the field and the reason."""
    kept = "-" + "7" * 4000
    got, r = call(channel, "Assemble", mutated("Assemble", lambda r: set_tool(r, input_json='{"n":%s}' % kept)))
    assert got == OK and f'"n":{kept}'.encode() in r.body
    schema = '{"type":"object","maximum":%s}' % ("1" * 5001)
    got, details = call(channel, "Assemble", mutated(
        "Assemble", lambda r: r.tools.append(pb.ToolDefinition(name="t", input_schema_json=schema))))
    assert got == INVALID and details.startswith("tools[0].input_schema_json: has an integer of 5001 digits"), details
    assert "set_int_max_str_digits" not in details
    # a failed call's arguments that no body can carry go as {}, as malformed ones do
    got, r = call(channel, "Assemble", mutated("Assemble", lambda r: set_tool(
        r, status=pb.TOOL_STATUS_ERROR, error="refused", input_json='{"n":%s}' % ("9" * 5000))))
    assert got == OK and b"9" * 5000 not in r.body
    assert_still_serving(channel, stub)


# A string of 2 UTF-8 bytes each side, swapped in the bytes for an invalid sequence of the same length
NOT_UTF8 = "\u00e9MARK\u00e9"


@pytest.mark.parametrize("rpc,put,field", [
    ("Measure", lambda r: setattr(msgs(r)[0].parts[0].text, "text", NOT_UTF8),
     "conversation.messages[0].parts[0].text.text"),
    ("Assemble", lambda r: set_tool(r, input_json='{"k":"%s"}' % NOT_UTF8),
     "conversation.messages[1].parts[1].tool.state.input_json"),
    ("Prune", lambda r: setattr(msgs(r)[2], "id", NOT_UTF8), "conversation.messages[2].id"),
    ("Compact", lambda r: setattr(r.model, "id", NOT_UTF8), "model.id"),
    ("TruncateToolOutput", lambda r: setattr(r, "text", NOT_UTF8), "text"),
    ("ReadTruncated", lambda r: setattr(r, "output_id", NOT_UTF8), "output_id"),
])
def test_a_string_that_is_not_utf8_is_refused_naming_its_field(channel, stub, rpc, put, field):
    req = REQUESTS[rpc]() if rpc in ("TruncateToolOutput", "ReadTruncated") else request_for(rpc)
    put(req)
    data = req.SerializeToString()
    assert data.count(NOT_UTF8.encode()) == 1
    got, details = call(channel, rpc, data.replace(NOT_UTF8.encode(), b"\xc3(MARK\xff\xfe"))
    assert got == INVALID, details
    assert details == (f"request: not a valid {rpc} request message ({field}: not valid UTF-8, which every string "
                       "field must be)"), details
    assert_still_serving(channel, stub)


def test_read_of_an_unknown_id_is_not_found(channel, stub):
    text = "".join(f"line {i}\n" for i in range(3000))
    got, r = call(channel, "TruncateToolOutput", pb.TruncateToolOutputRequest(text=text))
    assert got == OK and r.truncated
    unknown = r.output_id[:-4] + ("0000" if r.output_id[-4:] != "0000" else "1111")
    got, details = call(channel, "ReadTruncated", pb.ReadTruncatedRequest(output_id=unknown))
    assert got == grpc.StatusCode.NOT_FOUND and unknown in details
    got, past_end = call(channel, "ReadTruncated", pb.ReadTruncatedRequest(output_id=r.output_id, offset=10_000))
    assert got == OK and past_end.lines == 0 and past_end.eof and past_end.total_lines == 3000
    assert_still_serving(channel, stub)


# ---- bytes that are not a request --------------------------------------------------------------

@pytest.mark.parametrize("rpc", list(RESPONSES))
@pytest.mark.parametrize("data", GARBAGE, ids=[f"garbage{i}" for i in range(len(GARBAGE))])
def test_bytes_that_are_not_a_protobuf_message(channel, stub, rpc, data):
    got, details = call(channel, rpc, data)
    assert got == INVALID, details
    assert details.startswith(("request: not a valid", "output_id:")), details
    assert_still_serving(channel, stub)


def test_unknown_part_kind_from_a_newer_client(channel, stub):
    """A part whose kind is a field this server does not know arrives as an unknown field."""
    req = request_for("Measure")
    newer_part = pb.Part(id="pz").SerializeToString() + b"\xfa\x06\x03abc"  # field 111, a string
    conv = req.conversation
    extra = pb.Message.FromString(conv.messages[0].SerializeToString() + b"\x2a" + bytes([len(newer_part)])
                                  + newer_part)  # field 5: parts
    conv.messages[0].CopyFrom(extra)
    got, details = call(channel, "Measure", req)
    assert got == INVALID and "conversation.messages[0].parts[1].kind" in details
    assert_still_serving(channel, stub)


# ---- size --------------------------------------------------------------------------------------

def test_request_over_the_size_limit_is_resource_exhausted(channel, stub):
    req = request_for("Measure")
    msgs(req)[2].parts[0].text.text = "x" * (100 * 1024 * 1024)
    got, details = call(channel, "Measure", req)
    del req
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert_still_serving(channel, stub)


def test_garbage_over_the_size_limit_is_resource_exhausted(channel, stub):
    got, details = call(channel, "TruncateToolOutput", b"\xff" * (65 * 1024 * 1024))
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert_still_serving(channel, stub)


def test_huge_string_under_the_limit_is_answered(channel, stub):
    req = request_for("Measure")
    msgs(req)[2].parts[0].text.text = "word " * (12 * 1024 * 1024)  # 60 MiB, under the 64 MiB limit
    got, r = call(channel, "Measure", req, timeout=120)
    del req
    assert got == OK, r
    assert r.body_bytes > 60 * 1024 * 1024 and r.estimate.tokens > 15_000_000 and r.should_compact
    assert_still_serving(channel, stub)


def test_overflow_compaction_replays_subtask_and_agent_parts(channel, stub):
    """Found by the fuzzer: the replayed user message kept kinds with no wire form (INTERNAL)."""
    conv = convo.small_conversation()
    conv.messages[2].parts.extend([pb.Part(id="p5", subtask=pb.SubtaskPart(prompt="look around", description="scan",
                                                                          agent="explore")),
                                   pb.Part(id="p6", agent=pb.AgentPart(name="build"))])
    got, r = call(channel, "Compact", pb.CompactRequest(conversation=conv, model=convo.model(), overflow=True))
    assert got == OK, r
    kinds = [p.WhichOneof("kind") for p in r.continue_message.parts]
    assert "subtask" in kinds and "agent" in kinds
    sub = next(p.subtask for p in r.continue_message.parts if p.WhichOneof("kind") == "subtask")
    assert (sub.prompt, sub.description, sub.agent) == ("look around", "scan", "explore")
    assert_still_serving(channel, stub)
