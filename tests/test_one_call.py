"""One call per step (design.md §6): Assemble carries every figure of Measure for the same body, Measure
takes every per-step field, and each response reports, statelessly, what changed in the cached
prefix since the previous one. All over a real server."""
from __future__ import annotations

import hashlib
import json

import grpc
import pytest
from hypothesis import given, settings, strategies as st

from helpers import convo
from helpers.server import start_server
from contextsvc import config, prefix
from contextsvc.errors import BadInput
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.rpc import SYSTEM, TOOLS
from helpers.metrics import scrape
from helpers.rpc import cache_steps, long_session

PROVIDERS = {pb.PROVIDER_ANTHROPIC: "anthropic", pb.PROVIDER_OPENAI: "openai", pb.PROVIDER_BEDROCK: "bedrock",
             pb.PROVIDER_OPENROUTER: "openrouter", pb.PROVIDER_OPENAI_COMPATIBLE: "openai-compatible",
             pb.PROVIDER_OPENAI_RESPONSES: "openai-responses"}
STEP_FIELDS = ("editor", "step", "max_steps", "plan_reminder", "cache_hints", "cache_ttl", "tools_disabled",
               "exact", "previous_cache_state")
# the formats here that join the next user text to the tool results as appended blocks (merged_key;
# Gemini's puts it before the function responses: a change, not an append)
BLOCKS_APPENDED = {pb.PROVIDER_ANTHROPIC, pb.PROVIDER_BEDROCK}


def step_fields(**over):
    """Every per-step field set, as an agent's step would."""
    kw = dict(editor=pb.EditorContext(current_time="2026-12-02T17:00:00+00:00", working_directory="/repo",
                                      active_file="src/app.py", open_tabs=["src/app.py", "tests/test_app.py"]),
              step=3, max_steps=3, plan_reminder="Stay in plan mode.",
              cache_hints=[pb.CacheHint(system_block=0)], cache_ttl=pb.CACHE_TTL_1H, tools_disabled=False,
              exact=True)
    kw.update(over)
    return kw


def both(stub, conv, provider=pb.PROVIDER_ANTHROPIC, **kw):
    common = dict(conversation=conv, model=convo.model(provider=provider), tools=TOOLS, system=SYSTEM)
    a = stub.Assemble(pb.AssembleRequest(**common, **kw), timeout=30)
    m = stub.Measure(pb.MeasureRequest(**common, want_cache_state=True, **kw), timeout=30)
    cheap = {k: v for k, v in kw.items() if k != "previous_cache_state"}
    plain = stub.Measure(pb.MeasureRequest(**common, **cheap), timeout=30)  # no digests asked
    return a, m, plain


# what a previous_cache_state changes: the projection from the reported usage does not add the
# tools and system again when the state shows them unchanged (step.decision._resent)
PROJECTIONS = ("projected", "projected_calibrated", "projected_self_calibrated", "projected_exact", "should_compact")


def assert_same_figures(a, m, but=()):
    for f in pb.Figures.DESCRIPTOR.fields:
        if f.name in but:
            continue
        assert getattr(a.figures, f.name) == getattr(m, f.name), f.name
        assert a.figures.HasField(f.name) == m.HasField(f.name) if f.message_type else True, f.name


def test_figures_has_every_measure_figure_with_the_same_numbers():
    # cache_state and cache_report are the step's, not figures: Assemble has its own
    measure = {f.name: (f.number, f.type) for f in pb.MeasureResponse.DESCRIPTOR.fields
               if f.name not in ("cache_state", "cache_report")}
    figures = {f.name: (f.number, f.type) for f in pb.Figures.DESCRIPTOR.fields}
    assert measure == figures
    for name in STEP_FIELDS[:-1]:
        a, m = pb.AssembleRequest.DESCRIPTOR.fields_by_name[name], pb.MeasureRequest.DESCRIPTOR.fields_by_name[name]
        assert (a.type, a.is_repeated, a.message_type and a.message_type.name) == \
            (m.type, m.is_repeated, m.message_type and m.message_type.name), name


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_measure_and_assemble_agree_on_every_figure_with_every_step_field(stub, provider):
    first = stub.Assemble(pb.AssembleRequest(conversation=convo.small_conversation(),
                                             model=convo.model(provider=provider), tools=TOOLS, system=SYSTEM),
                          timeout=10)
    a, m, plain = both(stub, convo.small_conversation(), provider,
                       **step_fields(previous_cache_state=first.cache_state,
                                     cache_hints=[] if provider == pb.PROVIDER_BEDROCK else [pb.CacheHint(system_block=0)]))
    assert {"environment_details", "plan_reminder", "max_steps"} <= set(a.injected)
    assert a.figures.exact.tokens > 0 and a.figures.decision.tokens > 0
    assert a.body_bytes == len(a.body) == m.body_bytes == a.figures.body_bytes
    assert_same_figures(a, m)
    assert_same_figures(a, plain, but=PROJECTIONS)  # plain has no previous_cache_state
    assert plain.has_baseline and plain.projected > a.figures.projected  # the tools and system counted again
    assert all(getattr(plain, f) >= getattr(a.figures, f) for f in PROJECTIONS)
    assert not plain.cache_state and not plain.HasField("cache_report")
    assert m.cache_state == a.cache_state and m.cache_report == a.cache_report
    assert a.cache_report.compared  # the step injected a trailing message: a break, priced
    assert a.cache_report.rewrite.method == a.figures.decision.method


def test_measure_and_assemble_agree_when_the_payload_guard_trips(stub):
    conv = long_session(turns=24, output_chars=60_000)  # about 1.4 MB of tool output
    a, m, plain = both(stub, conv, **step_fields(max_steps=0))
    assert a.guard_tripped and a.pruned_part_ids and not a.over_payload_limit
    assert a.body_bytes == len(a.body) == m.body_bytes < 1_250_000
    assert_same_figures(a, m)
    assert_same_figures(a, plain)


def test_garbage_previous_cache_state_is_invalid_argument_naming_the_field(stub):
    good = stub.Assemble(pb.AssembleRequest(conversation=convo.small_conversation(), model=convo.model(),
                                            tools=TOOLS, system=SYSTEM), timeout=10).cache_state
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x40
    for bad in (b"\x00", b"garbage" * 20, good[:-1], bytes(flipped), good + b"x", b"CX\x09" + good[3:]):
        for call, req in ((stub.Assemble, pb.AssembleRequest), (stub.Measure, pb.MeasureRequest)):
            with pytest.raises(grpc.RpcError) as e:
                call(req(conversation=convo.small_conversation(), model=convo.model(), previous_cache_state=bad),
                     timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
            assert "previous_cache_state" in e.value.details()


def test_the_state_stays_bounded_and_groups_elements_of_a_long_session():
    n = 10_000
    chain = [prefix._short(str(i).encode()) for i in range(n)]
    d = prefix.Digests((3, 2, n - 5), chain, [0] * n, bytes(8))
    state = prefix.encode(d, 512)
    assert len(state) < 512 * 9 + 64
    before = prefix.decode(state)
    assert before.group == 20
    changed = prefix.Digests(d.counts, chain[:4321] + [b"x" * 8] * (n - 4321), d.pruned, d.compaction)
    c = prefix.compare(before, changed)
    assert (c.segment, c.index, c.flat, c.resolution) == ("messages", 4320 - 5, 4320, 20)  # the group's start
    assert prefix.compare(before, d) is None
    grown = prefix.Digests((3, 2, n + 1), chain + [b"y" * 8], d.pruned + [0], d.compaction)
    assert prefix.compare(before, grown).cause == "new_turn"


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), max_groups=st.integers(1, 64), data=st.data())
def test_a_grouped_state_holds_each_groups_last_digest_and_pruned_count(n, max_groups, data):
    """Groups of ceil(n / max_groups) elements, the last one shorter when they do not divide n."""
    chain = [prefix._short(str(i).encode()) for i in range(n)]
    pruned = data.draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    state = prefix.decode(prefix.encode(prefix.Digests((0, 0, n), chain, pruned, bytes(8)), max_groups))
    group = -(-n // max_groups)
    starts = range(0, n, group)
    assert state.group == group
    assert state.ends == [chain[min(k + group, n) - 1] for k in starts]
    assert state.pruned == [sum(pruned[k:k + group]) for k in starts]


def test_a_version_1_state_is_still_read_with_its_tool_choice_unknown():
    """A state from a server before the tool choice was recorded (version 1: no choice digest)."""
    chain = [prefix._short(str(i).encode()) for i in range(6)]
    d = prefix.Digests((1, 2, 3), chain, [0] * 6, bytes(8), prefix._short(b"none"))
    head = b"CX" + bytes([1, 1, 2, 3, 1]) + d.compaction
    v1 = head + b"".join(chain) + bytes(6)
    before = prefix.decode(v1 + hashlib.sha256(v1).digest()[:4])
    assert (before.counts, before.group, before.ends, before.choice) == ((1, 2, 3), 1, chain, None)
    assert prefix.compare(before, d) is None  # an unknown choice is not a change
    now = prefix.decode(prefix.encode(d, 512))
    assert now.choice == d.choice and prefix.compare(now, d) is None
    c = prefix.compare(now, prefix.Digests(d.counts, chain, d.pruned, d.compaction, prefix._short(b"auto")))
    assert (c.segment, c.index, c.flat, c.cause, c.prefix_kept) == ("messages", 0, 3, "tool_choice", False)



def test_a_version_2_state_is_still_read_with_its_tools_figures_unknown():
    """A state from a server before the figures of the body's tools and system were recorded
    (version 2): read, its overhead unknown (a projection then adds the tools whole again); a
    version 3 state carries them."""
    chain = [prefix._short(str(i).encode()) for i in range(6)]
    d = prefix.Digests((1, 2, 3), chain, [0] * 6, bytes(8), prefix._short(b"none"))
    v2 = b"CX" + bytes([2, 1, 2, 3, 1]) + d.compaction + d.choice + b"".join(chain) + bytes(6)
    before = prefix.decode(v2 + hashlib.sha256(v2).digest()[:4])
    assert (before.counts, before.ends, before.choice) == ((1, 2, 3), chain, d.choice)
    assert before.overhead is None and prefix.compare(before, d) is None
    now = prefix.decode(prefix.encode(d, 512, prefix.Overhead(11_234, 13_480)))
    assert now.overhead == prefix.Overhead(11_234, 13_480) and now.ends == chain
    # a body of no tools and no system is figured at 0, which is not "not figured"
    assert prefix.decode(prefix.encode(d, 512, prefix.Overhead(0, 0))).overhead == prefix.Overhead(0, 0)
    assert prefix.decode(prefix.encode(d, 512, None)).overhead is None
    # written as version 2 for a fleet whose older replicas read no later one: what they read
    old = prefix.encode(d, 512, prefix.Overhead(11_234, 13_480), version=2)
    assert old[2] == 2 and prefix.decode(old).overhead is None and old == v2 + hashlib.sha256(v2).digest()[:4]
    with pytest.raises(ValueError, match="cache_state_version"):
        config.AssembleConfig(cache_state_version=6)


# ---- the report against a byte comparison of consecutive bodies ------------------------------

_MARKER_KEYS = ("cache_control", "copilot_cache_control")


def _unmarked(x):
    """A body value with the cache markers removed (and the one-part form a marker needs on the
    gateways turned back into the plain string it came from)."""
    if isinstance(x, dict):
        out = {k: _unmarked(v) for k, v in x.items() if k not in _MARKER_KEYS}
        content = out.get("content")
        if "role" in out and isinstance(content, list) and len(content) == 1 \
                and set(content[0]) == {"type", "text"} and content[0]["type"] == "text":
            out["content"] = content[0]["text"]
        return out
    if isinstance(x, list):
        return [_unmarked(v) for v in x if not (isinstance(v, dict) and set(v) == {"cachePoint"})]
    return x


def cache_order(body: dict, provider) -> dict:
    """The body's elements in cache order, per segment, markers removed, as JSON texts."""
    if provider == pb.PROVIDER_BEDROCK:
        tools, system, messages = body.get("toolConfig", {}).get("tools", []), body.get("system", []), body["messages"]
    elif provider == pb.PROVIDER_ANTHROPIC:
        tools, system, messages = body.get("tools", []), body.get("system", []), body["messages"]
    else:  # system (Responses: developer) messages lead the list
        msgs = body["input"] if provider == pb.PROVIDER_OPENAI_RESPONSES else body["messages"]
        head = next((i for i, x in enumerate(msgs) if x.get("role") not in ("system", "developer")), len(msgs))
        tools, system, messages = body.get("tools", []), msgs[:head], msgs[head:]
    dump = lambda xs: [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in _unmarked(xs)]
    return {"tools": dump(tools), "system": dump(system), "messages": dump(messages)}


def _blocks_appended(was: str, now: str) -> bool:
    """Whether element now is element was with blocks appended to its list of blocks (what the
    providers that cache blocks read the cache of: Anthropic's and Bedrock's content, Gemini's parts)."""
    was, now = json.loads(was), json.loads(now)
    keys = [k for k in ("content", "parts") if isinstance(was.get(k), list) and isinstance(now.get(k), list)]
    return bool(keys) and all(
        {k: v for k, v in was.items() if k != key} == {k: v for k, v in now.items() if k != key}
        and now[key][:len(was[key])] == was[key] and len(now[key]) > len(was[key]) for key in keys[:1])


def expected_report(before: dict, now: dict):
    """(prefix kept, segment, index) by comparing the elements themselves (the previous body's
    last message element may come back with blocks appended: its cache is read)."""
    for segment in ("tools", "system", "messages"):
        p, c = before[segment], now[segment]
        i = next((k for k in range(min(len(p), len(c))) if p[k] != c[k]), min(len(p), len(c)))
        if segment == "messages" and i == len(p) - 1 and _blocks_appended(p[i], c[i]):
            return True, segment, i
        if i < len(p):
            return False, segment, i
        if segment != "messages" and len(c) != len(p):
            return False, segment, i
        if len(c) > len(p):
            return True, segment, i
    return True, "", 0


@pytest.mark.parametrize("figure", ["calibrated", "exact"])
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_report_and_metric_agree_with_a_byte_comparison_of_consecutive_bodies(provider, figure):
    """figure: the decision figure (measure.compaction_figure) the rewrite is given in."""
    s = start_server(measure_overrides={"compaction_figure": figure})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            state, before, breaks, appended = b"", None, {}, 0
            for label, conv, system, cause in cache_steps(provider):
                r = stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(provider=provider),
                                                     tools=TOOLS, system=system, previous_cache_state=state,
                                                     exact=figure == "exact"),
                                  timeout=10)
                now = cache_order(json.loads(r.body), provider)
                if before is None:
                    assert not r.HasField("cache_report"), label
                else:
                    rep = r.cache_report
                    kept, segment, index = expected_report(before, now)
                    assert (rep.compared, rep.prefix_kept, rep.segment, rep.index) == (True, kept, segment, index), label
                    assert rep.resolution == 1 and rep.cause == cause, label
                    assert rep.reused_elements == sum(len(before[x]) for x in ("tools", "system", "messages")
                                                      if x != segment and ["tools", "system", "messages"].index(x)
                                                      < ["tools", "system", "messages"].index(segment)) + index, label
                    assert 0 < rep.rewrite.tokens <= r.figures.decision.tokens, label
                    assert rep.rewrite.method == r.figures.decision.method
                    if kept and segment == "messages":
                        # what the provider writes to its cache: the elements appended, or the
                        # blocks appended to the last one (it reads the blocks it cached); a figure
                        # under twice their bytes as compared (markers out: a marker is written with
                        # its element; margins and the tokenizer's prior included), where the
                        # element before them is thousands
                        written = sum(len(x.encode()) for x in now["messages"][index:])
                        if index == len(before["messages"]) - 1:
                            was, grown = json.loads(before["messages"][index]), json.loads(now["messages"][index])
                            key = "parts" if "parts" in grown else "content"
                            written += len(json.dumps(grown[key][len(was[key]):]).encode()) - len(
                                now["messages"][index].encode())
                            appended += 1
                        assert rep.rewrite.tokens <= 2 * written + 16, (label, rep.rewrite.tokens, written)
                    if not kept:
                        breaks[(segment, cause)] = breaks.get((segment, cause), 0) + 1
                    if label == "compaction":
                        assert (segment, index) == ("messages", 0)
                    if label == "system":
                        assert segment == "system"
                    if label == "prune":  # the element that held the pruned output
                        assert "def f1()" in before["messages"][index] and "def f1()" not in now["messages"][index]
                before, state = now, r.cache_state
        # where the format joins the next user text to the results (its blocks: merged_key)
        assert appended == (1 if provider in BLOCKS_APPENDED else 0)
        samples = scrape(s.metrics_port)
        got = {(dict(k[1])["segment"], dict(k[1])["cause"]): v for k, v in samples.items()
               if k[0] == "contextsvc_prefix_breaks_total"}
        assert got == breaks and set(breaks) == {("messages", "prune"), ("system", "other"),
                                                 ("messages", "compaction")}
        assert all(dict(k[1])["provider"] == PROVIDERS[provider] for k in samples
                   if k[0] == "contextsvc_prefix_breaks_total")
    finally:
        s.stop(grace=1)


def _whitespace_step(stub, provider, conv_steps, **request):
    """The cache report of the step where a whitespace-only answer joined the next user text to
    the tool results (cache_steps' "whitespace answer"), with the bodies of it and the step before."""
    state, before = b"", None
    for label, conv, system, _ in conv_steps:
        r = stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(provider=provider), tools=TOOLS,
                                             system=system, previous_cache_state=state, **request), timeout=10)
        now = cache_order(json.loads(r.body), provider)
        if label == "whitespace answer":
            return r, before, now
        before, state = now, r.cache_state
    raise AssertionError("no whitespace answer step")


@pytest.mark.parametrize("provider", sorted(BLOCKS_APPENDED & set(PROVIDERS)))
def test_a_grown_last_element_is_read_in_a_grouped_state_too(provider):
    """A long session's state groups its elements (assemble.cache_state_groups): the element that
    came back with blocks appended is still known exactly (the digest is of everything up to its
    cached blocks), the prefix kept, and the rewrite of the appended blocks alone (reported as a
    break of the whole group, with that element whole, before)."""
    s = start_server(assemble_overrides={"cache_state_groups": 3})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            r, before, now = _whitespace_step(pb_grpc.ContextServiceStub(ch), provider, cache_steps(provider))
    finally:
        s.stop(grace=1)
    rep = r.cache_report
    assert expected_report(before, now) == (True, "messages", len(before["messages"]) - 1)
    assert (rep.prefix_kept, rep.cause, rep.segment, rep.index, rep.resolution) == (
        True, "new_turn", "messages", len(before["messages"]) - 1, 1)
    assert 0 < rep.rewrite.tokens < 100


@pytest.mark.parametrize("provider", sorted(BLOCKS_APPENDED & set(PROVIDERS)))
def test_media_in_the_appended_blocks_are_in_the_rewrite(provider):
    """An image the next user message brings, joined to the tool results by a whitespace-only
    answer: the provider writes it to its cache, at the decision figure's cost per media item."""
    steps = list(cache_steps(provider))
    image = pb.Part(id="img", file=pb.FilePart(mime="image/png", filename="shot.png",
                                               data=b"\x89PNG\r\n\x1a\n" + bytes(2000)))
    for label, conv, _, _ in steps:
        if label == "whitespace answer":
            conv.messages[-1].parts.append(image)
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            r, _, _ = _whitespace_step(pb_grpc.ContextServiceStub(ch), provider, steps)
    finally:
        s.stop(grace=1)
    per_item = config.MeasureConfig().media_decision_tokens
    assert r.cache_report.prefix_kept
    assert per_item <= r.cache_report.rewrite.tokens < per_item + 100, r.cache_report


@pytest.mark.parametrize("varints,why", [
    (b"\x81", "is truncated"),  # a count whose continuation byte never comes
    (b"\x80" * 10 + b"\x01", "has an overlong number"),  # a count over 64 bits
])
def test_a_cache_state_with_a_broken_count_is_refused_naming_the_field(varints, why):
    """A state whose check bytes are right (anyone can compute them) but whose counts cannot be
    read: BadInput naming the field and why, never an IndexError or a number read past the end."""
    body = prefix._MAGIC + bytes([prefix.STATE_VERSION]) + varints
    raw = body + hashlib.sha256(body).digest()[:prefix._CHECK_BYTES]
    with pytest.raises(BadInput) as e:
        prefix.decode(raw)
    assert e.value.field == prefix.STATE_FIELD and why in str(e.value), e.value
