"""The memo's real memory stays within server.memo_bytes (issue 16, item 10):
measured with tracemalloc in process, over a real server, for tiny and for large messages."""
from __future__ import annotations

import gc
import tracemalloc

import grpc
import pytest

from helpers import convo
from helpers.memo_memory import cleared
from helpers.server import start_server
from contextsvc.memo import Memo
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

BOUND = 2 * 1024 * 1024
SLACK = 128 * 1024  # the OrderedDict's table and allocator rounding


tiny, large = convo.tiny_message, convo.large_message


def cache_of_running_server() -> Memo:
    (cache,) = [o for o in gc.get_objects() if isinstance(o, Memo)]
    return cache


@pytest.mark.parametrize("make,count,per_call", [(tiny, 40_000, 4000), (large, 120, 20)])
def test_real_memory_of_the_cache_stays_within_its_bound(make, count, per_call):
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, Memo)]
    s = start_server(memo_bytes=BOUND, max_concurrent_rpcs=1, workers=2)
    tracemalloc.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}",
                                   options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for start in range(0, count, per_call):
                msgs = [make(n) for n in range(start, start + per_call)]
                stub.Prune(pb.PruneRequest(conversation=pb.Conversation(messages=msgs),
                                           reason=pb.PRUNE_REASON_NORMAL), timeout=60)
            cache = cache_of_running_server()
            assert cache.refused or len(cache) < count  # the bound was reached: some evicted, or not kept
            kept = len(cache)
            used, accounted = cleared(cache)
    finally:
        tracemalloc.stop()
        s.stop(grace=1)
    print(f"{make.__name__}: {kept} messages, {used} bytes real, {accounted} accounted, bound {BOUND}")
    assert used <= BOUND + SLACK
    assert accounted <= BOUND
    assert used >= BOUND // 2  # the bound is used, not wasted by a gross overestimate
    assert used / accounted == pytest.approx(1, abs=0.25)


def test_a_session_outgrowing_the_cache_keeps_its_real_memory_within_the_bound():
    """Steps of one session of 8,000 short messages (more than the bound holds) measured over a
    real server: each step keeps what fits of its own entries and its next step is served those
    (Memo.begin_step; a plain LRU kept none for it), and the real memory stays within the bound:
    nothing the step could not keep is held, uncharged, by an entry serving its next step whole."""
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, Memo)]
    s = start_server(memo_bytes=BOUND, max_concurrent_rpcs=1, workers=2)
    msgs = [m for n in range(4_000) for m in (convo.user(f"u{n}", convo.text(f"u{n}p", f"question {n}")),
                                              convo.assistant(f"a{n}", convo.text(f"a{n}p", "ok")))]
    tracemalloc.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}",
                                   options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            cache = None
            for k in range(4):
                conversation = pb.Conversation(session_id="long", messages=msgs[:len(msgs) - 3 + k])
                stub.Measure(pb.MeasureRequest(conversation=conversation, model=convo.model(context=200_000)),
                             timeout=60)
                cache = cache or cache_of_running_server()
                if k == 0:
                    first = cache.misses
                elif k == 1:
                    second = cache.misses - first
            used, accounted = cleared(cache)
    finally:
        tracemalloc.stop()
        s.stop(grace=1)
    print(f"8,000 short messages: first step {first} misses, the next {second}; "
          f"{used} bytes real, {accounted} accounted, bound {BOUND}")
    assert second < first  # served from what the first step kept
    assert used <= BOUND + SLACK
    assert accounted <= BOUND
