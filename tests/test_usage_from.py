"""usage_from (contextsvc_client): each provider's reported usage, as its own SDK types it, stored
as a Usage whose input side is what the provider counted of the request, counted once. Through a
real server: the projection of a conversation whose answer's usage was stored so reads that count,
where storing the total as `input` beside its cached part read it twice and asked to compact a
request that fits."""
from __future__ import annotations

import anthropic.types as at
import pytest
from google.genai import types as gt
from openai.types import CompletionUsage
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails
from openai.types.responses import ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from contextsvc_client import usage_from
from contextsvc.v1 import context_pb2 as pb
from helpers import convo

# one request of 30,100 input tokens, 28,000 of them read from the cache, and 900 output tokens,
# 600 of them reasoning, as each provider reports it
REPORTED = {
    pb.PROVIDER_ANTHROPIC: at.Usage(input_tokens=1_100, cache_read_input_tokens=28_000, cache_creation_input_tokens=1_000,
                                    output_tokens=900, output_tokens_details=at.OutputTokensDetails(thinking_tokens=600)),
    pb.PROVIDER_BEDROCK: {"inputTokens": 1_100, "cacheReadInputTokens": 28_000, "cacheWriteInputTokens": 1_000,
                          "outputTokens": 900, "totalTokens": 31_000},
    pb.PROVIDER_OPENAI: CompletionUsage(prompt_tokens=30_100, completion_tokens=900, total_tokens=31_000,
                                        prompt_tokens_details=PromptTokensDetails(cached_tokens=28_000,
                                                                                  cache_write_tokens=1_000),
                                        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=600)),
    pb.PROVIDER_OPENROUTER: {"prompt_tokens": 30_100, "completion_tokens": 900, "total_tokens": 31_000,
                             "prompt_tokens_details": {"cached_tokens": 28_000, "cache_write_tokens": 1_000},
                             "completion_tokens_details": {"reasoning_tokens": 600}},
    pb.PROVIDER_OPENAI_RESPONSES: ResponseUsage(input_tokens=30_100, output_tokens=900, total_tokens=31_000,
                                                input_tokens_details=InputTokensDetails(cached_tokens=28_000,
                                                                                                   cache_write_tokens=1_000),
                                                output_tokens_details=OutputTokensDetails(reasoning_tokens=600)),
    pb.PROVIDER_GEMINI: gt.GenerateContentResponseUsageMetadata(
        prompt_token_count=30_100, cached_content_token_count=28_000, candidates_token_count=300,
        thoughts_token_count=600, total_token_count=31_000),
}


@pytest.mark.parametrize("provider", REPORTED, ids=pb.Provider.Name)
def test_the_input_side_is_the_providers_count_of_the_request_once(provider):
    u = usage_from(provider, REPORTED[provider])
    assert u.input + u.cache_read + u.cache_write == 30_100
    assert u.cache_read == 28_000
    assert u.input + u.output + u.reasoning + u.cache_read + u.cache_write == 31_000
    if provider != pb.PROVIDER_BEDROCK:  # Converse names no reasoning count
        assert (u.output, u.reasoning) == (300, 600)


def test_the_response_json_reads_as_the_sdk_object_and_a_missing_field_is_0():
    assert usage_from("PROVIDER_GEMINI", {"promptTokenCount": 30_100, "cachedContentTokenCount": 28_000,
                                          "candidatesTokenCount": 300, "thoughtsTokenCount": 600}) == \
        usage_from(pb.PROVIDER_GEMINI, REPORTED[pb.PROVIDER_GEMINI])
    assert usage_from(pb.PROVIDER_OPENAI_RESPONSES, REPORTED[pb.PROVIDER_OPENAI_RESPONSES].model_dump()) == \
        usage_from(pb.PROVIDER_OPENAI_RESPONSES, REPORTED[pb.PROVIDER_OPENAI_RESPONSES])
    assert usage_from(pb.PROVIDER_OPENAI, {"prompt_tokens": 500, "completion_tokens": 20,
                                           "prompt_tokens_details": None}) == pb.Usage(input=500, output=20)
    with pytest.raises(ValueError, match="provider"):
        usage_from(pb.PROVIDER_UNSPECIFIED, {})


def test_a_request_that_fits_is_not_asked_to_compact_once_its_usage_is_stored_so(stub):
    """A Responses session at 30,100 input tokens of a 40,000 window: stored with usage_from it
    fits; with the total as `input` and its cached part again as `cache_read`, the projection
    read it at 58,100 and asked to compact."""
    model = convo.model(provider=pb.PROVIDER_OPENAI_RESPONSES, id="gpt-5", context=40_000, output=4_000)

    def measured(usage: pb.Usage) -> pb.MeasureResponse:
        messages = [convo.user("u1", convo.text("p1", "Refactor the module. " * 3_000)),
                    convo.assistant("a1", convo.text("p2", "Done."), usage=usage),
                    convo.user("u2", convo.text("p3", "Now the tests."))]
        return stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(session_id="usage", messages=messages),
                                              model=model), timeout=10)

    reported = REPORTED[pb.PROVIDER_OPENAI_RESPONSES]
    right = measured(usage_from(model.provider, reported))
    twice = measured(pb.Usage(input=reported.input_tokens, cache_read=28_000, cache_write=1_000, output=300,
                              reasoning=600))
    assert right.projected < right.limit and not right.should_compact
    assert twice.projected > right.projected + 25_000 and twice.should_compact  # the cached 29,000 again
