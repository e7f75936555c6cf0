"""Prune's gates on core types (SPEC section 4), one test per gate."""
from __future__ import annotations

import dataclasses

import pytest

from contextsvc import config, model as m, prune
from contextsvc.errors import BadInput

CFG = config.Config()
ON = m.CompactionSettings(prune=True)
PC = CFG.prune
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
    r = prune.prune(history().conv(), "normal", m.CompactionSettings(), CFG)
    assert (r.acted, r.stopped_by, r.part_ids, r.reason) == (False, "disabled", [], "normal")
    # config enables it, a per-request override wins over config
    cfg = dataclasses.replace(CFG, prune=dataclasses.replace(PC, enabled=True))
    assert prune.prune(history().conv(), "normal", m.CompactionSettings(), cfg).acted
    assert prune.prune(history().conv(), "normal", m.CompactionSettings(prune=False), cfg).stopped_by == "disabled"


@pytest.mark.parametrize("reason", ["payload-limit", "post-compaction"])
def test_other_reasons_always_run(reason):
    r = prune.prune(history().conv(), reason, m.CompactionSettings(prune=False), CFG)
    assert r.acted and r.reason == reason


def test_unknown_reason_is_bad_input():
    with pytest.raises(BadInput) as e:
        prune.prune(history().conv(), "sometimes", ON, CFG)
    assert e.value.field == "reason"


def test_protect_and_last_two_turns():
    b = history(old_turns=8)
    r = prune.prune(b.conv(), "normal", ON, CFG)
    # the last two turns are skipped; of the 8 older outputs the newest 4 (40,000) are protected
    old = [x for x in b.messages if x.role == m.ASSISTANT][:8]
    assert ids(r) == sorted(x.parts[1].id for x in old[:4])
    assert r.tokens_freed == 40_000
    assert r.tokens_scanned == 80_000
    assert r.acted and r.stopped_by == ""


def test_protected_turns_is_configurable():
    cfg = dataclasses.replace(CFG, prune=dataclasses.replace(PC, protected_turns=0))
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
    r = prune.prune(b.conv(), "normal", ON, CFG)
    # only the 3 outputs between the summary and the fresh turns are scanned: 30,000 <= protect
    assert r.tokens_scanned == 30_000
    assert (r.acted, r.stopped_by) == (False, "nothing-to-prune")


def test_protected_tools_are_skipped():
    b = Builder()
    for _ in range(8):
        b.user().assistant(tool(name="skill"))
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, CFG)
    assert r.tokens_scanned == 0 and r.stopped_by == "nothing-to-prune"


def test_stops_at_already_compacted_part():
    b = Builder()
    for _ in range(6):
        b.user().assistant(tool())
    b.user().assistant(tool(compacted=5))
    for _ in range(5):
        b.user().assistant(tool())
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, CFG)
    assert r.tokens_scanned == 50_000  # the 5 outputs newer than the compacted one
    # 10,000 would go on the list, which is not > 20,000: nothing is done
    assert (r.acted, r.stopped_by, r.tokens_freed, r.part_ids) == (False, "minimum", 0, [])


def test_only_completed_tools_count():
    b = Builder()
    for status in (m.ERROR, m.RUNNING, m.PENDING) * 3:
        b.user().assistant(tool(status=status))
    b.user().assistant(tool()).user().assistant(tool())
    r = prune.prune(b.conv(), "normal", ON, CFG)
    assert r.tokens_scanned == 0 and r.stopped_by == "nothing-to-prune"


def test_minimum_must_be_exceeded_strictly():
    # 40,000 protected + exactly 20,000 on the list: not more than the minimum
    b = history(old_turns=6)
    r = prune.prune(b.conv(), "normal", ON, CFG)
    assert r.tokens_freed == 0 and r.stopped_by == "minimum"
    b = history(old_turns=7)
    assert prune.prune(b.conv(), "normal", ON, CFG).tokens_freed == 30_000


def test_part_without_id_is_bad_input():
    b = history(old_turns=8)
    b.messages[1].parts[1].id = ""
    with pytest.raises(BadInput) as e:
        prune.prune(b.conv(), "normal", ON, CFG)
    assert e.value.field == "conversation.messages[1].parts[1].id"


def test_apply_marks_copy_only():
    b = history(old_turns=8)
    conv = b.conv()
    r = prune.prune(conv, "normal", ON, CFG)
    after = prune.apply(conv, r.part_ids, 1234)
    marked = [p.id for x in after.messages for p in x.parts
              if isinstance(p.content, m.Tool) and p.content.time_compacted_ms == 1234]
    assert sorted(marked) == ids(r)
    assert not any(isinstance(p.content, m.Tool) and p.content.compacted
                   for x in conv.messages for p in x.parts)  # the input is untouched
    # a second prune stops at the marks and finds nothing more
    again = prune.prune(after, "normal", ON, CFG)
    assert again.stopped_by == "nothing-to-prune" and again.tokens_scanned == 40_000
