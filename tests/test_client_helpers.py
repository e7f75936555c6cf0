"""contextsvc_client: applying CompactResponse, PruneResponse and AssembleResponse.persist to a message list,
and turning a model's tool call name back into the request's (AssembleResponse.tool_names)."""
from __future__ import annotations

import pytest

from contextsvc_client import apply_assemble, apply_compaction, apply_persist, apply_prune, client_tool_name
from contextsvc.v1 import context_pb2 as pb
from helpers.convo import assistant, text, tool, user


def _history():
    return [
        user("u1", text("p1", "Fix tests/test_app.py")),
        assistant("a1", tool("t1", "call_1", "read", {"path": "app.py"}, "x" * 100),
                  tool("t2", "call_2", "bash", {"command": "pytest"}, "FAILED"), usage=pb.Usage(input=100)),
        user("u2", text("p2", "go on")),
        assistant("a2", tool("t3", "call_3", "read", {"path": "b.py"}, "y" * 100), usage=pb.Usage(input=200)),
    ]


def _marker(mid, tail="", auto=True):
    return pb.Message(id=mid, role=pb.ROLE_USER,
                      parts=[pb.Part(id=mid + "-p", compaction=pb.CompactionPart(auto=auto, tail_start_id=tail))])


def _summary(mid):
    return pb.Message(id=mid, role=pb.ROLE_ASSISTANT, summary=True, time_completed_ms=1,
                      parts=[pb.Part(id=mid + "-p", text=pb.TextPart(text="## Goal\n- fix"))])


def _insert(after, message):
    return pb.CompactEdit(insert=pb.InsertMessage(after_id=after, message=message))


def test_inserts_chain_on_ids_inserted_by_earlier_edits_in_order():
    cont = user("svc-c", text("svc-c-p", "Continue if you have next steps", synthetic=True))
    r = pb.CompactResponse(outcome=pb.COMPACT_OUTCOME_COMPACTED, edits=[
        _insert("a2", _marker("svc-m", tail="u2")),
        _insert("svc-m", _summary("svc-s")),
        _insert("svc-s", cont),
    ])
    before = _history()
    after = apply_compaction(before, r)
    assert [m.id for m in after] == ["u1", "a1", "u2", "a2", "svc-m", "svc-s", "svc-c"]
    assert after[4].parts[0].compaction.tail_start_id == "u2"
    assert [m.id for m in before] == ["u1", "a1", "u2", "a2"], "the caller's list is untouched"
    assert after[0] is before[0], "unchanged messages are shared, not copied"
    after[5].parts[0].text.text = "changed"
    assert r.edits[1].insert.message.parts[0].text.text == "## Goal\n- fix", "inserted messages are copies"


def test_insert_in_the_middle_keeps_the_rest_in_place():
    r = pb.CompactResponse(edits=[_insert("a1", _marker("m")), _insert("m", _summary("s"))])
    assert [m.id for m in apply_compaction(_history(), r)] == ["u1", "a1", "m", "s", "u2", "a2"]


def test_set_tail_start_updates_a_copy_of_the_callers_marker():
    before = _history() + [_marker("m0")]
    r = pb.CompactResponse(edits=[
        pb.CompactEdit(set_tail_start=pb.SetTailStart(message_id="m0", tail_start_id="u2")),
        _insert("m0", _summary("s")),
    ])
    after = apply_compaction(before, r)
    assert after[4].parts[0].compaction.tail_start_id == "u2"
    assert before[4].parts[0].compaction.tail_start_id == "", "the original marker is not modified"
    assert after[5].id == "s"


def test_mark_compacted_sets_the_time_on_copies():
    before = _history()
    r = pb.CompactResponse(edits=[
        pb.CompactEdit(mark_compacted=pb.MarkCompacted(part_ids=["t1", "t3"], time_compacted_ms=1234)),
    ])
    after = apply_compaction(before, r)
    assert after[1].parts[0].tool.state.time_compacted_ms == 1234
    assert after[1].parts[1].tool.state.time_compacted_ms == 0
    assert after[3].parts[0].tool.state.time_compacted_ms == 1234
    assert before[1].parts[0].tool.state.time_compacted_ms == 0
    assert after[0] is before[0]


def test_replace_output_stores_the_cut_output_on_a_copy():
    before = _history()
    cut = "y" * 10 + "\n[Tool output truncated for compaction: omitted 80 chars]\n" + "y" * 10
    after = apply_compaction(before, pb.CompactResponse(edits=[
        pb.CompactEdit(replace_output=pb.ReplaceToolOutput(part_id="t3", output=cut))]))
    assert after[3].parts[0].tool.state.output == cut
    assert after[3].parts[0].tool.state.status == pb.TOOL_STATUS_COMPLETED
    assert before[3].parts[0].tool.state.output == "y" * 100, "the caller's message is untouched"
    assert after[:3] == before[:3] and after[1] is before[1]


def test_drop_omittable_leaves_out_the_listed_messages_only_when_asked():
    r = pb.CompactResponse(edits=[_insert("a2", _marker("m", tail="u2")), _insert("m", _summary("s"))],
                           omittable_ids=["u1", "a1"])
    assert [m.id for m in apply_compaction(_history(), r)] == ["u1", "a1", "u2", "a2", "m", "s"]
    assert [m.id for m in apply_compaction(_history(), r, drop_omittable=True)] == ["u2", "a2", "m", "s"]


def test_empty_response_returns_an_equal_new_list():
    before = _history()
    after = apply_compaction(before, pb.CompactResponse(outcome=pb.COMPACT_OUTCOME_NOTHING_TO_DO))
    assert after == before and after is not before


@pytest.mark.parametrize("edit, field", [
    (_insert("nope", _marker("m")), "edits[0].insert.after_id: no message 'nope'"),
    (_insert("a2", _marker("u1")), "edits[0].insert.message.id: 'u1' is already"),
    (pb.CompactEdit(set_tail_start=pb.SetTailStart(message_id="nope")), "edits[0].set_tail_start.message_id: no message"),
    (pb.CompactEdit(set_tail_start=pb.SetTailStart(message_id="u1")), "has no compaction part"),
    (pb.CompactEdit(mark_compacted=pb.MarkCompacted(part_ids=["t9"])), "mark_compacted.part_ids: no tool part 't9'"),
    (pb.CompactEdit(mark_compacted=pb.MarkCompacted(part_ids=["p1"])), "'p1' is not a tool part"),
    (pb.CompactEdit(replace_output=pb.ReplaceToolOutput(part_id="t9")), "replace_output.part_id: no tool part 't9'"),
    (pb.CompactEdit(replace_output=pb.ReplaceToolOutput(part_id="p2")), "'p2' is not a tool part"),
    (pb.CompactEdit(), "edits[0]: no edit set"),
])
def test_unknown_ids_raise_a_clear_value_error(edit, field):
    with pytest.raises(ValueError) as e:
        apply_compaction(_history(), pb.CompactResponse(edits=[edit]))
    assert field in str(e.value)


def test_unknown_omittable_id_raises():
    with pytest.raises(ValueError, match="omittable_ids: no message 'zz'"):
        apply_compaction(_history(), pb.CompactResponse(omittable_ids=["zz"]), drop_omittable=True)


def test_apply_prune_marks_the_parts_at_the_given_time():
    before = _history()
    after = apply_prune(before, pb.PruneResponse(part_ids=["t2"], acted=True), now_ms=99)
    assert after[1].parts[1].tool.state.time_compacted_ms == 99
    assert before[1].parts[1].tool.state.time_compacted_ms == 0
    assert after[3] is before[3]


def test_apply_prune_defaults_to_now_and_ignores_an_empty_answer():
    after = apply_prune(_history(), pb.PruneResponse(part_ids=["t1"]))
    assert after[1].parts[0].tool.state.time_compacted_ms > 1_600_000_000_000
    before = _history()
    assert apply_prune(before, pb.PruneResponse(acted=False)) == before


def test_apply_prune_unknown_part_raises():
    with pytest.raises(ValueError, match="part_ids: no tool part 'missing'"):
        apply_prune(_history(), pb.PruneResponse(part_ids=["missing"]))


def test_apply_persist_replaces_a_part_by_id_or_appends_it_on_copies():
    before = _history()
    r = pb.AssembleResponse(persist=[
        pb.PersistPart(message_id="u1", part=text("p1", "<system-reminder>\nwrapped")),
        pb.PersistPart(message_id="u1", part=text("u1~environment", "\n\nblock", synthetic=True))])
    after = apply_persist(before, r)
    assert [p.text.text for p in after[0].parts] == ["<system-reminder>\nwrapped", "\n\nblock"]
    assert [p.text.text for p in before[0].parts] == ["Fix tests/test_app.py"], "the caller's message is untouched"
    assert after[1] is before[1]
    after[0].parts[1].text.text = "changed"
    assert r.persist[1].part.text.text == "\n\nblock", "stored parts are copies"
    assert len(apply_persist(after, r)[0].parts) == 2, "stored again, still once"


def test_apply_assemble_stores_the_persist_parts_and_the_payload_guards_prune():
    before = _history()
    r = pb.AssembleResponse(
        persist=[pb.PersistPart(message_id="u1", part=text("u1~environment", "\n\nblock", synthetic=True))],
        pruned_part_ids=[before[1].parts[0].id])
    after = apply_assemble(before, r, now_ms=77)
    assert [p.text.text for p in after[0].parts][-1] == "\n\nblock"
    assert after[1].parts[0].tool.state.time_compacted_ms == 77
    assert before[1].parts[0].tool.state.time_compacted_ms == 0, "the caller's message is untouched"
    with pytest.raises(ValueError, match="pruned_part_ids"):
        apply_assemble(before, pb.AssembleResponse(pruned_part_ids=["nope"]))


def test_apply_persist_without_parts_returns_an_equal_new_list_and_checks_ids():
    before = _history()
    same = apply_persist(before, pb.AssembleResponse())
    assert same == before and same is not before
    with pytest.raises(ValueError, match="persist\\[0\\].message_id: no message 'nope'"):
        apply_persist(before, pb.AssembleResponse(persist=[pb.PersistPart(message_id="nope", part=text("x", "y"))]))


def test_client_tool_name_turns_a_mapped_name_back_and_keeps_any_other():
    a = pb.AssembleResponse(tool_names={"github_create_issue_3f2a9c1b7d4e": "github.create_issue"})
    assert client_tool_name(a, "github_create_issue_3f2a9c1b7d4e") == "github.create_issue"
    assert client_tool_name(a, "read") == "read"
    assert client_tool_name(pb.AssembleResponse(), "github_create_issue_3f2a9c1b7d4e") == "github_create_issue_3f2a9c1b7d4e"


def test_node_helpers_pass_their_unit_tests():
    """clients/node/apply.js and usage.js: the same cases, on proto-loader's plain objects (node --test)."""
    import pathlib
    import shutil
    import subprocess

    node = shutil.which("node")
    assert node, "node not installed: run .ci/deps (the README's test command does)"
    client = pathlib.Path(__file__).resolve().parent.parent / "clients" / "node"
    out = subprocess.run([node, "--test", "apply.test.js", "usage.test.js"], cwd=client, capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
