"""Converted messages are reused by wire bytes: same result as converting, never stale, bounded."""
from __future__ import annotations

import grpc
import pytest

from helpers import convo
from contextsvc import convert
from contextsvc.message_cache import ENTRY_OVERHEAD, MessageCache, resident_size
from contextsvc.v1 import context_pb2 as pb

import workload


def test_cached_conversion_equals_plain_conversion():
    conv = workload.conversation(200_000)
    cache = MessageCache(64 * 1024 * 1024)
    plain = convert.conversation(conv)
    first = convert.conversation(conv, cache=cache)
    assert cache.misses == len(conv.messages) and cache.hits == 0
    again = convert.conversation(conv, cache=cache)
    assert cache.hits == len(conv.messages)
    assert plain == first == again


def test_a_changed_message_is_converted_again():
    cache = MessageCache(1024 * 1024)
    conv = convo.small_conversation()
    convert.conversation(conv, cache=cache)
    conv.messages[2].parts[0].text.text = "A different request"  # same id, new content
    got = convert.conversation(conv, cache=cache)
    assert got.messages[2].parts[0].content.text == "A different request"
    assert cache.hits == 2 and cache.misses == 4


def test_invalid_messages_still_fail_with_their_path():
    cache = MessageCache(1024 * 1024)
    conv = convo.small_conversation()
    convert.conversation(conv, cache=cache)
    conv.messages[1].parts[1].tool.state.input_json = "{not json"
    with pytest.raises(convert.BadInput) as e:
        convert.conversation(conv, cache=cache)
    assert e.value.field == "conversation.messages[1].parts[1].tool.state.input_json"


def test_the_cache_is_bounded_by_real_memory_oldest_out():
    # each message is charged its objects' real size: three fit in three and a half of them
    msgs = [convo.user(f"m{i}", convo.text(f"p{i}", "x" * 900)) for i in range(5)]
    one = resident_size(convert.conversation(pb.Conversation(messages=[msgs[0]])).messages[0]) + ENTRY_OVERHEAD
    bound = 3 * one + one // 2
    cache = MessageCache(bound)
    for msg in msgs:
        convert.conversation(pb.Conversation(messages=[msg]), cache=cache)
    assert cache.size_bytes <= bound and len(cache) == 3
    convert.conversation(pb.Conversation(messages=[msgs[0]]), cache=cache)  # evicted: converted again
    assert cache.hits == 0
    convert.conversation(pb.Conversation(messages=[msgs[4]]), cache=cache)  # newest: still there
    assert cache.hits == 1


def test_server_answers_the_same_with_and_without_the_cache(stub):
    from helpers.server import start_server

    req = workload.measure_request(100_000)
    uncached = start_server(message_cache_bytes=0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{uncached.port}") as ch:
            from contextsvc.v1 import context_pb2_grpc as pb_grpc
            plain = pb_grpc.ContextServiceStub(ch).Measure(req, timeout=30)
    finally:
        uncached.stop(grace=1)
    first, second = stub.Measure(req, timeout=30), stub.Measure(req, timeout=30)
    assert first == second == plain
    grown = pb.MeasureRequest()
    grown.CopyFrom(req)
    grown.conversation.messages.append(convo.user("zz-new", convo.text("zz-p", "one more request " * 50)))
    assert stub.Measure(grown, timeout=30).body_bytes > plain.body_bytes
