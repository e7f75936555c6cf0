"""Prune's gates on core types (docs/design.md §4), one test per gate."""
from __future__ import annotations

import dataclasses

import pytest

from contextsvc import config, conversation as m, prune
from contextsvc.errors import BadInput

CFG = config.Config()
ON = m.CompactionSettings(prune=True)
PC = CFG.prune
TURNS = dataclasses.replace(CFG, prune=dataclasses.replace(PC, protect="turns"))  # the reference's rule
CHUNK = "x" * 4 * 10_000  # estimate 10,000 tokens


class Builder:
    def __init__(self):
        self.messages = []
        self.n = 0

    def _id(self):
        self.n += 1
        return f"msg_{self.n:04d}"

    def user(self, text="go", **kw):
        mid = self._id()
        self.messages.append(m.Message(mid, m.USER, [m.Part(f"{mid}-t", m.Text(text))], **kw))
        return self

    def assistant(self, *tools, summary=False):
        mid = self._id()
        parts = [m.Part(f"{mid}-t", m.Text("working"))]
        for k, t in enumerate(tools):
            parts.append(m.Part(f"{mid}-p{k}", t))
        self.messages.append(m.Message(mid, m.ASSISTANT, parts, time_completed_ms=1, summary=summary))
        return self

    def conv(self):
        return m.Conversation(self.messages)


def tool(output=CHUNK, name="read", status=m.COMPLETED, compacted=0):
    return m.Tool(f"call-{id(output)}-{name}-{compacted}", name, status, {"path": "a.py"},
                  output=output, time_compacted_ms=compacted)


def history(old_turns=8):
    """old_turns turns of one 10K-token tool output each, then two fresh turns."""
    b = Builder()
    for _ in range(old_turns):
        b.user().assistant(tool())
    b.user().assistant(tool())
    b.user().assistant(tool())
    return b


def ids(r):
    return sorted(r.part_ids)


def test_normal_is_off_by_default():
    r = prune.prune(history().conv(), "normal", m.CompactionSettings(), TURNS)
    assert (r.acted, r.stopped_by, r.part_ids, r.reason) == (False, "disabled", [], "normal")
    # config enables it, a per-request override wins over config
    cfg = dataclasses.replace(TURNS, prune=dataclasses.replace(TURNS.prune, enabled=True))
    assert prune.prune(history().conv(), "normal", m.CompactionSettings(), cfg).acted
    assert prune.prune(history().conv(), "normal", m.CompactionSettings(prune=False), cfg).stopped_by == "disabled"


@pytest.mark.parametrize("reason", ["payload-limit", "post-compaction"])
def test_other_reasons_run_unless_prune_is_false(reason):
    r = prune.prune(history().conv(), reason, m.CompactionSettings(), TURNS)
    assert r.acted and r.reason == reason
    # an explicit prune: false turns these off too (design.md §4, as upstream)
    r = prune.prune(history().conv(), reason, m.CompactionSettings(prune=False), TURNS)
    assert (r.acted, r.stopped_by, r.part_ids) == (False, "disabled", [])


def test_unknown_reason_is_bad_input():
    with pytest.raises(BadInput) as e:
        prune.prune(history().conv(), "sometimes", ON, CFG)
    assert e.value.field == "reason"


def test_protect_and_last_two_turns():
    b = history(old_turns=8)
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    # the last two turns are skipped; of the 8 older outputs the newest 4 (40,000) are protected
    old = [x for x in b.messages if x.role == m.ASSISTANT][:8]
    assert ids(r) == sorted(x.parts[1].id for x in old[:4])
    assert r.tokens_freed == 40_000
    assert r.tokens_scanned == 80_000
    assert r.acted and r.stopped_by == ""


def test_protected_turns_is_configurable():
    cfg = dataclasses.replace(TURNS, prune=dataclasses.replace(TURNS.prune, protected_turns=0))
    r = prune.prune(history(old_turns=8).conv(), "normal", ON, cfg)
    assert r.tokens_scanned == 100_000 and r.tokens_freed == 60_000


def test_stops_at_summary_message():
    b = Builder()
    for _ in range(6):
        b.user().assistant(tool())
    b.user().assistant(summary=True)  # a compaction point
    for _ in range(3):
        b.user().assistant(tool())
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    # only the 3 outputs between the summary and the fresh turns are scanned: 30,000 <= protect
    assert r.tokens_scanned == 30_000
    assert (r.acted, r.stopped_by) == (False, "nothing-to-prune")


def test_protected_tools_are_skipped():
    b = Builder()
    for _ in range(8):
        b.user().assistant(tool(name="skill"))
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    assert r.tokens_scanned == 0 and r.stopped_by == "nothing-to-prune"


def test_stops_at_already_compacted_part():
    b = Builder()
    for _ in range(6):
        b.user().assistant(tool())
    b.user().assistant(tool(compacted=5))
    for _ in range(5):
        b.user().assistant(tool())
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    assert r.tokens_scanned == 50_000  # the 5 outputs newer than the compacted one
    # 10,000 would go on the list, which is not > 20,000: nothing is done
    assert (r.acted, r.stopped_by, r.tokens_freed, r.part_ids) == (False, "minimum", 0, [])


def test_only_completed_tools_count():
    b = Builder()
    for status in (m.ERROR, m.RUNNING, m.PENDING) * 3:
        b.user().assistant(tool(status=status))
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    assert r.tokens_scanned == 0 and r.stopped_by == "nothing-to-prune"


def test_minimum_must_be_exceeded_strictly():
    # 40,000 protected + exactly 20,000 on the list: not more than the minimum
    b = history(old_turns=6)
    r = prune.prune(b.conv(), "normal", ON, TURNS)
    assert r.tokens_freed == 0 and r.stopped_by == "minimum"
    b = history(old_turns=7)
    assert prune.prune(b.conv(), "normal", ON, TURNS).tokens_freed == 30_000


def test_part_without_id_is_bad_input():
    b = history(old_turns=8)
    b.messages[1].parts[1].id = ""
    with pytest.raises(BadInput) as e:
        prune.prune(b.conv(), "normal", ON, TURNS)
    assert e.value.field == "conversation.messages[1].parts[1].id"


def test_apply_marks_copy_only():
    b = history(old_turns=8)
    conv = b.conv()
    r = prune.prune(conv, "normal", ON, TURNS)
    after = prune.apply(conv, r.part_ids, 1234)
    marked = [p.id for x in after.messages for p in x.parts
              if isinstance(p.content, m.Tool) and p.content.time_compacted_ms == 1234]
    assert sorted(marked) == ids(r)
    assert not any(isinstance(p.content, m.Tool) and p.content.compacted
                   for x in conv.messages for p in x.parts)  # the input is untouched
    # a second prune stops at the marks and finds nothing more
    again = prune.prune(after, "normal", ON, TURNS)
    assert again.stopped_by == "nothing-to-prune" and again.tokens_scanned == 40_000


# ---- long single turns: protection by tool results, gates scaled to the window (design.md §4) ----

W32 = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 4_096))  # usable 27,904
W200 = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 8_192))  # usable 191,808


def step_tokens(k):
    """Tool output sizes of 2,000-12,000 tokens, spread deterministically."""
    return 2_000 + (k * 3_917) % 10_001


def single_turn(steps=60):
    """One user message, then `steps` assistant steps each with one completed tool."""
    b = Builder().user("refactor the parser")
    for k in range(steps):
        b.assistant(tool("x" * 4 * step_tokens(k)))
    return b


def tool_ids(b):
    return [x.parts[1].id for x in b.messages if x.role == m.ASSISTANT]


def protected_count(sizes, protected_results, protect):
    """How many of the newest results the tool-results rule protects, by hand: the newest always
    (when N > 0), each next one while fewer than N are protected and their total including it
    stays within protect; protection ends at the first one that does not fit."""
    kept, held = 0, 0
    for size in reversed(sizes):
        if kept >= protected_results or (kept > 0 and held + size > protect):
            break
        kept, held = kept + 1, held + size
    return kept


def expected(sizes, protected_results, protect, minimum):
    """design.md §4 by hand, newest first: (ids' indexes on the list, tokens freed) or None.

    The protected results are not counted; the token walk starts from 0 after them."""
    total, chosen, freed = 0, [], 0
    for k in range(len(sizes) - 1 - protected_count(sizes, protected_results, protect), -1, -1):
        total += sizes[k]
        if total > protect:
            chosen.append(k)
            freed += sizes[k]
    return (chosen, freed) if freed > minimum else None


# The newest results are 3,080, 9,164, 5,247, 11,331, 7,414 tokens: at 6,976 only the newest fits
# (3,080 + 9,164 > 6,976); at 40,000 all five do (36,236).
@pytest.mark.parametrize("mdl,protect,minimum,kept", [(W32, 27_904 // 4, 27_904 // 10, 1),
                                                      (W200, 40_000, 191_808 // 10, 5)])
def test_default_protection_acts_in_a_long_single_turn(mdl, protect, minimum, kept):
    b = single_turn()
    assert prune.gates(ON, CFG, mdl) == prune.Gates("tool_results", 5, 2, protect, minimum,
                                                    frozenset({"skill"}), CFG.measure.media_decision_tokens)
    r = prune.prune(b.conv(), "normal", ON, CFG, model=mdl)
    sizes = [step_tokens(k) for k in range(60)]
    assert protected_count(sizes, 5, protect) == kept
    chosen, freed = expected(sizes, 5, protect, minimum)
    ids_ = tool_ids(b)
    assert r.acted and r.part_ids == [ids_[k] for k in chosen] and r.tokens_freed == freed
    # the protected results (the newest 5, as many as fit in protect) are never touched
    assert not set(ids_[-kept:]) & set(r.part_ids)
    # the turn rule (the reference's) protects the whole turn: it never acts here
    per_request = dataclasses.replace(ON, prune_settings=m.PruneSettings(protect="turns"))
    assert prune.prune(b.conv(), "normal", per_request, CFG, model=mdl).stopped_by == "nothing-to-prune"


def test_protected_results_are_not_counted():
    # 9 outputs of 10,000: the newest 4 are protected (40,000 fit PRUNE_PROTECT, a fifth would not),
    # the other 5 are counted from 0: 50,000 scanned, only the oldest goes over 40,000 and its
    # 10,000 do not beat PRUNE_MINIMUM
    b = Builder().user()
    for _ in range(9):
        b.assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, CFG)
    assert (r.tokens_scanned, r.stopped_by) == (50_000, "minimum")
    # a protected tool, a running tool and an error are not results that protect anything
    b.assistant(tool(name="skill")).assistant(tool(status=m.RUNNING)).assistant(tool(status=m.ERROR))
    assert prune.prune(b.conv(), "normal", ON, CFG).tokens_scanned == 50_000


def test_gates_scale_with_the_window():
    # 9 outputs of 3,000: PRUNE_PROTECT = 27,904 // 4 = 6,976 protects the newest 2 (6,000; a
    # third would make 9,000), of the other 7 counted 6,000 fit, the older five (15,000) go on the
    # list and free more than PRUNE_MINIMUM = 2,790
    b = Builder().user()
    for _ in range(9):
        b.assistant(tool("x" * 4 * 3_000))
    r = prune.prune(b.conv(), "normal", ON, CFG, model=W32)
    assert r.acted and r.part_ids == tool_ids(b)[4::-1] and r.tokens_freed == 15_000
    # without a model, or with an unknown window, the config values (40,000 / 20,000) stand: the
    # newest 5 (15,000) are protected and 12,000 counted, nothing over 40,000
    assert prune.prune(b.conv(), "normal", ON, CFG).stopped_by == "nothing-to-prune"
    unknown = m.Model("x", m.ANTHROPIC, m.ModelLimits(0, 0, 0))
    assert prune.prune(b.conv(), "normal", ON, CFG, model=unknown).stopped_by == "nothing-to-prune"
    # the usable window is measure.usable: a declared input limit and `reserved` count
    reserved = dataclasses.replace(ON, reserved=10_000)
    assert prune.gates(reserved, CFG, m.Model("x", m.OPENAI, m.ModelLimits(40_000, 30_000, 0))).protect_tokens \
        == 5_000


def test_protection_fits_the_protected_tokens_at_a_32k_window():
    # Why protection is bounded by PRUNE_PROTECT: five results of 12,000 tokens would hold 60,000,
    # more than the whole usable window (27,904), and prune could never act. At 6,976 the newest
    # is protected anyway (12,000 on its own), the next would make 24,000 and ends protection;
    # counted from 0, each older one goes over 6,976: 4 x 12,000 = 48,000 pruned > 2,790.
    assert 5 * 12_000 > 27_904
    b = Builder().user("run the whole suite")
    for _ in range(5):
        b.assistant(tool("x" * 4 * 12_000, name="bash"))
    assert prune.gates(ON, CFG, W32).protect_tokens == 6_976
    r = prune.prune(b.conv(), "normal", ON, CFG, model=W32)
    ids_ = tool_ids(b)
    assert r.acted and r.part_ids == ids_[3::-1] and ids_[-1] not in r.part_ids
    assert (r.tokens_freed, r.tokens_scanned) == (48_000, 48_000)


def settings_with(**kw):
    return dataclasses.replace(ON, prune_settings=m.PruneSettings(**kw))


def test_every_threshold_can_be_set_per_request():
    b = single_turn(20)
    sizes = [step_tokens(k) for k in range(20)]
    ids_ = tool_ids(b)

    def run(mdl=None, **kw):
        return prune.prune(b.conv(), "normal", settings_with(**kw), CFG, model=mdl)

    # protected_results
    r = run(protected_results=12, minimum_tokens=0)
    chosen, freed = expected(sizes, 12, 40_000, 0)
    assert r.part_ids == [ids_[k] for k in chosen] and r.tokens_freed == freed
    # protect_tokens and minimum_tokens win over the window scaling
    r = run(W32, protect_tokens=40_000, minimum_tokens=20_000)
    chosen, freed = expected(sizes, 5, 40_000, 20_000)
    assert r.part_ids == [ids_[k] for k in chosen]
    assert run(W32, minimum_tokens=10**9).stopped_by == "minimum"
    assert run(protect_tokens=10**9).stopped_by == "nothing-to-prune"
    # protect = "turns" with protected_turns
    t = history(old_turns=8)
    turns = prune.prune(t.conv(), "normal", settings_with(protect="turns"), CFG)
    assert turns.part_ids == prune.prune(t.conv(), "normal", ON, TURNS).part_ids and turns.tokens_freed == 40_000
    zero = prune.prune(t.conv(), "normal", settings_with(protect="turns", protected_turns=0), CFG)
    assert zero.tokens_freed == 60_000
    # protect = "tool_results" overrides a config that says turns
    assert prune.prune(b.conv(), "normal", settings_with(protect="tool_results"), TURNS).acted
    # protected_tools replaces the config list, an empty list included
    s = Builder().user()
    for _ in range(9):
        s.assistant(tool(name="skill"))
    s.assistant(*(tool() for _ in range(5)))
    # the skills are skipped; of the 5 reads the newest 4 (40,000) are protected, 1 counted
    assert prune.prune(s.conv(), "normal", ON, CFG).tokens_scanned == 10_000
    r = prune.prune(s.conv(), "normal", settings_with(protected_tools=()), CFG)
    # 14 results: 4 protected, 10 counted (100,000), the oldest 6 over 40,000 (60,000) pruned
    assert r.acted and r.tokens_scanned == 100_000 and r.tokens_freed == 60_000
    r = prune.prune(s.conv(), "normal", settings_with(protected_tools=("read",)), CFG)
    # the reads are skipped; of the 9 skills the newest 4 are protected, 5 counted: 40,000 kept,
    # the oldest 10,000 over it do not beat PRUNE_MINIMUM
    assert (r.tokens_scanned, r.stopped_by) == (50_000, "minimum")


def compacted_session():
    """Stored order after a compaction: head, kept tail, marker (tail_start_id), summary, later.

    Sent order: marker, summary, kept tail, later (history.project).
    """
    b = Builder()
    for _ in range(6):
        b.user("old").assistant(tool())  # the head: summarized, never sent again
    b.user("big task")
    tail_start = b.messages[-1].id
    for _ in range(12):
        b.assistant(tool())
    b.messages.append(m.Message("msg_0900", m.USER, [m.Part("msg_0900-c", m.Compaction(
        auto=True, tail_start_id=tail_start))]))
    b.messages.append(m.Message("msg_0901", m.ASSISTANT, [m.Part("msg_0901-t", m.Text("## Goal"))],
                                time_completed_ms=1, summary=True, parent_id="msg_0900"))
    b.messages.append(m.Message("msg_0902", m.USER, [m.Part("msg_0902-t", m.Text("continue"))]))
    return b


def test_scan_follows_send_order_and_reaches_the_kept_tail():
    b = compacted_session()
    tail = [x.parts[1].id for x in b.messages[13:25]]
    r = prune.prune(b.conv(), "post-compaction", m.CompactionSettings(), CFG)
    # the tail's 12 reads: 4 protected (40,000; a fifth would not fit), of the 8 counted 4 kept
    # (40,000), the oldest 4 (40,000) pruned; the head is not sent and not reached
    assert r.acted and r.part_ids == tail[3::-1] and r.tokens_scanned == 80_000
    assert r.tokens_freed == 40_000
    # the part ids are the stored parts'; marking them leaves the tail's newest untouched
    after = prune.apply(b.conv(), r.part_ids, 7)
    assert prune.prune(after, "post-compaction", m.CompactionSettings(), CFG).stopped_by == "nothing-to-prune"


def test_a_missing_part_id_names_the_stored_index():
    b = compacted_session()
    b.messages[13].parts[1].id = ""
    with pytest.raises(BadInput) as e:
        prune.prune(b.conv(), "post-compaction", m.CompactionSettings(), CFG)
    assert e.value.field == "conversation.messages[13].parts[1].id"


@pytest.mark.parametrize("kw,field", [
    ({"protect": "recent"}, "compaction.prune_settings.protect"),
    ({"protected_results": -1}, "compaction.prune_settings.protected_results"),
    ({"protected_turns": -1}, "compaction.prune_settings.protected_turns"),
    ({"protect_tokens": -1}, "compaction.prune_settings.protect_tokens"),
    ({"minimum_tokens": -1}, "compaction.prune_settings.minimum_tokens"),
])
def test_bad_prune_settings(kw, field):
    with pytest.raises(BadInput) as e:
        prune.prune(history().conv(), "normal", settings_with(**kw), CFG)
    assert e.value.field == field


def test_config_defaults_and_checks():
    assert (PC.protect, PC.protected_results, PC.protected_turns, PC.protect_tokens, PC.minimum_tokens) \
        == ("tool_results", 5, 2, 40_000, 20_000)
    with pytest.raises(ValueError, match="protect"):
        config.PruneConfig(protect="recent")
    with pytest.raises(ValueError, match="protected_results"):
        config.PruneConfig(protected_results=-1)
