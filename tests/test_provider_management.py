"""The provider's own context management as an option (CompactionSettings.provider_managed): the
bodies configure it from our settings and pass the providers' own request types (the beta header
named), Measure says what the provider will clear, and should_compact waits for it only where it
keeps the request under the limit."""
from __future__ import annotations

import json
import random
import string


from contextsvc import assemble, config, conversation as m, provider_management
from contextsvc.v1 import context_pb2 as pb
from judges import judge_for

CFG = config.Config()
MCP = "github.create_issue"  # an MCP tool name: written in the provider's alphabet
TOOLS = [m.ToolDefinition("bash", "Run a command", {"type": "object"}),
         m.ToolDefinition(MCP, "File an issue", {"type": "object"})]
WINDOW = 100_000


def words(n: int, seed: int) -> str:
    """Text that costs what real text costs (no run the calibration finds cheap)."""
    r = random.Random(seed)
    return " ".join("".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(2, 9))) for _ in range(n))


def session(outputs: int, size: int, usage: int = 0) -> m.Conversation:
    """`outputs` completed bash results of `size` words each, then a question."""
    msgs = [m.Message("u0", m.USER, [m.Part("q0", m.Text("Investigate the failures"))])]
    for i in range(outputs):
        msgs.append(m.Message(f"a{i}", m.ASSISTANT, [m.Part(f"t{i}", m.Tool(
            f"call_{i}", "bash", m.COMPLETED, {"command": f"pytest -k {i}"}, output=words(size, i)))],
            time_completed_ms=1, usage=m.Usage(input=usage) if usage and i == outputs - 1 else m.Usage()))
    msgs.append(m.Message("u1", m.USER, [m.Part("q1", m.Text("What next?"))]))
    return m.Conversation(msgs, "sess-native")


def settings(**kw) -> m.CompactionSettings:
    prune = m.PruneSettings(protected_results=2, minimum_tokens=5_000, protected_tools=(MCP, "never-defined"))
    return m.CompactionSettings(prune_settings=prune, **kw)


def run(conv, provider, **kw) -> assemble.Assembled:
    mdl = m.Model("claude-sonnet-4-5" if provider == m.ANTHROPIC else "gpt-5", provider,
                  m.ModelLimits(WINDOW, 0, 8_000))
    return assemble.assemble(assemble.AssembleInput(conv, mdl, TOOLS, m.SystemPrompt(soul="Agent."),
                                                    settings(**kw)), CFG)


def test_off_by_default():
    for provider in (m.ANTHROPIC, m.OPENAI_RESPONSES):
        r = run(session(3, 200), provider)
        assert "context_management" not in json.loads(r.body) and r.headers == {}
        assert r.measurement.provider_management == provider_management.Outlook()


def test_anthropic_edits_from_the_prune_settings():
    r = run(session(3, 200), m.ANTHROPIC, provider_managed=True)
    body, limit = json.loads(r.body), r.measurement.limit
    assert body["context_management"] == {"edits": [{
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": int(limit * 0.9)},
        "keep": {"type": "tool_uses", "value": 2},
        "clear_at_least": {"type": "input_tokens", "value": 5_000},
        "exclude_tools": [r.tool_names and next(k for k, v in r.tool_names.items() if v == MCP)],
    }]}
    assert r.headers == {"anthropic-beta": "context-management-2025-06-27"}
    assert judge_for(m.ANTHROPIC)(body, r.headers) == []
    assert len(r.body) == r.measurement.body_bytes
    assert r.measurement.provider_management.strategy == "clear_tool_uses_20250919"


def test_anthropic_judge_wants_the_beta_header():
    r = run(session(3, 200), m.ANTHROPIC, provider_managed=True)
    problems = judge_for(m.ANTHROPIC)(json.loads(r.body))
    assert [p.split(":")[0] for p in problems] == ["beta-header"]
    bad = json.loads(r.body)
    bad["context_management"]["edits"][0]["keep"] = {"type": "turns", "value": 2}
    assert any(p.startswith("schema: context_management.edits[0].keep") for p in judge_for(m.ANTHROPIC)(bad, r.headers))


def test_responses_compaction_threshold_from_the_limit():
    r = run(session(3, 200), m.OPENAI_RESPONSES, provider_managed=True)
    body = json.loads(r.body)
    assert body["context_management"] == [{"type": "compaction", "compact_threshold": int(r.measurement.limit * 0.9)}]
    assert r.headers == {} and judge_for(m.OPENAI_RESPONSES)(body) == []
    assert len(r.body) == r.measurement.body_bytes


def test_anthropic_clearing_holds_our_compaction_back_when_it_is_enough():
    conv = session(12, 4_500)
    ours = run(conv, m.ANTHROPIC).measurement
    assert ours.should_compact and ours.projected >= ours.limit
    native = run(conv, m.ANTHROPIC, provider_managed=True).measurement
    out = native.provider_management
    assert out.trigger < native.limit
    assert out.clears > 0 and native.projected - out.clears < native.limit
    assert out.relied_on and not native.should_compact


def test_anthropic_clearing_that_is_not_enough_leaves_the_decision_ours():
    # two big outputs, both kept (keep = 2): the provider clears nothing
    conv = session(2, 30_000)
    native = run(conv, m.ANTHROPIC, provider_managed=True).measurement
    assert native.projected >= native.limit
    assert native.provider_management.clears == 0
    assert native.should_compact and not native.provider_management.relied_on


def test_reported_overflow_is_never_left_to_the_provider():
    """The last request's reported usage reached the limit: the provider's management did not keep
    it under, so ours acts."""
    conv = session(12, 4_500, usage=WINDOW)
    native = run(conv, m.ANTHROPIC, provider_managed=True).measurement
    assert native.overflow and native.should_compact and not native.provider_management.relied_on


def test_responses_compaction_relied_on_only_while_the_request_fits():
    conv = session(12, 6_000)
    # limit == usable window: the request at the limit may not be accepted before it compacts
    full = run(conv, m.OPENAI_RESPONSES, provider_managed=True).measurement
    assert full.should_compact and not full.provider_management.relied_on
    # a limit below the window: between the two, the provider compacts past its threshold
    mid = run(session(12, 4_500), m.OPENAI_RESPONSES, provider_managed=True, threshold_percent=60).measurement
    assert mid.limit <= mid.projected < mid.usable
    assert mid.provider_management.relied_on and not mid.should_compact
    assert mid.provider_management.clears == 0  # opaque: nobody can size it beforehand


def test_measure_and_assemble_say_it_over_rpc(stub):
    conv = pb.Conversation(session_id="s", messages=[
        pb.Message(id="u0", role=pb.ROLE_USER, parts=[pb.Part(id="q", text=pb.TextPart(text="hi"))])])
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC, limits=pb.ModelLimits(context=WINDOW))
    tools = [pb.ToolDefinition(name="bash", description="Run", input_schema_json="{}")]
    on = pb.CompactionSettings(provider_managed=True)
    measured = stub.Measure(pb.MeasureRequest(conversation=conv, model=model, tools=tools, compaction=on))
    built = stub.Assemble(pb.AssembleRequest(conversation=conv, model=model, tools=tools, compaction=on))
    assert measured.provider_management.strategy == "clear_tool_uses_20250919"
    assert built.figures.provider_management == measured.provider_management
    assert dict(built.headers) == {"anthropic-beta": "context-management-2025-06-27"}
    assert judge_for(m.ANTHROPIC)(json.loads(built.body), dict(built.headers)) == []
    off = stub.Measure(pb.MeasureRequest(conversation=conv, model=model, tools=tools))
    assert not off.HasField("provider_management")


def grown(older: int, size: int, newer: int, big: int, usage: m.Usage) -> m.Conversation:
    """`older` bash results of `size` words, the last of them answered with `usage`, then `newer`
    results of `big` words sent since (the tail), then a question."""
    msgs = [m.Message("u0", m.USER, [m.Part("q0", m.Text("Investigate the failures"))])]
    for i in range(older + newer):
        msgs.append(m.Message(f"a{i}", m.ASSISTANT, [m.Part(f"t{i}", m.Tool(
            f"call_{i}", "bash", m.COMPLETED, {"command": f"pytest -k {i}"}, output=words(size if i < older else big, i)))],
            time_completed_ms=1, usage=usage if i == older - 1 else m.Usage()))
    msgs.append(m.Message("u1", m.USER, [m.Part("q1", m.Text("What next?"))]))
    return m.Conversation(msgs, "sess-native")


def test_what_the_provider_cleared_is_counted_as_sent():
    """The provider's usage counts the request after its own clearing; Usage.cleared says what it
    cleared. The calibration and the projection read the request as sent (input + cleared), so a
    clearing neither throws the calibration out of its bounds (back to the tokenizer prior,
    whose larger figure compacted where the provider's clearing was enough) nor lowers the
    projection; the backward overflow reads what the window held (input)."""
    whole_request = grown(6, 5_000, 2, 20_000, m.Usage())
    prefix = m.Conversation(whole_request.messages[:7] + whole_request.messages[-1:], "prefix")
    counted = run(prefix, m.ANTHROPIC).measurement.calibrated[0]  # the provider's count of the anchor's request
    cleared = counted * 4 // 5
    whole = run(grown(6, 5_000, 2, 20_000, m.Usage(input=counted)), m.ANTHROPIC, provider_managed=True).measurement
    after = run(grown(6, 5_000, 2, 20_000, m.Usage(input=counted - cleared, cleared=cleared)), m.ANTHROPIC,
                provider_managed=True).measurement
    assert whole.calibration_factor and after.calibration_factor == whole.calibration_factor
    assert (after.projected, after.reported, after.decision) == (whole.projected, whole.reported, whole.decision)
    assert after.projected >= after.limit and after.provider_management.relied_on and not after.should_compact
    # the window held input: a request the clearing kept under the limit is no overflow
    conv = session(12, 4_500)
    conv.messages[-2].usage = m.Usage(input=WINDOW // 2, cleared=WINDOW)
    assert not run(conv, m.ANTHROPIC, provider_managed=True).measurement.overflow
    conv.messages[-2].usage = m.Usage(input=WINDOW // 2 + WINDOW)
    assert run(conv, m.ANTHROPIC, provider_managed=True).measurement.overflow
