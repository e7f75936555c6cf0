"""The real server over loopback: Measure, bad input, health, reflection, limits."""
from __future__ import annotations


import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from helpers import convo
from helpers.server import start_server
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc


def test_measure_answers_with_every_figure(stub):
    r = stub.Measure(convo.measure_request(exact=True), timeout=10)
    assert r.body_bytes > 300
    assert r.estimate.method == "estimate:chars/4" and r.estimate.tokens > 50
    # ceil((estimate + tools) * 1.3); no tool is defined, but the history holds a call: the body
    # defines the one that stands for it (step.plan.HISTORY_TOOL)
    assert r.tools > 0 and r.normalized.tokens == -(-(r.estimate.tokens + r.tools) * 13 // 10)
    assert r.exact.method == "tiktoken:cl100k_base (proxy for claude-sonnet-4-5)" and r.exact.tokens > 0
    assert not r.exact_for_model
    assert r.usable == 200_000 - 32_000 and r.limit == r.usable
    assert r.has_baseline and r.reported == 1280
    # the decision figure (calibrated + margin) projects from the reported usage
    assert r.decision.method.startswith("calibrated:cl100k-ratios+p95-margin(") and r.decision.method.endswith("+media:2048") and r.decision.tokens > 0
    assert r.projected > 1280 and r.compaction_figure == "calibrated"
    assert not r.should_compact and r.output_tokens == 32_000


def test_measure_overflow_over_the_wire(stub):
    conv = convo.small_conversation()
    conv.messages[1].usage.input = 190_000
    r = stub.Measure(convo.measure_request(conv), timeout=10)
    assert r.overflow and r.should_compact


def _expect(stub, request, code, *fragments):
    with pytest.raises(grpc.RpcError) as e:
        stub.Measure(request, timeout=10)
    assert e.value.code() == code, e.value.details()
    for f in fragments:
        assert f in e.value.details()
    return e.value.details()


def _bad(mutate):
    req = convo.measure_request()
    mutate(req)
    return req


BAD_INPUTS = [
    ("empty request", pb.MeasureRequest(), "conversation: is required"),
    ("no messages", _bad(lambda r: r.conversation.ClearField("messages")), "conversation.messages"),
    ("no model", _bad(lambda r: r.ClearField("model")), "model: is required"),
    ("no provider", _bad(lambda r: setattr(r.model, "provider", 0)), "model.provider"),
    ("no model id", _bad(lambda r: setattr(r.model, "id", "")), "model.id"),
    ("negative context", _bad(lambda r: setattr(r.model.limits, "context", -5)), "model.limits.context"),
    ("negative output", _bad(lambda r: setattr(r.model.limits, "output", -1)), "model.limits.output"),
    ("unknown provider", _bad(lambda r: setattr(r.model, "provider", 99)), "model.provider"),
    ("unknown role", _bad(lambda r: setattr(r.conversation.messages[0], "role", 7)),
     "conversation.messages[0].role"),
    ("duplicate id", _bad(lambda r: setattr(r.conversation.messages[2], "id", "msg_002")),
     "conversation.messages[2].id"),
    ("id repeating an older message's", _bad(lambda r: setattr(r.conversation.messages[2], "id",
                                                            r.conversation.messages[0].id)),
     "conversation.messages[2].id"),
    ("tool without call id", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool, "call_id", "")),
     "conversation.messages[1].parts[1].tool.call_id"),
    ("unknown tool status", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool.state, "status", 42)),
     "conversation.messages[1].parts[1].tool.state.status"),
    ("invalid tool json", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool.state, "input_json", "{nope")),
     "input_json"),
    ("deep tool json", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool.state, "input_json",
                                                 '{"a":' * 100_000 + "1" + "}" * 100_000)), "input_json"),
    ("NaN in tool json", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool.state, "input_json",
                                                 '{"n": NaN}')), "input_json"),
    ("lone surrogate in tool json", _bad(lambda r: setattr(r.conversation.messages[1].parts[1].tool.state,
                                                          "input_json", '{"s": "\\ud800"}')), "input_json"),
    ("part without kind", _bad(lambda r: r.conversation.messages[0].parts.append(pb.Part(id="px"))),
     "conversation.messages[0].parts[1].kind"),
    ("negative usage", _bad(lambda r: setattr(r.conversation.messages[1].usage, "output", -3)),
     "conversation.messages[1].usage.output"),
    ("bad threshold", _bad(lambda r: setattr(r.compaction, "threshold_percent", 0)),
     "compaction.threshold_percent"),
    ("tool schema not json", _bad(lambda r: r.tools.append(pb.ToolDefinition(name="x", input_schema_json="[1"))),
     "tools[0].input_schema_json"),
]


@pytest.mark.parametrize("name,request_,field", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_invalid_argument_naming_the_field(stub, name, request_, field):
    _expect(stub, request_, grpc.StatusCode.INVALID_ARGUMENT, field)
    assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0  # still serving


def test_bytes_that_are_not_protobuf(channel, stub):
    raw = channel.unary_unary("/contextsvc.v1.ContextService/Measure",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\xff\xff\xff\xff garbage", timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid Measure request" in e.value.details()
    assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0


def test_oversized_request_is_resource_exhausted():
    small = start_server(max_request_bytes=64 * 1024)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{small.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            conv = convo.small_conversation()
            conv.messages[0].parts[0].text.text = "x" * 100_000
            with pytest.raises(grpc.RpcError) as e:
                stub.Measure(convo.measure_request(conv), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.Measure(convo.measure_request(), timeout=10).body_bytes > 0
    finally:
        small.stop(grace=1)


def test_large_string_under_the_limit_is_measured(stub):
    conv = convo.small_conversation()
    conv.messages[2].parts[0].text.text = "é" * (20 * 1024 * 1024)
    r = stub.Measure(convo.measure_request(conv), timeout=60)
    assert r.body_bytes > 40 * 1024 * 1024
    assert r.should_compact  # ~6.8M pre-flight tokens against a 168K limit



def test_health(channel):
    h = health_pb2_grpc.HealthStub(channel)
    for name in ("", "contextsvc.v1.ContextService"):
        assert h.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_and_describes_the_service(channel):
    r = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = list(r.ServerReflectionInfo(iter([
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="contextsvc.v1.ContextService"),
    ]), timeout=5))
    names = {s.name for s in responses[0].list_services_response.service}
    assert {"contextsvc.v1.ContextService", "grpc.health.v1.Health"} <= names
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto.FromString(
        responses[1].file_descriptor_response.file_descriptor_proto[0])
    methods = {m.name for m in fd.service[0].method}
    assert methods == {"Measure", "Prune", "Compact", "Assemble", "TruncateToolOutput", "ReadTruncated"}
