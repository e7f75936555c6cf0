"""A step's own edits move no compaction point (step.run finds them once for every stage, or
takes them from the conversion): the per-turn injections, the payload guard's prune marks and
its media notes leave every compaction marker and summary where it was, on the corpus's
sessions of every provider (compactions, manual summaries, media, tool outputs of every
state); what the conversion scanned of the messages the injections left as they were stands."""
from __future__ import annotations

import datetime as dt

from helpers import corpus
from helpers.convo import assistant, text, tool, user
from contextsvc import conversation as m, projection, prune
from contextsvc.rpc import conversion
from contextsvc.step import media_strip
from contextsvc.step.environment import Editor
from contextsvc.step.inject import Turn, inject
from contextsvc.v1 import context_pb2 as pb


def _edited(messages: list) -> dict:
    """Each of the step's edits of messages, as the step makes them."""
    turn = Turn(Editor(current_time="2026-12-05T10:00:00+00:00", working_directory="/repo"), step=4, max_steps=4,
                plan_reminder="finish the plan")
    injected = inject(messages, turn, dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc)).messages
    outputs = [p.id for x in messages for p in x.parts if isinstance(p.content, m.Tool)]
    pruned = prune.apply(m.Conversation(messages=injected), outputs, 1_000).messages
    stripped, _ = media_strip.strip(pruned)
    return {"injected": injected, "pruned": pruned, "stripped": stripped}


def _summarized_with_media() -> pb.Conversation:
    """A manual summary, after it a user message with an image and a tool output with one: the
    guard strips both (media before the last typed message, once a summary exists)."""
    image = pb.FilePart(mime="image/png", filename="a.png", data=corpus.PNG)
    shot = tool("t1", "c1", "screenshot", {})
    shot.tool.state.attachments.append(image)
    return pb.Conversation(session_id="s", messages=[
        user("u1", text("p1", "fix the parser")),
        assistant("a1", text("p2", "done")),
        user("u2", text("p3", "summarize"), pb.Part(id="p4", file=image)),
        assistant("a2", text("p5", "Summary: the parser is fixed."), summary=True, parent_id="u2"),
        user("u3", text("p6", "take a screenshot")),
        assistant("a3", shot),
        user("u4", text("p7", "and now?")),
    ])


def test_the_steps_edits_move_no_compaction_point():
    seen = {"points": 0, "appended": 0, "pruned": 0, "stripped": 0}
    sessions = [conversion.conversation(_summarized_with_media())]
    sessions += [conversion.request_conversation(case.request)
                 for provider in corpus.PROVIDER_ENUM for case in corpus.cases(provider, 12)]
    for conv in sessions:
        messages = conv.messages
        points = projection.compaction_points(messages)
        edited = _edited(messages)
        for name, after in edited.items():
            assert projection.compaction_points(after) == points, (conv.messages[0].id, name)
            assert projection.project(after, points) == projection.project(after), (conv.messages[0].id, name)
            assert projection.last_compaction(after, points) == projection.last_compaction(after)
        # what the conversion scanned stands for the injected messages as far as they are the very
        # same objects (step.run reads the others)
        scanned, injected = m.NOTHING_SCANNED.extended(0, messages), edited["injected"]
        same = next((i for i, (a, b) in enumerate(zip(injected, messages)) if a is not b), len(messages))
        assert scanned.extended(same, injected) == m.NOTHING_SCANNED.extended(0, injected)
        seen["points"] += bool(points)
        seen["appended"] += len(edited["injected"]) > len(messages)
        seen["pruned"] += any(a is not b for a, b in zip(edited["pruned"], edited["injected"]))
        seen["stripped"] += any(a is not b for a, b in zip(edited["stripped"], edited["pruned"]))
    assert all(seen.values()), seen  # sessions with compaction points, and each edit changed some


def test_the_rebase_reads_the_conversions_latest_compaction_for_what_it_says():
    """The baseline's rebase (step.baseline.as_counted) told the latest compaction of the messages
    as they were (conversation.Scanned) pairs the same messages as without it: none when nothing
    was compacted since the baseline's answer, the guard's copies alone over the guard."""
    from contextsvc.step.baseline import as_counted, baseline

    seen = {"nothing since": 0, "compacted since": 0, "over the guard": 0}
    sessions = [conversion.conversation(_summarized_with_media())]
    sessions += [conversion.request_conversation(case.request)
                 for provider in corpus.PROVIDER_ENUM for case in corpus.cases(provider, 12)]
    for conv in sessions:
        messages = conv.messages
        base = baseline(messages)
        if base is None:
            continue
        outputs = [p.id for x in messages for p in x.parts if isinstance(p.content, m.Tool)]
        pruned = prune.apply(m.Conversation(messages=messages), outputs, base.time_completed_ms + 1).messages
        latest = m.NOTHING_SCANNED.extended(0, messages).last_compacted_ms
        for now, before in ((messages, None), (pruned, messages)):
            assert as_counted(now, base, before, latest) == as_counted(now, base, before, None)
        seen["compacted since" if latest > base.time_completed_ms else "nothing since"] += 1
        seen["over the guard"] += bool(as_counted(pruned, base, messages, latest))
    assert all(seen.values()), seen


def test_the_media_of_a_kept_tail_stay_when_the_marker_is_stored_after_it():
    """A compaction that keeps the person's last turn (tail_start_id) stores its marker, a user
    message, after that turn: read as the person's last message, it made the screenshot they had
    just sent history, and the guard stripped it at every step over its bytes."""
    png = m.File("image/png", "mine.png", data=corpus.PNG)
    shot = m.Tool("c1", "screenshot", m.COMPLETED, {}, output="taken", attachments=[m.File("image/png", "s.png",
                                                                                            data=corpus.PNG)])
    old = m.File("image/png", "old.png", data=corpus.PNG)
    messages = [
        m.Message("u1", m.USER, [m.Part("p1", m.Text("fix the layout")), m.Part("p2", old)]),
        m.Message("a1", m.ASSISTANT, [m.Part("p3", m.Text("looked"))], time_completed_ms=1),
        m.Message("u2", m.USER, [m.Part("p4", m.Text("the Save button is off, see")), m.Part("p5", png)]),
        m.Message("a2", m.ASSISTANT, [m.Part("p6", shot)], time_completed_ms=2),
        m.Message("u3", m.USER, [m.Part("p7", m.Compaction(auto=True, tail_start_id="u2"))]),
        m.Message("a3", m.ASSISTANT, [m.Part("p8", m.Text("## Goal\nfix the layout"))], summary=True,
                  parent_id="u3", time_completed_ms=3),
    ]
    stripped, count = media_strip.strip(messages)
    assert [x.id for x in projection.project(stripped)] == ["u3", "a3", "u2", "a2"]  # the tail sent after the summary
    assert count == 0 and stripped[2] is messages[2] and stripped[3] is messages[3]
    # a message the person writes after it makes the tail's media history, as before
    later = messages + [m.Message("u4", m.USER, [m.Part("p9", m.Text("and now?"))])]
    stripped, count = media_strip.strip(later)
    assert count == 2 and "mine.png" in stripped[2].parts[1].content.text and not stripped[3].parts[0].content.attachments
