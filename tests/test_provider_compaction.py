"""A provider's opaque compaction item (ProviderCompactionPart): sent back verbatim to the provider
that wrote it, dropped for any other, counted in every figure, never read by Compact, its fields
checked. Bodies judged by the providers' own request types."""
from __future__ import annotations

import base64
import json

import pytest

from contextsvc import assemble, config, conversation as m, measure, validate
from contextsvc.compact import run as cmod, serialize
from contextsvc.errors import BadInput
from contextsvc.lowering.registry import PROVIDERS
from judges import judge_for

CFG = config.Config()
RESPONSES = m.OPENAI_RESPONSES
# an item as OpenAI returns it: base64 of ciphertext, tens of KB for a long session
ENCRYPTED = base64.b64encode(bytes(range(256)) * 120).decode()
TOOLS = [m.ToolDefinition("bash", "Run a command", {"type": "object", "properties": {"command": {"type": "string"}}})]


def conversation(item=None, role=m.ASSISTANT) -> m.Conversation:
    compaction = [m.Part("c", item or m.ProviderCompaction(RESPONSES, ENCRYPTED))]
    reply = [m.Part("b", m.StepStart()), m.Part("d", m.Text("Parser fixed.")),
             m.Part("t", m.Tool("call_1", "bash", m.COMPLETED, {"command": "pytest"}, output="2 passed"))]
    user = [m.Part("a", m.Text("Fix the parser"))]
    if role == m.ASSISTANT:
        reply[1:1] = compaction
    else:
        user += compaction
    return m.Conversation(session_id="s1", messages=[
        m.Message("u1", m.USER, user),
        m.Message("a1", m.ASSISTANT, reply, time_completed_ms=5, provider_id=RESPONSES, model_id="gpt-5"),
        m.Message("u2", m.USER, [m.Part("e", m.Text("Now the tests"))]),
    ])


def without_item() -> m.Conversation:
    conv = conversation()
    a1 = conv.messages[1]
    a1.parts = [p for p in a1.parts if not isinstance(p.content, m.ProviderCompaction)]
    return conv


def model(provider: str) -> m.Model:
    return m.Model("gpt-5", provider, m.ModelLimits(400_000, 0, 32_000))


def assembled(conv: m.Conversation, provider: str) -> assemble.Assembled:
    return assemble.assemble(assemble.AssembleInput(conv, model(provider), TOOLS, m.SystemPrompt(soul="Agent."),
                                                    m.CompactionSettings()), CFG)


def measured(conv: m.Conversation, provider: str):
    return measure.measure(measure.MeasureInput(conv, model(provider), TOOLS, m.SystemPrompt(soul="Agent."),
                                                m.CompactionSettings()), CFG)


def test_sent_verbatim_to_responses_in_place():
    body = json.loads(assembled(conversation(), RESPONSES).body)
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == ["developer", "user", "compaction", "assistant", "function_call", "function_call_output", "user"]
    assert body["input"][2] == {"type": "compaction", "encrypted_content": ENCRYPTED}
    assert judge_for(RESPONSES)(body) == []


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != RESPONSES])
def test_dropped_for_every_other_provider(provider):
    """No other provider can read it; the history it stands for is still in the conversation."""
    got = assembled(conversation(), provider).body
    assert ENCRYPTED.encode() not in got
    assert got == assembled(without_item(), provider).body
    assert judge_for(provider)(json.loads(got)) == []


def test_counted_in_every_figure_where_sent():
    """Its text is in the body: the bytes, the estimate and the decision figure carry it."""
    with_item, bare = measured(conversation(), RESPONSES), measured(without_item(), RESPONSES)
    assert with_item.body_bytes == len(assembled(conversation(), RESPONSES).body)
    assert with_item.body_bytes - bare.body_bytes >= len(ENCRYPTED)
    for name in ("estimate", "calibrated", "decision"):
        grown = getattr(with_item, name)[0] - getattr(bare, name)[0]
        assert grown >= len(ENCRYPTED) // 4, (name, grown)
    # where it is dropped it costs nothing
    assert measured(conversation(), m.ANTHROPIC).decision == measured(without_item(), m.ANTHROPIC).decision


def test_compact_never_reads_it_and_leaves_it_in_place():
    conv = conversation()
    conv.messages.append(m.Message("a2", m.ASSISTANT, [m.Part("f", m.Text("Tests pass."))], time_completed_ms=6))
    conv.messages.append(m.Message("u3", m.USER, [m.Part("g", m.Text("Ship it"))]))
    assert ENCRYPTED not in serialize.serialize(conv.messages, 10_000).text
    result = cmod.compact(cmod.CompactInput(conv, model(RESPONSES), compaction=m.CompactionSettings(tail_turns=0),
                                            now_ms=1000), CFG)
    assert "a1" in result.summarized_ids
    assert ENCRYPTED not in json.dumps([p.content.text for p in result.summary.parts if hasattr(p.content, "text")])
    # no edit touches the part: it stays in its stored message
    touched = {pid for e in result.edits for pid in getattr(e, "part_ids", ())} | \
              {getattr(e, "part_id", "") for e in result.edits}
    assert "c" not in touched


@pytest.mark.parametrize("item,role,field", [
    (m.ProviderCompaction("", ENCRYPTED), m.ASSISTANT, "parts[1].provider_compaction.provider_id"),
    (m.ProviderCompaction(RESPONSES, ""), m.ASSISTANT, "parts[1].provider_compaction.encrypted_content"),
    (m.ProviderCompaction(m.ANTHROPIC, ENCRYPTED), m.ASSISTANT, "parts[1].provider_compaction.provider_id"),
    (m.ProviderCompaction("no-such-provider", ENCRYPTED), m.ASSISTANT, "parts[1].provider_compaction.provider_id"),
    (m.ProviderCompaction(RESPONSES, ENCRYPTED), m.USER, "messages[0].parts[1].provider_compaction"),
])
def test_fields_checked(item, role, field):
    with pytest.raises(BadInput) as e:
        validate.conversation(conversation(item, role))
    assert field in e.value.field
