"""Nothing keeps a client's strings whole across calls (issue 16, item 11): the message cache,
the exact-count cache and the step memo key by digests and are bounded in bytes, metrics labels
are fixed names. Session ids over server.max_session_id_bytes are refused; one over OpenAI's 64
characters goes into prompt_cache_key as a digest."""
from __future__ import annotations

import json
import tracemalloc

import grpc
import pytest

from helpers import convo
from helpers.server import start_server
from contextsvc.lowering.openai_chat import PROMPT_CACHE_KEY_MAX
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
MB = 1 << 20


def request(i: int, big: str, session: str):
    """A step whose message ids, part ids and tool name are each a 1 MB string of its own."""
    tag = f"{i:04d}"
    conv = pb.Conversation(session_id=session, messages=[
        convo.user(tag + big[:MB - 4], convo.text(tag + "p" + big[:MB - 5], "run it")),
        convo.assistant("a" + tag, convo.tool("t" + tag, "c" + tag, "tool" + tag + big[:MB - 8], {"x": 1}, "ok")),
        convo.user("u" + tag, convo.text("q" + tag, "next"))])
    return conv


def test_six_hundred_steps_with_megabyte_strings_leave_memory_bounded():
    """600 Measures and Assembles with a fresh 1 MB session id each (refused), then 40 (exact
    counts on) with a fresh 1 MB message id, part id and tool name each and a session id at the
    limit: the server keeps at most its caches' bounds. Before, a per-session table kept 583 MB
    after 600 Assembles with 1 MB session ids."""
    cache_bytes = 4 << 20
    s = start_server(memo_bytes=3 * cache_bytes)
    big = "x" * MB
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}", options=OPTIONS) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            stub.Measure(convo.measure_request(), timeout=30)
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for i in range(600):
                    conv = pb.Conversation(session_id=f"{i:04d}" + big, messages=[
                        convo.user("m", convo.text("p", "hi"))])
                    call = stub.Assemble if i % 2 else stub.Measure
                    req = pb.AssembleRequest if i % 2 else pb.MeasureRequest
                    with pytest.raises(grpc.RpcError) as e:
                        call(req(conversation=conv, model=convo.model()), timeout=30)
                    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                for i in range(40):
                    session = f"{i:04d}" + "s" * 1020  # at the 1 KiB limit, a new one each call
                    conv = request(i, big, session)
                    if i % 2:
                        stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(
                            provider=pb.PROVIDER_OPENAI, id="gpt-4o")), timeout=30)
                    else:
                        stub.Measure(convo.measure_request(conv, exact=True), timeout=30)
                    del conv
                kept = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            print(f"640 steps with 1 MB strings: {kept / MB:.1f} MB kept")
            # the three caches (messages, step memo, lowering memo) at their bound, plus slack
            assert kept < 3 * cache_bytes + 16 * MB
    finally:
        s.stop(grace=1)


def test_session_id_over_the_limit_is_refused_and_a_long_one_fits_openai():
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}", options=OPTIONS) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            conv = convo.small_conversation()
            conv.session_id = "s" * 1025
            for call, req in (("Measure", convo.measure_request(conv)),
                              ("Assemble", pb.AssembleRequest(conversation=conv, model=convo.model())),
                              ("Prune", pb.PruneRequest(conversation=conv, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)),
                              ("Compact", pb.CompactRequest(conversation=conv, model=convo.model()))):
                with pytest.raises(grpc.RpcError) as e:
                    getattr(stub, call)(req, timeout=10)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, call
                assert e.value.details().startswith("conversation.session_id: is 1025 bytes"), e.value.details()
            openai = convo.model(provider=pb.PROVIDER_OPENAI, id="gpt-4o")
            keys = []
            for sid in ("sess-1", "é" * 512, "é" * 511 + "f"):  # 1024 bytes: answered
                conv.session_id = sid
                body = json.loads(stub.Assemble(pb.AssembleRequest(conversation=conv, model=openai),
                                                timeout=10).body)
                keys.append(body["prompt_cache_key"])
            assert keys[0] == "sess-1"
            assert all(len(k) <= PROMPT_CACHE_KEY_MAX for k in keys) and len(set(keys)) == 3
    finally:
        s.stop(grace=1)
