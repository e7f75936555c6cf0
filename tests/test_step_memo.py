"""The per-message memo of Prune, Compact's selection and the offline summarizer (memo.py).

Same answers with it on or off: random conversations grown step by step, each step sent to a
servicer with the memo (shared across the steps, as a server's is) and to one without, every
Prune reason and Compact compared byte for byte. Its memory stays within its bound, each entry
charged its real size.
"""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import importlib
import random
import sys
import threading
import tracemalloc

import pytest

from contextsvc import config, memo, native, conversation as m
from contextsvc.rpc import conversion, servicer
from contextsvc_client import apply_compaction
from contextsvc.compact import run as compact_run
from contextsvc.v1 import context_pb2 as pb
from helpers.convo import assistant, model, text, tool, user
from helpers.steps import Context, memo_config

WORDS = ("fix the parser in src/app/main.py and keep the public API stable; we must never break "
         "ParseError handling, I'll use load_config because the cause is in utils.read_file next "
         "then run pytest tests/test_main.py Error: failed to import").split()


def _words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _grow(rng, msgs, n):
    """One agent step: a user turn now and then, an assistant message with tools."""
    if rng.random() < 0.3 or not msgs:
        msgs.append(user(f"u{n}", text(f"u{n}p", _words(rng, rng.randint(3, 30)).capitalize() + ".")))
        return
    parts = [text(f"a{n}t", _words(rng, rng.randint(0, 25)))]
    for k in range(rng.randint(0, 3)):
        name = rng.choice(("read", "edit", "bash", "grep", "skill"))
        inp = {"command": _words(rng, 3)} if name == "bash" else {"path": f"src/f{rng.randint(0, 9)}.py"}
        status = rng.choice((pb.TOOL_STATUS_COMPLETED,) * 4 + (pb.TOOL_STATUS_ERROR, pb.TOOL_STATUS_RUNNING))
        p = tool(f"a{n}x{k}", f"c{n}_{k}", name, inp, "out line\n" * rng.randint(0, 400), status=status)
        if status == pb.TOOL_STATUS_ERROR:
            p.tool.state.error = "Traceback: " + _words(rng, 4)
        parts.append(p)
    msgs.append(assistant(f"a{n}", *parts, usage=pb.Usage(input=rng.randint(0, 50_000))))


def _same(a, b):
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


@pytest.mark.parametrize("seed", range(4))
def test_the_memo_changes_no_answer(seed, monkeypatch):
    monkeypatch.setattr(compact_run.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    rng = random.Random(seed)
    on_cfg, off_cfg = config.Config(), memo_config(0)
    # the converted-message cache on in both: the memos are the only difference
    with_memo, without = servicer.ContextService(on_cfg), servicer.ContextService(off_cfg)
    assert with_memo._memo is not None and without._memo is None
    msgs, ctx = [], Context()
    mdl = model(context=rng.choice((8_000, 30_000, 200_000)))
    for n in range(60):
        _grow(rng, msgs, n)
        if not any(x.role == pb.ROLE_USER for x in msgs):
            continue
        conv = pb.Conversation(session_id="s", messages=msgs)
        for reason in (pb.PRUNE_REASON_NORMAL, pb.PRUNE_REASON_PAYLOAD_LIMIT, pb.PRUNE_REASON_POST_COMPACTION):
            req = pb.PruneRequest(conversation=conv, reason=reason, model=mdl)
            _same(with_memo.Prune(req, ctx), without.Prune(req, ctx))
        if n % 7 == 6:
            req = pb.CompactRequest(conversation=conv, model=mdl, auto=True)
            a, b = with_memo.Compact(req, ctx), without.Compact(req, ctx)
            _same(a, b)
            if a.outcome == pb.COMPACT_OUTCOME_COMPACTED and rng.random() < 0.5:
                msgs = apply_compaction(msgs, a)  # the next steps go on from the compacted history
    assert with_memo._memo.hits > 0


def test_a_bad_message_is_refused_the_same_with_the_memo():
    """The memo keeps a message's own checks; errors still name the first bad field in order."""
    on_cfg, off_cfg = config.Config(), memo_config(0)
    with_memo, without = servicer.ContextService(on_cfg), servicer.ContextService(off_cfg)
    good = [user("u1", text("p1", "hi")), assistant("a1", tool("t1", "c1", "read", {"path": "x"}, "o"))]
    for bad in ([*good, user("u1", text("p9", "dup id"))],
                [*good, user("u2", text("t1", "dup part id"))],
                [*good, user("u2", tool("t2", "c2", "read", {}, "user tool"))]):
        req = pb.PruneRequest(conversation=pb.Conversation(messages=good), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)
        with_memo.Prune(req, None)  # the good messages are known
        req = pb.PruneRequest(conversation=pb.Conversation(messages=bad), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)
        errors = []
        for svc in (with_memo, without):
            with pytest.raises(Exception) as exc:
                svc.Prune(req, None)
            errors.append(str(exc.value))
        assert errors[0] == errors[1]


def _message(i, size):
    msg = m.Message(f"m{i}", m.USER, [m.Part(f"p{i}", m.Text(f"{i} " + "x" * size))])
    msg.digest = i.to_bytes(16, "little")
    return msg


@pytest.mark.parametrize("size", [2, 60_000])
def test_memory_stays_within_the_bound(size):
    """Entries charged their real size: tracemalloc's count of what the memo holds stays
    within the bound (plus slack for the table itself), for tiny and large values alike."""
    bound = 1 << 20
    msgs = [_message(i, size) for i in range(20_000 if size < 100 else 60)]
    compute = lambda x: (x.parts[0].content.text[:size], ("fact", x.id))  # noqa: E731
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    mm = memo.Memo(bound)
    for k in range(0, len(msgs), 100):
        mm.each("k", msgs[k:k + 100], (), compute)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert mm.size_bytes <= bound
    assert held <= bound + 256 * 1024, (held, mm.size_bytes, len(mm))
    assert mm.size_bytes >= 0.5 * held  # the charge is not far below reality either
    assert 0 < len(mm) < len(msgs)  # the oldest went first


def test_what_is_kept_for_objects_serves_those_very_objects():
    """Memo.for_objects: the same objects and settings are a hit; equal objects that are not
    the same, other settings, or objects in another order are computed afresh; and while kept the
    entry holds the objects, so their ids stay theirs."""
    mm = memo.Memo(1 << 20)
    a, b = [{"name": "read"}, {"name": "edit"}], [{"name": "read"}, {"name": "edit"}]
    calls = []

    def compute(objects):
        return lambda: (calls.append(objects) or len(calls), 64)

    assert mm.for_objects("k", a, (), compute(a)) == 1
    assert mm.for_objects("k", a, (), compute(a)) == 1  # kept
    assert mm.for_objects("k", b, (), compute(b)) == 2  # equal, not the same
    assert mm.for_objects("k", a, ("other",), compute(a)) == 3
    assert mm.for_objects("k", a[::-1], (), compute(a[::-1])) == 4
    ids = [id(x) for x in a]
    del a
    gc.collect()
    held, _ = mm.get(("k", (), tuple(ids)))
    assert [id(x) for x in held] == ids and held == ({"name": "read"}, {"name": "edit"})
    assert len(calls) == 4


def test_least_recently_used_go_first():
    mm = memo.Memo(4_000)
    msgs = [_message(i, 2) for i in range(40)]
    mm.each("k", msgs[:3], (), lambda x: x.id)
    for x in msgs[3:]:
        mm.each("k", [msgs[0], x], (), lambda y: y.id)  # msgs[0] stays in use
    calls = []
    mm.each("k", [msgs[0], msgs[1]], (), lambda y: calls.append(y.id) or y.id)
    assert calls == ["m1"]


def test_a_step_does_not_evict_what_it_used_or_kept():
    """Memo.begin_step: a step whose entries outgrow the bound keeps the first that fit and does
    not keep the rest, so its next step is served those; a plain LRU read in message order evicts
    each entry just before the next step asks for it, and serves none."""
    mm = memo.Memo(4_000)
    msgs = [_message(i, 2) for i in range(40)]
    mm.begin_step()
    mm.each("k", msgs, (), lambda x: x.id)
    kept = len(mm)
    assert 0 < kept < 40 and mm.size_bytes <= 4_000
    for _ in range(2):
        mm.begin_step()
        computed = []
        assert mm.each("k", msgs, (), lambda y: computed.append(y.id) or y.id) == [x.id for x in msgs]
        assert computed == [x.id for x in msgs[kept:]] and len(mm) == kept


def test_what_a_step_could_not_keep_is_charged_to_the_entries_that_may_hold_it():
    """An entry for the session's next step (supersede: a prefix, charged apart from the message
    entries it holds) is charged what the step's refused entries would have been, once: otherwise
    it would hold them, uncharged. Other entries are not; a later step starts from nothing."""
    mm = memo.Memo(4_000)
    msgs = [_message(i, 2) for i in range(40)]
    mm.begin_step()
    values = mm.each("k", msgs, (), lambda x: x.id)
    refused = mm._step.refused
    assert refused > 0
    mm.supersede(None, ("prefix",), tuple(values), 8)
    assert mm.get(("prefix",)) is None and mm.size_bytes <= 4_000
    assert mm._step.refused == refused  # a refused prefix adds nothing to it
    mm.begin_step()  # a step that kept everything: charged as before
    assert mm._step.refused == 0
    mm.supersede(None, ("prefix",), tuple(values[:3]), 8)
    assert mm.get(("prefix",)) == tuple(values[:3])


def test_a_replacing_entry_takes_the_old_one_s_place_past_the_hold():
    """A memo full of entries used within the hold: the entry replacing a session's previous one
    (supersede), a little larger, is kept, evicting the oldest held entries by the difference
    alone; one that cannot be kept leaves the old one in place."""
    clock = _Clock()
    mm = memo.Memo(6_000, hold_seconds=60.0, clock=clock)
    mm.begin_step()
    mm.supersede(None, ("prefix", 1), "first", 1_000)
    msgs = [_message(i, 2) for i in range(60)]
    clock.now += 2.0
    mm.begin_step()
    mm.each("k", msgs, (), lambda x: x.id)
    assert mm.refused > 0  # the memo is full of held entries
    kept = len(mm)
    clock.now += 2.0
    mm.begin_step()
    mm.supersede(("prefix", 1), ("prefix", 2), "second", 1_200)
    assert mm.get(("prefix", 2)) == "second" and mm.get(("prefix", 1)) is None
    assert mm.size_bytes <= 6_000 and kept - 3 <= len(mm) <= kept
    mm.supersede(("prefix", 2), ("prefix", 3), "too big", 10_000)
    assert mm.get(("prefix", 3)) is None and mm.get(("prefix", 2)) == "second"


def test_another_step_evicts_a_step_s_entries_as_any_older_ones():
    """The mark protects a step from itself only: a later step on another thread evicts an
    earlier step's entries, oldest first, as a plain LRU does."""
    mm = memo.Memo(4_000)
    first, second = [_message(i, 2) for i in range(6)], [_message(100 + i, 2) for i in range(30)]
    mm.begin_step()
    mm.each("k", first, (), lambda x: x.id)

    def other_step():
        mm.begin_step()
        mm.each("k", second, (), lambda x: x.id)

    worker = threading.Thread(target=other_step)
    worker.start()
    worker.join()
    assert all(mm.get(("k", x.digest)) is None for x in first)
    assert mm.get(("k", second[0].digest)) == second[0].id and mm.size_bytes <= 4_000


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_sessions_stepped_in_turn_keep_what_fits_within_the_hold():
    """Four sessions stepped in turn need twice what the memo holds. A plain LRU evicts, at each
    step, the entries of the session that steps next: no step is served anything. With the hold
    (what a step used within hold_seconds is not evicted to make room), the entries that fit stay
    and serve their sessions' later steps."""
    sessions = [[_message(100 * k + i, 40) for i in range(10)] for k in range(4)]
    probe = memo.Memo(1 << 30)
    probe.each("k", sessions[0], (), lambda x: x.id)
    bound = 2 * probe.size_bytes + 100
    served = {}
    for hold in (0.0, 60.0):
        clock = _Clock()
        mm = memo.Memo(bound, hold_seconds=hold, clock=clock)
        for _ in range(3):
            for msgs in sessions:
                clock.now += 2.0  # seconds between two sessions' steps
                mm.begin_step()
                assert mm.each("k", msgs, (), lambda x: x.id) == [x.id for x in msgs]
        assert mm.hits + mm.misses == 120 and mm.size_bytes <= bound
        served[hold] = mm
    assert served[0.0].hits == 0
    held = served[60.0]
    assert held.hits == 40 and held.refused == 60  # two sessions kept, served whole in rounds 2 and 3
    assert len(held) == len(held.keys()) == 20


def test_a_session_idle_past_the_hold_gives_way():
    """What was used longer ago than hold_seconds is evicted as in a plain LRU: a new session
    takes the place of one that stopped."""
    clock = _Clock()
    old, new = [_message(i, 40) for i in range(10)], [_message(100 + i, 40) for i in range(10)]
    probe = memo.Memo(1 << 30)
    probe.each("k", old, (), lambda x: x.id)
    mm = memo.Memo(probe.size_bytes + 100, hold_seconds=60.0, clock=clock)
    mm.begin_step()
    mm.each("k", old, (), lambda x: x.id)
    clock.now += 30.0
    mm.begin_step()
    mm.each("k", new, (), lambda x: x.id)
    assert all(mm.get(("k", x.digest)) == x.id for x in old)  # used 30 s ago: held
    assert mm.refused == 10
    clock.now += 61.0
    mm.begin_step()
    mm.each("k", new, (), lambda x: x.id)
    assert all(mm.get(("k", x.digest)) == x.id for x in new)
    assert all(mm.get(("k", x.digest)) is None for x in old)


def test_the_marks_of_time_stay_few():
    """A step marks the time in the LRU order once a second at most, and marks past the hold
    are dropped: a memo that never evicts does not gather them."""
    clock = _Clock()
    mm = memo.Memo(1 << 20, hold_seconds=10.0, clock=clock)
    for _ in range(1000):
        clock.now += 0.5
        mm.begin_step()
    assert len(mm._marks) <= 10 / memo.MARK_EVERY_SECONDS + 1
    assert len(mm) == 0 and mm.keys() == []


def test_sessions_outgrowing_the_memo_together_are_served_what_fits():
    """Eight sessions measured in turn, as the server does (the parse begins the step), together
    need about twice the memo. With the server's default hold, the sessions kept are served their
    history at their later steps; a plain LRU (hold 0) served none of them. Every answer equals
    the one without the memo."""
    cfg = config.Config()
    without = servicer.ContextService(memo_config(0))
    plain = without.serialized("Measure")
    sessions = []
    for k in range(8):
        rng = random.Random(k)
        msgs = []
        for n in range(120):
            _grow(rng, msgs, n)
        sessions.append(msgs)
    probe = servicer.ContextService(cfg)
    for msgs in sessions[:4]:
        wire = pb.MeasureRequest(conversation=pb.Conversation(session_id="probe", messages=msgs[:-3]),
                                 model=model(context=200_000)).SerializeToString()
        probe.serialized("Measure")(conversion.parser(pb.MeasureRequest, probe.memo)(wire), Context())
    bound = probe.memo.size_bytes
    later_misses = {}
    for hold in (0.0, cfg.server.memo_hold_seconds):
        small = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, memo_bytes=bound,
                                                                    memo_hold_seconds=hold))
        svc = servicer.ContextService(small)
        parse, measure = conversion.parser(pb.MeasureRequest, svc.memo), svc.serialized("Measure")
        for step in range(3):
            if step == 1:
                before = svc.memo.misses
            for k, msgs in enumerate(sessions):
                wire = pb.MeasureRequest(conversation=pb.Conversation(session_id=f"s{k}", messages=msgs[:-3 + step or None]),
                                         model=model(context=200_000)).SerializeToString()
                got = measure(parse(wire), Context())
                assert got == plain(conversion.parser(pb.MeasureRequest)(wire), Context())
                assert svc.memo.size_bytes <= bound
        later_misses[hold] = svc.memo.misses - before
    assert later_misses[cfg.server.memo_hold_seconds] < 0.7 * later_misses[0.0], later_misses


def test_a_conversation_outgrowing_the_memo_is_served_from_it_at_the_next_step():
    """6,000 short messages need more than a 12 MiB memo holds. Measured as the server does (the
    parse begins the step), the session's next steps compute a fraction of what the first did,
    and every answer equals the one without the memo. A plain LRU recomputed every message at
    every step."""
    small = memo_config(12 << 20)
    with_memo, without = servicer.ContextService(small), servicer.ContextService(memo_config(0))
    parse, measure = conversion.parser(pb.MeasureRequest, with_memo.memo), with_memo.serialized("Measure")
    plain = without.serialized("Measure")
    msgs = []
    for i in range(3_000):
        msgs.append(user(f"u{i}", text(f"u{i}p", f"question {i}")))
        msgs.append(assistant(f"a{i}", text(f"a{i}p", "ok")))
    mdl = model(context=200_000)
    misses = []
    for k in range(4):
        wire = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs[:len(msgs) - 3 + k]),
                                 model=mdl).SerializeToString()
        before = with_memo.memo.misses
        got = measure(parse(wire), Context())
        assert got == plain(conversion.parser(pb.MeasureRequest)(wire), Context())
        misses.append(with_memo.memo.misses - before)
        assert with_memo.memo.size_bytes <= 12 << 20
    assert all(later < misses[0] / 2 for later in misses[1:]), misses


def test_the_entries_a_prefix_serves_are_touched_once_every_few_messages():
    """Memo.touch_held moves the entries to the back only when the session crossed a multiple of
    TOUCH_EVERY messages since the prefix it resumed from; either way they count as hits."""
    mm = memo.Memo(1 << 20)
    held = [("k", i) for i in range(4)]
    for key in held + [("other", 0)]:
        mm.put(key, 1)
    n = memo.TOUCH_EVERY
    mm.touch_held(held, n + 2, n + 4)  # within one stretch of TOUCH_EVERY: left where they are
    assert list(mm._items)[-1] == ("other", 0) and mm.hits == 4
    mm.touch_held(held, 2 * n - 2, 2 * n)  # crossed one: touched
    assert list(mm._items)[-4:] == held and mm.hits == 8


def test_a_message_without_digest_is_computed_every_time():
    mm = memo.Memo(1 << 20)
    msg = m.Message("x", m.USER, [])
    calls = []
    for _ in range(2):
        assert mm.each("k", [msg], (), lambda y: calls.append(1) or 7) == [7]
    assert len(calls) == 2 and len(mm) == 0
    assert sys.getsizeof(msg.digest) > 0


def _small_guard(memo_bytes=None):
    """A payload guard of 60 KB, so a session of a few dozen steps crosses it."""
    cfg = config.Config() if memo_bytes is None else memo_config(0)
    return dataclasses.replace(cfg, assemble=dataclasses.replace(cfg.assemble, request_prune_bytes=60_000))


def _over_guard_steps(seed, steps=40):
    """A random session's requests, one per step, its later bodies over _small_guard's guard."""
    rng, msgs, out = random.Random(seed), [], []
    mdl = model(context=16_000)  # prune's gates scaled to a small window: it finds outputs to mark
    for n in range(steps):
        _grow(rng, msgs, n)
        if any(x.role == pb.ROLE_USER for x in msgs):
            out.append(pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl))
    return out


def _assemble(r):
    return pb.AssembleRequest(conversation=r.conversation, model=r.model)


@pytest.mark.parametrize("seed", range(3))
def test_the_payload_guard_answers_the_same_with_the_memo(seed):
    """Measure and Assemble of every step of a session growing over the payload guard, each sent
    twice (the second from the guard's memo entries), equal a servicer's without the memo."""
    with_memo, without = servicer.ContextService(_small_guard()), servicer.ContextService(_small_guard(0))
    tripped = 0
    for r in _over_guard_steps(seed):
        for _ in range(2):
            _same(with_memo.Measure(r, None), without.Measure(r, None))
            a, b = with_memo.Assemble(_assemble(r), None), without.Assemble(_assemble(r), None)
            _same(a, b)
        tripped += bool(a.pruned_part_ids)
    assert tripped > 3


def test_the_payload_guard_prunes_a_conversation_once(monkeypatch):
    """The same conversation over the guard (Measure then Assemble of one step, a retry) is pruned
    once, and the copies its prune marked are made once; the body it replaces is given no figures."""
    from contextsvc import prune
    step_run = importlib.import_module("contextsvc.step.run")  # the package exports its function run

    calls = {"prune": 0, "apply": 0, "figures": 0}

    def counted(name, f):
        def call(*a, **k):
            calls[name] += 1
            return f(*a, **k)
        return call

    monkeypatch.setattr(prune, "prune", counted("prune", prune.prune))
    monkeypatch.setattr(prune, "apply", counted("apply", prune.apply))
    monkeypatch.setattr(step_run, "figures", counted("figures", step_run.figures))
    svc = servicer.ContextService(_small_guard())
    r = _over_guard_steps(0)[-1]
    first = svc.Measure(r, None)
    assert first.body_bytes <= 60_000 and calls == {"prune": 1, "apply": 1, "figures": 1}
    for _ in range(3):
        _same(svc.Measure(r, None), first)
        assert svc.Assemble(_assemble(r), None).pruned_part_ids
    assert calls == {"prune": 1, "apply": 1, "figures": 7}


def test_the_same_tools_are_converted_once(monkeypatch):
    """The same tools at every step are converted once, serialized for the body and profiled
    for the figures once, and hashed for the prefix digests once: a hit gives the definitions the miss made (in a list of the caller's own) and
    the same Measure and Assemble as without the memo; a changed schema is a miss, answered as
    without the memo; a bad schema is refused every time."""
    from contextsvc.rpc import conversion
    step_figures = importlib.import_module("contextsvc.step.figures")

    serialized = []  # the tool lists the figures of the servicer with the memo serialized
    real = step_figures.tool_schema_list
    monkeypatch.setattr(step_figures, "tool_schema_list", lambda tools: serialized.append(tools) or real(tools))
    encoded = []  # what was serialized holding tool definitions as the body writes them
    json_text = native.json_text

    def counting(value):
        if isinstance(value, dict) and ("input_schema" in value or isinstance(value.get("tools"), list)):
            encoded.append(value)
        return json_text(value)

    monkeypatch.setattr(native, "json_text", counting)
    from contextsvc import prefix
    heads = []  # the tool and system bytes the prefix hashing hashed from the start

    class Hashing:  # the hashing of a body's first elements, counted (its copies are not)
        def __init__(self, data=b""):
            self.h = hashlib.sha256(data)

        def update(self, chunk):
            heads.append(len(chunk))
            self.h.update(chunk)

        def __getattr__(self, name):
            return getattr(self.h, name)

    monkeypatch.setattr(prefix, "hashlib", type("Hashlib", (), {"sha256": Hashing}))

    tools = [pb.ToolDefinition(name=n, description=f"{n} a file",
                               input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')
             for n in ("read", "edit")]
    keep = memo.Memo(1 << 20)
    first, again = conversion.tools(tools, memo=keep), conversion.tools(tools, memo=keep)
    assert first is not again and all(a is b for a, b in zip(first, again)) and len(again) == 2
    assert first == conversion.tools(tools)  # as without the memo

    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    req = pb.AssembleRequest(conversation=pb.Conversation(messages=[user("u1", text("p1", "hi"))]), model=model(),
                             tools=tools)
    measure = pb.MeasureRequest(conversation=req.conversation, model=req.model, tools=req.tools)
    hashed_heads = []
    for _ in range(2):
        h = len(heads)
        answers = [with_memo.Assemble(req, None), with_memo.Measure(measure, None)]
        hashed_heads.append(len(heads) - h)
        n, k = len(serialized), len(encoded)
        _same(answers[0], without.Assemble(req, None))
        _same(answers[1], without.Measure(measure, None))
        del serialized[n:], encoded[k:]  # the servicer's without the memo
    assert len(serialized) == 1, serialized
    assert hashed_heads == [2, 0], hashed_heads  # the two tools, at the first step only (HEAD)
    # each definition once for the body and its prefix digests (TOOL_JSON), and the last one
    # again with its cache marker at each Assemble: never the whole list
    assert [e.get("name", "the body") for e in encoded] == ["read", "edit", "edit", "edit"], encoded
    before = with_memo.Measure(measure, None).tools
    for r in (req, measure):
        r.tools[1].input_schema_json = '{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}}}'
    changed = with_memo.Measure(measure, None)
    _same(changed, without.Measure(measure, None))
    _same(with_memo.Assemble(req, None), without.Assemble(req, None))
    assert changed.tools > before
    assert len(serialized) == 1 + 1 + 2  # the changed list, and twice without the memo
    measure.tools[1].name = "read"  # valid definitions, twice the same name: refused every time
    for _ in range(2):
        with pytest.raises(Exception, match=r"tools\[1\]\.name.*defined twice"):
            with_memo.Measure(measure, None)
    measure.tools[0].input_schema_json = '{"type":"object"'
    for _ in range(2):
        with pytest.raises(Exception, match=r"tools\[0\]\.input_schema_json"):
            with_memo.Measure(measure, None)


def test_the_tools_are_known_by_their_bytes():
    """With the request's bytes, the tool definitions are kept under the bytes of their entries:
    the same bytes are a hit (the very definitions), the same definitions written otherwise a miss
    that converts them again, equal; entries not written back to back are known by their strings."""
    from contextsvc.rpc import conversion

    tools = [pb.ToolDefinition(name=n, description=f"{n} a file", input_schema_json='{"type":"object"}')
             for n in ("read", "edit")]
    request = pb.MeasureRequest(model=model(), tools=tools)
    wire = request.SerializeToString()
    keep = memo.Memo(1 << 20)
    first = conversion.tools(request.tools, memo=keep, wire=wire)
    again = conversion.tools(pb.MeasureRequest.FromString(wire).tools, memo=keep, wire=bytes(wire))
    assert all(a is b for a, b in zip(first, again)) and first == conversion.tools(tools)

    def entry(tool: pb.ToolDefinition, reverse: bool = False) -> bytes:
        fields = [(1, tool.name), (2, tool.description), (3, tool.input_schema_json)]
        body = b"".join(bytes([n << 3 | 2, len(v.encode())]) + v.encode() for n, v in fields[::-1 if reverse else 1])
        return bytes([3 << 3 | 2, len(body)]) + body

    model_entry = pb.MeasureRequest(model=model()).SerializeToString()
    assert b"".join(map(entry, tools)) in wire  # entry() writes them as the encoder does
    reordered = model_entry + b"".join(entry(t, reverse=True) for t in tools)  # the same definitions
    apart = entry(tools[0]) + model_entry + entry(tools[1])  # a field between the two entries
    for data in (reordered, apart):
        parsed = pb.MeasureRequest.FromString(data)
        assert list(parsed.tools) == tools
        got = conversion.tools(parsed.tools, memo=keep, wire=data)
        assert got == first and not any(a is b for a, b in zip(got, first))
    # the strings' key, as entries apart are known by: a hit for the same strings
    assert all(a is b for a, b in zip(conversion.tools(pb.MeasureRequest.FromString(apart).tools, memo=keep,
                                                       wire=apart),
                                      conversion.tools(request.tools, memo=keep)))
    request.tools[1].input_schema_json = '{"type":"object","properties":{}}'
    changed = conversion.tools(request.tools, memo=keep, wire=request.SerializeToString())
    assert changed[1].input_schema == {"type": "object", "properties": {}} and changed[0] == first[0]


def test_a_system_elements_shape_is_equal_exactly_when_its_json_is():
    """SYSTEM's key (step.request._shape): key order and each scalar's type count (true is not
    1, "1" is not 1); what it does not cover (floats, deep nesting) has no shape, and is not kept."""
    shape = importlib.import_module("contextsvc.step.request")._shape
    cases = [{"type": "text", "text": "a"}, {"text": "a", "type": "text"}, {"a": True}, {"a": 1}, {"a": None},
             {"a": "1"}, {"a": [1]}, {"a": [[1]]}, {"a": [1, 1]}, {"a": {"b": 1}}, {"a": {"b": True}}, {"a": {}},
             {"a": []}, {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]
    for x in cases:
        for y in cases:
            assert (shape(x) == shape(y)) == (native.json_text(x) == native.json_text(y)), (x, y)
    assert shape({"a": 1.5}) is None and shape({"a": [[[[[["deep"]]]]]]}) is None


def test_the_same_system_prompt_is_measured_once(monkeypatch):
    """A system prompt of many kilobytes, the same at every step: its element is serialized,
    sized and profiled once while the memo keeps it (SYSTEM), with every answer as without the
    memo; a changed prompt is measured afresh."""
    profiled = []  # the system prompt's texts the servicer with the memo profiled
    real = native.text_profile

    def counting(text):
        if "Keep the change small" in text:
            profiled.append(len(text))
        return real(text)

    monkeypatch.setattr(native, "text_profile", counting)
    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    rules = "Keep the change small, run the tests after every edit, and say what you changed. " * 200
    msgs = [user("u0", text("u0p", "Fix the parser."))]
    for n in range(4):
        msgs += [assistant(f"a{n}", text(f"a{n}t", f"Step {n}.")), user(f"u{n + 1}", text(f"u{n + 1}p", "go on"))]
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=model(),
                              system=pb.SystemPrompt(soul=rules))
        answers = [with_memo.Measure(r, None), with_memo.Assemble(_assemble(r), None)]
        n_profiled = len(profiled)
        _same(answers[0], without.Measure(r, None))
        _same(answers[1], without.Assemble(_assemble(r), None))
        del profiled[n_profiled:]  # the servicer's without the memo
    assert len(profiled) == 1, profiled
    changed = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=model(),
                                system=pb.SystemPrompt(soul=rules + "Be brief."))
    answer = with_memo.Measure(changed, None)
    assert len(profiled) == 2
    _same(answer, without.Measure(changed, None))


def _pruned_history():
    """A history over _small_guard's guard whose outputs the prune marks (with model(context=16_000))."""
    msgs = [user("u0", text("u0p", "Fix the parser."))]
    for n in range(12):
        msgs.append(assistant(f"a{n}", text(f"a{n}t", "Reading."),
                              tool(f"a{n}x", f"c{n}", "read", {"path": f"src/f{n}.py"}, f"line {n}\n" * 900)))
    msgs.append(user("u1", text("u1p", "Go on.")))
    return msgs


@pytest.mark.parametrize("editor", [False, True])
def test_a_history_grown_past_the_prune_is_not_pruned_again(editor, monkeypatch):
    """A client that does not store the guard's marks resends its history over the guard at every
    step: a step that adds what the prune passes over (text, a running tool, a protected tool)
    takes the earlier step's prune, the copies it marked and the baseline's rebase over them
    from the memo; a step that adds a completed output prunes again and marks more. Every answer
    equals a servicer's without the memo. editor: Assemble's last user message carries the
    environment block, a copy the memo has no digest of, so Assemble resumes from the step before
    rather than from Measure's entry: it prunes when Measure does, and takes its copies."""
    from contextsvc import prune
    step_figures = importlib.import_module("contextsvc.step.figures")

    runs = {"prune": [], "apply": [], "changed_pieces": []}
    for module, name in ((prune, "prune"), (prune, "apply"), (step_figures, "changed_pieces")):
        f, calls = getattr(module, name), runs[name]
        monkeypatch.setattr(module, name, lambda *a, f=f, calls=calls, **k: calls.append(1) or f(*a, **k))
    with_memo, without = servicer.ContextService(_small_guard()), servicer.ContextService(_small_guard(0))
    mdl = model(context=16_000)
    msgs = _pruned_history()

    def answer(n, part):  # reported usage: the baseline the guard's marks rebase
        return assistant(f"s{n}", part, usage=pb.Usage(input=9_000 + n, output=50))

    added = (lambda n: [answer(n, text(f"s{n}t", f"Step {n}: next file.")), user(f"s{n}u", text(f"s{n}v", "ok"))],
             lambda n: [answer(n, tool(f"s{n}x", f"r{n}", "bash", {"command": "make"}, "",
                                       status=pb.TOOL_STATUS_RUNNING))],
             lambda n: [answer(n, tool(f"s{n}x", f"r{n}", "skill", {"name": "x"}, "rules\n" * 900))],
             lambda n: [answer(n, tool(f"s{n}x", f"r{n}", "read", {"path": "b.py"}, "more\n" * 900)),
                        user(f"s{n}u", text(f"s{n}v", "ok"))])
    marked, pruned_at, copied_at, rebased_at = [], [], [], []
    for n in range(16):
        msgs += added[n % 4](n)
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl)
        before = {name: len(calls) for name, calls in runs.items()}
        _same(with_memo.Measure(r, None), without.Measure(r, None))
        ask = _assemble(r)
        if editor:
            ask.editor.CopyFrom(pb.EditorContext(current_time="2026-12-02T17:08:32+00:00", working_directory="/repo"))
        a = with_memo.Assemble(ask, None)
        _same(a, without.Assemble(ask, None))
        assert a.guard_tripped and len(a.body) <= 60_000
        # the servicer without the memo prunes, copies and rebases at both calls
        pruned_at += [n % 4] * (len(runs["prune"]) - before["prune"] - 2)
        copied_at += [n % 4] * (len(runs["apply"]) - before["apply"] - 2)
        rebased_at += [n % 4] * (len(runs["changed_pieces"]) - before["changed_pieces"] - 2)
        marked.append(list(a.pruned_part_ids))
    # the first step (nothing kept), then each that adds an output
    assert pruned_at == [0] * (1 + editor) + [3] * 4 * (1 + editor)
    assert copied_at == rebased_at == [0] + [3] * 4  # Assemble takes Measure's copies and rebase
    assert all(marked[n] == marked[n - 1] for n in range(1, 16) if n % 4 != 3)
    assert all(set(marked[n]) > set(marked[n - 1]) for n in range(3, 16, 4))
    # each step's prune took the place of the one it resumed or pruned again after: one left
    # (and Assemble's own, resumed from the step before, with the editor's block)
    assert sum(key[0] == memo.GUARD for key in with_memo.memo.keys()) == 1 + editor


def test_a_history_the_guard_pruned_before_is_hashed_once(monkeypatch):
    """Assemble of a session whose earlier step the guard pruned sizes the body before hashing
    it: the body the guard replaces is not hashed; one sent after all (a compaction brought it
    under the guard, or nothing is left to prune) is hashed as ever. Every answer equals a
    servicer's without the memo, which hashes the body it sizes."""
    from contextsvc import prefix

    hashed, f = [], prefix.prefix_hashes
    monkeypatch.setattr(prefix, "prefix_hashes", lambda *a, **k: hashed.append(1) or f(*a, **k))
    with_memo, without = servicer.ContextService(_small_guard()), servicer.ContextService(_small_guard(0))
    mdl = model(context=16_000)
    msgs = _pruned_history()
    steps = ([],
             [assistant("s0", text("s0t", "Next file.")), user("s0u", text("s0v", "ok"))],
             [assistant("s1", text("s1t", "And the next.")), user("s1u", text("s1v", "ok"))],
             [user("c0", pb.Part(id="c0p", compaction=pb.CompactionPart(auto=True))),
              assistant("c1", text("c1t", "## Goal\nFix the parser."), summary=True, parent_id="c0"),
              user("s2u", text("s2v", "Go on."))],
             [user("s3u", text("s3v", "log line\n" * 8000))])
    calls, tripped = {"with": [], "without": []}, []
    for added in steps:
        msgs += added
        r = _assemble(pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl))
        answers = []
        for name, svc in (("with", with_memo), ("without", without)):
            before = len(hashed)
            answers.append(svc.Assemble(r, None))
            calls[name].append(len(hashed) - before)
        _same(*answers)
        tripped.append((answers[0].guard_tripped, bool(answers[0].pruned_part_ids)))
    assert tripped == [(True, True)] * 3 + [(False, False), (True, False)]
    assert calls == {"with": [2, 1, 1, 1, 1], "without": [2, 2, 2, 1, 1]}


@pytest.mark.parametrize("provider", [v for v in pb.Provider.values() if v != pb.PROVIDER_UNSPECIFIED])
def test_a_history_the_guard_pruned_before_is_sized_from_the_guard_s_body(provider, monkeypatch):
    """A step over the guard whose prune the memo gives again builds only the guard's body, its
    prefix keys and the baseline's rebase keyed from the guard's entry: the whole body's bytes are
    the guard's plus Guard.freed, exactly those of the whole body built without the memo (at any
    output budget), for every wire format. Every answer equals a servicer's without the memo."""
    step_run = importlib.import_module("contextsvc.step.run")  # the package exports its function run
    step_figures = importlib.import_module("contextsvc.step.figures")
    from contextsvc.step import baseline as step_baseline

    built, guarded, counted = [], [], []
    build, guard = step_run.build, step_run.payload_guard
    as_counted = step_baseline.as_counted
    monkeypatch.setattr(step_figures, "as_counted", lambda *a: counted.append(1) or as_counted(*a))
    monkeypatch.setattr(step_run, "build", lambda conv, plan, *a, **k: built.append((conv, plan)) or
                        build(conv, plan, *a, **k))
    monkeypatch.setattr(step_run, "payload_guard", lambda conv, *a, **k: guarded.append((conv, guard(conv, *a, **k)))
                        or guarded[-1][1])

    def body_bytes(conv, plan, output):
        request = build(conv, plan)  # no memo: the whole request lowered at once
        request.lowered.set_max_output(output)
        return request.body_bytes()

    with_memo, without = servicer.ContextService(_small_guard()), servicer.ContextService(_small_guard(0))
    mdl = model(provider=provider, context=16_000)
    msgs, sized = _pruned_history(), 0
    for n in range(6):
        msgs += [assistant(f"s{n}", text(f"s{n}t", f"Step {n}: next file."), usage=pb.Usage(input=9_000 + n, output=50)),
                 user(f"s{n}u", text(f"s{n}v", "ok"))]
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl)
        for call, ask in ((servicer.ContextService.Measure, r), (servicer.ContextService.Assemble, _assemble(r))):
            built.clear(), guarded.clear(), counted.clear()
            answer = call(with_memo, ask, None)
            (sent, g), = guarded
            assert g.tripped and g.pruned_part_ids
            if g.freed is None:  # pruned afresh: the whole body was built first, as ever
                assert [conv for conv, _ in built] == [sent, g.conversation]
                continue
            sized += 1
            (conv, plan), = built  # the guard's body alone
            assert conv is g.conversation
            # its prefix keys made of what the guard's entry kept, as they would be made afresh
            assert g.digests == memo.message_prefix_digests(conv.messages)
            # and the baseline's rebase keyed as from the changed messages, which are not read
            base = step_baseline.baseline(conv.messages)
            latest = sent.scanned.last_compacted_ms
            pairs = as_counted(conv.messages, base, sent.messages, latest)
            assert len(pairs) == len(g.pruned_part_ids)  # one output marked in each
            assert step_baseline.known_key(conv.messages, base, g.pairs, latest, plan) == \
                step_baseline.changed_key(pairs, plan)
            assert counted == []
            for output in (0, 4_096, 64_000):
                assert body_bytes(conv, plan, output) + g.freed == body_bytes(sent, plan, output)
            _same(answer, call(without, ask, None))
    assert sized >= 8  # each step but the first, both calls (Bedrock's media-free history included)


def test_a_guard_entry_holds_no_more_than_it_was_charged_for_the_bytes_it_frees():
    """The guard's entry keeps the bytes its marks free for the lowering that first reads them,
    in room charged when it was stored: served again to the same history, under that model and
    others, it never holds more than the memo charged it; every answer is the memo-less one."""
    with_memo, without = servicer.ContextService(_small_guard()), servicer.ContextService(_small_guard(0))
    msgs = _pruned_history()
    for model_id in ("claude-sonnet-4-5", "claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5",
                     "claude-sonnet-4-5"):
        mdl = model(context=16_000)
        mdl.id = model_id
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=mdl)
        _same(with_memo.Measure(r, None), without.Measure(r, None))
        entries = [(key, value, size) for key, (value, size) in with_memo.memo._items.items()
                   if isinstance(key, tuple) and key[0] == memo.GUARD]
        assert entries
        for key, e, size in entries:  # what it holds beside the entries it names, as the memo charges it
            held = (sys.getsizeof(e.changed) + sys.getsizeof(e.copies) + sys.getsizeof(e.kept) + e.ids_size
                    + sys.getsizeof(e.joined) + sys.getsizeof(e.pairs) + sys.getsizeof(e.freed) + 64 * len(e.freed))
            assert held + memo.ENTRY_OVERHEAD + memo.resident_size(key) <= size
    assert any(e.freed for _, e, _ in entries)


def test_the_guard_s_freed_bytes_count_the_caller_s_deadline(monkeypatch):
    """The first step a guard's entry serves reads every copy the entry keeps for the bytes it
    frees: the caller's deadline is counted per copy, as the build's loops count it."""
    from contextsvc.deadline import Deadline

    counted, real = [], Deadline.count
    monkeypatch.setattr(Deadline, "count", lambda self, what: counted.append(what) or real(self, what))
    svc = servicer.ContextService(_small_guard())
    msgs = _pruned_history()
    for n in range(2):
        msgs += [assistant(f"s{n}", text(f"s{n}t", "Next.")), user(f"s{n}u", text(f"s{n}v", "ok"))]
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=msgs), model=model(context=16_000))
        counted.clear()
        svc.Measure(r, Context())
        freed_at = counted.count("payload guard")
    marked = svc.Assemble(_assemble(r), None).pruned_part_ids  # one output in each message it marks
    assert freed_at == len(marked) > 0


def test_a_measure_looks_for_the_guard_s_entry_once_its_session_was_over_the_guard(monkeypatch):
    """Measure looks for the guard's entry (its keys are a pass over the history's digests and a
    dozen lookups) only for a conversation a step of which was over the guard: not at every step
    of one under it, even one sharing the session id of one over it, and with or without a
    session id. Assemble, which hashes its body, looks at every step."""
    step_run = importlib.import_module("contextsvc.step.run")  # the package exports its function run
    looked = []
    guard_keys = step_run.guard_keys
    monkeypatch.setattr(step_run, "guard_keys", lambda *a, **k: looked.append(1) or guard_keys(*a, **k))
    svc = servicer.ContextService(_small_guard())
    mdl = model(context=16_000)
    under = [user("u0", text("u0p", "Fix the lexer."))]  # its first message is not _pruned_history's
    for session, msgs, over in (("under", under, False), ("over", _pruned_history(), True),
                                ("over", under, False), ("", _pruned_history(), True)):
        r = pb.MeasureRequest(conversation=pb.Conversation(session_id=session, messages=msgs), model=mdl)
        for n in range(3):
            r.conversation.messages.extend([assistant(f"s{n}", text(f"s{n}t", "Next.")), user(f"s{n}u", text(f"s{n}v", "ok"))])
            looked.clear()
            svc.Measure(r, None)
            measured = len(looked)
            svc.Assemble(_assemble(r), None)
            assert (measured, len(looked) - measured) == ((1 if over and n > 0 else 0), 1), (session, over, n)


def test_a_tool_schema_is_parsed_once(monkeypatch):
    """The same tools at every step: each input schema is parsed once while the memo keeps it,
    a bad one refused every time, and the body the same as without the memo."""
    from contextsvc.rpc import conversion

    parsed = []
    real = conversion._json_object
    monkeypatch.setattr(conversion, "_json_object", lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    tools = [pb.ToolDefinition(name=n, description=n, input_schema_json='{"type":"object","properties":{"%s":{}}}' % n)
             for n in ("read", "edit")]
    req = pb.AssembleRequest(conversation=pb.Conversation(messages=[user("u1", text("p1", "hi"))]), model=model(),
                             tools=tools)
    for _ in range(3):
        _same(with_memo.Assemble(req, None), without.Assemble(req, None))
    assert len([t for t in parsed if "read" in t]) == 1 + 3  # once with the memo, every time without
    req.tools.append(pb.ToolDefinition(name="bad", input_schema_json="[1]"))
    for _ in range(2):
        with pytest.raises(Exception, match="input_schema_json"):
            with_memo.Assemble(req, None)


def _id_history() -> list:
    """PREFIX_FROM_MESSAGES + 1 messages, user and assistant in turn, ids u<n> and a<n>."""
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    return [user(f"u{n}", text(f"u{n}p", f"step {n}")) if n % 2 == 0 else
            assistant(f"a{n}", tool(f"a{n}x", f"c{n}", "read", {"path": f"f{n}.py"}, "out " * n))
            for n in range(PREFIX_FROM_MESSAGES + 1)]


def _refused_alike(services, msgs: list, bad_messages) -> None:
    """Each of bad_messages after msgs is refused as repeating an id, by each service alike."""
    for bad in bad_messages:
        req = pb.MeasureRequest(conversation=pb.Conversation(messages=[*msgs, bad]), model=model())
        errors = []
        for svc in services:
            with pytest.raises(Exception) as exc:
                svc.Measure(req, None)
            errors.append(str(exc.value))
        assert errors[0] == errors[1] and ("duplicates" in errors[0]), errors


class _Walked:
    """The messages each step's id checks walk (validate.each), and the conversations a step
    checked in full (validate._conversation: its shortcut failed), while in use."""

    def __enter__(self):
        from contextsvc import validate

        self.validate, self.each, self.full = validate, validate.each, validate._conversation
        self.walked, self.whole = [], []
        validate.each = lambda memo, kind, messages, *rest: self.walked.append([x.id for x in messages]) or \
            self.each(memo, kind, messages, *rest)
        validate._conversation = lambda conv, *rest, **named: (
            self.whole.append(len(conv.messages)) if len(conv.messages) > 1 else None) or self.full(conv, *rest, **named)
        return self

    def __exit__(self, *_):
        self.validate.each, self.validate._conversation = self.each, self.full

    def clear(self):
        self.walked.clear()
        self.whole.clear()


def test_a_step_checks_only_its_new_messages_and_still_finds_an_id_of_the_kept_ones():
    """From PREFIX_FROM_MESSAGES messages on, the ids of a conversation whose checks passed are
    kept (memo.VALIDATED under its Lineage): the step that resends it checks only the messages it
    adds. A new message or part repeating an id of the kept messages is still refused, with the
    same error as without the memo, and the kept ids are the earlier step's alone (a refused step
    leaves nothing for the next), however many steps kept them."""
    from contextsvc import validate

    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    msgs = _id_history()
    with _Walked() as checks:
        for step in range(validate.FLATTEN_AFTER + 3):  # past a flattening of the kept ids
            msgs.append(user(f"next{step}", text(f"next{step}p", "go on")))
            req = pb.MeasureRequest(conversation=pb.Conversation(messages=msgs), model=model(context=200_000))
            checks.clear()
            _same(with_memo.Measure(req, None), without.Measure(req, None))
            if step:  # the earlier step's whole conversation was checked and kept
                assert checks.walked == [[f"next{step}"]], checks.walked
        _refused_alike((with_memo, without), msgs, (
            user("u4", text("fresh", "a message id of the kept ones")),
            user("fresh", text("a5x", "a part id of the kept ones")),
            user("next18", text("fresh", "an id kept above the flattening")),
            user("fresh", text("next17p", "a part id kept above the flattening"))))


def test_a_step_after_its_last_messages_were_edited_checks_only_those_and_its_new_ones():
    """The client edits the last message of its previous step (stores a part into it, as it does
    the environment block) before the next: that step resumes before the edited message (Lineage
    names the earlier step, that message dropped) and checks only it and the messages it adds,
    its ids free again; after a revert (messages dropped, none added) the next step checks only
    what it adds. An id of a kept message is still refused, as without the memo; the ids of
    dropped messages taken by a new one are not, however many steps kept the ids."""
    from contextsvc import validate

    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    msgs = _id_history()
    with _Walked() as checks:
        def measured(messages):
            req = pb.MeasureRequest(conversation=pb.Conversation(messages=messages), model=model(context=200_000))
            checks.clear()
            got = with_memo.Measure(req, None)
            assert not checks.whole, "the step checked the whole conversation"
            _same(got, without.Measure(req, None))

        for step in range(validate.FLATTEN_AFTER + 3):  # past a flattening of the kept ids
            last = pb.Message()
            last.CopyFrom(msgs[-1])
            last.parts.append(text(f"{last.id}~stored{step}", "a part the client stored"))
            msgs[-1] = last
            msgs.append(assistant(f"next{step}a", text(f"next{step}t", "reading")))
            msgs.append(user(f"next{step}", text(f"next{step}p", "go on")))
            measured(msgs)
            if step:
                assert checks.walked == [[last.id, f"next{step}a", f"next{step}"]], checks.walked
        # the last two messages dropped, their ids taken by a new one: not duplicates any more
        dropped = msgs[-2:]
        measured([*msgs[:-2], user(dropped[0].id, text(dropped[1].parts[0].id, "the ids of dropped messages"))])
        assert checks.walked == [[dropped[0].id]], checks.walked
        # a revert (the last messages dropped, nothing added), then a step that adds one
        measured(msgs[:-4])
        assert checks.walked == [[]], checks.walked
        measured([*msgs[:-4], user(msgs[-4].id, text("after-revert", "a message after the revert"))])
        assert checks.walked == [[msgs[-4].id]], checks.walked
        _refused_alike((with_memo, without), msgs, (
            user("u4", text("fresh", "a message id of the kept ones")),
            user("fresh", text("a5x", "a part id of the kept ones")),
            user("next1", text("fresh", "an id kept above the flattening")),
            user("fresh", text("u32~stored0", "a stored part's id, kept above the flattening"))))


def test_the_kept_ids_hide_those_of_the_messages_a_step_no_longer_holds():
    """validate._Ids: a layer's hidden ids (the earlier step's messages it no longer holds) are
    not held below it, its own are, and a flattened chain holds what the layers do."""
    from contextsvc.validate import _Ids

    bottom = _Ids({"a", "b"}, {"pa", "pb"}, None, 0)
    edited = _Ids({"c"}, {"pc"}, bottom, 1, frozenset({"b"}), frozenset({"pb"}))
    again = _Ids({"b"}, {"pb2"}, edited, 2)  # b sent again, with another part
    assert not edited.holds("b", ()) and not edited.holds("x", ("pb",)) and edited.holds("a", ("px",))
    assert edited.holds("x", ("pc",)) and edited.holds("c", ())
    assert again.holds("b", ()) and again.holds("x", ("pb2",)) and not again.holds("x", ("pb",))
    assert edited.flat() == ({"a", "c"}, {"pa", "pc"}) and again.flat() == ({"a", "b", "c"}, {"pa", "pb2", "pc"})


@pytest.mark.parametrize("provider,model_id", [(pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
                                               (pb.PROVIDER_ANTHROPIC, "claude-opus-4-6"),
                                               (pb.PROVIDER_BEDROCK, "us.anthropic.claude-haiku-4-5-20251001-v1:0"),
                                               (pb.PROVIDER_OPENROUTER, "anthropic/claude-sonnet-4.5")])
def test_a_thinking_session_measures_the_same_with_the_memo(provider, model_id):
    """Signed thinking (opaque state) makes the figures read a lowering of their own, whose
    element profiles the memo keeps, and Claude before Opus 4.5 has its earlier turns' thinking
    stripped there (kept by the memo too): each step of a growing session measures and assembles
    the same with the memo and without, the cache state passed back."""
    rng = random.Random(5)
    with_memo, without = servicer.ContextService(config.Config()), servicer.ContextService(memo_config(0))
    mdl = model(context=200_000, provider=provider, id=model_id)
    msgs, state = [user("u0", text("u0p", "Audit the retry logic."))], b""
    for n in range(24):
        if n % 6 == 5:  # the turn's answer was given: the person's next turn
            msgs.append(user(f"u{n}", text(f"u{n}p", _words(rng, 12).capitalize() + ".")))
        else:
            thought = pb.Part(id=f"r{n}", reasoning=pb.ReasoningPart(text=_words(rng, 80), signature=f"sig{n}" * 30))
            ran = [] if n % 6 == 4 else [tool(f"a{n}x", f"c{n}", "bash", {"command": "ls"},
                                              "out line\n" * rng.randint(5, 200))]
            msgs.append(assistant(f"a{n}", thought, text(f"a{n}t", _words(rng, 10)), *ran,
                                  usage=pb.Usage(input=2_000 + 900 * n, output=120, reasoning=300)))
            msgs[-1].model_id = model_id
        conv = pb.Conversation(session_id="thinking", messages=msgs)
        _same(with_memo.Measure(pb.MeasureRequest(conversation=conv, model=mdl), None),
              without.Measure(pb.MeasureRequest(conversation=conv, model=mdl), None))
        a, b = (svc.Assemble(pb.AssembleRequest(conversation=conv, model=mdl, previous_cache_state=state), None)
                for svc in (with_memo, without))
        _same(a, b)
        state = a.cache_state
    assert with_memo._memo.hits > 0
