"""The memo's lowering entries (memo.py, step/pieces.py; issue 19): the same answers with it
on or off, over real servers and random growing sessions of every provider; its charge is its real
memory; its bound holds; it is keyed by Message.digest, with or without the message cache."""
from __future__ import annotations

import dataclasses
import gc
import re
import tracemalloc

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from helpers import convo, corpus
from helpers.memo_memory import cleared
from helpers.server import start_server
from contextsvc import conversation as m
from contextsvc.rpc import conversion
from contextsvc.lowering.registry import PROVIDERS
from contextsvc.memo import BODY, LOWERED, PREFIX, Memo
from contextsvc.step import request
from helpers.steps import plan
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def servers():
    on, off = start_server(), start_server(memo_bytes=0)
    chans = [grpc.insecure_channel(f"127.0.0.1:{s.port}") for s in (on, off)]
    yield [pb_grpc.ContextServiceStub(c) for c in chans]
    for c in chans:
        c.close()
    on.stop(grace=1)
    off.stop(grace=1)


def _answer(call, req):
    try:
        return call(req, timeout=60).SerializeToString(deterministic=True)
    except grpc.RpcError as e:
        return (e.code(), e.details())


_CASES = {p: corpus.cases(p, 12, seed=19) for p in PROVIDERS}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(provider=st.sampled_from(PROVIDERS), case=st.integers(0, 11), data=st.data())
def test_the_same_answers_with_the_memo_on_or_off(servers, provider, case, data):
    """A session grown a few messages at a time; each step's Measure and Assemble, bytes and all,
    with the cache state passed back, equal a server's without the memo."""
    n = len(_CASES[provider][case].request.conversation.messages)
    _agree(servers, provider, case, sorted(set(data.draw(st.lists(st.integers(1, n), min_size=1, max_size=4)) + [n])))


def test_a_last_element_with_blocks_appended_is_read_alike_with_the_memo_on_or_off(servers):
    """The example the property above found: a step of two messages, then the whole session with
    its cache state, whose first message element came back with blocks appended. With the memo,
    the prefix hashing resumed past that element, and the report said "other" where it said kept
    without."""
    _agree(servers, "anthropic", 0, [2, len(_CASES["anthropic"][0].request.conversation.messages)])


def _agree(servers, provider: str, case: int, cuts: list) -> None:
    """Each cut of the session's messages, Measure and Assemble on both servers alike."""
    on, off = servers
    full = pb.AssembleRequest()
    full.CopyFrom(_CASES[provider][case].request)
    for cut in cuts:
        req = pb.AssembleRequest()
        req.CopyFrom(full)
        del req.conversation.messages[cut:]
        measure = pb.MeasureRequest(conversation=req.conversation, model=req.model, tools=req.tools,
                                    system=req.system, want_cache_state=True)
        got = [(_answer(s.Measure, measure), _answer(s.Assemble, req)) for s in (on, off)]
        assert got[0] == got[1]
        a = got[0][1]
        if isinstance(a, bytes):
            state = pb.AssembleResponse.FromString(a).cache_state
            full.previous_cache_state = state  # the next step passes it back


def _fill(memo: Memo, make, count: int, provider: str = m.ANTHROPIC, cache=None):
    """Measures conversations of count messages through the memo (conversion without it by
    default, so what stays is the lowering alone: conversion gives every message its digest anyway)."""
    mdl = m.Model(id="claude-sonnet-4-5", provider=provider)
    for start in range(0, count, 50):
        msgs = [make(k) for k in range(start, start + 50)]
        conv = conversion.conversation(pb.Conversation(messages=msgs), memo=cache)
        request.build(conv, plan(mdl), memo)


tiny, large = convo.tiny_message, convo.large_message


@pytest.mark.parametrize("make,count", [(tiny, 3000), (large, 100)])
def test_the_charge_is_the_real_memory(make, count):
    memo = Memo(1 << 30)
    gc.collect()
    tracemalloc.start()
    try:
        _fill(memo, make, count)
        used, accounted = cleared(memo)
    finally:
        tracemalloc.stop()
    # what the memo frees is what it was charged; a constant string every element shares (a
    # key such as "role") is charged each time, so the charge errs high, never low
    # (tiny messages: about 1.6 times; large ones: close to 1)
    assert used * 0.9 <= accounted <= used * 2, (used, accounted)


def test_the_bound_holds_oldest_out():
    bound = 256 * 1024
    memo = Memo(bound)
    _fill(memo, large, 60)
    assert 0 < memo.size_bytes <= bound
    memo_all = Memo(1 << 30)
    _fill(memo_all, large, 60)
    assert len(memo) < len(memo_all) and memo_all.size_bytes > bound  # the oldest went
    newest = [k for k in memo_all._items][-1]
    assert memo.get(newest) is not None


@pytest.mark.parametrize("cached", [False, True])
def test_keyed_by_the_message_digest(cached):
    """The pieces are found again under each message's digest (Message.digest, the key the
    memo uses for every entry), whether the message was converted afresh or came from the
    memo; a message without one is lowered afresh and adds nothing."""
    memo = Memo(1 << 30)
    cache = memo if cached else None
    _fill(memo, tiny, 50, cache=cache)
    n = len(memo)
    msgs = [tiny(k) for k in range(50)]
    conv = conversion.conversation(pb.Conversation(messages=msgs), memo=cache)
    digests = {msg.digest for msg in conv.messages}
    assert len(digests) == 50 and all(len(d) == 16 for d in digests)
    assert {k[1] for k in memo.keys() if k[0] == LOWERED} == digests
    hits = memo.hits
    request.build(conv, plan(m.Model(id="claude-sonnet-4-5", provider=m.ANTHROPIC)), memo)
    assert len(memo) == n and memo.hits > hits
    fresh = m.Conversation([dataclasses.replace(x) for x in conv.messages])
    assert not any(x.digest for x in fresh.messages)
    request.build(fresh, plan(m.Model(id="claude-sonnet-4-5", provider=m.ANTHROPIC)), memo)
    assert len(memo) == n


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_session_grown_a_message_at_a_time_resumes_its_earlier_steps_lowering(provider):
    """Each step of a session starts from the elements its previous step put together (the
    PREFIX entry: merges, lead message and trimming redone at the end), and its body is the one
    a build without the memo makes, byte for byte, at every step of every case."""
    memo = Memo(1 << 30)
    resumed_from = []  # per lowering: how many messages it resumed after
    longest = memo.longest

    def recording(candidates):
        k, value = longest(candidates)
        if candidates and candidates[0][1][0] == PREFIX:
            resumed_from.append(k)
        return k, value

    memo.longest = recording
    for i, case in enumerate(_CASES[provider]):
        full = case.request
        mdl = conversion.model(full.model)
        conv = conversion.conversation(full.conversation, memo=memo)
        for n in range(1, len(conv.messages) + 1):
            grown = m.Conversation(conv.messages[:n], session_id=conv.session_id)
            try:
                with_memo = request.build(grown, plan(mdl), memo).body_json()
            except request.BadInput as e:
                with pytest.raises(request.BadInput, match=re.escape(e.field)):
                    request.build(grown, plan(mdl))
                continue
            assert with_memo == request.build(grown, plan(mdl)).body_json(), (i, n)
    # the steps did resume from the step before (a case's first step, a compaction that moved
    # the start, and media on Bedrock, lowered whole without the memo, do not)
    assert sum(k > 0 for k in resumed_from) >= len(resumed_from) // 2, resumed_from


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_session_resent_from_an_earlier_step_answers_the_same(provider):
    """A session's step keeps its entries in place of the ones it resumed from (PREFIX, CHAIN,
    BODY): a client that goes back two steps and on from there (a regenerated answer) finds
    none of those and builds the body, its digests and its figures afresh from the messages'
    entries, the same as without the memo, and its next step resumes from it."""
    from contextsvc import prefix, step

    memo, resent = Memo(1 << 30), 0
    for mdl, system, grown in _growing_sessions(provider, memo):
        if len(grown.messages) < 3:
            continue
        for n in (len(grown.messages), len(grown.messages) - 2, len(grown.messages) - 1):
            conv = m.Conversation(grown.messages[:n], session_id=grown.session_id)
            p = plan(mdl, system=system, hashes=True)
            try:
                got = step.run(conv, p, memo=memo)
            except request.BadInput:
                continue
            want = step.run(conv, p)
            assert got.measurement == want.measurement
            assert got.request.body_json() == want.request.body_json()
            assert prefix.encode(got.request.digests, 64) == prefix.encode(want.request.digests, 64)
            resent += 1
    assert resent > len(_CASES[provider])


def _growing_sessions(provider: str, memo: Memo):
    """(model, system, conversation) of each step of each case of provider's corpus, the session
    grown a message at a time, converted through memo."""
    for case in _CASES[provider]:
        full = case.request
        mdl = conversion.model(full.model)
        system = conversion.system(full.system)
        conv = conversion.conversation(full.conversation, memo=memo)
        for n in range(1, len(conv.messages) + 1):
            yield mdl, system, m.Conversation(conv.messages[:n], session_id=conv.session_id)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_prefix_hashing_resumes_after_the_earlier_steps_elements(provider):
    """With the prefix digests asked (Assemble), a step hashes only the message elements it adds
    after the ones its previous step hashed after the same tools and system (CHAIN); the digest
    at every element, each breakpoint's prefix bytes and SHA-256, and the cache state equal those
    of a build without the memo, at every step of every case."""
    from contextsvc import prefix

    memo = Memo(1 << 30)
    hashed = []  # per build with the memo: message elements hashed, of all
    original = prefix._text

    def counting(element, entries, made):
        counting.n += 1
        return original(element, entries, made)

    prefix._text = counting
    try:
        for mdl, system, grown in _growing_sessions(provider, memo):
            counting.n = 0
            try:
                got = request.build(grown, plan(mdl, system=system, hashes=True), memo)
            except request.BadInput:
                continue
            hashed.append((counting.n, sum(got.prefix_chain.counts)))
            want = request.build(grown, plan(mdl, system=system, hashes=True))
            assert got.prefix_chain == want.prefix_chain
            assert [(b.kind, b.index, b.prefix_bytes, b.prefix_sha256) for b in got.breakpoints] == \
                [(b.kind, b.index, b.prefix_bytes, b.prefix_sha256) for b in want.breakpoints]
            assert prefix.encode(got.digests, 64) == prefix.encode(want.digests, 64)
    finally:
        prefix._text = original
    # steps hashed a few elements, not their whole history (Bedrock's media cases are lowered
    # whole, without the memo: most of its long ones)
    assert any(k < total for k, total in hashed), hashed
    # each step's entries took the place of those it resumed from (the hashing's and the
    # lowering's): the ones left are the last of each case's session, and those a compaction or
    # a first message left behind (the lowering's, twice where the estimate lowers its own
    # request with media as placeholders)
    for kind, per_case in ((prefix.CHAIN, 2), (PREFIX, 3)):
        kept = sum(key[0] == kind for key in memo.keys())
        assert 0 < kept <= per_case * len(_CASES[provider]), (kind, kept, len(hashed))
    if provider != m.BEDROCK:
        assert sum(k <= 6 for k, total in hashed if total > 12) >= sum(total > 12 for _, total in hashed) // 2, hashed


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_body_copies_the_elements_its_earlier_step_encoded(provider):
    """Assemble's body copies the element list of its session's previous step (BODY) where an
    element's text is the very one that step encoded, and encodes the others: the body equals a
    build's without the memo byte for byte at every step of every case, with the cache markers
    moving along the history; and most steps encode only a few elements."""
    memo = Memo(1 << 30)
    encoded = []  # per body with an earlier step's list: (elements encoded, elements)
    original = request.Request._list_pieces

    def counting(self, texts):
        pieces = original(self, texts)
        if len(pieces) < len(texts):
            encoded.append((sum(isinstance(p, bytes) for p in pieces), len(texts)))
        return pieces

    request.Request._list_pieces = counting
    try:
        for mdl, system, grown in _growing_sessions(provider, memo):
            try:
                got = request.build(grown, plan(mdl, system=system, hashes=True), memo).body_json()
            except request.BadInput:
                continue
            assert got == request.build(grown, plan(mdl, system=system, hashes=True)).body_json()
            # and again: the same step twice (a retry) copies its own list
            assert request.build(grown, plan(mdl, system=system, hashes=True), memo).body_json() == got
    finally:
        request.Request._list_pieces = original
    assert encoded, "no step copied an earlier step's elements"
    # each step's entry took the place of the one it copied from: the entries left are the last
    # of each case's session, and those a compaction or a first message left behind
    kept = sum(key[0] == BODY for key in memo.keys())
    assert kept <= 2 * len(_CASES[provider]), kept
    if provider != m.BEDROCK:  # its media cases are lowered whole, without the memo
        assert sum(k <= 6 for k, total in encoded if total > 12) >= sum(total > 12 for _, total in encoded) // 2, \
            encoded


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_head_stretch_adds_to_its_earlier_steps_sum(provider):
    """A step's calibrated head stretch (most of a long history) is its previous step's sum
    (PROFILES) with only the profiles that are not the very same tuples taken out and added: every
    figure of every step of every case equals a step's without the memo, and most steps added
    only a few profiles."""
    import importlib

    from contextsvc import native, step

    figures = importlib.import_module("contextsvc.step.figures")

    memo = Memo(1 << 30)
    added = []  # per head taken from an earlier sum: (profiles summed afresh, the head's)
    original = native.sum_profiles

    def counting(profiles, extra):
        counting.n += len(profiles)
        return original(profiles, extra)

    counting.n = 0

    head_profile = figures._head_profile

    def recording(profiles, at, earlier, same):
        counting.n = 0
        out = head_profile(profiles, at, earlier, same)
        if earlier is not None:
            added.append((counting.n, at))
        return out

    figures.native.sum_profiles, figures._head_profile = counting, recording
    try:
        for mdl, system, grown in _growing_sessions(provider, memo):
            try:
                got = step.run(grown, plan(mdl, system=system, hashes=True), memo=memo).measurement
            except request.BadInput:
                continue
            assert got == step.run(grown, plan(mdl, system=system, hashes=True)).measurement
    finally:
        figures.native.sum_profiles, figures._head_profile = original, head_profile
    assert added, "no step started from an earlier step's sum"
    # each step's entry took the place of the one it started from
    assert sum(key[0] == figures.PROFILES for key in memo.keys()) <= 2 * len(_CASES[provider])
    if provider != m.BEDROCK:  # its media cases are lowered whole, without the memo
        assert sum(k <= 8 for k, at in added if at > 12) >= sum(at > 12 for _, at in added) // 2, added


@pytest.mark.parametrize("where", ["file", "attachment"])
def test_bedrock_media_anywhere_is_lowered_with_the_whole_request(where):
    """Bedrock names each document distinctly across the request, so a message with media does
    not lower alone as it does in the whole body: with the memo (its entries made by earlier
    steps, where each document was the only one), the body still names the second "report" PDF
    "report (2)", as the build without the memo does, whether the PDF is a file part or a tool
    output's attachment (Message.has_media)."""
    mdl = m.Model(id="anthropic.claude-sonnet-4-5", provider=m.BEDROCK)
    pdf = m.File(mime="application/pdf", filename="report.pdf", data=b"%PDF-1.4 report")

    def turn(k: int) -> list:
        text = m.Part(f"u{k}t", m.Text(f"read the report, take {k}"))
        if where == "file":
            return [m.Message(f"u{k}", m.USER, [text, m.Part(f"u{k}f", pdf)])]
        ask = m.Message(f"u{k}", m.USER, [text])
        call = m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"a{k}c", m.Tool(
            call_id=f"call_{k}", tool="read", status=m.COMPLETED, input={"path": "report.pdf"}, output="attached",
            attachments=[pdf]))], time_completed_ms=1)
        return [ask, call]

    def conv(msgs):
        return conversion.conversation(pb.Conversation(messages=[conversion.message_to_pb(x) for x in msgs]), memo=cache)

    memo, cache = Memo(1 << 30), Memo(1 << 30)
    first, second = turn(1), turn(2)
    assert any(msg.has_media for msg in first)
    # each turn stepped alone first: the memo holds each message's lowering with its PDF the only one
    for msgs in (first, second):
        request.build(conv(msgs), plan(mdl), memo)
    both = conv(first + second + [m.Message("u3", m.USER, [m.Part("u3t", m.Text("go on"))])])
    got = request.build(both, plan(mdl), memo).body_json()
    assert got == request.build(both, plan(mdl)).body_json()
    assert b'"name":"report"' in got and b'"name":"report (2)"' in got


# ---- runs of messages of one role ----------------------------------------------------------------

_MERGING = [m.ANTHROPIC, m.BEDROCK, m.GEMINI]  # the formats that join consecutive messages of one role
_REAL, _STAND_IN = "c2lnbmF0dXJl", "skip_thought_signature_validator"


def _reference_sign(parts: list) -> list:
    """The first functionCall signed as Gemini wants, read straight: when it carries no signature
    Gemini gave, the signature of the signed part nearest it (before it first) moves to it."""
    first = next((i for i, p in enumerate(parts) if "functionCall" in p), None)
    if first is None or parts[first].get("thoughtSignature") not in (None, _STAND_IN):
        return parts
    signed = [i for i, p in enumerate(parts) if p.get("thoughtSignature") not in (None, _STAND_IN)]
    if signed:
        nearest = min(signed, key=lambda i: (abs(i - first), i > first))
        donor = dict(parts[nearest])
        parts[first] = {**parts[first], "thoughtSignature": donor.pop("thoughtSignature")}
        parts[nearest] = donor
    return parts


def _reference_joined(fmt, earlier: list, later: list) -> list:
    """Two consecutive messages' blocks joined, read straight (a new list): later's leading
    reasoning goes first unless earlier opens with its own; on Gemini, the turn's first call signed."""
    if fmt.name == m.GEMINI:
        return _reference_sign(earlier + later)
    n = 0
    while n < len(later) and fmt.opens_turn(later[n]):
        n += 1
    if n == 0 or (earlier and fmt.opens_turn(earlier[0])):
        return earlier + later
    return later[:n] + earlier + later[n:]


_BLOCKS = {
    m.ANTHROPIC: st.sampled_from([{"type": "thinking", "thinking": "t", "signature": "s"},
                                  {"type": "redacted_thinking", "data": "d"}, {"type": "text", "text": "x"},
                                  {"type": "tool_use", "id": "c", "name": "read", "input": {}}]),
    m.BEDROCK: st.sampled_from([{"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}},
                                {"text": "x"}, {"toolUse": {"toolUseId": "c", "name": "read", "input": {}}}]),
    m.GEMINI: st.builds(lambda kind, signature: {**kind, **signature},
                        st.sampled_from([{"text": "x"}, {"functionCall": {"name": "read", "args": {}}}]),
                        st.sampled_from([{}, {"thoughtSignature": _STAND_IN}]
                                        + [{"thoughtSignature": _REAL + s} for s in "ABC"])),
}


def _runs(provider):
    """The blocks of up to 8 messages of one role, each block an object of its own."""
    return st.lists(st.lists(_BLOCKS[provider].map(dict), max_size=4), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(_MERGING).flatmap(lambda provider: st.tuples(st.just(provider), _runs(provider))))
# two signed texts before the turn's first call, which comes later: the nearer signature moves to it
@example(case=(m.GEMINI, [[{"text": "x"}], [{"text": "x", "thoughtSignature": _REAL + "A"},
                                            {"text": "x", "thoughtSignature": _REAL + "B"}],
                          [{"functionCall": {"name": "read", "args": {}}}]]))
def test_a_run_of_one_role_joins_as_its_messages_joined_one_after_another(case):
    """A run's blocks equal its messages' joined one pair at a time, as the rule reads (reasoning
    first, Gemini's first call signed), and no message's blocks change (the memo keeps them)."""
    from contextsvc.lowering.registry import FORMATS

    provider, messages = case
    fmt = FORMATS[provider]
    before = repr(messages)
    want = list(messages[0])
    for later in messages[1:]:
        want = _reference_joined(fmt, want, later)
    run = fmt.run(list(messages[0]))
    for later in messages[1:]:
        run.add(later)
    assert run.blocks == want
    assert repr(messages) == before


class _ReadPart(dict):
    """A block that counts the reads of its keys."""
    reads = 0

    def __contains__(self, key):
        _ReadPart.reads += 1
        return super().__contains__(key)

    def get(self, key, default=None):
        _ReadPart.reads += 1
        return super().get(key, default)

    def __getitem__(self, key):
        _ReadPart.reads += 1
        return super().__getitem__(key)


@pytest.mark.parametrize("provider", _MERGING)
def test_a_run_of_one_role_reads_each_block_a_few_times(provider):
    """4,000 messages of one role, the last with a call (Gemini signs the turn's first call):
    each block is read a few times, not once per message after it (Gemini's signing read the
    whole turn at every message; a run of 20,000 user messages took 8 s to measure)."""
    from contextsvc.lowering.registry import FORMATS

    fmt, n = FORMATS[provider], 4_000
    texts = {m.ANTHROPIC: {"type": "text", "text": "x"}, m.BEDROCK: {"text": "x"}, m.GEMINI: {"text": "x"}}
    call = {m.ANTHROPIC: {"type": "tool_use", "id": "c", "name": "read", "input": {}},
            m.BEDROCK: {"toolUse": {"toolUseId": "c", "name": "read", "input": {}}},
            m.GEMINI: {"functionCall": {"name": "read", "args": {}}, "thoughtSignature": _STAND_IN}}[provider]
    messages = [[_ReadPart(texts[provider])] for _ in range(n - 1)] + [[_ReadPart(call)]]
    _ReadPart.reads = 0
    run = fmt.run(list(messages[0]))
    for later in messages[1:]:
        run.add(later)
    assert len(run.blocks) == n
    assert _ReadPart.reads <= 4 * n, _ReadPart.reads


def _one_role_runs() -> pb.Conversation:
    """Runs of user and of assistant messages: plain asks, answers opening with signed reasoning,
    tool calls whose results join the user's asks after them."""
    def thought(pid):
        return pb.Part(id=pid, reasoning=pb.ReasoningPart(text="thinking", signature=_REAL))

    messages = [convo.user(f"u{k}", convo.text(f"u{k}t", f"ask {k}")) for k in range(3)]
    messages += [convo.assistant("a3", thought("a3r"), convo.text("a3t", "Reading it.")),
                 convo.assistant("a4", thought("a4r"), convo.tool("a4c", "call_1", "read", {"path": "a.py"}, "one")),
                 convo.assistant("a5", convo.text("a5t", "And b."), convo.tool("a5c", "call_2", "read", {}, "two"))]
    messages += [convo.user(f"u{k}", convo.text(f"u{k}t", f"ask {k} ")) for k in range(6, 9)]
    messages += [convo.assistant(f"a{k}", thought(f"a{k}r"), convo.text(f"a{k}t", f"answer {k} "))
                 for k in range(9, 12)]
    return pb.Conversation(session_id="runs", messages=messages)


@pytest.mark.parametrize("provider, model_id", [(m.ANTHROPIC, "claude-sonnet-4-5"),
                                                 (m.BEDROCK, "anthropic.claude-sonnet-4-5"),
                                                 (m.GEMINI, "gemini-3-pro-preview")])
def test_a_run_grown_a_message_at_a_time_leaves_what_the_memo_keeps_as_it_was(provider, model_id):
    """Each step merges its new message into the last element its previous step put together
    and the memo keeps (PREFIX), and into the elements of messages lowered alone (LOWERED): the
    step joins them on copies, so what the memo keeps (or kept, and another request may still
    read) stays as it was, and the body is the one a build without the memo makes, byte for byte."""
    memo = Memo(1 << 30)
    mdl = m.Model(id=model_id, provider=provider)
    conv = conversion.conversation(_one_role_runs(), memo=memo)

    def shown(kind, value) -> str:
        return repr((value.elements, value.roles, value.sources, value.keys) if kind == PREFIX else value)

    kept = {}  # id of each PREFIX and LOWERED entry seen -> (kind, the entry, how it read then)
    for n in range(1, len(conv.messages) + 1):
        grown = m.Conversation(conv.messages[:n], session_id=conv.session_id)
        assert request.build(grown, plan(mdl), memo).body_json() == request.build(grown, plan(mdl)).body_json(), n
        for key in memo.keys():
            if key[0] in (PREFIX, LOWERED):
                value = memo.get(key)
                kept.setdefault(id(value), (key[0], value, shown(key[0], value)))
        for kind, value, seen in kept.values():
            assert shown(kind, value) == seen, (n, kind)
    assert sum(kind == PREFIX for kind, _, _ in kept.values()) >= len(conv.messages) - 1
