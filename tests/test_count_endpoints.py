"""The providers' token-counting endpoints (issue 30, "Exact counts where they exist"): with
measure.count_endpoints naming a provider, Measure's `exact` figure of that provider's models is
the endpoint's count, through the provider's own SDK (anthropic, google-genai) against a fake API
on loopback that counts with a tokenizer the service never uses, so the figure can only have come
from the endpoint. The decision figure never moves with it (SPEC §3); a hanging endpoint leaves the
offline figure, its method saying why, within the caller's deadline; a request measured again is
not counted again."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from contextsvc import config
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers import convo, fake_anthropic, fake_gemini
from helpers.rpc import SYSTEM, TOOLS
from helpers.server import start_server

KEY_ENV = "CONTEXTSVC_TEST_KEY"
GEMINI = convo.model(provider=pb.PROVIDER_GEMINI, id="gemini-2.5-pro", context=1_000_000)


def counting_server(**measure):
    return start_server(measure_overrides=measure)


@pytest.fixture()
def anthropic_counts(api):
    """(stub, fake API) of a server whose Anthropic exact figures come from the fake's endpoint."""
    server = counting_server(count_endpoints=("anthropic",), anthropic_count_base_url=api.url,
                             anthropic_count_api_key_env=KEY_ENV)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield pb_grpc.ContextServiceStub(ch), api
    server.stop()


@pytest.fixture()
def gemini_counts(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "gemini-test-key")
    fake = fake_gemini.FakeGeminiAPI()
    server = counting_server(count_endpoints=("gemini",), gemini_count_base_url=fake.url,
                             gemini_count_api_key_env=KEY_ENV)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield pb_grpc.ContextServiceStub(ch), fake
    server.stop()
    fake.close()


def measure_request(conv=None, model=None, tools=True, **kw):
    """tools=False: no tools, no system prompt, and a history without tool calls (one with calls
    is sent with a tool standing for them), so the body is its messages alone."""
    extra = dict(tools=TOOLS, system=SYSTEM) if tools else {}
    conv = conv or convo.small_conversation()
    if not tools:
        for msg in conv.messages:
            kept = [p for p in msg.parts if not p.HasField("tool")]
            del msg.parts[:]
            msg.parts.extend(kept)
    return pb.MeasureRequest(conversation=conv, model=model or convo.model(), exact=True, **extra, **kw)


def counts(fake, suffix):
    return [r for r in fake.requests if r[0].split("?")[0].endswith(suffix)]


def lower(headers):
    return {k.lower(): v for k, v in headers.items()}


def other_conversation(word):
    return pb.Conversation(session_id="sess-2", messages=[convo.user("msg_001", convo.text("p1", f"Explain {word}."))])


def test_anthropic_exact_figure_is_the_endpoints_count(anthropic_counts, stub):
    counting, api = anthropic_counts
    req = measure_request(step=1)
    r = counting.Measure(req, timeout=30)
    offline = stub.Measure(req, timeout=30)  # the same request on a server without the endpoint
    (path, headers, body), = counts(api, fake_anthropic.COUNT_PATH)
    assert lower(headers)["authorization"] == "Bearer sk-test-123" and body["model"] == "claude-sonnet-4-5"
    # the endpoint was asked about the very body Assemble sends
    sent = counting.Assemble(pb.AssembleRequest(conversation=req.conversation, model=req.model, tools=TOOLS,
                                                system=SYSTEM, step=1, exact=True), timeout=30)
    wire = json.loads(sent.body)
    assert (body["system"], body["messages"], body["tools"]) == (wire["system"], wire["messages"], wire["tools"])
    assert (r.exact.tokens, r.exact.method) == (fake_anthropic.count(body), "anthropic-count-tokens")
    assert r.exact_for_model and not offline.exact_for_model
    assert offline.exact.method == "tiktoken:cl100k_base (proxy for claude-sonnet-4-5)"
    assert r.exact.tokens != offline.exact.tokens
    # reported only: the decision figure is the offline one, whatever the endpoint said
    assert r.decision == offline.decision and r.should_compact == offline.should_compact
    assert r.projected == offline.projected
    # Assemble's figures are Measure's, and the request was counted once for both
    assert (sent.figures.exact.tokens, sent.figures.exact.method) == (r.exact.tokens, r.exact.method)
    assert len(counts(api, fake_anthropic.COUNT_PATH)) == 1


def test_the_same_request_is_counted_once(anthropic_counts):
    counting, api = anthropic_counts
    first = counting.Measure(measure_request(), timeout=30)
    again = counting.Measure(measure_request(), timeout=30)
    assert len(counts(api, fake_anthropic.COUNT_PATH)) == 1
    assert (again.exact.tokens, again.exact.method) == (first.exact.tokens, "anthropic-count-tokens")
    # a new step (one more message) is a new request: counted
    conv = convo.small_conversation()
    conv.messages.append(convo.assistant("msg_004", convo.text("p5", "Done."), usage=pb.Usage(input=1500, output=9)))
    conv.messages.append(convo.user("msg_005", convo.text("p6", "Thanks, now the docs.")))
    later = counting.Measure(measure_request(conv), timeout=30)
    assert len(counts(api, fake_anthropic.COUNT_PATH)) == 2 and later.exact.tokens > first.exact.tokens


def test_a_hanging_anthropic_endpoint_leaves_the_offline_figure_within_the_deadline(anthropic_counts, stub):
    counting, api = anthropic_counts
    counting.Measure(measure_request(), timeout=30)  # warm: tokenizer loaded, SDK client made
    api.mode = "hang"
    req = measure_request(other_conversation("the hang"))
    start = time.monotonic()
    r = counting.Measure(req, timeout=0.3)
    seconds = time.monotonic() - start
    offline = stub.Measure(req, timeout=30)
    assert seconds < 0.3
    assert r.exact.tokens == offline.exact.tokens and not r.exact_for_model
    assert r.exact.method.startswith(offline.exact.method + " (anthropic-count-tokens unavailable: no answer within")
    assert len(counts(api, fake_anthropic.COUNT_PATH)) == 2  # it was asked
    # a failure is not cached: the endpoint answering again gives its count
    api.mode = "ok"
    api.release.set()
    assert counting.Measure(req, timeout=30).exact.method == "anthropic-count-tokens"


def test_an_anthropic_endpoint_error_is_named_in_the_method(anthropic_counts):
    counting, api = anthropic_counts
    api.mode = "401"
    r = counting.Measure(measure_request(), timeout=30)
    assert r.exact.method == ("tiktoken:cl100k_base (proxy for claude-sonnet-4-5) (anthropic-count-tokens "
                              "unavailable: HTTP 401: Error code: 401 - {'type': 'error', 'error': "
                              "{'type': 'authentication_error', 'message': 'invalid x-api-key'}})")


def test_other_providers_keep_their_offline_count(anthropic_counts):
    counting, api = anthropic_counts
    bedrock = counting.Measure(measure_request(model=convo.model(provider=pb.PROVIDER_BEDROCK,
                                                                 id="anthropic.claude-sonnet-4-5")), timeout=30)
    o200k = counting.Measure(measure_request(model=convo.model(provider=pb.PROVIDER_OPENAI, id="gpt-4o")), timeout=30)
    assert bedrock.exact.method == "tiktoken:cl100k_base (proxy for anthropic.claude-sonnet-4-5)"
    assert o200k.exact.method == "tiktoken:o200k_base" and o200k.exact_for_model
    assert counts(api, fake_anthropic.COUNT_PATH) == []


def test_gemini_exact_figure_is_the_endpoints_count(gemini_counts, stub):
    counting, fake = gemini_counts
    req = measure_request(model=GEMINI, tools=False)
    r = counting.Measure(req, timeout=30)
    offline = stub.Measure(req, timeout=30)
    (path, headers, body), = fake.requests
    assert path == "/v1/models/gemini-2.5-pro:countTokens" and lower(headers)["x-goog-api-key"] == "gemini-test-key"
    sent = counting.Assemble(pb.AssembleRequest(conversation=req.conversation, model=GEMINI, exact=True), timeout=30)
    assert body["contents"] == json.loads(sent.body)["contents"]
    assert (r.exact.tokens, r.exact.method) == (fake_gemini.count(body), "gemini-count-tokens")
    assert r.exact_for_model and r.exact.tokens != offline.exact.tokens
    assert r.decision == offline.decision and r.should_compact == offline.should_compact
    assert len(fake.requests) == 1  # Assemble of the same request: counted once


def test_gemini_system_and_tools_come_from_the_offline_count(gemini_counts):
    """The Gemini Developer API's count (through its SDK) takes contents only: the system
    instruction and tools are added from the offline count, and the method says which is which."""
    counting, fake = gemini_counts
    r = counting.Measure(measure_request(model=GEMINI), timeout=30)
    (_, _, body), = fake.requests
    assert set(body) == {"contents"}
    assert r.exact.method == ("gemini-count-tokens(contents)"
                              "+tiktoken:cl100k_base (proxy for gemini-2.5-pro)(system,tools)")
    assert r.exact.tokens > fake_gemini.count(body) and not r.exact_for_model


def test_a_hanging_gemini_endpoint_leaves_the_offline_figure_within_the_deadline(gemini_counts, stub):
    counting, fake = gemini_counts
    counting.Measure(measure_request(model=GEMINI, tools=False), timeout=30)  # warm
    fake.mode = "hang"
    req = measure_request(other_conversation("the hang"), model=GEMINI, tools=False)
    start = time.monotonic()
    r = counting.Measure(req, timeout=0.3)
    seconds = time.monotonic() - start
    assert seconds < 0.3
    assert r.exact.tokens == stub.Measure(req, timeout=30).exact.tokens
    assert r.exact.method.startswith("tiktoken:cl100k_base (proxy for gemini-2.5-pro) "
                                     "(gemini-count-tokens unavailable: no answer within")


def test_count_endpoints_config_names_known_providers():
    assert config.from_mapping({"measure": {"count_endpoints": ["anthropic", "gemini"]}}).measure.count_endpoints \
        == ("anthropic", "gemini")
    with pytest.raises(ValueError, match=r"count_endpoints: unknown 'bedrock'; known: anthropic, gemini"):
        config.from_mapping({"measure": {"count_endpoints": ["bedrock"]}})
