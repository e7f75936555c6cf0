"""A request of more than 20 images takes none over 2000 px a side on Anthropic (step/many_images.py).

The refusal users of the reference's peers met ("At least one of the image dimensions exceed max
allowed size for many-image requests: 2000 pixels") came once a 21st screenshot joined a history
holding a larger one, and then at every later request: the image stays in the history. Here a
session grows a screenshot a step over real servers, with the memo and without, and each body is
judged by the anthropic SDK's types and the API's documented image rules (tests/judges).
"""
from __future__ import annotations

import base64
import io
import json

import PIL.Image
import pytest

from contextsvc import assemble, config, conversation as m
from contextsvc.lowering.registry import FORMATS
from helpers.server import stubs_with_and_without_memo
from judges import judge_for
from contextsvc.v1 import context_pb2 as pb

RULE = FORMATS[m.ANTHROPIC]
BIG = (2400, 1350)  # a screenshot of a large display: within Anthropic's 8000 px, over its 2000


def png(w: int, h: int) -> bytes:
    out = io.BytesIO()
    PIL.Image.new("RGB", (w, h), (30, 120, 200)).save(out, "PNG")
    return out.getvalue()


SMALL_SHOT, BIG_SHOT = png(128, 72), png(*BIG)


def step_messages(k: int, in_tool: bool, all_big: bool = False) -> tuple[list, list]:
    """(what step k sends after the history, what the history then keeps) of a computer-use
    session: the screenshot as the person's file (then the model's answer), or as the output of
    the model's screenshot tool (in_tool); the first screenshot is the big one (all_big: all)."""
    shot = pb.FilePart(mime="image/png", filename=f"shot{k}.png", data=BIG_SHOT if k == 0 or all_big else SMALL_SHOT)
    if in_tool:
        call = pb.Message(id=f"a{k}", role=pb.ROLE_ASSISTANT, time_completed_ms=1, parts=[pb.Part(
            id=f"c{k}", tool=pb.ToolPart(call_id=f"call{k}", tool="screenshot", state=pb.ToolState(
                status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output="taken", attachments=[shot])))])
        return [call], [call]
    ask = pb.Message(id=f"u{k}", role=pb.ROLE_USER, parts=[pb.Part(id=f"t{k}", text=pb.TextPart(text=f"now {k}")),
                                                            pb.Part(id=f"f{k}", file=shot)])
    answer = pb.Message(id=f"a{k}", role=pb.ROLE_ASSISTANT, time_completed_ms=1,
                        parts=[pb.Part(id=f"x{k}", text=pb.TextPart(text=f"step {k} done"))])
    return [ask], [ask, answer]


@pytest.fixture(scope="module")
def stubs():
    yield from stubs_with_and_without_memo()


def _dicts(v):
    """Every JSON object in v, depth first."""
    if isinstance(v, dict):
        yield v
    children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    for x in children:
        yield from _dicts(x)


def _images(body: dict) -> list:
    """(pixels as sent, or None for the note) of each screenshot in body order: Anthropic's image
    blocks and Converse's."""
    out = []
    for d in _dicts(body):
        data = d["source"]["data"] if d.get("type") == "image" else \
            d["image"]["source"]["bytes"] if isinstance(d.get("image"), dict) else None
        if data is not None:
            out.append(PIL.Image.open(io.BytesIO(base64.b64decode(data))).size)
        elif isinstance(d.get("text"), str) and d["text"].startswith("[Attached image/png"):
            out.append(None)
    return out


def grown(stubs, in_tool: bool, steps: int, all_big: bool = False):
    """Each step's (body, whether the cache report kept the prefix) of a session grown a
    screenshot a step over the servers with the memo and without (the same bodies), each body
    judged by the Anthropic judge."""
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=200_000, output=8_000))
    tool = pb.ToolDefinition(name="screenshot", description="Takes a screenshot.", input_schema_json="{}")
    history = [pb.Message(id="start", role=pb.ROLE_USER, parts=[pb.Part(id="s", text=pb.TextPart(text="Go."))])]
    states = [b"", b""]
    for k in range(steps):
        sent, keep = step_messages(k, in_tool, all_big)
        bodies, reports = [], []
        for i, stub in enumerate(stubs):
            request = pb.AssembleRequest(conversation=pb.Conversation(session_id=f"shots-{in_tool}-{all_big}",
                                                                      messages=history + sent),
                                         model=model, tools=[tool], previous_cache_state=states[i])
            r = stub.Assemble(request, timeout=60)
            states[i] = r.cache_state
            bodies.append(r.body)
            reports.append(r.cache_report)
        assert bodies[0] == bodies[1], f"step {k}: the memo changed the body"
        assert judge_for(m.ANTHROPIC)(json.loads(bodies[0])) == [], f"step {k}"
        yield bodies[0], reports[0].prefix_kept
        history += keep


@pytest.mark.parametrize("in_tool", [False, True], ids=["files", "tool-outputs"])
def test_a_session_past_20_screenshots_sends_its_big_one_as_a_note_and_is_accepted(stubs, in_tool):
    kept = []
    for k, (body, prefix_kept) in enumerate(grown(stubs, in_tool, 24)):
        shots = _images(json.loads(body))
        assert len(shots) == k + 1
        if k + 1 <= RULE.many_images:
            assert shots[0] == BIG  # within the 8000 px of a request of 20 images or fewer
        else:
            assert shots[0] is None and all(s == (128, 72) for s in shots[1:])
            assert "over the 2000 px anthropic takes per side in a request of more than 20 images" in body.decode()
        kept.append(prefix_kept)
    # the prefix is rewritten once, at the 21st screenshot, and kept at every other step
    assert [k for k, x in enumerate(kept) if not x] == [0, RULE.many_images]


@pytest.mark.parametrize("in_tool", [False, True], ids=["files", "tool-outputs"])
def test_a_session_of_large_screenshots_keeps_sending_its_newest_ones(stubs, in_tool):
    """Screenshots of a large display are all over 2000 px: noting them all left the agent blind
    from the 21st on. The oldest are left out instead, 10 at a time, and the newest 11 to 20 sent
    whole; the prefix is rewritten where the left-out ones end, once every 10 screenshots."""
    kept = []
    for k, (body, prefix_kept) in enumerate(grown(stubs, in_tool, 36, all_big=True)):
        shots = _images(json.loads(body))
        n = k + 1
        left_out = 0 if n <= RULE.many_images else -(-(n - RULE.many_images) // 10) * 10
        assert shots == [None] * left_out + [BIG] * (n - left_out), k
        if left_out:
            assert "an older image: a request of more than 20 images takes none over 2000 px on anthropic" \
                in body.decode()
        kept.append(prefix_kept)
    assert [k for k, x in enumerate(kept) if not x] == [0, 20, 30]


def test_20_screenshots_or_other_providers_keep_the_big_one_and_bedrock_does_not():
    def shots(provider, n, all_big=False):
        msgs = []
        for k in range(n):
            data = BIG_SHOT if k == 0 or all_big else SMALL_SHOT
            msgs += [m.Message(f"u{k}", m.USER, [m.Part(f"f{k}", m.File("image/png", f"s{k}.png", data=data))]),
                     m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"x{k}", m.Text("ok"))], time_completed_ms=1)]
        msgs.append(m.Message("q", m.USER, [m.Part("q", m.Text("go on"))]))
        inp = assemble.AssembleInput(m.Conversation(msgs, "s"), m.Model("model-x", provider, m.ModelLimits(
            1_000_000, 0, 8_000)), [], m.SystemPrompt(), m.CompactionSettings())
        return json.loads(assemble.assemble(inp, config.Config()).body)

    assert _images(shots(m.ANTHROPIC, 20))[0] == BIG
    assert _images(shots(m.BEDROCK, 20))[0] == BIG
    # Claude behind Converse has the rule too: the whole request is lowered at once there
    bedrock = shots(m.BEDROCK, 21)
    assert "over the 2000 px bedrock takes per side" in json.dumps(bedrock) and judge_for(m.BEDROCK)(bedrock) == []
    bedrock = shots(m.BEDROCK, 21, all_big=True)  # the oldest 10 left out, as on Anthropic
    assert _images(bedrock) == [None] * 10 + [BIG] * 11 and judge_for(m.BEDROCK)(bedrock) == []
    for provider in (m.OPENAI, m.GEMINI):
        body = shots(provider, 21)
        assert "not sent" not in json.dumps(body) and judge_for(provider)(body) == []


def test_the_judges_refuse_a_big_image_among_more_than_20():
    """What the tests above rely on: the Anthropic and Bedrock judges know the rule."""
    block = lambda data: {"type": "image", "source": {"type": "base64", "media_type": "image/png",  # noqa: E731
                                                      "data": base64.b64encode(data).decode()}}
    many = {"model": "x", "max_tokens": 10, "messages": [
        {"role": "user", "content": [block(BIG_SHOT)] + [block(SMALL_SHOT)] * RULE.many_images}]}
    assert [p.split(":")[0] for p in judge_for(m.ANTHROPIC)(many)] == ["image"]
    many["messages"][0]["content"].pop()
    assert judge_for(m.ANTHROPIC)(many) == []
    converse = lambda n: {"messages": [{"role": "user", "content": [  # noqa: E731
        {"image": {"format": "png", "source": {"bytes": base64.b64encode(data).decode()}}}
        for data in [BIG_SHOT] + [SMALL_SHOT] * n]}]}
    assert [p.split(":")[0] for p in judge_for(m.BEDROCK)(converse(RULE.many_images))] == ["image"]
    assert judge_for(m.BEDROCK)(converse(RULE.many_images - 1)) == []


def test_a_prune_that_moves_which_messages_are_left_out_sends_the_same_body_with_the_memo(stubs):
    """A prune of the oldest screenshot outputs moved which messages the rule left out while their
    count stayed 10; the element joining a tool result and the person's next message was taken
    from the memo as the step before lowered it: the memo sent a screenshot, no memo its note."""
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=400_000, output=8_000))

    def session(pruned=()):
        messages = [pb.Message(id="u0", role=pb.ROLE_USER, parts=[pb.Part(id="t0", text=pb.TextPart(text="Go."))])]
        for k in range(30):
            state = pb.ToolState(status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output="Clicked.",
                                 attachments=[pb.FilePart(mime="image/png", filename=f"s{k}.png", data=BIG_SHOT)],
                                 time_compacted_ms=10_000 if k in pruned else 0)
            messages.append(pb.Message(id=f"a{k}", role=pb.ROLE_ASSISTANT, time_completed_ms=k + 1, parts=[
                pb.Part(id=f"c{k}", tool=pb.ToolPart(call_id=f"call{k}", tool="computer", state=state))]))
            if k == 11:  # the person's word, joined with the screenshot's tool result
                messages.append(pb.Message(id="y", role=pb.ROLE_USER,
                                           parts=[pb.Part(id="ty", text=pb.TextPart(text="The blue one."))]))
        return pb.Conversation(messages=messages, session_id="moved")

    tool = pb.ToolDefinition(name="computer", description="Clicks.", input_schema_json="{}")
    with_memo, without = stubs
    with_memo.Assemble(pb.AssembleRequest(conversation=session(), model=model, tools=[tool]), timeout=60)
    pruned = pb.AssembleRequest(conversation=session(pruned=range(5)), model=model, tools=[tool])
    a, b = with_memo.Assemble(pruned, timeout=60).body, without.Assemble(pruned, timeout=60).body
    assert a == b and len(_images(json.loads(a))) == 25 and judge_for(m.ANTHROPIC)(json.loads(a)) == []


@pytest.mark.parametrize("most", [20, 100])
@pytest.mark.parametrize("per_message", [1, 2, 3, 5, 7, 10])
def test_the_left_out_messages_change_once_every_10_images_whatever_each_message_holds(most, per_message):
    """A step adds one message of per_message images; the messages left out (so that at most
    `most` are sent) change, and the prefix is rewritten, once every CHUNK images past the limit
    at most: with 3 or 7 screenshots a message, a cut that followed what must go moved at nearly
    every step."""
    from contextsvc.step.many_images import CHUNK, _oldest_out

    changes, before, past = 0, None, 0
    for n in range(1, 400 // per_message + 1):
        count = n * per_message
        if count <= most:
            continue
        held = [(None, (0,) * per_message, 0)] * n
        at = _oldest_out(held, count, most, lambda msg, sides, pages: len(sides))
        assert count - at * per_message <= most  # what is sent keeps to the limit
        changes += before is not None and at != before
        before, past = at, count - most
    assert changes <= -(-past // CHUNK) + 1, (changes, past)


# what the provider's count of a request reads over our figure of it, in the sessions below: a
# rebase that takes out too much shows as a projection under the request's figure plus this
OVER = 5_000


def measured(stubs, session_id: str, messages: list, model) -> pb.MeasureResponse:
    """The Measure of both servers (the memo's and none's figures equal)."""
    answers = [stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(session_id=session_id, messages=messages),
                                              model=model), timeout=60) for stub in stubs]
    figures = [(r.projected, r.decision.tokens, r.has_baseline, r.should_compact, r.media_count) for r in answers]
    assert figures[0] == figures[1], "the memo changed the figures"
    return answers[0]


def test_the_projection_takes_out_the_screenshots_left_out_since_the_last_answer(stubs):
    """Each answer reports, as its usage, our figure of the request it answered and OVER more (a
    provider counting a little more than we do): the next step's projection from that count is
    then the figure of its own request and OVER, at the steps where the rule leaves out ten more
    screenshots too. The count still holds those ten (SPEC §3: a medium stripped since is
    rebased); taken as it was, it read some 20K tokens over, and a session that fits its window
    was compacted at the 31st screenshot."""
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=60_500, output=8_000))
    history = [pb.Message(id="start", role=pb.ROLE_USER, parts=[pb.Part(id="s", text=pb.TextPart(text="Go."))])]
    left_out_steps, gaps = [], []
    for k in range(41):
        sent, keep = step_messages(k, False, all_big=True)
        r = measured(stubs, "rebased-shots", history + sent, model)
        assert r.decision.tokens + OVER < r.limit == 52_500, f"step {k}: the request fits as the provider counts"
        assert r.has_baseline == (k > 0)
        if k:
            assert abs(r.projected - (r.decision.tokens + OVER)) <= 64, (k, r.projected, r.decision.tokens)
            # the projections by each method are rebased alike (informational fields)
            gaps.append(r.projected_calibrated - r.decision.tokens)
        assert not r.should_compact, k
        if r.media_count < k + 1:
            left_out_steps.append(k)
        keep[-1].usage.input = r.decision.tokens + OVER
        history += keep
    assert left_out_steps[:1] == [20] and {20, 30, 40} <= set(left_out_steps)
    assert max(gaps) - min(gaps) < 1_000, gaps


def test_a_turn_of_several_steps_is_counted_with_the_screenshots_its_last_step_sent(stubs):
    """A computer-use turn is one message of several steps, each taking a screenshot: its usage
    is its last step's count, of a request that held the turn's earlier screenshots. Whether the
    rule left them out then is read with them (a projection that left them out of the request as
    counted took out ten screenshots it did not leave out, some 20K tokens short)."""
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=200_000, output=8_000))
    history = [pb.Message(id="start", role=pb.ROLE_USER, parts=[pb.Part(id="s", text=pb.TextPart(text="Go."))])]

    def turn(t: int, steps: int, finished: bool) -> pb.Message:
        parts = []
        for s in range(steps):
            shot = pb.FilePart(mime="image/png", filename=f"t{t}s{s}.png", data=BIG_SHOT)
            parts += [pb.Part(id=f"t{t}s{s}", step_start=pb.StepStartPart()),
                      pb.Part(id=f"t{t}c{s}", tool=pb.ToolPart(call_id=f"call{t}_{s}", tool="screenshot", state=pb.ToolState(
                          status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output="taken", attachments=[shot]))),
                      pb.Part(id=f"t{t}f{s}", step_finish=pb.StepFinishPart(reason="tool-calls"))]
        return pb.Message(id=f"a{t}", role=pb.ROLE_ASSISTANT, time_completed_ms=1 if finished else 0, parts=parts)

    checked = 0
    for t in range(9):
        ask = pb.Message(id=f"u{t}", role=pb.ROLE_USER, parts=[pb.Part(id=f"q{t}", text=pb.TextPart(text=f"turn {t}"))])
        r = measured(stubs, "rebased-turns", history + [ask], model)
        if t:
            assert abs(r.projected - (r.decision.tokens + OVER)) <= 64, (t, r.projected, r.decision.tokens)
            checked += 1
        last_step = measured(stubs, "rebased-turns", history + [ask, turn(t, 3, False)], model)  # its fourth step's
        answer = turn(t, 4, True)
        answer.usage.input = last_step.decision.tokens + OVER
        history += [ask, answer]
    assert checked == 8


def test_a_history_the_guard_prunes_at_every_step_is_rebased_alike_with_the_memo(stubs):
    """The payload guard prunes the same screenshot output at every step (a client that does not
    store its marks) while screenshots accrue, until the rule leaves that message's images out:
    the memo's figure of the guard's changes was kept for the same messages whatever the rule
    left out of them, and the projection read 2,012 tokens under the figure without the memo."""
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=200_000, output=8_000))
    guard = pb.CompactionSettings(request_prune_bytes=2000,
                                  prune_settings=pb.PruneSettings(protect_tokens=0, minimum_tokens=0))
    tool = pb.ToolDefinition(name="screenshot", description="Takes a screenshot.", input_schema_json="{}")

    def shot(mid: str, outputs: str = "taken") -> pb.Message:
        state = pb.ToolState(status=pb.TOOL_STATUS_COMPLETED, input_json="{}", output=outputs, attachments=[
            pb.FilePart(mime="image/png", filename=f"{mid}.png", data=BIG_SHOT)])
        return pb.Message(id=mid, role=pb.ROLE_ASSISTANT, time_completed_ms=100, parts=[
            pb.Part(id=mid + "c", tool=pb.ToolPart(call_id=mid + "call", tool="screenshot", state=state))])

    history = [pb.Message(id="start", role=pb.ROLE_USER, parts=[pb.Part(id="s", text=pb.TextPart(text="Go."))]),
               shot("m", "taken " * 200)] + [shot(f"t{i}") for i in range(5)]
    for k in range(26):
        history.append(pb.Message(id=f"u{k}", role=pb.ROLE_USER, parts=[
            pb.Part(id=f"u{k}t", text=pb.TextPart(text="look")),
            pb.Part(id=f"u{k}f", file=pb.FilePart(mime="image/png", filename=f"u{k}.png", data=BIG_SHOT))]))
        answers = [stub.Measure(pb.MeasureRequest(conversation=pb.Conversation(session_id="guarded-shots",
                                                                               messages=history),
                                                  model=model, tools=[tool], compaction=guard), timeout=60)
                   for stub in stubs]
        assert (answers[0].projected, answers[0].decision.tokens) == (answers[1].projected, answers[1].decision.tokens), k
        answer = pb.Message(id=f"b{k}", role=pb.ROLE_ASSISTANT, time_completed_ms=1000 + k,
                            parts=[pb.Part(id=f"b{k}x", text=pb.TextPart(text="ok"))])
        answer.usage.input = answers[0].decision.tokens + OVER
        history.append(answer)
    body = stubs[0].Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="guarded-shots", messages=history),
                                                model=model, tools=[tool], compaction=guard), timeout=60)
    assert body.guard_tripped and "mc" in body.pruned_part_ids
