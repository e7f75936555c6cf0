"""Script corrections (step.scripts) held per element and resumed from the session's previous
step: the same corrections, and the same answers, as working them out afresh for every element.

A step takes the corrections of the elements whose profile is the very tuple its previous step
held and checks only the others (the changed, the new). The tests hold that to the corrections
of every element worked out from nothing: on generated lists of elements in other scripts, edited
in place, cut and grown; and over whole sessions in Greek, Russian, Hindi and emoji, grown and
edited between steps, answered by a servicer with the memo and one without.
"""
from __future__ import annotations

import operator
import random

import pytest
from hypothesis import given, settings, strategies as st

from contextsvc import config, encodings, native, tokens
from contextsvc.deadline import NO_DEADLINE
from contextsvc.memo import PROFILES, Memo
from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES
from contextsvc.rpc.servicer import ContextService
from contextsvc.step import scripts
from contextsvc.v1 import context_pb2 as pb

import test_memo_edits as edits

# sentences an agent reads in files, logs and user messages; the first ones are corrected, the
# last ones (ASCII, CJK, one emoji in a long English line) are not
SENTENCES = (
    "Σφάλμα κατά τη σύνδεση με τη βάση δεδομένων: έληξε ο χρόνος αναμονής.",
    "Ошибка при подключении к базе данных: превышено время ожидания блокировки.",
    "डेटाबेस से कनेक्ट करते समय त्रुटि: प्रतीक्षा समय समाप्त हो गया।",
    "Wystąpił błąd podczas łączenia z bazą danych: przekroczono limit czasu.",
    "Deployed ✅ tests 🧪 passing 🚀 bug 🐛 fixed 🔥 release 📦 shipped 🎉",
    "The parser fails on nested input, so we read the file again and fix the import.",
    "数据库连接错误：等待行锁超时，请稍后重试。",
    "We read src/app/main.py again, ran pytest on tests/test_main.py and fixed the import error 😀",
)
COUNTER = tokens.ExactCounters("cl100k_base").for_model("gpt-4o")[0]  # o200k, the model's own


def _element(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _corrections(elements: list, memo, earlier=None, same=None, profiles=None, counter=COUNTER,
                 own=False) -> scripts.Corrections:
    profiles = profiles if profiles is not None else [native.json_profile(e) for e in elements]
    wide = [b - u for b, u in map(native.json_lengths, elements)]
    return scripts.corrections(profiles, lambda indices: [wide[i] for i in indices],
                               lambda indices: [native.json_text(elements[i]) for i in indices],
                               counter, memo, NO_DEADLINE, earlier, same, own)


def _as_lists(c: scripts.Corrections) -> tuple:
    return list(c.cal), list(c.dec), list(c.present)


_TEXT = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(first=st.lists(_TEXT, min_size=0, max_size=30), data=st.data(), memo_on=st.booleans(), own=st.booleans())
def test_resumed_corrections_equal_those_worked_out_afresh(first, data, memo_on, own):
    """A list of elements, then the next step's: some elements given a new text, some profiled
    again with the same text (new tuples: checked again), the list cut and grown. The corrections
    resumed from the first list's equal those worked out for every element, and sums over any
    stretch equal adding each element's in turn; counted with a proxy or the model's own
    tokenizer (own: CJK elements counted too, corrections that take off)."""
    memo = Memo(8 << 20) if memo_on else None
    before = [_element(t) for t in first]
    before_profiles = [native.json_profile(e) for e in before]
    earlier = _corrections(before, memo, profiles=before_profiles, own=own)
    keep = data.draw(st.integers(0, len(before)))
    after = before[:keep] + [_element(t) for t in data.draw(st.lists(_TEXT, max_size=8))]
    profiles = before_profiles[:keep] + [native.json_profile(e) for e in after[keep:]]
    for i in data.draw(st.lists(st.integers(0, max(0, keep - 1)), max_size=4)) if keep else ():
        if data.draw(st.booleans()):
            after[i] = _element(data.draw(_TEXT))
        profiles[i] = native.json_profile(after[i])
    same = list(map(operator.is_, profiles, before_profiles))
    resumed = _corrections(after, memo, earlier, same, profiles, own=own)
    afresh = _corrections(after, None, profiles=profiles, own=own)
    assert _as_lists(resumed) == _as_lists(afresh)
    start = data.draw(st.integers(0, len(after)))
    end = data.draw(st.integers(start, len(after)))
    pair = (data.draw(st.floats(0, 1e6)), data.draw(st.floats(0, 1e6)))
    one_by_one = list(pair)
    for i in range(start, end):
        if afresh.present[i]:
            one_by_one = [one_by_one[0] + afresh.cal[i], one_by_one[1] + afresh.dec[i]]
    assert resumed.added(pair, start, end) == tuple(one_by_one)
    assert resumed.calibrated(start, end) == sum(afresh.cal[start:end])


def test_corrections_are_taken_afresh_for_another_encoding():
    """Corrections resumed under another encoding are not taken: they are what another
    tokenizer counted."""
    elements = [_element(SENTENCES[0] * 3), _element(SENTENCES[1] * 3)]
    cl100k = tokens.ExactCounters("cl100k_base").for_model("claude-sonnet-4-5")[0]

    def corrected(counter, earlier=None):
        return _corrections(elements, None, earlier, [True] * len(elements), counter=counter)

    assert cl100k.encoding_name != COUNTER.encoding_name
    other = corrected(cl100k)
    assert _as_lists(corrected(COUNTER, other)) == _as_lists(corrected(COUNTER))
    assert _as_lists(other) != _as_lists(corrected(COUNTER))


def test_with_the_model_s_own_tokenizer_cjk_and_other_scripts_count_as_their_exact_count():
    """Counted with the model's own tokenizer (o200k for gpt-4o), an element of Korean, Chinese
    or Greek has its exact count as its calibrated figure, and that count with its own margins as
    its decision figure: less than before where cl100k's CJK ratios read high; with a proxy, CJK
    is not counted and a correction never takes off; the two are never taken for each other."""
    korean = "데이터베이스 연결 오류: 잠금 대기 시간이 초과되었습니다. 나중에 다시 시도하십시오. " * 20
    chinese = SENTENCES[6] * 20
    english = SENTENCES[5] * 20
    elements = [_element(t) for t in (korean, chinese, SENTENCES[0] * 20, english)]
    profiles = [native.json_profile(e) for e in elements]
    own = _corrections(elements, None, own=True)
    proxy = _corrections(elements, None)
    for i, e in enumerate(elements[:3]):
        exact = COUNTER.count(native.json_text(e))
        cal, decide = tokens.calibrated_pair(profiles[i])
        assert own.present[i] and cal + own.cal[i] == exact, i
        assert abs(decide + own.dec[i] - exact * decide / cal) < 1e-6 and decide > cal, i
    assert own.cal[0] < 0 and own.dec[0] < 0 and own.dec[1] < 0  # cl100k's CJK ratios read high
    assert not own.present[3] and not proxy.present[3]  # English: the ratios stand
    assert not proxy.present[0] and not proxy.present[1] and proxy.present[2]
    assert min(proxy.cal) >= 0 and min(proxy.dec) >= 0
    assert _as_lists(_corrections(elements, None, proxy, [True] * 4, own=True)) == _as_lists(own)
    assert _as_lists(_corrections(elements, None, own, [True] * 4)) == _as_lists(proxy)


@pytest.mark.parametrize("model_id, provider, text", [
    ("gpt-5", pb.PROVIDER_OPENAI_RESPONSES, "데이터베이스 연결 오류: 구성 파일의 포트 설정을 확인하십시오. 서버가 응답하지 않습니다. " * 560),
    ("gpt-4o", pb.PROVIDER_OPENAI, "数据库连接错误：等待行锁超时，请稍后重试。配置文件中的端口设置不正确。" * 500)])
def test_a_session_in_korean_or_chinese_is_not_compacted_at_half_its_window(model_id, provider, text):
    """A gpt-5 session whose tool output was Korean asked to compact at 54% of its window by the
    model's own count (its decision figure 2.06x it, 1.29x for Chinese on gpt-4o), and the
    provider's count of the steps that followed could not bring it down. Counted with the
    model's own tokenizer, the CJK elements are their exact count, with their margins in the
    decision figure: at least the body's o200k count (its keys and tool wrappers included), at
    most 1.1x it, step after step, never compacting."""
    o200k = encodings.get("o200k_base").encode_ordinary
    service = ContextService(config.Config())
    mdl = pb.Model(id=model_id, provider=provider, limits=pb.ModelLimits(context=32_000, output=8_000))
    tools = [pb.ToolDefinition(name="read", input_schema_json='{"type":"object"}')]
    messages = [pb.Message(id="u", role=pb.ROLE_USER, parts=[pb.Part(id="ut", text=pb.TextPart(text="로그를 읽어 주세요"))]),
                pb.Message(id="a", role=pb.ROLE_ASSISTANT, time_completed_ms=1, model_id=model_id, usage=pb.Usage(
                    input=400, output=30), parts=[pb.Part(id="ac", tool=pb.ToolPart(call_id="c1", tool="read", state=pb.ToolState(
                        status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output=text)))])]
    for step in range(3):
        r = service.Assemble(pb.AssembleRequest(conversation=pb.Conversation(messages=messages), model=mdl,
                                                tools=tools), None)
        counted = len(o200k(r.body.decode()))
        assert counted <= r.figures.decision.tokens <= 1.1 * counted, (step, counted, r.figures.decision)
        assert counted < 0.6 * r.figures.limit and not r.figures.should_compact, step
        # the provider answers with its count; the session goes on
        messages += [pb.Message(id=f"a{step}", role=pb.ROLE_ASSISTANT, time_completed_ms=2 + step, model_id=model_id,
                                usage=pb.Usage(input=counted, output=20),
                                parts=[pb.Part(id=f"a{step}t", text=pb.TextPart(text="계속 확인하겠습니다."))]),
                     pb.Message(id=f"u{step}", role=pb.ROLE_USER, parts=[pb.Part(id=f"u{step}t", text=pb.TextPart(text="계속"))])]


def test_a_first_request_in_korean_with_many_tools_that_passes_the_check_fits_the_window():
    """No answer to project from, 40 tools, one pasted Korean log: sized at its elements' bare
    o200k counts, a body the check let through was over the window by the request's keys and the
    tools' wrappers (27,887 projected, 28,113 counted, 32,209 with its output cap). Whatever its
    length, a request that does not ask to compact fits with its output cap."""
    o200k = encodings.get("o200k_base").encode_ordinary
    service = ContextService(config.Config())
    mdl = pb.Model(id="gpt-4o", provider=pb.PROVIDER_OPENAI, limits=pb.ModelLimits(context=32_000, output=4_096))
    tools = [pb.ToolDefinition(name=f"tool_{k}", description=f"Tool number {k} of the agent",
                               input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')
             for k in range(40)]
    line = "2026-12-06 10:00:01 오류: 데이터베이스 연결이 거부되었습니다. 다시 시도하는 중입니다.\n"
    near = 0
    for lines in range(800, 1400, 25):
        conv = pb.Conversation(messages=[pb.Message(id="u", role=pb.ROLE_USER, parts=[
            pb.Part(id="ut", text=pb.TextPart(text="이 로그를 보세요:\n" + line * lines))])])
        r = service.Assemble(pb.AssembleRequest(conversation=conv, model=mdl, tools=tools), None)
        counted = len(o200k(r.body.decode()))
        near += abs(counted - r.figures.limit) < 2_000
        if not r.figures.should_compact:
            assert counted + r.output_tokens <= 32_000, (lines, counted, r.figures.projected, r.figures.limit)
    assert near >= 3  # the sizes cross the limit


class ScriptSession(edits.Session):
    """test_memo_edits' session whose user and assistant texts are in other scripts, its requests
    without editor context (a block injected into the last user message at every step, not
    persisted by this client, leaves that message without a digest: no step would resume)."""

    def words(self, k: int) -> str:
        return " ".join(self.rng.choice(SENTENCES) for _ in range(max(1, k // 8)))

    def request(self, method: str) -> bytes:
        request = edits.METHODS[method].FromString(super().request(method))
        request.ClearField("editor")
        return request.SerializeToString()


EDITS = ("complete_running", "edit_user", "edit_user", "mark_pruned", "change_usage", "drop_middle")


def test_sessions_in_other_scripts_are_answered_the_same_with_and_without_the_memo(monkeypatch):
    """Sessions in other scripts, grown a message a step past the prefix resumption's message
    count and edited now and then between steps (a tool call completes, the user edits a message,
    outputs are marked pruned, usage changes, a message is dropped): every Measure and Assemble
    with the memo equals the one without it, and steps did resume corrections from their
    previous step's, elements with a correction among those changed since."""
    resumed = {"steps": 0, "changed corrected": 0}
    original = scripts.corrections

    def counting(profiles, wide_at, texts_at, counter, memo, deadline, earlier=None, same=None, own=False):
        if earlier is not None and 1 in earlier.present:
            resumed["steps"] += 1
            resumed["changed corrected"] += any(earlier.present[i] for i, kept in enumerate(same) if not kept)
        return original(profiles, wide_at, texts_at, counter, memo, deadline, earlier, same, own)

    monkeypatch.setattr(scripts, "corrections", counting)
    for seed in range(3):
        on, off = edits._servicers()
        rng = random.Random(seed)
        session = ScriptSession(rng, session_id=f"scripts-{seed}")
        session.model_at = seed  # Claude (a proxy's corrections), gpt-4o and gpt-5 (their own tokenizer's)
        for _ in range(PREFIX_FROM_MESSAGES + 8):
            session.grow()
        for step in range(20):
            session.grow()
            if rng.random() < 0.7:
                getattr(session, rng.choice(EDITS))()
            for method in ("Measure", "Assemble"):
                data = session.request(method)
                got = edits._answer(on, method, data)
                assert got == edits._answer(off, method, data), f"seed {seed}, step {step}, {method}"
                if method == "Assemble" and isinstance(got, bytes):
                    session.cache_state = pb.AssembleResponse.FromString(got).cache_state
        assert any(key[0] == PROFILES and 1 in on.memo.get(key).corrections.present for key in on.memo.keys())
    assert resumed["steps"] >= 20 and resumed["changed corrected"] >= 1, resumed
