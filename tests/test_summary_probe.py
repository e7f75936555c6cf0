"""The summary probe (bench/summary_probe.py), short, and the regressions of issue 17: In Progress
and Next Steps filled from the head, asks already done kept out of Next Steps, across compactions."""
from __future__ import annotations

import summary_probe as probe

from contextsvc import config, conversation as m
from contextsvc.compact import run as cmod, edits as ed, template
from contextsvc.compact.summarizers import offline

# Floors under what the offline summarizer reaches today (1.00 but files touched 0.96 and
# commands 0.97 after the fifth compaction on 20 sessions), with slack for changes elsewhere.
FLOORS = {"goal": 1.0, "constraints": 0.9, "files": 0.8, "commands": 0.8, "errors": 0.8,
          "decisions": 0.9, "in_progress": 0.9, "next_steps": 0.9, "done_kept_out": 1.0,
          "precision": 0.9}


def test_probe_short_meets_floors_over_five_compactions():
    result = probe.run(sessions=4, rounds=5, seed=1)
    for cat, floor in FLOORS.items():
        for r, ratio in enumerate(result[cat]):
            assert ratio >= floor, (cat, r + 1, ratio, probe.table(result))


def _user(mid, text):
    return m.Message(mid, m.USER, [m.Part(f"{mid}:0", m.Text(text))])


def _assistant(mid, *contents):
    return m.Message(mid, m.ASSISTANT, [m.Part(f"{mid}:{k}", m.Text(c) if isinstance(c, str) else c)
                                        for k, c in enumerate(contents)], time_completed_ms=1)


def _edit(path, status=m.COMPLETED):
    return m.Tool(f"call-{path}-{status}", "edit", status, {"file_path": path, "old_string": "a",
                                                           "new_string": "b"}, output="applied")


def the_case():
    """The issue's case: the last user message asks for two more things, the assistant is
    mid-way through the first; an earlier ask was done."""
    return [
        _user("u1", "Add a timeout to `fetch_rates` in src/rates/client.py"),
        _assistant("a1", "Adding it.", _edit("src/rates/client.py")),
        _user("u2", "Two more things: rename `load_cfg` to `load_config` in src/app/config.py, "
                    "and then update docs/CHANGELOG.md."),
        _assistant("a2", m.Tool("call-r", "read", m.COMPLETED, {"path": "src/app/config.py"},
                                output="def load_cfg(): ...")),
        _assistant("a3", _edit("src/app/config.py", m.RUNNING)),
    ]


def test_in_progress_and_next_steps_are_filled_and_a_done_ask_stays_out():
    s = template.parse(offline.summarize(the_case()))
    assert s["in_progress"] == [
        "Working on: rename `load_cfg` to `load_config` in src/app/config.py",
        "Last step: `edit` on `src/app/config.py` was interrupted"]
    assert s["next_steps"] == ["update docs/CHANGELOG.md"]
    assert not any("fetch_rates" in x for x in s["next_steps"])


def test_next_steps_roll_a_step_done_later_moves_out():
    cfg = config.Config()
    msgs = the_case()
    r1 = cmod.compact(cmod.CompactInput(m.Conversation(msgs, "s"), probe.MODEL,
                                        compaction=probe.WHOLE_HEAD, now_ms=1), cfg)
    msgs = ed.apply(msgs, r1.edits)
    # the next round finishes the rename, then does the changelog; nothing else is asked
    msgs += [_assistant("a4", "Renamed `load_cfg` to `load_config`.", _edit("src/app/config.py")),
             _assistant("a5", m.Tool("call-w", "write", m.COMPLETED, {"filePath": "docs/CHANGELOG.md",
                                                                      "content": "..."}, output="ok"))]
    r2 = cmod.compact(cmod.CompactInput(m.Conversation(msgs, "s"), probe.MODEL,
                                        compaction=probe.WHOLE_HEAD, now_ms=2), cfg)
    s = template.parse(r2.summary.parts[0].content.text)
    assert s["next_steps"] == [] and s["in_progress"] == []
    text = r2.summary.parts[0].content.text
    assert "## Next Steps\n- (none)" in text and "### In Progress\n- (none)" in text
    # the first compaction had them; the facts themselves survive elsewhere
    first = template.parse(r1.summary.parts[0].content.text)
    assert first["next_steps"] == ["update docs/CHANGELOG.md"]
    assert "docs/CHANGELOG.md" in text and "src/app/config.py" in text


def test_an_open_next_step_survives_a_compaction_with_unrelated_steps():
    summary = offline.summarize(the_case())
    later = [_user("u3", "Also check the logs"),
             _assistant("a6", m.Tool("call-b", "bash", m.COMPLETED, {"command": "tail -n 50 app.log"},
                                     output="ok"))]
    s = template.parse(offline.summarize(later, summary))
    assert "update docs/CHANGELOG.md" in s["next_steps"]
    rename = "rename `load_cfg` to `load_config` in src/app/config.py"
    assert rename in s["next_steps"] or "Working on: " + rename in s["in_progress"]
