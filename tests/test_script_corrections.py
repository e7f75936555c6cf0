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

from hypothesis import given, settings, strategies as st

from contextsvc import native, tokens
from contextsvc.deadline import NO_DEADLINE
from contextsvc.memo import PROFILES, Memo
from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES
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


def _corrections(elements: list, memo, earlier=None, same=None, profiles=None, counter=COUNTER) -> scripts.Corrections:
    profiles = profiles if profiles is not None else [native.json_profile(e) for e in elements]
    wide = [b - u for b, u in map(native.json_lengths, elements)]
    return scripts.corrections(profiles, lambda indices: [wide[i] for i in indices],
                               lambda indices: [native.json_text(elements[i]) for i in indices],
                               counter, memo, NO_DEADLINE, earlier, same)


def _as_lists(c: scripts.Corrections) -> tuple:
    return list(c.cal), list(c.dec), list(c.present)


_TEXT = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(first=st.lists(_TEXT, min_size=0, max_size=30), data=st.data(), memo_on=st.booleans())
def test_resumed_corrections_equal_those_worked_out_afresh(first, data, memo_on):
    """A list of elements, then the next step's: some elements given a new text, some profiled
    again with the same text (new tuples: checked again), the list cut and grown. The corrections
    resumed from the first list's equal those worked out for every element, and sums over any
    stretch equal adding each element's in turn."""
    memo = Memo(8 << 20) if memo_on else None
    before = [_element(t) for t in first]
    before_profiles = [native.json_profile(e) for e in before]
    earlier = _corrections(before, memo, profiles=before_profiles)
    keep = data.draw(st.integers(0, len(before)))
    after = before[:keep] + [_element(t) for t in data.draw(st.lists(_TEXT, max_size=8))]
    profiles = before_profiles[:keep] + [native.json_profile(e) for e in after[keep:]]
    for i in data.draw(st.lists(st.integers(0, max(0, keep - 1)), max_size=4)) if keep else ():
        if data.draw(st.booleans()):
            after[i] = _element(data.draw(_TEXT))
        profiles[i] = native.json_profile(after[i])
    same = list(map(operator.is_, profiles, before_profiles))
    resumed = _corrections(after, memo, earlier, same, profiles)
    afresh = _corrections(after, None, profiles=profiles)
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

    def counting(profiles, wide_at, texts_at, counter, memo, deadline, earlier=None, same=None):
        if earlier is not None and 1 in earlier.present:
            resumed["steps"] += 1
            resumed["changed corrected"] += any(earlier.present[i] for i, kept in enumerate(same) if not kept)
        return original(profiles, wide_at, texts_at, counter, memo, deadline, earlier, same)

    monkeypatch.setattr(scripts, "corrections", counting)
    for seed in range(3):
        on, off = edits._servicers()
        rng = random.Random(seed)
        session = ScriptSession(rng, session_id=f"scripts-{seed}")
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
