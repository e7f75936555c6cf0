"""bench/cache_model.py follows Anthropic's documented cache rules, and bench/cache_sim.py's
accounting adds up over sessions run through a real server."""
from __future__ import annotations


import pytest

import cache_model as cm
import cache_sim

MARK = {"type": "ephemeral"}
TOOLS = [{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}]


def words(tag, n):
    """About 2n tokens of text no other call repeats."""
    return " ".join(f"{tag}{i}" for i in range(n))


BIG_SYSTEM = words("sys", 1500)  # well over 1,024 tokens


def user(text, marked=False):
    block = {"type": "text", "text": text}
    if marked:
        block["cache_control"] = MARK
    return {"role": "user", "content": [block]}


def assistant(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def body(messages, system=BIG_SYSTEM, **extra):
    return {"model": "claude-sonnet-4-5", "max_tokens": 1000, "tools": TOOLS,
            "system": [{"type": "text", "text": system, "cache_control": MARK}], "messages": messages, **extra}


def send(cache, b):
    u = cache.send(cm.parse(b))
    assert u.read + u.written + u.uncached == u.total and min(u.read, u.written, u.uncached) >= 0
    return u


def system_tokens(b):
    """Tokens of the tools and system blocks: what the system breakpoint's entry holds."""
    count = cm.TokenCounter()
    return sum(count(x.counted) for x in cm.parse(b).blocks if x.segment != "messages")


def history(k, marked_last=True):
    msgs = []
    for i in range(k):
        msgs += [user(f"question {i} " + words(f"q{i}_", 40)), assistant(f"answer {i} " + words(f"a{i}_", 40))]
    msgs.append(user("latest " + words("latest", 40), marked=marked_last))
    return msgs


# ---- must hit -----------------------------------------------------------------------------------

def test_identical_request_reads_all_of_it():
    c = cm.Cache()
    b = body(history(3))
    first = send(c, b)
    assert first.read == 0 and first.written == first.total
    again = send(c, b)
    assert again.read == again.total and again.written == 0


def test_growth_after_the_last_breakpoint_reads_the_old_prefix_and_writes_the_new_tail():
    c = cm.Cache()
    msgs = history(3)
    first = send(c, body(msgs))
    grown = [*msgs, assistant("next step " + words("n", 40)), user("tool result " + words("r", 40), marked=True)]
    grown[len(msgs) - 1] = user(msgs[-1]["content"][0]["text"])  # the marker moved on: not a change
    second = send(c, body(grown))
    assert second.read == first.total
    assert second.written == second.total - first.total and second.uncached == 0


def test_unmarked_growth_is_read_up_to_the_breakpoint_and_billed_uncached_after_it():
    c = cm.Cache()
    msgs = history(2)
    first = send(c, body(msgs))
    second = send(c, body([*msgs, assistant("more " + words("m", 40)), user("tail " + words("t", 40))]))
    assert second.read == first.total and second.written == 0 and second.uncached == second.total - first.total


def test_a_match_within_the_lookback_window_hits():
    c = cm.Cache()
    msgs = history(1)
    first = send(c, body(msgs))
    msgs[-1] = user(msgs[-1]["content"][0]["text"])
    # 18 blocks later: the new breakpoint's window (itself and the 19 boundaries before) reaches back
    grown = msgs + [assistant(f"a{i}") if i % 2 else user(f"u{i}") for i in range(1, 18)]
    grown.append(user("end", marked=True))
    assert send(c, body(grown)).read == first.total


def test_bedrock_cache_points_mark_the_block_before_them():
    c = cm.Cache("global.anthropic.claude-sonnet-4-5-20250929-v1:0")
    b = {"modelId": "x", "system": [{"text": BIG_SYSTEM}, {"cachePoint": {"type": "default"}}],
         "messages": [{"role": "user", "content": [{"text": "hello " + words("h", 40)},
                                                   {"cachePoint": {"type": "default"}}]}]}
    p = cm.parse(b, "bedrock")
    assert [blk.marked for blk in p.blocks] == [True, True]
    first = c.send(p)
    again = c.send(cm.parse(b, "bedrock"))
    assert first.written == first.total and again.read == again.total


# ---- must miss ----------------------------------------------------------------------------------

def test_a_prefix_under_the_minimum_length_is_not_written():
    c = cm.Cache("claude-sonnet-4-5")
    small = body([user("hi", marked=True)], system="You are terse.")
    first = send(c, small)
    assert first.total < 1024 and first.written == 0 and first.uncached == first.total
    assert send(c, small).read == 0


def test_the_minimum_depends_on_the_model():
    b = body([user(words("u", 700), marked=True)], system="short")  # ~1,400-2,000 tokens
    sonnet, haiku = cm.Cache("claude-sonnet-4-5"), cm.Cache("claude-haiku-4-5")
    assert 1024 <= send(sonnet, b).written and send(haiku, b).written == 0
    assert cm.min_tokens("claude-opus-4-5") == 4096 and cm.min_tokens("claude-3-5-haiku-latest") == 2048


def test_a_match_more_than_20_blocks_back_misses():
    c = cm.Cache()
    msgs = history(1)
    first = send(c, body(msgs))
    msgs[-1] = user(msgs[-1]["content"][0]["text"])
    grown = msgs + [assistant(f"a{i}") if i % 2 else user(f"u{i}") for i in range(1, 25)]
    grown.append(user("end", marked=True))
    second = send(c, body(grown))
    # only the system breakpoint's entry is found: the old message prefix is 25 blocks back
    assert second.read < first.total and second.read == system_tokens(body(msgs))


def test_a_changed_tool_choice_invalidates_the_messages_cache_only():
    c = cm.Cache()
    b = body(history(3))
    first = send(c, b)
    second = send(c, {**b, "tool_choice": {"type": "none"}})
    assert second.read == system_tokens(b) < first.total
    assert second.written == second.total - second.read


def test_changed_thinking_parameters_invalidate_the_messages_cache():
    c = cm.Cache()
    b = body(history(3), thinking={"type": "enabled", "budget_tokens": 2000})
    send(c, b)
    second = send(c, {**b, "thinking": {"type": "enabled", "budget_tokens": 4000}})
    assert second.read == system_tokens(b)


def test_an_image_added_anywhere_invalidates_the_messages_cache():
    c = cm.Cache()
    msgs = history(3)
    first = send(c, body(msgs))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with_image = [*msgs[:-1], {"role": "user", "content": [*msgs[-1]["content"], image]}]
    with_image[-1]["content"][0] = {"type": "text", "text": msgs[-1]["content"][0]["text"]}
    with_image[-1]["content"][-1] = {**image, "cache_control": MARK}
    second = send(c, body(with_image))
    assert second.read == system_tokens(body(msgs)) < first.total
    # counted as MEDIA_TOKENS (and a few tokens of JSON around it), not by its base64
    assert cm.MEDIA_TOKENS <= second.total - first.total < cm.MEDIA_TOKENS + 20


def test_a_changed_tool_definition_invalidates_everything():
    c = cm.Cache()
    b = body(history(2))
    send(c, b)
    changed = {**b, "tools": [{**TOOLS[0], "description": "Read a file, quickly"}]}
    assert send(c, changed).read == 0


def test_prefix_comparison_ignores_markers_and_sees_any_change():
    msgs = history(2)
    moved = [*msgs, assistant("x"), user("y", marked=True)]
    moved[len(msgs) - 1] = user(msgs[-1]["content"][0]["text"])
    assert cm.is_prefix(cm.parse(body(msgs)), cm.parse(body(moved)))
    edited = [*moved]
    edited[0] = user("question 0 changed")
    assert not cm.is_prefix(cm.parse(body(msgs)), cm.parse(body(edited)))


# ---- end to end over a real server ---------------------------------------------------------------

@pytest.mark.parametrize("spec", [cache_sim.Spec("anthropic", 32_000, True, steps=14),
                                  cache_sim.Spec("bedrock", 200_000, False, steps=8)], ids=lambda s: s.name)
def test_a_session_through_the_server_adds_up(stub, spec):
    session = cache_sim.run_session(stub, spec)
    assert len(session.steps) == spec.steps
    for s in session.steps:
        u = s.usage
        assert u.read + u.written + u.uncached == u.total > 0
        assert min(u.read, u.written, u.uncached) >= 0
    total, read, written, uncached, cost = session.totals()
    assert read + written + uncached == total
    assert cost == pytest.approx(uncached + cm.WRITE_PRICE * written + cm.READ_PRICE * read)
    assert session.steps[0].usage.read == 0 and session.steps[0].prefix_kept is None
    assert read > 0 and session.kept > 0
    if spec.compact:
        assert session.compactions > 0 and any(s.after_compaction for s in session.steps)
    # the cache state goes back with every request: the service reports on every later step, and
    # its report agrees with the byte comparison of the bodies
    assert session.steps[0].reported_kept is None
    assert all(s.reported_kept is not None for s in session.steps[1:])
    assert session.disagreements == []
    lines = []
    cache_sim.report([session], out=lines.append)
    assert spec.name in lines[1]


def test_the_last_anthropic_step_reads_the_whole_previous_request(stub):
    """The last allowed step keeps tool_choice on Anthropic (a change would invalidate the cached
    messages): it reads everything the step before sent, and no step loses its cache."""
    session = cache_sim.run_session(stub, cache_sim.Spec("anthropic", 200_000, False, steps=6))
    before, last = session.steps[-2:]
    assert "max_steps" in last.injected and last.prefix_kept and last.reported_kept
    assert last.usage.read == before.usage.total
    assert session.lost == [] and session.disagreements == []
