"""Inputs that used to answer INTERNAL (issue 16, items 6-9 and 12), over a real server: each gets
a defined status naming the field, or a real answer."""
from __future__ import annotations

import json

import grpc
import pytest

from helpers import convo
from helpers.server import start_server
from contextsvc.config import ServerConfig
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import FakeMessagesAPI, summarizer_server
from helpers.rpc import compact_request, session

INVALID = grpc.StatusCode.INVALID_ARGUMENT
INT64_MAX = 2**63 - 1
DEPTH = ServerConfig.max_json_depth
PROVIDERS = [pb.PROVIDER_ANTHROPIC, pb.PROVIDER_OPENAI, pb.PROVIDER_OPENAI_COMPATIBLE, pb.PROVIDER_BEDROCK,
             pb.PROVIDER_OPENROUTER, pb.PROVIDER_ALIBABA, pb.PROVIDER_COPILOT, pb.PROVIDER_GEMINI,
             pb.PROVIDER_OPENAI_RESPONSES]


def status(fn, request):
    """(code, details or response) of one call."""
    try:
        return grpc.StatusCode.OK, fn(request, timeout=60)
    except grpc.RpcError as e:
        return e.code(), e.details()


# ---- item 6: usage figures near int64 max ------------------------------------------------------

@pytest.mark.parametrize("field", ["input", "output", "reasoning", "cache_read", "cache_write", "total"])
def test_usage_beyond_any_real_count_is_refused_naming_the_field(stub, field):
    conv = convo.small_conversation()
    setattr(conv.messages[1].usage, field, INT64_MAX)
    for rpc, req in (("Measure", pb.MeasureRequest(conversation=conv, model=convo.model())),
                     ("Compact", pb.CompactRequest(conversation=conv, model=convo.model())),
                     ("Assemble", pb.AssembleRequest(conversation=conv, model=convo.model(), step=1)),
                     ("Prune", pb.PruneRequest(conversation=conv, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT))):
        code, details = status(getattr(stub, rpc), req)
        assert code == INVALID, (rpc, code, details)
        assert details.startswith(f"conversation.messages[1].usage.{field}: ") and "2^53 - 1" in details


def test_every_summed_token_figure_is_bounded_and_the_bound_itself_is_answered(stub):
    top = 2**53 - 1
    conv = session()
    for msg in conv.messages:
        if msg.role == pb.ROLE_ASSISTANT:
            msg.usage.CopyFrom(pb.Usage(input=top, output=top, reasoning=top, cache_read=top,
                                        cache_write=top, total=top))
    conv.messages[1].parts.add(id="sf", step_finish=pb.StepFinishPart(tokens=pb.Usage(input=top)))
    mdl = convo.model(context=top, output=top)
    settings = pb.CompactionSettings(reserved=top, preserve_recent_tokens=top,
                                     prune_settings=pb.PruneSettings(protect_tokens=top, minimum_tokens=top))
    for rpc, req in (("Measure", pb.MeasureRequest(conversation=conv, model=mdl, compaction=settings)),
                     ("Compact", pb.CompactRequest(conversation=conv, model=mdl, compaction=settings)),
                     ("Assemble", pb.AssembleRequest(conversation=conv, model=mdl, compaction=settings, step=1))):
        code, r = status(getattr(stub, rpc), req)
        assert code == grpc.StatusCode.OK, (rpc, r)
    over = top + 1
    cases = [
        (lambda r: setattr(r.conversation.messages[1].parts[-1].step_finish.tokens, "output", over),
         "conversation.messages[1].parts[2].step_finish.tokens.output"),
        (lambda r: setattr(r.model.limits, "context", over), "model.limits.context"),
        (lambda r: setattr(r.compaction, "reserved", over), "compaction.reserved"),
        (lambda r: setattr(r.compaction.prune_settings, "protect_tokens", over),
         "compaction.prune_settings.protect_tokens"),
    ]
    for mutate, field in cases:
        req = pb.MeasureRequest(conversation=conv, model=mdl, compaction=settings)
        mutate(req)
        code, details = status(stub.Measure, req)
        assert code == INVALID and details.startswith(field + ": "), (field, details)


# ---- item 7: a read of "everything" ------------------------------------------------------------

def test_read_with_the_largest_limit_reads_everything(stub):
    text = "".join(f"line {i}\n" for i in range(5000))
    oid = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=30).output_id
    assert oid
    r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=oid, offset=1, limit=INT64_MAX), timeout=30)
    assert (r.offset, r.lines, r.total_lines, r.eof) == (1, 4999, 5000, True)
    assert r.text == text[len("line 0\n"):-1]
    r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=oid, offset=INT64_MAX, limit=INT64_MAX), timeout=30)
    assert (r.text, r.lines, r.eof) == ("", 0, True)
    r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=oid, offset=4998, limit=INT64_MAX), timeout=30)
    assert (r.text, r.lines, r.eof) == ("line 4998\nline 4999", 2, True)


# ---- item 8: one JSON depth limit --------------------------------------------------------------

def nested_object(depth: int) -> str:
    """A JSON object nested exactly depth levels (objects and arrays alternating)."""
    levels = range(1, depth + 1)
    return ("".join('{"k": ' if n % 2 else "[" for n in levels) + "1"
            + "".join("}" if n % 2 else "]" for n in reversed(levels)))


def nested_schema(depth: int) -> str:
    """A tool schema of nested object properties, depth levels in all."""
    wraps = (depth - 1) // 2
    return '{"type": "object", "properties": {"x": ' * wraps + '{"type": "string"}' + "}}" * wraps


def deep_requests(depth: int, provider=pb.PROVIDER_ANTHROPIC, where="input"):
    conv = session(turns=4, output_chars=4000)
    tools = [pb.ToolDefinition(name="bash", description="run", input_schema_json='{"type": "object"}')]
    if where == "input":
        conv.messages[1].parts[0].tool.state.input_json = nested_object(depth)
    else:
        tools[0].input_schema_json = nested_schema(depth)
    mdl = convo.model(provider=provider, context=8_000, output=2_000)
    return {
        "Measure": pb.MeasureRequest(conversation=conv, model=mdl, tools=tools),
        "Assemble": pb.AssembleRequest(conversation=conv, model=mdl, tools=tools, step=1),
        "Compact": pb.CompactRequest(conversation=conv, model=mdl, tools=tools),
        "Prune": pb.PruneRequest(conversation=conv, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT),
    }


def test_nested_object_helpers_nest_as_said():
    def depth(v):
        return 1 + max([depth(x) for x in (v.values() if isinstance(v, dict) else v)], default=0) \
            if isinstance(v, (dict, list)) else 0
    assert depth(json.loads(nested_object(7))) == 7 and depth(json.loads(nested_schema(7))) == 7


@pytest.mark.parametrize("where", ["input", "schema"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_json_at_the_depth_limit_is_answered_by_every_rpc_and_lowering(stub, provider, where):
    for rpc, req in deep_requests(DEPTH, provider, where).items():
        if where == "schema" and rpc == "Prune":
            continue
        code, r = status(getattr(stub, rpc), req)
        assert code == grpc.StatusCode.OK, (rpc, r)
        if rpc == "Compact":
            assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED


@pytest.mark.parametrize("depth", [DEPTH + 1, 975, 978, 980, 982, 990, 200_000])
def test_json_over_the_depth_limit_is_refused_the_same_way_cached_or_not(stub, depth):
    for where in ("input", "schema"):
        for rpc, req in deep_requests(depth, where=where).items():
            if where == "schema" and rpc == "Prune":
                continue
            field = ("conversation.messages[1].parts[0].tool.state.input_json" if where == "input"
                     else "tools[0].input_schema_json")
            for _ in range(2):  # the second time, every other message is in the message cache
                code, details = status(getattr(stub, rpc), req)
                assert code == INVALID, (rpc, where, code, details)
                assert details == f"{field}: JSON nested too deeply (at most {DEPTH} levels)"


def test_the_depth_limit_is_configurable():
    s = start_server(max_json_depth=8)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert status(stub.Measure, deep_requests(8)["Measure"])[0] == grpc.StatusCode.OK
            code, details = status(stub.Measure, deep_requests(9)["Measure"])
            assert code == INVALID and details.endswith("JSON nested too deeply (at most 8 levels)")
    finally:
        s.stop(grace=1)
    for bad in (0, 100_000):
        with pytest.raises(ValueError, match="max_json_depth"):
            ServerConfig(max_json_depth=bad)


# ---- item 12: every stored output can be read back ---------------------------------------------

def read_all(stub, oid, limit=0):
    """Reads from offset 0 until eof, each read going on where the last stopped."""
    pieces, offset = [], 0
    while True:
        r = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=oid, offset=offset, limit=limit), timeout=60)
        pieces.append(r.text)
        offset += r.lines
        if r.eof:
            return pieces, r.total_lines
        assert r.lines > 0


def big_channel(server):
    return grpc.insecure_channel(f"127.0.0.1:{server.port}", options=[
        ("grpc.max_send_message_length", 256 * 1024 * 1024),
        ("grpc.max_receive_message_length", 256 * 1024 * 1024)])


def test_an_output_as_large_as_a_request_is_read_back_in_pieces_that_fit_the_response_limit():
    """64 MiB minus 5 bytes (the largest text a request can carry) of lines, at the defaults."""
    s = start_server()
    limit = s.cfg.server.max_response_bytes
    try:
        with big_channel(s) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            line = "x" * 1023 + "\n"
            text = line * (s.cfg.server.max_request_bytes // 1024 - 1) + "y" * (1024 - 5)
            r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=60)
            assert r.truncated and r.output_id
            for read_limit in (2**63 - 1, 0):
                pieces, total = read_all(stub, r.output_id, read_limit)
                assert "\n".join(pieces) == text and total == text.count("\n") + 1
                assert all(len(p.encode()) + 64 <= limit for p in pieces)
            assert len(pieces) > 1
    finally:
        s.stop(grace=1)


def test_a_line_no_read_can_return_is_refused_before_it_is_stored():
    """Scaled down (1 MiB requests, 256 KiB responses): a line longer than a response can carry
    is RESOURCE_EXHAUSTED at TruncateToolOutput and nothing is stored; shorter lines of a larger
    output are read back whole, in pieces under the limit."""
    s = start_server(max_request_bytes=1024 * 1024, max_response_bytes=256 * 1024)
    try:
        with big_channel(s) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for text in ("z" * (1024 * 1024 - 16), "ok\n" * 10 + "é" * (200 * 1024) + "\nafter\n"):
                code, details = status(stub.TruncateToolOutput, pb.TruncateToolOutputRequest(text=text))
                assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
                assert "more than one ReadTruncated response can carry" in details
                assert "nothing was stored" in details
            assert s.store.usage() == (0, 0)
            text = "".join(f"{i:06d} " + "ü" * (i * 7 % 1400) + "\n" for i in range(700))
            assert 850 * 1024 < len(text.encode()) < 1024 * 1024
            r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=60)
            pieces, total = read_all(stub, r.output_id, 2**63 - 1)
            assert "\n".join(pieces) + "\n" == text and total == 700
            assert len(pieces) >= 4 and all(len(p.encode()) <= 256 * 1024 - 64 for p in pieces)
    finally:
        s.stop(grace=1)


# ---- item 9: a summarizer answering 200 with something that is not a summary --------------------

def _message(content) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
                       "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()


ODD_REPLIES = {
    "html": (b"<html><body>502 Bad Gateway</body></html>", "not valid JSON"),
    "null": (b"null", "not a Messages API message"),
    "empty object": (b"{}", "no content"),
    "list": (b"[1, 2]", "not a Messages API message"),
    "string": (b'"summary"', "not a Messages API message"),
    "error object": (json.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "Overloaded"}}).encode(),
                     "an error: overloaded_error: Overloaded"),
    "content null": (_message(None), "no content"),
    "content a string": (_message("## Goal"), "no content"),
    "text 123": (_message([{"type": "text", "text": 123}]), "text is not a string"),
    "lone surrogate": (_message([{"type": "text", "text": "## Goal \ud800 fix"}]), "lone surrogate"),
}


@pytest.mark.parametrize("name", ODD_REPLIES)
def test_a_reply_that_is_not_a_summary_is_unavailable_or_falls_back(monkeypatch, name):
    body, reason = ODD_REPLIES[name]
    monkeypatch.setenv("CONTEXTSVC_TEST_KEY", "sk-test")
    api = FakeMessagesAPI("raw", raw_body=body)
    servers = [summarizer_server(api, fallback, timeout=5) for fallback in (False, True)]
    try:
        strict, lenient = servers
        with grpc.insecure_channel(f"127.0.0.1:{strict.port}") as ch:
            code, details = status(pb_grpc.ContextServiceStub(ch).Compact, compact_request())
            assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
            assert details.startswith("anthropic summarizer: ") and reason in details, details
        with grpc.insecure_channel(f"127.0.0.1:{lenient.port}") as ch:
            code, r = status(pb_grpc.ContextServiceStub(ch).Compact, compact_request())
            assert code == grpc.StatusCode.OK, r
            assert r.fell_back and r.backend == "offline" and reason in r.fallback_reason
            assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED and "## Goal" in r.summary.parts[0].text.text
        assert len(api.requests) == 2
    finally:
        for s in servers:
            s.stop(grace=1)
        api.close()
