"""Compact on core types (docs/design.md §5): select, serialize, template, summarizers, outcomes."""
from __future__ import annotations

import dataclasses
import operator
import re

import pytest
from hypothesis import example, given, settings, strategies as st

from contextsvc import config, conversation as m, native, projection, window
from contextsvc.compact import run as cmod, chunked, edits, retention, head_tail, serialize, template
from contextsvc.compact.summarizers import offline
from contextsvc.compact.summarizers import make_summarizer
from contextsvc.compact.summarizers.job import SummaryJob
from contextsvc.errors import BadInput, Unavailable
from helpers.fake_anthropic import SUMMARY

CFG = config.Config()
SONNET = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000))
NO = m.CompactionSettings()


class Conv:
    """A conversation builder with sortable ids."""

    def __init__(self):
        self.messages = []

    def _id(self):
        return f"msg_{len(self.messages):05d}"

    def user(self, *texts, parts=()):
        mid = self._id()
        ps = [m.Part(f"{mid}-{k}", m.Text(t)) for k, t in enumerate(texts)]
        ps += [m.Part(f"{mid}-x{k}", c) for k, c in enumerate(parts)]
        self.messages.append(m.Message(mid, m.USER, ps))
        return self

    def marker(self, auto=True, overflow=False):
        mid = self._id()
        self.messages.append(m.Message(mid, m.USER, [m.Part(f"{mid}-c", m.Compaction(auto, overflow))]))
        return self

    def assistant(self, *contents, summary=False, parent_id="", usage=None):
        mid = self._id()
        ps = [m.Part(f"{mid}-{k}", m.Text(c) if isinstance(c, str) else c) for k, c in enumerate(contents)]
        self.messages.append(m.Message(mid, m.ASSISTANT, ps, time_completed_ms=1, summary=summary,
                                       parent_id=parent_id, usage=usage or m.Usage()))
        return self

    def conv(self):
        return m.Conversation(list(self.messages), "s1")


def bash(cmd, output="ok", status=m.COMPLETED, error=""):
    return m.Tool(f"call-{cmd}-{status}", "bash", status, {"command": cmd}, output=output, error=error)


def read(path, output="content"):
    return m.Tool(f"call-read-{path}-{len(output)}", "read", m.COMPLETED, {"path": path}, output=output)


def edit(path):
    return m.Tool(f"call-edit-{path}", "edit", m.COMPLETED, {"file_path": path, "old": "a", "new": "b"},
                  output="applied")


def run(conv, model_=SONNET, settings=NO, cfg=CFG, summarizer=None, **kw):
    return cmod.compact(cmod.CompactInput(conv, model_, compaction=settings, now_ms=1000, **kw), cfg,
                        summarizer)


# ---- select ------------------------------------------------------------------------------------

def sized(conv):
    return head_tail.sizes(conv.messages, SONNET)


def test_select_keeps_whole_turns_that_fit():
    c = Conv()
    for i in range(4):
        c.user(f"question {i}").assistant(f"answer {i}")
    sz = sized(c)
    budget = sum(sz[4:])  # exactly the last two turns
    s = head_tail.select(c.messages, SONNET, 100_000, m.CompactionSettings(preserve_recent_tokens=budget), CFG)
    assert s.tail_start_id == c.messages[4].id
    assert [x.id for x in s.head] == [x.id for x in c.messages[:4]]
    assert s.tail == c.messages[4:]
    # tail_turns limits the walk even when the budget is larger
    s = head_tail.select(c.messages, SONNET, 100_000,
                      m.CompactionSettings(preserve_recent_tokens=10**6, tail_turns=1), CFG)
    assert s.tail_start_id == c.messages[6].id


def test_select_splits_inside_a_turn():
    c = Conv()
    c.user("old").assistant("old answer")
    c.user("do it").assistant("x" * 4000).assistant("step two").assistant("done")
    sz = sized(c)
    budget = sz[4] + sz[5]  # the last turn's last two messages only
    s = head_tail.select(c.messages, SONNET, 100_000, m.CompactionSettings(preserve_recent_tokens=budget), CFG)
    assert s.tail_start_id == c.messages[4].id
    assert len(s.head) == 4


def test_select_nothing_fits_summarizes_everything():
    c = Conv()
    c.user("old").assistant("a" * 8000).user("new").assistant("b" * 8000)
    s = head_tail.select(c.messages, SONNET, 100_000, m.CompactionSettings(preserve_recent_tokens=10), CFG)
    assert (s.tail_start_id, s.tail, len(s.head)) == ("", [], 4)
    s = head_tail.select(c.messages, SONNET, 100_000, m.CompactionSettings(tail_turns=0), CFG)
    assert s.tail_start_id == "" and len(s.head) == 4


def test_select_huge_tool_output_at_start_of_last_turn():
    c = Conv()
    c.user("earlier").assistant("fine")
    c.user("run the suite").assistant(bash("pytest", "F" * 800_000)).assistant("3 tests fail in parser.py")
    s = head_tail.select(c.messages, SONNET, 200_000, NO, CFG)
    assert s.budget == CFG.compact.preserve_recent_max
    # the 200K-token log is summarized; the conclusion after it is kept verbatim
    assert s.tail_start_id == c.messages[4].id
    assert [x.id for x in s.head] == [x.id for x in c.messages[:4]]


def test_select_kept_start_at_first_message_is_all_head():
    c = Conv()
    c.user("only").assistant("turn")
    s = head_tail.select(c.messages, SONNET, 100_000, NO, CFG)
    assert s.tail_start_id == "" and len(s.head) == 2


@pytest.mark.parametrize("usable,expected", [(0, 2000), (4000, 2000), (20_000, 5000), (200_000, 8000)])
def test_select_budget(usable, expected):
    assert head_tail.budget(usable, NO, CFG) == expected
    assert head_tail.budget(usable, m.CompactionSettings(preserve_recent_tokens=123), CFG) == 123


def test_sizes_are_json_estimates_of_lowered_messages():
    c = Conv().user("hello")
    assert sized(c) == [native.estimate_tokens(len('{"role":"user","content":[{"type":"text","text":"hello"}]}'))]


def test_compaction_marker_does_not_start_a_turn():
    c = Conv().user("a").assistant("b").marker()
    assert native.split_turns([head_tail.starts_turn(x) for x in c.messages]) == [0]


# ---- serialize ---------------------------------------------------------------------------------

def test_serialize_placeholders_exactly():
    c = Conv()
    c.user("look", parts=[m.File("image/png", "foo.png", data=b"\x89PNG\r\n\x1a\n" + b"\x89PNG" * 1000)])
    out = "é" * 1000 + "😀" * 20 + "ë" * 1000  # 2020 characters: the head and the tail are kept
    c.assistant(m.Tool("c1", "read", m.COMPLETED, {"path": "a.py"}, output=out,
                       attachments=[m.File("application/pdf", "spec.pdf", url="http://x/spec.pdf")]))
    t = serialize.serialize(c.messages, CFG.compact.tool_output_max_chars)
    assert "[Attached image/png: foo.png]" in t.text
    assert "[Attached application/pdf: spec.pdf]" in t.text
    assert "PNG" not in t.text
    assert ("\n[Tool read result]\n" + "é" * 1000 + "\n[Tool output truncated for compaction: omitted 20 chars]\n"
            + "ë" * 1000 + "\n[Attached application/pdf: spec.pdf]") in t.text
    assert "😀" not in t.text
    assert serialize.clip("abc", 3) == "abc"
    # on a character boundary: the cut falls between emoji, never inside one
    assert serialize.clip("😀" * 5, 3) == "😀😀\n[Tool output truncated for compaction: omitted 2 chars]\n😀"


def test_serialize_hides_compaction_pairs_and_extracts_previous_summary():
    c = Conv()
    c.user("first task").assistant("did it")
    c.marker()
    c.assistant("## Goal\n- first task", summary=True, parent_id=c.messages[-1].id)
    c.user("second task").assistant("working")
    t = serialize.serialize(c.messages, 2000)
    assert t.previous_summary == "## Goal\n- first task"
    assert "What did we do so far" not in t.text and "## Goal" not in t.text
    assert [x.id for x in t.messages] == [c.messages[i].id for i in (0, 1, 4, 5)]


# ---- projection --------------------------------------------------------------------------------

def _reference_summary_for(messages, user_index):
    """projection's rule read straight: the first finished summary after the marker answering it."""
    for j in range(user_index + 1, len(messages)):
        x = messages[j]
        if x.role == m.ASSISTANT and x.summary and x.parent_id == messages[user_index].id and x.finished \
                and x.error is None:
            return j
    return -1


def _reference_cut(messages):
    """(kind, where what is sent starts, its summary) of the last compaction point that cuts history,
    a scan of the history per point."""
    for i in range(len(messages) - 1, -1, -1):
        x = messages[i]
        if x.role == m.USER and x.compaction() is not None:
            s = _reference_summary_for(messages, i)
            if s >= 0:
                return "marker", i, s
        if x.role == m.ASSISTANT and x.summary and x.finished and x.error is None:
            parent = next((k for k in range(i - 1, -1, -1) if messages[k].id == x.parent_id), -1)
            if parent >= 0 and messages[parent].compaction() is None:
                return "manual", parent, i
    return None, -1, -1


def _reference_project(messages):
    kind, i, s = _reference_cut(messages)
    if kind is None:
        return list(messages)
    if kind == "manual":
        return messages[i:]
    tail_start = messages[i].compaction().tail_start_id
    start = next((k for k in range(i) if messages[k].id == tail_start), i) if tail_start else i
    return [messages[i], messages[s], *messages[start:i], *(x for k, x in enumerate(messages) if k > i and k != s)]


@st.composite
def _histories(draw):
    """Short histories of markers (some with a kept tail), summaries finished, failed or not yet,
    answering a marker, a plain message or none, and plain messages; ids now and then used twice."""
    n = draw(st.integers(0, 14))
    ids = [f"m{i}" for i in range(n)]
    for i in range(n):
        if i and draw(st.integers(0, 4)) == 0:
            ids[i] = ids[draw(st.integers(0, i - 1))]
    messages, markers = [], []
    for i in range(n):
        kind = draw(st.sampled_from(["user", "marker", "marker", "summary", "summary", "assistant"]))
        some_id = st.sampled_from(ids + ["gone"])
        if kind in ("user", "marker"):
            parts = [m.Part(f"p{i}", m.Text("ask"))]
            if kind == "marker":
                tail = draw(st.one_of(st.just(""), some_id))
                parts.append(m.Part(f"c{i}", m.Compaction(auto=True, tail_start_id=tail)))
                markers.append(ids[i])
            messages.append(m.Message(ids[i], m.USER, parts))
            continue
        error = m.MessageError("APIError") if draw(st.integers(0, 3)) == 0 else None
        parent = draw(st.sampled_from(markers) if markers and draw(st.booleans()) else some_id)
        messages.append(m.Message(ids[i], m.ASSISTANT, [m.Part(f"p{i}", m.Text("answer"))],
                                  time_completed_ms=draw(st.sampled_from([0, 1, 1])), error=error,
                                  summary=kind == "summary", parent_id=parent))
    return messages


def _ask(mid, marker=False):
    parts = [m.Part(f"{mid}-t", m.Text("ask"))] + ([m.Part(f"{mid}-c", m.Compaction(auto=True))] if marker else [])
    return m.Message(mid, m.USER, parts)


def _summary(mid, parent):
    return m.Message(mid, m.ASSISTANT, [m.Part(f"{mid}-t", m.Text("summary"))], time_completed_ms=1, summary=True,
                     parent_id=parent)


@settings(max_examples=400, deadline=None)
@given(messages=_histories())
# two finished summaries answer the marker, neither right after it: the first one completes it
@example(messages=[_ask("u0", marker=True), _ask("u1"), _summary("a2", "u0"), _summary("a3", "u0")])
# a manual summary whose parent's id a later message uses again: the one before it is the parent
@example(messages=[_ask("x"), _ask("y"), _summary("s", "x"), _ask("x")])
def test_the_projection_is_the_rule_read_straight(messages):
    """What is sent, and where the last compaction is, as the rule reads: a marker a finished
    summary after it answers (an earlier failed attempt aside), a manual summary, or neither."""
    kind, _, s = _reference_cut(messages)
    points = projection.compaction_points(messages)
    for given_points in (None, points):
        assert projection.last_compaction(messages, given_points) == s
        assert list(map(id, projection.project(messages, given_points))) == \
            list(map(id, _reference_project(messages)))
    for i, x in enumerate(messages):
        if x.role == m.USER and x.compaction() is not None:
            assert projection.answered(messages, i) == (_reference_summary_for(messages, i) >= 0)


class _Read(m.Message):
    """A message that counts the reads of its fields."""
    __slots__ = ()
    reads = 0

    def __getattribute__(self, name):
        _Read.reads += 1
        return super().__getattribute__(name)


def _markers(n, answered_by=None):
    """n user messages, each a compaction marker no finished summary answers (a failed attempt
    after each when answered_by names the error)."""
    out = []
    for i in range(n):
        out.append(_Read(f"u{i}", m.USER, [m.Part(f"c{i}", m.Compaction(auto=True))]))
        if answered_by is not None:
            out.append(_Read(f"a{i}", m.ASSISTANT, [m.Part(f"s{i}", m.Text("partial"))], time_completed_ms=1,
                             summary=True, parent_id=f"u{i}", error=m.MessageError(answered_by)))
    return out


@pytest.mark.parametrize("shape", ["unanswered markers", "failed attempts", "summaries of no message"])
def test_the_projection_reads_each_message_a_few_times(shape):
    """A history of 3,000 compaction points, none of which cuts: each message is read a few
    times, not once per point after it (the scan per point took 3.6 s to measure 10,000)."""
    n = 3_000
    if shape == "summaries of no message":
        messages = [_Read(f"a{i}", m.ASSISTANT, [m.Part(f"s{i}", m.Text("summary"))], time_completed_ms=1,
                          summary=True, parent_id="gone") for i in range(n)]
    else:
        messages = _markers(n if shape == "unanswered markers" else n // 2,
                            "APIError" if shape == "failed attempts" else None)
    _Read.reads = 0
    assert projection.last_compaction(messages) == -1
    assert _Read.reads <= 20 * n, _Read.reads
    _Read.reads = 0
    sent = projection.project(messages)
    assert _Read.reads <= 20 * n, _Read.reads
    assert len(sent) == n and all(map(operator.is_, sent, messages))


# ---- template ----------------------------------------------------------------------------------

HEADINGS = ["## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress",
            "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context", "## Relevant Files"]


def _in_order(text):
    lines = [x.strip() for x in text.splitlines()]
    return [h for h in lines if h.startswith("#")] == HEADINGS


def test_template_sections_and_rules():
    assert list(template.HEADINGS) == HEADINGS
    assert _in_order(template.TEMPLATE)
    assert _in_order(template.render({}))
    assert template.render({}).count("(none)") == 9  # every section but the Progress parent
    rules = template.TEMPLATE_RULES.lower()
    for rule in ("write (none) under a section that is empty", "terse bullets",
                 "copy file paths, commands, error strings and identifiers exactly",
                 "never mention the summary"):
        assert rule in rules, rule
    p = template.prompt("T", "PREV")
    assert "<previous-summary>\nPREV\n</previous-summary>" in p
    assert "keep what still holds, drop what the conversation superseded, merge the new facts" in p
    assert "<previous-summary>" not in template.prompt("T")
    # every prompt that meets later facts names each kind of supersession and where it must leave
    for text in (p, template.merge_prompt(["A", "B"], "PREV"), template.prompt("T")):
        low = text.lower()
        for kind in ("reversed decision", "replaced constraint", "blocker since resolved",
                     "renamed or deleted file", "next step since done", "never state a superseded item as current"):
            assert kind in low, kind
        assert all(s in text for s in ("Key Decisions", "Blocked", "Next Steps", "Relevant Files", "Constraints"))
    # parse reads back what render wrote
    sections = {"goal": ["g"], "next_steps": ["a", "b"], "files": ["`x.py`: read"]}
    parsed = template.parse(template.render(sections))
    assert parsed["goal"] == ["g"] and parsed["next_steps"] == ["a", "b"] and parsed["done"] == []


# ---- the offline summarizer --------------------------------------------------------------------

def working_session():
    c = Conv()
    c.user("Fix the crash in src/app/server.py when the config is empty. Never change the public API "
           "of `ConfigLoader`; keep Python 3.11 compatibility.")
    c.assistant("Reading the server first.", read("src/app/server.py", "def main():\n    load_config()\n"))
    c.assistant(bash("pytest tests/test_server.py -x", "E   KeyError: 'port'\nFAILED tests/test_server.py::test_empty"))
    c.assistant("I'll default the port in load_config instead because callers rely on it. "
                "Next I will add a regression test.", edit("src/app/config.py"))
    c.assistant(bash("npm run lint", status=m.ERROR, error="Error: eslint not found\nexit 127"))
    c.user("Also update docs/CHANGELOG.md")
    c.assistant("ok")
    return c


def test_offline_summary_is_deterministic_and_verbatim():
    msgs = working_session().messages
    a = offline.summarize(msgs)
    assert a == offline.summarize(msgs)
    assert _in_order(a)
    for verbatim in ("src/app/server.py", "src/app/config.py", "docs/CHANGELOG.md",
                     "pytest tests/test_server.py -x", "KeyError: 'port'", "Error: eslint not found",
                     "load_config", "ConfigLoader", "FAILED tests/test_server.py::test_empty",
                     "Never change the public API"):
        assert verbatim in a, verbatim
    s = template.parse(a)
    assert s["goal"][-1] == "Also update docs/CHANGELOG.md"
    assert any("npm run lint" in x and "failed" in x for x in s["blocked"])
    assert any("pytest tests/test_server.py -x" in x for x in s["done"])
    assert any("default the port" in x for x in s["decisions"])
    assert any("regression test" in x for x in s["next_steps"])
    assert any("src/app/config.py" in x and "edited" in x for x in s["files"])
    # the first request is the one the steps were about; the later ask is still to do
    assert s["in_progress"][0] == "Working on: Fix the crash in src/app/server.py when the config is empty"
    assert s["in_progress"][1].startswith("Last step: `npm run lint` failed")
    assert "update docs/CHANGELOG.md" in s["next_steps"]


def test_offline_empty_sections_read_none():
    text = offline.summarize(Conv().user("hi").messages)
    assert text.count("(none)") >= 6 and _in_order(text)


def test_five_rolling_updates_with_retention():
    cfg = CFG
    c = Conv()
    previous = ""
    seen_files = []
    for round_ in range(5):
        path = f"pkg/module_{round_}.py"
        seen_files.append(path)
        c.user(f"Round {round_}: refactor {path} keeping handle_request_{round_} stable")
        c.assistant("I'll split it because it is long.", edit(path),
                    bash(f"pytest -k round_{round_}", "passed"))
        c.user("next")
        c.assistant("ok")
        r = run(c.conv(), settings=m.CompactionSettings(tail_turns=1), cfg=cfg)
        assert r.outcome == "compacted" and r.backend == "offline" and r.under_limit
        text = r.summary.parts[0].content.text
        assert _in_order(text)
        # one rolling document: earlier facts survive (bounded), no nested summaries
        for p in seen_files:
            assert p in text
        assert text.count("## Goal") == 1
        assert r.retention.items > 0 and 0 < r.retention.ratio <= 1
        assert r.retention.retained == r.retention.items - len(r.retention.missing)
        # store the result the way a caller does: marker, summary, then the kept tail continues
        marker_id = c.messages[-1].id + "~m"
        c.messages.append(m.Message(marker_id, m.USER, [m.Part(marker_id + "c", m.Compaction(
            True, False, r.tail_start_id))]))
        summary = dataclasses.replace(r.summary, id=marker_id + "~s", parent_id=marker_id)
        c.messages.append(summary)
        if previous:
            assert template.parse(previous)["files"][0] in text or len(seen_files) > 12
        previous = text
    assert len(template.parse(previous)["files"]) <= offline.DEFAULT_LIMITS.max_items


def test_offline_merge_is_bounded():
    limits = dataclasses.replace(offline.DEFAULT_LIMITS, max_items=3)
    merged = offline.merge({"done": ["a", "b", "c"]}, {"done": ["b", "d"]}, limits)
    assert merged["done"] == ["c", "b", "d"]


# ---- compact: outcomes -------------------------------------------------------------------------

def test_attempts_cap_returns_context_overflow_without_summarizing():
    class Boom:
        name = "boom"

        def summarize(self, job):
            raise AssertionError("must not summarize")

    r = run(working_session().conv(), attempts=CFG.compact.max_attempts, summarizer=Boom())
    assert r.outcome == "context_overflow" and r.attempts == CFG.compact.max_attempts
    assert r.summary is None and not r.summarized_ids


def test_compact_result_messages():
    c = working_session()
    c.marker()
    r = run(c.conv(), settings=m.CompactionSettings(tail_turns=1, preserve_recent_tokens=100_000))
    last = c.messages[-1]
    assert r.outcome == "compacted" and r.attempts == 1
    assert r.summary.role == m.ASSISTANT and r.summary.summary and r.summary.finished
    assert r.summary.parent_id == last.id and r.summary.id not in {x.id for x in c.messages}
    assert r.tail_start_id == c.messages[5].id  # the last real turn is kept
    assert r.summarized_ids == [x.id for x in c.messages[:5]]
    assert r.continue_message is None  # a manual compaction (auto: false) adds no continue prompt
    assert r.tokens_after < r.tokens_before and r.limit == window.limit(SONNET, NO, CFG)
    auto = run(c.conv(), settings=m.CompactionSettings(tail_turns=1, preserve_recent_tokens=100_000), auto=True)
    assert auto.continue_message.role == m.USER
    assert auto.continue_message.parts[0].content.text == cmod.CONTINUE_PROMPT
    assert auto.continue_message.parts[0].content.synthetic
    assert [e.message.id for e in auto.edits if isinstance(e, edits.InsertMessage)] == [
        auto.summary.id, auto.continue_message.id]  # after the caller's own marker


def test_overflow_replays_last_user_message_with_placeholders_and_a_media_notice():
    c = working_session()
    c.user("Now look at this", parts=[m.File("image/png", "shot.png", data=b"\x89PNG\r\n\x1a\n123")])
    c.assistant("partial").marker(overflow=True)
    # a tail budget too small for the last turn: the user message goes into the head
    r = run(c.conv(), overflow=True, settings=m.CompactionSettings(preserve_recent_tokens=1))
    texts = [p.content.text for p in r.continue_message.parts]
    assert texts == ["Now look at this", "[Attached image/png: shot.png]", cmod.MEDIA_REMOVED_NOTE]
    # the turn in progress is summarized, never dropped
    assert c.messages[7].id in r.summarized_ids and c.messages[8].id in r.summarized_ids


def test_overflow_keeps_a_user_message_in_the_tail_instead_of_sending_it_twice():
    c = working_session()
    c.user("Now look at this", parts=[m.File("image/png", "shot.png", data=b"\x89PNG\r\n\x1a\n123")])
    c.assistant("partial").marker(overflow=True)
    r = run(c.conv(), overflow=True)
    assert r.tail_start_id == c.messages[5].id and r.continue_message is None
    sent = projection.project(edits.apply(c.messages, r.edits))
    assert [x.id for x in sent].count(c.messages[7].id) == 1


def test_overflow_replay_too_big_is_summarized_with_a_note():
    c = working_session()
    c.user("Apply this patch to src/app/big.py\n" + "+ added line\n" * 50_000)
    c.assistant("partial").marker(overflow=True)
    r = run(c.conv(), overflow=True)
    (part,) = r.continue_message.parts
    assert part.content.text.startswith(cmod.REPLAY_NOTE)
    assert "src/app/big.py" in part.content.text and len(part.content.text) < 20_000
    assert r.outcome == "compacted" and r.under_limit


def test_nothing_to_do():
    # everything since the last compaction point is that compaction pair: nothing new to fold in
    c = Conv().user("hello").assistant("hi").marker()
    c.assistant("## Goal\n- hello", summary=True, parent_id=c.messages[-1].id)
    c.marker()
    r = run(c.conv())
    assert r.outcome == "nothing_to_do" and r.summary is None and r.under_limit


def test_needs_a_user_message():
    with pytest.raises(BadInput):
        run(Conv().assistant("x").conv())


@pytest.mark.parametrize("context", [8_192, 200_000, 1_000_000])
def test_insufficient_is_never_reported_as_compacted(context):
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(context, 0, 4096))
    lim = window.limit(mdl, NO, CFG)
    c = working_session()
    huge = m.SystemPrompt(soul="rules " * (lim + 10))  # the system prompt alone is over
    r = cmod.compact(cmod.CompactInput(c.conv(), mdl, system=huge, now_ms=1), CFG)
    assert r.outcome == "insufficient" and not r.under_limit
    assert r.tokens_after >= r.limit == lim
    assert r.summary is not None  # the summary is still made and returned
    # the same conversation without the oversized system prompt compacts fine
    ok = cmod.compact(cmod.CompactInput(c.conv(), mdl, now_ms=1), CFG)
    assert ok.outcome == "compacted" and ok.under_limit and ok.tokens_after < lim


def test_post_compaction_prune_reaches_the_kept_tail():
    # One kept turn of 12 reads of 10,000 tokens. Sent, the tail follows the summary; stored, it
    # precedes it, so a scan in stored order stops at the summary before reaching any of them.
    c = Conv()
    c.user("old task").assistant("done")
    c.user("big task")
    for i in range(12):
        c.assistant(read(f"f{i}.py", "z" * 4 * 10_000))
    c.marker()
    settings = m.CompactionSettings(tail_turns=1, preserve_recent_tokens=300_000)
    r = run(c.conv(), settings=settings)
    assert r.tail_start_id == "msg_00002"
    # newest 4 results protected (40,000; a fifth would not fit), the next 4 kept (40,000), the 4
    # oldest pruned (40,000 > 16,800)
    assert r.pruned_part_ids == [f"{c.messages[k].id}-0" for k in (6, 5, 4, 3)]
    assert run(c.conv(), settings=dataclasses.replace(settings, prune=False)).pruned_part_ids == []


def handlers(name, lines):
    return "".join(f"def {name}_{i}(request):\n    return render(request, 'page_{i}.html', {{'id': {i}}})\n"
                   for i in range(lines))


def test_kept_tail_keeps_the_file_just_read_cut_to_the_budget():
    # a 32K window (tail budget 6,976): the last step read a file of ~11,000 tokens, over the
    # budget alone; it is kept, its output cut to fit, rather than nothing kept verbatim
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 4_096))
    c = Conv().user("Refactor the request handlers in src/ and keep the tests green.")
    for k in range(5):
        c.assistant(f"Reading src/mod_{k}.py.", read(f"src/mod_{k}.py", handlers(f"small_{k}", 40)))
    big = "# src/views.py\n" + handlers("view", 600) + "# end of src/views.py\n"
    c.assistant("Reading src/views.py.", read("src/views.py", big))
    last = c.messages[-1]
    budget = head_tail.budget(window.usable(mdl, NO, CFG), NO, CFG)
    assert budget == 6_976 and head_tail.message_size(last, mdl) > budget
    r = run(c.conv(), model_=mdl, auto=True)
    assert r.outcome == "compacted" and r.under_limit
    assert r.tail_start_id == last.id and last.id not in r.summarized_ids
    (cut,) = [e for e in r.edits if isinstance(e, edits.ReplaceToolOutput)]
    assert cut.part_id == f"{last.id}-1"
    # the head and the tail of the file, the truncation marker between them
    head, sep, rest = cut.output.partition("\n[Tool output truncated for compaction: omitted ")
    omitted, _, tail = rest.partition(" chars]\n")
    assert sep and big.startswith(head) and big.endswith(tail) and int(omitted) == len(big) - len(head) - len(tail)
    assert head.startswith("# src/views.py\ndef view_0(request)") and tail.endswith("# end of src/views.py\n")
    assert cut.output == serialize.clip(big, len(head) + len(tail))
    # applied, the kept message holds the cut output and fits the budget by the selection's rule
    stored = edits.apply(c.messages, r.edits)
    kept = next(x for x in stored if x.id == last.id)
    assert kept.parts[1].content.output == cut.output and kept.parts[0] == last.parts[0]
    assert budget - 100 < head_tail.message_size(kept, mdl) <= budget
    assert [x.id for x in projection.project(stored)][-2:] == [last.id, r.continue_message.id]
    after = cmod._measure(m.Conversation(stored, "s1"), cmod.CompactInput(c.conv(), mdl), CFG)
    assert r.tokens_after == after.decision[0]


def test_kept_tail_keeps_parallel_reads_each_cut_to_the_budget():
    # the last step read two files at once (parallel calls), together far over the budget: the
    # step is kept with both outputs cut to the same length, rather than nothing kept verbatim
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 4_096))
    c = Conv().user("Refactor the request handlers in src/ and keep the tests green.")
    for k in range(3):
        c.assistant(f"Reading src/mod_{k}.py.", read(f"src/mod_{k}.py", handlers(f"small_{k}", 40)))
    views, urls = handlers("view", 600), "# src/urls.py\n" + handlers("route", 300)
    c.assistant("Reading both.", read("src/views.py", views), read("src/urls.py", urls))
    last = c.messages[-1]
    budget = head_tail.budget(window.usable(mdl, NO, CFG), NO, CFG)
    r = run(c.conv(), model_=mdl, auto=True)
    assert r.outcome == "compacted" and r.under_limit
    assert r.tail_start_id == last.id and last.id not in r.summarized_ids
    cuts = {e.part_id: e.output for e in r.edits if isinstance(e, edits.ReplaceToolOutput)}
    assert sorted(cuts) == [f"{last.id}-1", f"{last.id}-2"]
    # each is its file's head and tail, cut to one length
    kept_chars = set()
    for pid, full in ((f"{last.id}-1", views), (f"{last.id}-2", urls)):
        head, sep, rest = cuts[pid].partition("\n[Tool output truncated for compaction: omitted ")
        tail = rest.partition(" chars]\n")[2]
        assert sep and cuts[pid] == serialize.clip(full, len(head) + len(tail))
        kept_chars.add(len(head) + len(tail))
    assert len(kept_chars) == 1 and 0 < kept_chars.pop() < len(urls)
    stored = edits.apply(c.messages, r.edits)
    kept = next(x for x in stored if x.id == last.id)
    assert budget - 100 < head_tail.message_size(kept, mdl) <= budget
    after = cmod._measure(m.Conversation(stored, "s1"), cmod.CompactInput(c.conv(), mdl), CFG)
    assert r.tokens_after == after.decision[0]


def chinese(chars: int) -> str:
    """Prose in Chinese: one token or more a character, where the estimate reads four to a token."""
    line = "这个模块负责处理用户请求并返回页面渲染结果，错误时记录日志。"
    return "\n".join(f"{k:04d} {line}" for k in range(chars // (len(line) + 6) + 1))[:chars]


@pytest.mark.parametrize("chars, fits_by_estimate", ((20_000, True), (30_000, False)))
def test_kept_tail_the_estimate_reads_low_is_cut_to_what_the_figure_reads(chars, fits_by_estimate):
    """A file of Chinese just read, in a 32K window: chosen by its estimate (chars / 4) the tail
    fits the budget, but its decision figure takes the request over the limit. It used to be
    summarized whole (the model never saw the file it asked for); now the tail is chosen again
    at the ratio the figure reads it, the newest read kept cut to the preserve budget in those
    terms, and the summary of the unchanged head asked once."""
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 4_096))
    c = Conv()
    for k in range(3):
        c.user(f"Translate the docs of src/mod_{k}.py into English.")
        c.assistant(f"Reading src/mod_{k}.py.", read(f"src/mod_{k}.py", handlers(f"small_{k}", 10)))
    text = chinese(chars)
    c.user("Now the guide.").assistant("Reading docs/guide.md.", read("docs/guide.md", text))
    last = c.messages[-1]
    budget = head_tail.budget(window.usable(mdl, NO, CFG), NO, CFG)
    # by the estimate the whole read fits the budget, or is cut to it (the selection's own cut)
    assert (head_tail.message_size(last, mdl) < budget) == fits_by_estimate
    rec = Recorder()
    r = run(c.conv(), model_=mdl, auto=True, summarizer=rec)
    assert r.outcome == "compacted" and r.under_limit and r.tokens_before > r.limit
    assert last.id not in r.summarized_ids and r.tail_start_id == last.id
    (cut,) = [e for e in r.edits if isinstance(e, edits.ReplaceToolOutput)]
    head, sep, rest = cut.output.partition("\n[Tool output truncated for compaction: omitted ")
    tail = rest.partition(" chars]\n")[2]
    assert sep and cut.output == serialize.clip(text, len(head) + len(tail)) and len(head) + len(tail) > 2_000
    stored = edits.apply(c.messages, r.edits)
    after = cmod._measure(m.Conversation(stored, "s1"), cmod.CompactInput(c.conv(), mdl), CFG)
    assert r.tokens_after == after.decision[0]
    # the tail is about the preserve budget as the decision figure reads it, far under the limit
    kept = next(x for x in stored if x.id == last.id)
    alone = cmod._measure(m.Conversation([kept], "s1"), cmod.CompactInput(c.conv(), mdl), CFG).decision[0]
    one = cmod._measure(m.Conversation([c.messages[0]], "s1"), cmod.CompactInput(c.conv(), mdl), CFG).decision[0]
    assert budget * 0.8 < alone - one <= budget * 1.05
    assert r.tokens_after < r.limit * 0.5
    # every summary asked was of a different head
    assert len({j.transcript for j in rec.jobs}) == len(rec.jobs) <= 2


def test_kept_tail_cut_only_when_nothing_of_the_turn_fits():
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 4_096))
    c = Conv().user("Read the views.").assistant(read("src/views.py", handlers("view", 600)))
    c.assistant("The views render pages 0 to 599.")
    # a conclusion after the big read fits: it is the tail, the read is summarized, nothing is cut
    r = run(c.conv(), model_=mdl)
    assert r.tail_start_id == c.messages[2].id
    assert not any(isinstance(e, edits.ReplaceToolOutput) for e in r.edits)
    # tail_turns 0 keeps nothing, cut or not
    r = run(Conv().user("Read.").assistant(read("a.py", handlers("v", 600))).conv(), model_=mdl,
            settings=m.CompactionSettings(tail_turns=0))
    assert r.tail_start_id == "" and not any(isinstance(e, edits.ReplaceToolOutput) for e in r.edits)


# ---- chunked -----------------------------------------------------------------------------------

def big_session(n=40):
    c = Conv()
    for i in range(n):
        c.user(f"Step {i}: update lib/part_{i}.py")
        c.assistant(f"Editing lib/part_{i}.py.", edit(f"lib/part_{i}.py"),
                    bash(f"make test-{i}", "y" * 1500))
    c.user("done?")
    return c


def test_chunked_fallback_offline():
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(16_000, 0, 4_000))
    r = run(big_session().conv(), model_=mdl)
    assert r.chunked and r.outcome == "compacted"
    text = r.summary.parts[0].content.text
    assert _in_order(text) and "lib/part_38.py" in text
    assert r.tail_start_id == "msg_00078"  # the last two turns stay verbatim


def test_chunk_split_is_greedy_and_bounded():
    t = serialize.serialize(big_session(10).messages, 2000)
    budget = chunked.chunk_budget(1000, CFG)
    assert budget == CFG.compact.chunk_min_tokens
    chunks = chunked.split_chunks(t, budget)
    assert sum(len(b) for _, b in chunks) == len(t.blocks)
    for _, blocks in chunks:
        assert len(blocks) == 1 or sum(native.estimate_tokens(b) for b in blocks) <= budget


class Recorder:
    name = "anthropic"

    def __init__(self):
        self.jobs, self.merges = [], []

    def summarize(self, job):
        self.jobs.append(job)
        return template.render({"done": [f"chunk {len(self.jobs)}"]})

    def merge(self, partials, previous="", max_tokens=0, deadline=None):
        self.merges.append(list(partials))
        return template.render({"done": ["merged"]})


def test_chunked_with_a_model_backend_merges_partials():
    mdl = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(16_000, 0, 4_000))
    rec = Recorder()
    r = run(big_session().conv(), model_=mdl, summarizer=rec)
    assert r.chunked and len(rec.jobs) > 1 and len(rec.merges) == 1
    assert all(j.max_tokens == CFG.compact.chunk_output_tokens for j in rec.jobs)
    assert "merged" in r.summary.parts[0].content.text


# ---- the model backends through their real SDKs ------------------------------------------------


def model_cfg(api, fallback=True, timeout=5.0):
    """The backend api fakes (Anthropic Messages or OpenAI Chat Completions), pointed at it."""
    return dataclasses.replace(CFG, summarizer=dataclasses.replace(
        CFG.summarizer, backend=api.BACKEND, base_url=api.url, api_key_env="CONTEXTSVC_TEST_KEY",
        timeout_seconds=timeout, max_retries=0, fallback_to_offline=fallback))


def test_anthropic_backend_request_and_response(api):
    cfg = model_cfg(api)
    r = run(working_session().conv(), cfg=cfg)
    assert (r.outcome, r.backend, r.fell_back) == ("compacted", "anthropic", False)
    assert r.summary.parts[0].content.text == SUMMARY
    assert r.retention.items > 0 and r.retention.retained >= 1
    path, headers, body = api.requests[0]
    assert path == "/v1/messages"
    assert "sk-test-123" in (headers.get("x-api-key", "") + headers.get("Authorization", ""))
    assert body["model"] == cfg.summarizer.model == "claude-haiku-4-5"
    assert body["max_tokens"] == window.max_output(SONNET, cfg)
    system = body["system"]
    assert len(system) == 1 and system[0]["type"] == "text"
    assert system[0]["text"] == template.TEMPLATE_RULES
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    (message,) = body["messages"]
    assert message["role"] == "user"
    text = message["content"][0]["text"]
    assert "src/app/server.py" in text and "pytest tests/test_server.py -x" in text
    assert "cache_control" not in message["content"][0]  # only the stable block is marked


def test_openai_backend_request_and_response(openai_api):
    cfg = model_cfg(openai_api)
    r = run(working_session().conv(), cfg=cfg)
    assert (r.outcome, r.backend, r.fell_back) == ("compacted", "openai", False)
    assert r.summary.parts[0].content.text == SUMMARY
    assert r.summary.model_id == "gpt-4.1-mini" and r.summary.provider_id == m.OPENAI_COMPATIBLE
    path, headers, body = openai_api.requests[0]
    assert path == "/chat/completions"
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer sk-test-123"
    assert body["model"] == cfg.summarizer.model == "gpt-4.1-mini"
    # a server at base_url gets max_tokens, the name every Chat Completions server reads
    assert body["max_tokens"] == window.max_output(SONNET, cfg) and "max_completion_tokens" not in body
    system, user = body["messages"]
    assert system == {"role": "system", "content": template.TEMPLATE_RULES}
    assert user["role"] == "user"
    assert "src/app/server.py" in user["content"] and "pytest tests/test_server.py -x" in user["content"]


def test_openai_backend_on_openais_own_endpoint_asks_max_completion_tokens(openai_api, monkeypatch):
    """No base_url: the SDK's endpoint (api.openai.com), here redirected to the fake through the
    SDK's own OPENAI_BASE_URL, gets max_completion_tokens, which its reasoning models require."""
    monkeypatch.setenv("OPENAI_BASE_URL", openai_api.url)
    cfg = dataclasses.replace(model_cfg(openai_api), summarizer=dataclasses.replace(
        model_cfg(openai_api).summarizer, base_url=""))
    r = run(working_session().conv(), cfg=cfg)
    assert r.backend == "openai" and r.summary.provider_id == m.OPENAI
    body = openai_api.requests[0][2]
    assert body["max_completion_tokens"] == window.max_output(SONNET, cfg) and "max_tokens" not in body


def _prompt_of(api, i=0) -> str:
    body = api.requests[i][2]
    if api.BACKEND == "openai":
        return body["messages"][-1]["content"]
    return body["messages"][0]["content"][0]["text"]


def test_incremental_prompt_carries_previous_summary_and_asks_for_supersession(model_api):
    s = make_summarizer(model_cfg(model_api))
    assert s.summarize(SummaryJob([], "User:\nhi", "## Goal\n- old", 100)) == SUMMARY
    text = _prompt_of(model_api)
    assert "<previous-summary>\n## Goal\n- old\n</previous-summary>" in text
    assert template.SUPERSESSION in text and "drop what the conversation superseded" in text


@pytest.mark.parametrize("mode,needle", [("slow", "timed out"), ("500", "HTTP 500"),
                                         ("401", "authentication failed (401)"),
                                         ("refusal", "the model refused to summarize")])
def test_model_backend_failures(model_api, mode, needle):
    model_api.mode = mode
    # a short timeout for the slow backend alone: on a loaded machine a retried 500 could time
    # out within 0.3 s too, and the error then named the timeout
    timeout = 0.3 if mode == "slow" else 10.0
    cfg = model_cfg(model_api, fallback=False, timeout=timeout)
    with pytest.raises(Unavailable, match=f"^{model_api.BACKEND} summarizer: .*" + re.escape(needle)):
        run(working_session().conv(), cfg=cfg)
    r = run(working_session().conv(), cfg=model_cfg(model_api, fallback=True, timeout=timeout))
    assert r.fell_back and r.backend == "offline" and needle in r.fallback_reason
    assert r.outcome == "compacted" and _in_order(r.summary.parts[0].content.text)


def test_model_backend_context_overflow_switches_to_chunks(model_api):
    model_api.mode = "too-long"
    r = run(working_session().conv(), cfg=model_cfg(model_api))
    assert r.chunked and r.backend == model_api.BACKEND and not r.fell_back
    assert len(model_api.requests) >= 2
    second = model_api.requests[1][2]
    assert second.get("max_tokens", second.get("max_completion_tokens")) == CFG.compact.chunk_output_tokens


def test_model_backend_without_key_falls_back(monkeypatch, model_api):
    monkeypatch.delenv("CONTEXTSVC_TEST_KEY")
    r = run(working_session().conv(), cfg=model_cfg(model_api))
    assert r.fell_back and "CONTEXTSVC_TEST_KEY" in r.fallback_reason and not model_api.requests


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_connection_refused_maps_to_unavailable(monkeypatch, backend):
    monkeypatch.setenv("CONTEXTSVC_TEST_KEY", "k")
    cfg = dataclasses.replace(CFG, summarizer=dataclasses.replace(
        CFG.summarizer, backend=backend, base_url="http://127.0.0.1:9", api_key_env="CONTEXTSVC_TEST_KEY",
        timeout_seconds=2, max_retries=0))
    with pytest.raises(Unavailable, match=f"{backend} summarizer: connection failed"):
        make_summarizer(cfg).summarize(SummaryJob([], "x", "", 10))


# ---- retention ---------------------------------------------------------------------------------

def test_retention_counts_verbatim_items():
    msgs = working_session().messages
    items = retention.extract(msgs)
    for x in ("src/app/server.py", "pytest tests/test_server.py -x", "ConfigLoader", "load_config",
              "Error: eslint not found", "docs/CHANGELOG.md"):
        assert x in items, x
    r = retention.measure(items, "only src/app/server.py here")
    assert r.items == len(items) and r.retained == 1 and r.ratio == pytest.approx(1 / len(items))
    assert retention.measure([], "").ratio == 1.0


def test_offline_limits_come_from_config():
    cfg = dataclasses.replace(CFG, summarizer=dataclasses.replace(CFG.summarizer, offline_max_items=2))
    c = Conv()
    for i in range(6):
        c.user(f"refactor pkg/m{i}.py").assistant("on it", edit(f"pkg/m{i}.py"))
    c.user("next").assistant("ok")
    r = run(c.conv(), settings=m.CompactionSettings(tail_turns=1), cfg=cfg)
    files = template.parse(r.summary.parts[0].content.text)["files"]
    assert len(files) == 2 and "pkg/m5.py" in files[-1]  # the newest kept, the oldest out
    wide = run(c.conv(), settings=m.CompactionSettings(tail_turns=1))
    assert len(template.parse(wide.summary.parts[0].content.text)["files"]) > 2


# ---- a compaction after an earlier one -----------------------------------------------------------

def test_compact_after_an_earlier_compaction_summarizes_the_turns_since():
    """[compaction; its summary; a turn; compaction], manual: the finished pair is hidden before the
    tail is selected (as upstream), so the turn since is summarized, rolled into the earlier
    summary, instead of "nothing to do"."""
    c = Conv().marker(auto=False)
    c.assistant("## Goal\n- fix the parser in src/parse.py", summary=True, parent_id=c.messages[-1].id)
    c.user("fix bug in a.py").assistant("patched a.py").marker(auto=False)
    r = run(c.conv(), settings=m.CompactionSettings(auto=False))
    assert r.outcome == "compacted"
    assert {c.messages[2].id, c.messages[3].id} <= set(r.summarized_ids)
    text = r.summary.parts[0].content.text
    assert "a.py" in text and "src/parse.py" in text


def _continue_turn(messages: list, step: int) -> list:
    """The agent's turn goes on after a compaction: two more tool steps, no new user message."""
    out = list(messages)
    for k in range(2):
        mid = f"step_{step}_{k}"
        path = f"src/app/part_{step}_{k}.py"
        out.append(m.Message(mid, m.ASSISTANT, [m.Part(mid + "-t", read(path, f"line of {path}\n" * 20))],
                             time_completed_ms=1))
    return out


def test_a_second_compaction_in_the_same_turn_rolls_the_first_summary_forward():
    """After Compact(overflow=true) the compaction marker is the last user message; a later
    compaction in the same turn is a new one (the marker is answered), never a retry of the
    first that drops its summary: every file the first summary held is still in the second."""
    c = working_session()
    c.user("Now refactor src/app/loader.py")
    settings = m.CompactionSettings(tail_turns=1)
    msgs = _continue_turn(c.messages, 1)
    first = run(m.Conversation(msgs, "s1"), overflow=True, settings=settings)
    assert first.outcome == "compacted" and first.continue_message is None  # the turn is kept
    assert max(i for i, x in enumerate(edits.apply(msgs, first.edits)) if x.role == m.USER) > len(msgs) - 1
    kept = [p for p in ("src/app/server.py", "src/app/config.py", "docs/CHANGELOG.md")
            if p in first.summary.parts[0].content.text]
    assert kept, "the first summary holds the session's files"
    msgs = _continue_turn(edits.apply(msgs, first.edits), 2)
    second = run(m.Conversation(msgs, "s1"), overflow=True, settings=settings)
    assert second.outcome == "compacted" and second.under_limit
    text = second.summary.parts[0].content.text
    assert [p for p in kept if p not in text] == []
    sent = projection.project(edits.apply(msgs, second.edits))
    assert sent[1].summary and sent[1].parts[0].content.text == text
