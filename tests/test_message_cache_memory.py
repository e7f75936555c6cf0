"""The memo's real memory stays within server.memo_bytes (issue 16, item 10):
measured with tracemalloc in process, over a real server, for tiny and for large messages."""
from __future__ import annotations

import gc
import tracemalloc

import grpc
import pytest

from helpers import convo
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
            assert len(cache) < count  # the bound evicted some
            gc.collect()
            filled = tracemalloc.get_traced_memory()[0]
            kept, accounted = len(cache), cache.size_bytes
            cache.clear()
            gc.collect()
            used = filled - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        s.stop(grace=1)
    print(f"{make.__name__}: {kept} messages, {used} bytes real, {accounted} accounted, bound {BOUND}")
    assert used <= BOUND + SLACK
    assert accounted <= BOUND
    assert used >= BOUND // 2  # the bound is used, not wasted by a gross overestimate
    assert used / accounted == pytest.approx(1, abs=0.25)
