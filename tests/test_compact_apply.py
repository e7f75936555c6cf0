"""Property: apply any CompactResponse, then Measure: the decision figure equals tokens_after.

For generated conversations (UUID ids, tool outputs of many sizes, screenshots, a second
compaction on top of a first, call ids numbered afresh at every step as some agents do, no tool
definitions though the history holds calls), windows and settings, over a real server: Compact, apply its edits
with contextsvc_client.apply_compaction (with and without dropping the omittable messages), and
Measure the result with the same model, tools, system and settings. decision.tokens must equal
tokens_after, and under_limit must be true exactly when tokens_after < limit.
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, event, given, settings, strategies as st

from contextsvc_client import apply_assemble, apply_compaction
from contextsvc.v1 import context_pb2 as pb

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8ff"
                    "ff3f0005fe02fea7d6a4100000000049454e44ae426082")
TOOLS = [pb.ToolDefinition(name="bash", description="Run a command",
                           input_schema_json=json.dumps({"type": "object", "properties": {"command": {"type": "string"}}}))]
SYSTEM = pb.SystemPrompt(soul="You are a coding agent.")
WORDS = ["def parse(self, token):", "return None", "FAILED tests/test_app.py::test_x", "上下文窗口压缩",
         '{"id": 17, "ok": true}', "0001a2f0: 4865 6c6c 6f20", "src/app/models.py:112:", "assert x == 2"]


@st.composite
def conversations(draw):
    ids = iter(draw(st.lists(st.uuids(), min_size=400, max_size=400, unique=True)))
    nid = lambda: str(next(ids))  # noqa: E731
    messages = []
    reuse = draw(st.booleans())  # call_0, call_1, ... at every step (step.call_ids writes them apart)
    for t in range(draw(st.integers(1, 6))):
        parts = [pb.Part(id=nid(), text=pb.TextPart(text=f"Turn {t}: fix src/mod_{t}.py " + draw(st.sampled_from(WORDS))))]
        if draw(st.booleans()) and draw(st.booleans()):
            parts.append(pb.Part(id=nid(), file=pb.FilePart(mime="image/png", filename="s.png", data=PNG)))
        messages.append(pb.Message(id=nid(), role=pb.ROLE_USER, parts=parts))
        for _ in range(draw(st.integers(0, 5))):
            tools = []
            for k in range(draw(st.integers(0, 3))):
                size = draw(st.integers(0, 40_000))
                line = draw(st.sampled_from(WORDS))
                out = (line + "\n") * (size // (len(line) + 1))
                atts = [pb.FilePart(mime="image/png", filename="shot.png", data=PNG)] if draw(st.integers(0, 9)) == 0 else []
                call_id = f"call_{k}" if reuse else f"call_{nid()[:8]}"
                tools.append(pb.Part(id=nid(), tool=pb.ToolPart(call_id=call_id, tool="bash", state=pb.ToolState(
                    status=pb.TOOL_STATUS_COMPLETED, input_json='{"command": "pytest"}', output=out, attachments=atts))))
            reported = draw(st.integers(0, 120_000))
            messages.append(pb.Message(
                id=nid(), role=pb.ROLE_ASSISTANT, time_completed_ms=1, usage=pb.Usage(input=reported, output=50),
                parts=[pb.Part(id=nid(), step_start=pb.StepStartPart()),
                       pb.Part(id=nid(), text=pb.TextPart(text="Working on it. " + draw(st.sampled_from(WORDS)))),
                       *tools]))
    return messages, nid


def _settings(draw_tail, draw_preserve, draw_threshold):
    s = pb.CompactionSettings()
    if draw_tail is not None:
        s.tail_turns = draw_tail
    if draw_preserve is not None:
        s.preserve_recent_tokens = draw_preserve
    if draw_threshold is not None:
        s.threshold_percent = draw_threshold
    return s


def _check(stub, messages, model, comp, overflow, auto, attempts, drop, tools=TOOLS):
    r = stub.Compact(pb.CompactRequest(conversation=pb.Conversation(session_id="prop", messages=messages),
                                       model=model, tools=tools, system=SYSTEM, compaction=comp,
                                       overflow=overflow, auto=auto, attempts=attempts), timeout=30)
    after = apply_compaction(messages, r, drop_omittable=drop)
    m = stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(session_id="prop", messages=after),
                                       model=model, tools=tools, system=SYSTEM, compaction=comp), timeout=30)
    outcome = pb.CompactOutcome.Name(r.outcome)
    event(f"{outcome}, overflow={overflow}, {'edits' if r.edits else 'no edits'}")
    assert m.decision.tokens == r.tokens_after, (outcome, r.tokens_before, r.tokens_after, m.decision.tokens,
                                                 [e.WhichOneof("edit") for e in r.edits], list(r.omittable_ids), drop)
    assert m.decision.method == r.decision_method
    if r.under_limit:
        assert r.tokens_after < r.limit, (outcome, r.tokens_after, r.limit)
    if r.outcome in (pb.COMPACT_OUTCOME_COMPACTED, pb.COMPACT_OUTCOME_INSUFFICIENT):
        assert r.under_limit == (r.tokens_after < r.limit), (outcome, r.tokens_after, r.limit)
        assert (r.outcome == pb.COMPACT_OUTCOME_COMPACTED) == r.under_limit, (outcome, r.under_limit)
    return r, after


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(convo=conversations(),
       window=st.sampled_from([(16_000, 4_000), (32_000, 4_096), (64_000, 8_000), (200_000, 8_192)]),
       provider=st.sampled_from([pb.PROVIDER_ANTHROPIC, pb.PROVIDER_OPENAI, pb.PROVIDER_BEDROCK]),
       tail=st.one_of(st.none(), st.integers(0, 3)),
       preserve=st.one_of(st.none(), st.integers(0, 20_000)),
       threshold=st.one_of(st.none(), st.floats(20, 100)),
       overflow=st.booleans(), auto=st.booleans(), attempts=st.integers(0, 3), drop=st.booleans(),
       more=st.integers(0, 4), tools=st.sampled_from([TOOLS, []]))
def test_measure_after_applying_equals_tokens_after(stub, convo, window, provider, tail, preserve, threshold,
                                                     overflow, auto, attempts, drop, more, tools):
    messages, nid = convo
    model = pb.Model(id="claude-sonnet-4-5" if provider != pb.PROVIDER_OPENAI else "gpt-4o", provider=provider,
                     limits=pb.ModelLimits(context=window[0], output=window[1]))
    comp = _settings(tail, preserve, threshold)
    r, after = _check(stub, messages, model, comp, overflow, auto, attempts, drop, tools)
    if not r.edits:
        return
    # a second compaction over the first: the conversation grows by a few steps, then compacts again
    last_user = next(m.id for m in reversed(after) if m.role == pb.ROLE_USER)
    for i in range(more):
        after.append(pb.Message(id=nid(), role=pb.ROLE_ASSISTANT, time_completed_ms=1, parent_id=last_user,
                                usage=pb.Usage(input=1000 * (i + 1), output=10), parts=[
                                    pb.Part(id=nid(), tool=pb.ToolPart(call_id=f"c_{nid()[:8]}", tool="bash", state=pb.ToolState(
                                        status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output="log line\n" * 3000)))]))
    _check(stub, after, model, comp, False, True, 0, drop, tools)


EDITOR = pb.EditorContext(current_time="2026-12-04T10:00:00+00:00", working_directory="/work/app",
                          active_file="src/app.py", visible_files=["src/app.py", "tests/test_app.py"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(convo=conversations(),
       window=st.sampled_from([(32_000, 4_096), (200_000, 8_192)]),
       provider=st.sampled_from([pb.PROVIDER_ANTHROPIC, pb.PROVIDER_OPENAI, pb.PROVIDER_BEDROCK]),
       overflow=st.booleans(), auto=st.booleans())
def test_the_next_assemble_with_an_editor_equals_tokens_after(stub, convo, window, provider, overflow, auto):
    """The README's loop: every Assemble's parts stored (apply_assemble), Compact, apply, then the
    next Assemble with the same editor: its decision figure is tokens_after. The continue prompt
    a compaction adds gets no environment block (it is the service's message, not the
    person's), so the next request is no bigger than the compaction counted."""
    messages, _ = convo
    model = pb.Model(id="claude-sonnet-4-5" if provider != pb.PROVIDER_OPENAI else "gpt-4o", provider=provider,
                     limits=pb.ModelLimits(context=window[0], output=window[1]))
    ask = dict(model=model, tools=TOOLS, system=SYSTEM, compaction=pb.CompactionSettings())
    convo_of = lambda msgs: pb.Conversation(session_id="prop", messages=msgs)  # noqa: E731
    a = stub.Assemble(pb.AssembleRequest(conversation=convo_of(messages), editor=EDITOR, **ask), timeout=30)
    messages = apply_assemble(messages, a, now_ms=2)
    r = stub.Compact(pb.CompactRequest(conversation=convo_of(messages), overflow=overflow, auto=auto, **ask),
                     timeout=30)
    after = apply_compaction(messages, r, drop_omittable=True)
    b = stub.Assemble(pb.AssembleRequest(conversation=convo_of(after), editor=EDITOR, **ask), timeout=30)
    event(f"{pb.CompactOutcome.Name(r.outcome)}, continue={any(e.WhichOneof('edit') == 'insert' for e in r.edits)}")
    assert b.figures.decision.tokens == r.tokens_after, (pb.CompactOutcome.Name(r.outcome), list(b.injected))
