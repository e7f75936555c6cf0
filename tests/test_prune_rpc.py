"""Prune over loopback: what the gates decide reaches the caller, bad input is named."""
from __future__ import annotations

import grpc
import pytest

import convo
from contextsvc.v1 import context_pb2 as pb


def long_session(turns=6, output_chars=60_000):
    """Each turn: a user ask, an assistant reading a big file. ~15,000 tokens per output."""
    msgs, n = [], 0
    for t in range(turns):
        n += 1
        msgs.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", f"step {t}")))
        n += 1
        msgs.append(convo.assistant(f"msg_{n:03d}", convo.tool(f"t{n}", f"call_{n}", "read", {"path": f"f{t}.py"},
                                                                "x" * output_chars)))
    return pb.Conversation(messages=msgs)


def test_payload_limit_prune_marks_old_outputs(stub):
    r = stub.Prune(pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT), timeout=10)
    # last 2 turns protected; of the older 4 outputs (15,000 each) the newest 40,000 are kept
    assert r.acted and r.reason == pb.PRUNE_REASON_PAYLOAD_LIMIT
    assert list(r.part_ids) == ["t4", "t2"]
    assert r.tokens_freed == 30_000


def test_normal_prune_is_off_by_default_and_on_when_asked(stub):
    req = pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_NORMAL)
    r = stub.Prune(req, timeout=10)
    assert not r.acted and r.stopped_by == "disabled" and not r.part_ids
    req.compaction.prune = True
    assert stub.Prune(req, timeout=10).acted


def test_minimum_gate(stub):
    r = stub.Prune(pb.PruneRequest(conversation=long_session(turns=5, output_chars=50_000),
                                   reason=pb.PRUNE_REASON_POST_COMPACTION), timeout=10)
    # 3 prunable outputs of 12,500: 37,500 kept under 40,000 -> nothing to prune
    assert not r.acted and r.stopped_by in ("nothing-to-prune", "minimum")


def test_bad_prune_requests(stub):
    for req, field in ((pb.PruneRequest(reason=pb.PRUNE_REASON_NORMAL), "conversation"),
                       (pb.PruneRequest(conversation=long_session()), "reason"),
                       (pb.PruneRequest(conversation=long_session(), reason=17), "reason")):
        with pytest.raises(grpc.RpcError) as e:
            stub.Prune(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()


def test_prune_metrics_by_reason():
    from conftest import start_server
    from contextsvc.v1 import context_pb2_grpc as pb_grpc
    from test_metrics import scrape

    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            stub.Prune(pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT), timeout=10)
            stub.Prune(pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_NORMAL), timeout=10)
        m = scrape(s.metrics_port)
        assert m[("contextsvc_prune_runs_total", (("outcome", "acted"), ("reason", "payload-limit")))] == 1
        assert m[("contextsvc_prune_runs_total", (("outcome", "noop"), ("reason", "normal")))] == 1
        assert m[("contextsvc_prune_tokens_freed_total", (("reason", "payload-limit"),))] == 30_000
    finally:
        s.stop(grace=1)
