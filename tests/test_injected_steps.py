"""Steps whose last user message gets an injection made again at every step (a plan reminder, an
environment block the client passes back): the copy sent is named by a digest of the original's
and the parts added (memo.injected_digest), so a session in such a loop keeps what each step
built and the next resumes after it, as a session without injections does; answers unchanged.

Injections the client stores (a block made at this step, a mid-run wrapping: persist) come back
in the message itself, so their copy is named by no digest: the step that made them keeps
nothing, and the next resumes from the step before (the previous step's entry stays).
"""
from __future__ import annotations

import random

import pytest

from contextsvc import conversation as m
from contextsvc.memo import PREFIX, injected_digest
from contextsvc.step.environment import Editor
from contextsvc.step.inject import Turn, inject
from contextsvc.v1 import context_pb2 as pb
from helpers.convo import assistant, model, text, tool, user
from helpers.steps import Context, memo_config
from contextsvc import config
from contextsvc.rpc import conversion, servicer
from contextsvc_client import apply_persist

BLOCK = "<environment_details>\n# Current Time\n2026-12-06T10:00:00+00:00\n</environment_details>"
REMINDER = "Plan mode is active: read and plan, do not edit files."
DIGEST = b"\x01" * 16


def _history(mid_run: bool = False) -> list:
    """A user message, then a finished answer; a user message after it when mid_run (step > 1)."""
    asked = m.Message("u1", m.USER, [m.Part("u1p", m.Text("Plan the change."))])
    answer = m.Message("a1", m.ASSISTANT, [m.Part("a1p", m.Text("Reading."))], time_completed_ms=1)
    out = [asked, answer] + ([m.Message("u2", m.USER, [m.Part("u2p", m.Text("Also the tests."))])] if mid_run else [])
    for msg in out:
        msg.digest = bytes([len(msg.id)]) * 16
    return out


@pytest.mark.parametrize("turn, named", [
    (Turn(plan_reminder=REMINDER), True),
    (Turn(editor=Editor(environment_details=BLOCK)), True),
    (Turn(editor=Editor(environment_details=BLOCK), plan_reminder=REMINDER), True),
    (Turn(editor=Editor(current_time="2026-12-06T10:00:00+00:00")), False),  # a block made now: stored
    (Turn(editor=Editor(current_time="2026-12-06T10:00:00+00:00"), plan_reminder=REMINDER), False),
], ids=["reminder", "block passed back", "both", "block made", "block made and reminder"])
def test_an_injected_copy_is_named_when_the_next_step_makes_it_again(turn, named):
    """The copy of the last user message is named by injected_digest of the original's and the
    parts added when every injection is one the next step makes again; else by none."""
    messages = _history()
    sent = inject(messages, turn).messages
    copy = sent[0]
    assert copy is not messages[0] and len(copy.parts) > 1
    assert copy.digest == (injected_digest(messages[0].digest, copy.parts[1:]) if named else b"")
    if named:  # the same injections, the same digest: the next step's keys meet this one's
        assert inject(_history(), turn).messages[0].digest == copy.digest


def test_an_injected_last_message_is_named_by_none():
    """Injections into a user message that is the last one go to a newer one once the session
    moves on (the next step sends this one otherwise): its copy is named by no digest, so the step
    keeps what it built before it."""
    messages = _history(mid_run=True)
    for turn in (Turn(plan_reminder=REMINDER), Turn(editor=Editor(environment_details=BLOCK))):
        copy = inject(messages, turn).messages[2]
        assert copy is not messages[2] and len(copy.parts) == 2 and copy.digest == b""


def test_an_injected_copy_is_named_by_what_was_added():
    """Another reminder, another block, or another original: another digest."""
    messages = _history()
    named = {inject(messages, Turn(plan_reminder=r)).messages[0].digest for r in (REMINDER, REMINDER + ".")}
    named.add(inject(messages, Turn(editor=Editor(environment_details=BLOCK + " "))).messages[0].digest)
    messages[0].digest = DIGEST
    named.add(inject(messages, Turn(plan_reminder=REMINDER)).messages[0].digest)
    assert len(named) == 4 and b"" not in named


def test_a_mid_run_message_is_wrapped_in_a_copy_named_by_none_and_a_stored_wrapping_is_kept():
    """A mid-run user message wrapped at this step comes back stored wrapped (persist): its copy
    is named by no digest. Stored wrapped, it is sent as it came, with its digest."""
    messages = _history(mid_run=True)
    wrapped = inject(messages, Turn(step=2, plan_reminder=REMINDER))
    assert "mid_run_reminder" in wrapped.injected and wrapped.messages[2].digest == b""
    stored = [*messages[:2], m.Message("u2", m.USER, [p.part for p in wrapped.persist])]
    stored[2].digest = DIGEST
    again = inject(stored, Turn(step=3))
    assert again.messages[2] is stored[2] and "mid_run_reminder" not in again.injected


def _session(rng: random.Random, steps: int, chat: bool, stored: bool):
    """A session's requests after 48 answers, one more each step: in a plan-mode tool loop (one
    user message, then an answer with a tool call per step), or with a user message after each
    answer (chat). Each request but the last four has the plan reminder; the environment block
    is passed back, or (stored) made by the service and stored by the client, which sends each
    request only once it has its answer: a generator to send() each Assemble's answer to."""
    messages = [user("u0", text("u0p", "Plan the refactor of the parser."))]
    for i in range(48 + steps):
        out = "\n".join(f"line {k}: def handle_{i}_{k}(request): return ROUTES[request.path]"
                        for k in range(rng.randint(2, 40)))
        messages.append(assistant(f"a{i}", text(f"a{i}t", f"Reading module {i}."),
                                  tool(f"a{i}x", f"c{i}", "read", {"path": f"src/m{i}.py"}, out),
                                  usage=pb.Usage(input=2_000 + 300 * i, output=120)))
        if chat:
            messages.append(user(f"u{i + 1}", text(f"u{i + 1}p", f"Now module {i + 1}.")))
        if i >= 48:
            editor = pb.EditorContext(current_time="2026-12-06T10:00:00+00:00") if stored else \
                pb.EditorContext(environment_details=BLOCK)
            answer = yield pb.AssembleRequest(
                conversation=pb.Conversation(session_id="plan", messages=messages), model=model(),
                plan_reminder=REMINDER if i < 48 + steps - 4 else "", editor=editor)
            if stored:
                messages = apply_persist(messages, answer)


@pytest.mark.parametrize("chat", [False, True], ids=["tool loop", "a user message every step"])
@pytest.mark.parametrize("stored", [False, True], ids=["block passed back", "block stored"])
def test_a_plan_mode_session_resumes_each_step_and_answers_as_without_the_memo(chat, stored):
    """Each step finds what the step before it kept: past the injected user message once answers
    follow it, up to it while it is the last message; it puts together only the messages it adds.
    Every body and figure equals those built without the memo, the steps after plan mode ends
    too (the user message with the block alone)."""
    on = servicer.ContextService(config.Config())
    off = servicer.ContextService(memo_config(0))
    found = []  # per lookup of a lowering kept for the session: (messages it holds, of those keyed)
    longest = on.memo.longest

    def recording(candidates):
        k, value = longest(candidates)
        if candidates and candidates[0][1][0] == PREFIX:
            found.append((k if value is not None else 0, candidates[0][0]))
        return k, value

    on.memo.longest = recording
    session, state, answer = _session(random.Random(3), 12, chat, stored), b"", None
    while True:
        try:
            request = session.send(answer)
        except StopIteration:
            break
        request.previous_cache_state = state
        data = request.SerializeToString()
        got = on.serialized("Assemble")(conversion.parser(pb.AssembleRequest, on.memo)(data), Context())
        assert got == off.serialized("Assemble")(conversion.parser(pb.AssembleRequest, off.memo)(data), Context())
        answer = pb.AssembleResponse.FromString(got)
        state = answer.cache_state
    # all but the first two steps and the first out of plan mode (it sends the user message
    # without the reminder: it starts again before it) resume within three messages of the end
    resumed = [held >= keyed - 3 for held, keyed in found]
    assert len(found) >= 11 and all(keyed >= 48 for _, keyed in found) and sum(resumed) >= len(found) - 3, found
