"""Prune over loopback: what the gates decide reaches the caller, bad input is named."""
from __future__ import annotations

import grpc
import pytest

from helpers import convo
from contextsvc.v1 import context_pb2 as pb
from helpers.rpc import long_session


TURNS = pb.CompactionSettings(prune_settings=pb.PruneSettings(protect="turns"))


def test_payload_limit_prune_marks_old_outputs(stub):
    r = stub.Prune(pb.PruneRequest(conversation=long_session(turns=12), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT),
                   timeout=10)
    # 12 outputs of 15,000: the newest 2 are protected (30,000; a third would exceed 40,000); of the
    # older 10, 30,000 are kept and the oldest 8 are pruned
    assert r.acted and r.reason == pb.PRUNE_REASON_PAYLOAD_LIMIT
    assert list(r.part_ids) == ["t16", "t14", "t12", "t10", "t8", "t6", "t4", "t2"]
    assert r.tokens_freed == 120_000 and r.tokens_scanned == 150_000


def test_turns_rule_over_grpc(stub):
    r = stub.Prune(pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT,
                                   compaction=TURNS), timeout=10)
    # last 2 turns protected; of the older 4 outputs (15,000 each) the newest 40,000 are kept
    assert r.acted and list(r.part_ids) == ["t4", "t2"] and r.tokens_freed == 30_000


def test_normal_prune_is_off_by_default_and_on_when_asked(stub):
    req = pb.PruneRequest(conversation=long_session(turns=12), reason=pb.PRUNE_REASON_NORMAL)
    r = stub.Prune(req, timeout=10)
    assert not r.acted and r.stopped_by == "disabled" and not r.part_ids
    req.compaction.prune = True
    assert stub.Prune(req, timeout=10).acted


@pytest.mark.parametrize("reason", [pb.PRUNE_REASON_PAYLOAD_LIMIT, pb.PRUNE_REASON_POST_COMPACTION,
                                    pb.PRUNE_REASON_NORMAL])
def test_prune_false_stops_every_reason(stub, reason):
    req = pb.PruneRequest(conversation=long_session(turns=12), reason=reason,
                          compaction=pb.CompactionSettings(prune=False))
    r = stub.Prune(req, timeout=10)
    assert (r.acted, r.stopped_by, list(r.part_ids)) == (False, "disabled", [])


def single_turn(steps=60):
    """One user message, 60 assistant steps each with a completed tool of 2,000-12,000 tokens."""
    msgs = [convo.user("msg_000", convo.text("u0", "port the parser to the new AST"))]
    for k in range(1, steps + 1):
        tokens = 2_000 + (k * 3_917) % 10_001
        msgs.append(convo.assistant(f"msg_{k:03d}", convo.text(f"a{k}", "next"),
                                    convo.tool(f"t{k}", f"call_{k}", "read", {"path": f"src/m{k}.py"},
                                               "x" * 4 * tokens)))
    return pb.Conversation(session_id="long", messages=msgs)


# The newest results t60..t56 are 3,080, 9,164, 5,247, 11,331, 7,414 tokens: at 32K (PRUNE_PROTECT
# 6,976) only t60 fits, at 200K (40,000) all five do.
@pytest.mark.parametrize("context,output,protected", [
    (32_000, 4_096, ["t60"]), (200_000, 8_192, ["t60", "t59", "t58", "t57", "t56"])])
def test_defaults_act_in_a_long_single_turn(stub, context, output, protected):
    req = pb.PruneRequest(conversation=single_turn(), model=convo.model(context=context, output=output),
                          reason=pb.PRUNE_REASON_NORMAL, compaction=pb.CompactionSettings(prune=True))
    r = stub.Prune(req, timeout=10)
    usable = context - output
    assert r.acted and r.tokens_freed > min(20_000, usable // 10)
    assert r.tokens_scanned - r.tokens_freed <= min(40_000, usable // 4)  # what is kept fits the gate
    # the newest 5 results, as many as fit in protect_tokens, are neither touched nor counted
    assert not set(protected) & set(r.part_ids)
    assert r.tokens_scanned == sum(2_000 + (k * 3_917) % 10_001 for k in range(1, 61 - len(protected)))
    # the reference's rule protects the whole turn and never acts
    req.compaction.prune_settings.protect = "turns"
    assert stub.Prune(req, timeout=10).stopped_by == "nothing-to-prune"


def test_window_scales_the_gates_and_overrides_win(stub):
    conv = long_session(turns=9, output_chars=12_000)  # 9 outputs of 3,000 tokens
    req = pb.PruneRequest(conversation=conv, reason=pb.PRUNE_REASON_POST_COMPACTION)
    assert stub.Prune(req, timeout=10).stopped_by == "nothing-to-prune"  # no model: 40,000 / 20,000
    req.model.CopyFrom(convo.model(context=32_000, output=4_096))  # 6,976 / 2,790
    # t18 and t16 are protected (6,000; a third would make 9,000), t14 and t12 kept (6,000), the
    # older five (15,000) pruned
    r = stub.Prune(req, timeout=10)
    assert r.acted and list(r.part_ids) == ["t10", "t8", "t6", "t4", "t2"] and r.tokens_freed == 15_000
    req.compaction.prune_settings.protect_tokens = 40_000  # a per-request value beats the window
    assert stub.Prune(req, timeout=10).stopped_by == "nothing-to-prune"
    req.compaction.prune_settings.ClearField("protect_tokens")
    req.compaction.prune_settings.minimum_tokens = 15_000  # 15,000 freed is not more
    assert stub.Prune(req, timeout=10).stopped_by == "minimum"
    req.compaction.prune_settings.ClearField("minimum_tokens")
    req.compaction.prune_settings.protected_results = 7  # still only as many as fit in 6,976
    assert list(stub.Prune(req, timeout=10).part_ids) == ["t10", "t8", "t6", "t4", "t2"]
    req.compaction.prune_settings.protected_results = 1  # t18 only: t16 and t14 kept
    assert list(stub.Prune(req, timeout=10).part_ids) == ["t12", "t10", "t8", "t6", "t4", "t2"]
    req.compaction.prune_settings.protected_tools.append("read")
    req.compaction.prune_settings.protected_tools_set = True
    assert stub.Prune(req, timeout=10).tokens_scanned == 0


def test_post_compaction_prune_reaches_the_kept_tail(stub):
    msgs = [convo.user("msg_001", convo.text("u1", "old")),
            convo.assistant("msg_002", convo.tool("h2", "call_h2", "read", {"path": "old.py"}, "x" * 40_000)),
            convo.user("msg_003", convo.text("u3", "big task"))]
    for k in range(4, 16):  # the kept tail: 12 reads of 10,000 tokens
        msgs.append(convo.assistant(f"msg_{k:03d}", convo.tool(f"t{k}", f"call_{k}", "read", {"path": f"f{k}"},
                                                               "x" * 40_000)))
    msgs += [pb.Message(id="msg_016", role=pb.ROLE_USER, parts=[pb.Part(id="c16", compaction=pb.CompactionPart(
                 auto=True, tail_start_id="msg_003"))]),
             convo.assistant("msg_017", convo.text("s17", "## Goal\n- ship"), summary=True, parent_id="msg_016"),
             convo.user("msg_018", convo.text("u18", "continue"))]
    r = stub.Prune(pb.PruneRequest(conversation=pb.Conversation(messages=msgs),
                                   reason=pb.PRUNE_REASON_POST_COMPACTION), timeout=10)
    # t15..t12 are protected (40,000), t11..t8 kept (40,000), the oldest 4 pruned
    assert r.acted and list(r.part_ids) == ["t7", "t6", "t5", "t4"] and r.tokens_freed == 40_000


def test_minimum_gate(stub):
    r = stub.Prune(pb.PruneRequest(conversation=long_session(turns=5, output_chars=50_000),
                                   reason=pb.PRUNE_REASON_POST_COMPACTION), timeout=10)
    # 5 outputs of 12,500: the newest 3 protected (37,500), 2 counted (25,000) under 40,000
    assert not r.acted and r.stopped_by in ("nothing-to-prune", "minimum") and r.tokens_scanned == 25_000


def test_bad_prune_requests(stub):
    for req, field in ((pb.PruneRequest(reason=pb.PRUNE_REASON_NORMAL), "conversation"),
                       (pb.PruneRequest(conversation=long_session()), "reason"),
                       (pb.PruneRequest(conversation=long_session(), reason=17), "reason"),
                       (pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_NORMAL,
                                        compaction=pb.CompactionSettings(prune_settings=pb.PruneSettings(
                                            protect="recent"))), "compaction.prune_settings.protect"),
                       (pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_NORMAL,
                                        compaction=pb.CompactionSettings(prune_settings=pb.PruneSettings(
                                            minimum_tokens=-1))), "compaction.prune_settings.minimum_tokens")):
        with pytest.raises(grpc.RpcError) as e:
            stub.Prune(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()


def test_prune_metrics_by_reason():
    from helpers.server import start_server
    from contextsvc.v1 import context_pb2_grpc as pb_grpc
    from helpers.metrics import scrape

    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            stub.Prune(pb.PruneRequest(conversation=long_session(turns=12), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT),
                       timeout=10)
            stub.Prune(pb.PruneRequest(conversation=long_session(), reason=pb.PRUNE_REASON_NORMAL), timeout=10)
        m = scrape(s.metrics_port)
        assert m[("contextsvc_prune_runs_total", (("outcome", "acted"), ("reason", "payload-limit")))] == 1
        assert m[("contextsvc_prune_runs_total", (("outcome", "noop"), ("reason", "normal")))] == 1
        assert m[("contextsvc_prune_tokens_freed_total", (("reason", "payload-limit"),))] == 120_000
    finally:
        s.stop(grace=1)
