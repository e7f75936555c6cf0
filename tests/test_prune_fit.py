"""A prune past its gates acts when it makes the request fit (prune_fit, design.md §4).

Once a request is over its limit, the alternative to a prune is a compaction, which breaks the
cached prefix too and keeps less of the history: the minimum gate (breaking the cache must pay
for itself) and the protected tokens then stand aside for the fewest oldest outputs whose marks
bring the request under the limit (the newest protected results never). Over a real server, as
the README's loop calls it: Prune with the Assemble's tokens_needed, apply the part ids,
Assemble again.
"""
from __future__ import annotations

import pytest

from contextsvc_client import apply_prune
from helpers.convo import assistant, model, text, tool, user
from contextsvc.v1 import context_pb2 as pb

OUTPUT = "def handler():\n    return lock.acquire(timeout=5)\n" * 40  # about 500 tokens
TOOLS = [pb.ToolDefinition(name="read", description="Read a file", input_schema_json='{"type":"object"}')]
SYSTEM = pb.SystemPrompt(soul="You fix bugs in the shop's checkout service.")
BRIEF, READS = 600, 20


def _session(counted: bool, brief: int = BRIEF, reads: int = READS) -> list:
    """A brief, then reads: the newest five protected, the oldest few past protect_tokens, freeing
    less than the minimum (min(20000, usable / 10))."""
    msgs = [user("u0", text("u0p", "The checkout service deadlocks under load. " * brief))]
    for i in range(reads):
        usage = pb.Usage(input=8_000 + 850 * i, output=30) if counted else None  # about as we count
        msgs.append(assistant(f"a{i}", tool(f"t{i}", f"c{i}", "read", {"path": f"app/h{i}.py"}, OUTPUT),
                              usage=usage))
    msgs.append(user("u1", text("u1p", "Now run the tests.")))
    return msgs


def _assemble(stub, msgs, mdl):
    return stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl,
                                            tools=TOOLS, system=SYSTEM), timeout=10).figures


def _prune(stub, msgs, mdl, needed=0):
    return stub.Prune(pb.PruneRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl,
                                      reason=pb.PRUNE_REASON_NORMAL, compaction=pb.CompactionSettings(prune=True),
                                      tokens_needed=needed, tools=TOOLS, system=SYSTEM), timeout=10)


def _over_by_150(stub, msgs):
    """A Gemini model whose limit is 150 tokens under the request's projected figure, and its figures."""
    projected = _assemble(stub, msgs, model(pb.PROVIDER_GEMINI, context=1_000_000, output=4096,
                                            id="gemini-2.5-flash")).projected
    mdl = model(pb.PROVIDER_GEMINI, context=projected - 150 + 4096, output=4096, id="gemini-2.5-flash")
    f = _assemble(stub, msgs, mdl)
    assert f.should_compact and f.limit == projected - 150 and f.projected == projected
    return mdl, f


@pytest.mark.parametrize("counted", [False, True], ids=["no-usage", "usage"])
def test_a_prune_below_its_minimum_acts_when_it_makes_the_request_fit(stub, counted):
    msgs = _session(counted)
    mdl, f = _over_by_150(stub, msgs)
    needed = f.projected - f.limit + 1
    default = _prune(stub, msgs, mdl)
    assert not default.acted and default.stopped_by == "minimum"  # what the gate alone does
    p = _prune(stub, msgs, mdl, needed)
    assert p.acted and p.fits and p.part_ids == ["t0"] and p.stopped_by == ""  # the oldest output does it
    after = _assemble(stub, apply_prune(msgs, p), mdl)
    assert not after.should_compact and after.projected < after.limit
    # more than every output past the protected results frees: the gates stand, and the loop compacts
    too_much = _prune(stub, msgs, mdl, f.projected)
    assert not too_much.acted and not too_much.fits and too_much.stopped_by == "minimum"


def test_outputs_protect_tokens_keeps_are_marked_when_that_spares_a_compaction(stub):
    """Twelve reads: the newest five are the protected results, the other seven within
    PRUNE_PROTECT, so the gate finds nothing to prune. Over by 150 tokens, the oldest read is
    marked and the request fits; the newest five are never touched."""
    msgs = _session(False, reads=12)
    mdl, f = _over_by_150(stub, msgs)
    default = _prune(stub, msgs, mdl)
    assert not default.acted and default.stopped_by == "nothing-to-prune"
    p = _prune(stub, msgs, mdl, f.projected - f.limit + 1)
    assert p.acted and p.fits and p.part_ids == ["t0"]
    assert not _assemble(stub, apply_prune(msgs, p), mdl).should_compact
    # asked for more: more of the oldest, never the five newest
    more = _prune(stub, msgs, mdl, 3_000)
    assert more.acted and len(more.part_ids) > 1 and not {f"t{i}" for i in range(7, 12)} & set(more.part_ids)
    assert more.part_ids == [f"t{i}" for i in range(len(more.part_ids))]


def test_a_request_over_by_the_last_answer_s_usage_alone_prunes_as_before(stub):
    """should_compact by the backward check alone (the last answer's usage reached the limit,
    projected is under it): projected - limit + 1 is negative, and Prune answers as without it."""
    msgs = _session(False)
    mdl = model(pb.PROVIDER_GEMINI, context=1_000_000, output=4096, id="gemini-2.5-flash")
    assert _prune(stub, msgs, mdl, -27_863) == _prune(stub, msgs, mdl)


def test_a_prune_after_a_count_that_decided_makes_the_next_step_fit(stub):
    """gpt-4o counts with o200k, under our figure: its count decides for the prefix it counted
    (the client passes back that body's cache_state), and a step over the limit by that count
    prunes. The marks change that prefix, so the step after reads the whole request's figure
    again, higher: a prune sized by the count's projection, the gates' own marks included, left
    it over the limit, and every such prune was followed by a compaction (a 32K trial session
    compacted 3 times at 65-72% of its window)."""
    msgs = _session(False, brief=300, reads=30)
    sent_then = msgs[:-2]  # the request the last answer counted: before that answer
    mdl = model(pb.PROVIDER_OPENAI, context=1_000_000, output=4096, id="gpt-4o")

    def assembled(messages, m, state=b""):
        return stub.Assemble(pb.AssembleRequest(
            conversation=pb.Conversation(session_id="s", messages=messages), model=m, tools=TOOLS, system=SYSTEM,
            previous_cache_state=state), timeout=10)

    def counted(usage):
        msgs[-2].usage.CopyFrom(pb.Usage(input=usage, output=30))
        return msgs

    ours = 10_000 / assembled(counted(10_000), mdl).figures.calibration_factor
    counted(round(0.8 * ours))  # o200k against cl100k's ratios: the count is under our figure
    f = assembled(msgs, mdl, assembled(sent_then, mdl).cache_state).figures
    assert f.has_baseline and f.projected < f.decision.tokens
    mdl = model(pb.PROVIDER_OPENAI, context=f.projected - 300 + 4096, output=4096, id="gpt-4o")
    state = assembled(sent_then, mdl).cache_state
    before = assembled(msgs, mdl, state).figures
    assert before.should_compact and before.projected == f.projected and before.decision.tokens > before.limit
    r = _prune(stub, msgs, mdl, before.projected - before.limit + 1)
    assert r.acted and r.fits
    after = assembled(apply_prune(msgs, r), mdl, state).figures
    assert not after.should_compact and after.projected < after.limit, (after.projected, after.limit)
