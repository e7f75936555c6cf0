"""Assemble over loopback: the exact body, breakpoints, byte-stable prefix, guard, injections."""
from __future__ import annotations

import json

import anthropic
import grpc
import pytest

from helpers import convo
from helpers.server import start_server
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import SUMMARY, FakeMessagesAPI
from judges import judge_for
from helpers.metrics import scrape
from helpers.rpc import SYSTEM, TOOLS, big_conversation_with_summary, request


def test_body_is_the_measured_body_for_every_provider(stub):
    for provider in range(1, 9):
        a = stub.Assemble(request(provider=provider), timeout=10)
        m = stub.Measure(pb.MeasureRequest(conversation=convo.small_conversation(),
                                           model=convo.model(provider=provider), tools=TOOLS, system=SYSTEM),
                         timeout=10)
        assert a.body_bytes == len(a.body) == m.body_bytes, provider
        assert a.estimate.tokens == m.estimate.tokens
        json.loads(a.body)


def test_the_service_adds_exactly_what_the_readme_says_to_the_system_prompt(stub):
    """Each addition comes from a field the agent sets, so an agent owning its whole prompt sends
    soul and agent_prompt alone and gets them byte for byte; facts_only keeps <env> without the
    lines naming the model."""
    def system_texts(system):
        body = json.loads(stub.Assemble(pb.AssembleRequest(conversation=convo.small_conversation(),
                                                           model=convo.model(), system=system), timeout=10).body)
        return [b["text"] for b in body["system"]]

    own = pb.SystemPrompt(soul="You are Ada.", agent_prompt="Rules: none.\n<env>mine</env>")
    assert system_texts(own) == ["You are Ada.", "Rules: none.\n<env>mine</env>"]
    env = pb.EnvInfo(working_directory="/repo", is_git_repo=True, platform="linux", date="2026-12-02",
                     shell="bash")
    facts = ("<env>\n  Working directory: /repo\n  Is directory a git repo: yes\n  Platform: linux\n"
             "  Today's date: 2026-12-02\n  Shell: bash\n</env>")
    full = pb.SystemPrompt(soul="You are Ada.", agent_prompt="Rules.", env=env,
                           instructions=[pb.Instruction(path="AGENTS.md", content="Run the tests.")],
                           skills=[pb.Skill(name="pdf", description="Reads PDFs.")])
    assert system_texts(full) == ["You are Ada.", "Rules.\n"
        "You are powered by the model named claude-sonnet-4-5.\n"
        "Here is some useful information about the environment you are running in:\n" + facts + "\n"
        "Instructions from: AGENTS.md\nRun the tests.\n"
        "Skills provide specialized instructions. Load a skill when the task matches it.\n<available_skills>\n"
        "  <skill>\n    <name>pdf</name>\n    <description>Reads PDFs.</description>\n  </skill>\n"
        "</available_skills>"]
    env.facts_only = True
    assert system_texts(pb.SystemPrompt(agent_prompt="Rules.", env=env)) == ["Rules.\n" + facts]


def test_anthropic_shape_and_auto_breakpoints(stub):
    a = stub.Assemble(request(), timeout=10)
    body = json.loads(a.body)
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == a.output_tokens == 32_000
    assert [b["text"] for b in body["system"]][0] == "You are a careful coding agent."
    assert "Instructions from: AGENTS.md\nRun the tests." in body["system"][1]["text"]
    assert body["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["system"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    # the latest user message carries the marker on its last content block
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    kinds = [b["type"] for msg in body["messages"] for b in msg["content"]]
    assert kinds == ["text", "text", "tool_use", "tool_result", "text"]
    assert [b.location for b in a.breakpoints] == ["tools[0]", "system[1]", "messages[2]"]
    assert [b.segment for b in a.breakpoints] == ["tools", "system", "tail"]
    sizes = [b.prefix_bytes for b in a.breakpoints]
    assert sizes == sorted(sizes) and all(len(b.prefix_sha256) == 64 for b in a.breakpoints)


def test_marker_shapes_per_provider(stub):
    bedrock = json.loads(stub.Assemble(request(provider=pb.PROVIDER_BEDROCK), timeout=10).body)
    assert bedrock["system"][-1] == {"cachePoint": {"type": "default"}}
    assert bedrock["messages"][-1]["content"][-1] == {"cachePoint": {"type": "default"}}
    assert "max_tokens" not in bedrock and bedrock["inferenceConfig"]["maxTokens"] == 32_000
    openai = json.loads(stub.Assemble(request(provider=pb.PROVIDER_OPENAI), timeout=10).body)
    assert "cache_control" not in json.dumps(openai) and openai["prompt_cache_key"] == "sess-1"
    assert openai["messages"][3]["tool_calls"][0]["function"]["arguments"] == '{"path":"tests/test_app.py"}'
    assert openai["messages"][4] == {"role": "tool", "tool_call_id": "call_1",
                                     "content": "def test_x():\n    assert f() == 2\n"}
    compat = json.loads(stub.Assemble(request(provider=pb.PROVIDER_OPENAI_COMPATIBLE), timeout=10).body)
    # on the last content part, where the gateways document it: a string content becomes one part
    assert compat["messages"][0]["content"] == [{"type": "text", "text": compat["messages"][0]["content"][0]["text"],
                                                 "cache_control": {"type": "ephemeral"}}]
    assert compat["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert not any("cache_control" in msg for msg in compat["messages"])
    copilot = json.loads(stub.Assemble(request(provider=pb.PROVIDER_COPILOT), timeout=10).body)
    assert copilot["messages"][-1]["content"][-1]["copilot_cache_control"] == {"type": "ephemeral"}
    gemini = json.loads(stub.Assemble(request(provider=pb.PROVIDER_GEMINI), timeout=10).body)
    assert gemini["generationConfig"]["maxOutputTokens"] == 32_000 and "cache" not in json.dumps(gemini)


def test_two_steps_of_one_turn_keep_the_cached_prefix(stub):
    editor = pb.EditorContext(current_time="2026-12-02T17:08:32+00:00", working_directory="/repo",
                              active_file="src/app.py", visible_files=["src/app.py", "tests/test_app.py"])
    first = stub.Assemble(request(editor=editor, step=1), timeout=10)
    assert "# Current Time\n2026-12-02T17:08:32+00:00" in first.environment_details
    # step 2: the model called a tool, the clock moved, the client passes the block back
    conv = convo.small_conversation()
    conv.messages.append(convo.assistant("msg_004", convo.tool("p9", "call_9", "read", {"path": "src/app.py"}, "x = 1\n"),
                                         usage=pb.Usage(input=1500, output=30)))
    moved = pb.EditorContext(current_time="2026-12-02T17:09:58+00:00", working_directory="/repo",
                             environment_details=first.environment_details)
    second = stub.Assemble(request(conv, editor=moved, step=2), timeout=10)
    assert second.environment_details == first.environment_details
    one, two = unmarked(json.loads(first.body)), unmarked(json.loads(second.body))
    # everything up to the first request's last breakpoint (the turn's user message) is identical
    assert one["tools"] == two["tools"] and one["system"] == two["system"]
    assert one["messages"] == two["messages"][:3]
    assert "2026-12-02T17:08:32+00:00" in json.dumps(two["messages"][2], ensure_ascii=False)
    same = {b.location: b.prefix_sha256 for b in second.breakpoints}
    for b in first.breakpoints[:-1]:  # tools and system breakpoints sit at the same places
        assert same[b.location] == b.prefix_sha256, b.location


def unmarked(value):
    """The body without cache markers: what the provider's cache keys on."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def test_max_steps_sends_a_trailing_user_message_and_no_tool_use(stub):
    a = stub.Assemble(request(step=5, max_steps=5, provider=pb.PROVIDER_OPENAI), timeout=10)
    body = json.loads(a.body)
    # the tools stay (the history holds tool blocks); the provider's own choice disables them
    assert body["tools"] and body["tool_choice"] == "none" and "max_steps" in a.injected
    last = body["messages"][-1]
    assert last["role"] == "user" and "MAXIMUM STEPS REACHED" in last["content"]


def _next_step(conv: pb.Conversation, n: int) -> pb.Conversation:
    """conv with one more tool step of the model (and the user's text after it)."""
    grown = pb.Conversation()
    grown.CopyFrom(conv)
    grown.messages.append(convo.assistant(f"msg_1{n:02d}", convo.tool(f"p1{n:02d}", f"call_1{n:02d}", "read",
                                                                       {"path": f"src/m{n}.py"}, f"x = {n}\n"),
                                          usage=pb.Usage(input=1500 + n, output=30)))
    return grown


def test_the_last_anthropic_step_keeps_the_tool_choice_and_the_cache(stub):
    """Anthropic invalidates the cached messages when tool_choice changes: on the last allowed
    step the trailing message alone says tools are disabled, the choice stays as the step before
    had it, and the cache report sees the history only grow."""
    conv = _next_step(convo.small_conversation(), 1)
    before = stub.Assemble(request(conv, step=4, max_steps=5), timeout=10)
    conv = _next_step(conv, 2)
    last = stub.Assemble(request(conv, step=5, max_steps=5, previous_cache_state=before.cache_state), timeout=10)
    one, two = json.loads(before.body), json.loads(last.body)
    assert judge_for("anthropic")(two) == []
    assert "max_steps" in last.injected and "max_steps" not in before.injected
    assert two["tools"] and "tool_choice" not in one and "tool_choice" not in two
    tail = two["messages"][-1]
    assert tail["role"] == "user" and "MAXIMUM STEPS REACHED" in tail["content"][-1]["text"]
    r = last.cache_report
    assert r.compared and r.prefix_kept and r.cause == "new_turn" and r.segment == "messages"


def test_a_changed_tool_choice_is_named_where_it_costs_the_cache(stub):
    """The caller's own tools_disabled sets the provider's "no tool use" choice on every format;
    where changing the choice invalidates the cached messages (Anthropic), the report names it:
    the messages are written again from the first, tools and system are read. Measure agrees."""
    conv = convo.small_conversation()
    on = stub.Assemble(request(conv, step=1), timeout=10)
    conv = _next_step(conv, 1)
    off = stub.Assemble(request(conv, step=2, tools_disabled=True, previous_cache_state=on.cache_state), timeout=10)
    body = json.loads(off.body)
    assert body["tool_choice"] == {"type": "none"} and judge_for("anthropic")(body) == []
    r = off.cache_report
    assert (r.compared, r.prefix_kept, r.segment, r.index, r.cause) == (True, False, "messages", 0, "tool_choice")
    assert r.reused_elements == len(body["tools"]) + len(body["system"]) and r.resolution == 1
    assert 0 < r.rewrite.tokens < off.figures.decision.tokens  # tools and system are not written again
    m = stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(), tools=TOOLS, system=SYSTEM,
                                       step=2, tools_disabled=True, previous_cache_state=on.cache_state), timeout=10)
    assert m.cache_report == off.cache_report
    # the same choice again: the history only grows; and back on: named again
    conv = _next_step(conv, 2)
    still = stub.Assemble(request(conv, step=3, tools_disabled=True, previous_cache_state=off.cache_state), timeout=10)
    assert still.cache_report.prefix_kept and still.cache_report.cause == "new_turn"
    back = stub.Assemble(request(conv, step=3, previous_cache_state=off.cache_state), timeout=10)
    assert (back.cache_report.prefix_kept, back.cache_report.cause) == (False, "tool_choice")
    # a real change before the messages is named first
    edited = request(conv, step=3, previous_cache_state=off.cache_state)
    edited.system.soul = "You are a careful coding agent, terse."
    assert stub.Assemble(edited, timeout=10).cache_report.cause == "other"


def test_a_changed_tool_choice_is_no_break_where_the_provider_does_not_say_so(stub):
    """OpenAI and Gemini document no cache cost for a changed tool choice: no break is named."""
    for provider in (pb.PROVIDER_OPENAI, pb.PROVIDER_GEMINI):
        conv = convo.small_conversation()
        on = stub.Assemble(request(conv, provider=provider, step=1), timeout=10)
        off = stub.Assemble(request(_next_step(conv, 1), provider=provider, step=2, tools_disabled=True,
                                    previous_cache_state=on.cache_state), timeout=10)
        assert off.cache_report.prefix_kept and off.cache_report.cause == "new_turn", provider


def test_mid_run_user_message_is_wrapped(stub):
    conv = convo.small_conversation()
    a = stub.Assemble(request(conv, step=3), timeout=10)
    text = json.loads(a.body)["messages"][-1]["content"][-1]["text"]
    assert text.startswith("<system-reminder>\nThe user sent the following message:\nAlso keep")
    assert "mid_run_reminder" in a.injected


def test_explicit_hints_are_kept_auto_fills_and_all_are_bounded(stub):
    a = stub.Assemble(request(cache_hints=[pb.CacheHint(message_id="msg_001", ttl=pb.CACHE_TTL_1H)]), timeout=10)
    body = json.loads(a.body)
    assert body["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    # auto fills the places left, but no 5m marker may precede the caller's 1h one (Anthropic
    # refuses it): the tools and system markers are left out, the latest user message keeps its
    assert "cache_control" not in json.dumps(body["system"]) + json.dumps(body["tools"])
    assert [b.location for b in a.breakpoints] == ["messages[0]", "messages[2]"]
    assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    too_many = [pb.CacheHint(system_block=0), pb.CacheHint(system_block=1), pb.CacheHint(last_tool=True),
                pb.CacheHint(message_id="msg_001"), pb.CacheHint(message_id="msg_003")]
    for hints, field in ((too_many, "cache_hints"), ([pb.CacheHint(message_id="nope")], "cache_hints[0].message_id"),
                         ([pb.CacheHint(system_block=7)], "cache_hints[0].system_block")):
        with pytest.raises(grpc.RpcError) as e:
            stub.Assemble(request(cache_hints=hints), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()
    # where the provider caches on its own a hint is a no-op, but one naming no message, or the
    # last tool of none, is refused as everywhere (it was taken on OpenAI and Gemini alone)
    conv = pb.Conversation(session_id="hints", messages=[convo.user("msg_001", convo.text("p1", "Fix the parser."))])
    for provider in (pb.PROVIDER_OPENAI, pb.PROVIDER_OPENAI_RESPONSES, pb.PROVIDER_GEMINI):
        for hint, field in ((pb.CacheHint(message_id="nope"), "cache_hints[1].message_id"),
                            (pb.CacheHint(last_tool=True), "cache_hints[1].last_tool")):
            hints = [pb.CacheHint(message_id="msg_001"), hint]
            assert not stub.Assemble(request(conv, provider=provider, cache_hints=hints[:1]), timeout=10).breakpoints
            r = request(conv, provider=provider, cache_hints=hints)
            del r.tools[:]
            with pytest.raises(grpc.RpcError) as e:
                stub.Assemble(r, timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details(), provider


NUMBERS_JSON = ('{"a": 1.0, "b": 1e-07, "c": -0.0, "d": 1e21, "e": 1.2345678901234568e20, "f": 3.0, '
                '"g": 123456789012345678901234567890, "h": 0.1, "i": 5e-324, "j": [2.50, 1E2, -7]}')
NUMBERS_NODE = ('{"a":1,"b":1e-7,"c":0,"d":1e+21,"e":123456789012345680000,"f":3,'
                '"g":123456789012345678901234567890,"h":0.1,"i":5e-324,"j":[2.5,100,-7]}')


def numbers_conversation(input_json=NUMBERS_JSON):
    conv = convo.small_conversation()
    conv.messages[1].parts[1].tool.state.input_json = input_json
    return conv


def test_numbers_are_written_as_node_writes_them(stub):
    """Tool input numbers reach every body as JSON.stringify writes them (big ints exactly as
    written), and Measure counts those bytes."""
    conv = numbers_conversation()
    schema = pb.ToolDefinition(name="seek", description="Seek", input_schema_json=(
        '{"type":"object","properties":{"t":{"type":"number","minimum":0.0,"maximum":1e21,"multipleOf":1e-07}}}'))
    for provider in range(1, 9):
        req = request(conv, provider=provider)
        req.tools.append(schema)
        a = stub.Assemble(req, timeout=10)
        m = stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(provider=provider),
                                           tools=req.tools, system=SYSTEM), timeout=10)
        assert a.body_bytes == len(a.body) == m.body_bytes, provider
        text = a.body.decode()
        # Chat Completions carries the input as a JSON string: its text is escaped once more
        assert NUMBERS_NODE in text or json.dumps(NUMBERS_NODE) in text, provider
        assert '"minimum":0,"maximum":1e+21,"multipleOf":1e-7' in text, provider
        for bad in ("1.0", "1e-07", "-0.0", "e+20"):
            assert bad not in text, (provider, bad)


@pytest.mark.parametrize("number", ["1e400", "-1E999", "NaN", "Infinity"])
def test_numbers_beyond_a_double_are_invalid_argument(stub, number):
    conv = numbers_conversation('{"a": %s}' % number)
    for call in (lambda: stub.Assemble(request(conv), timeout=10),
                 lambda: stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model()), timeout=10)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "input_json" in e.value.details()


def test_payload_guard_prunes_then_reports(stub):
    a = stub.Assemble(request(big_conversation_with_summary()), timeout=30)
    # only the newest result is protected (t32: 25,000 fit PRUNE_PROTECT = 40,000, t30 would make
    # 50,000), t30 is kept under PRUNE_PROTECT, t28..t6 are pruned
    assert a.guard_tripped and list(a.pruned_part_ids) == [f"t{n}" for n in range(28, 5, -2)]
    assert a.media_stripped == 1 and b"[Attached image/png: after.png]" in a.body
    assert a.body_bytes == len(a.body) and not a.over_payload_limit
    assert a.body.count(b"[Old tool result content cleared]") == 12
    assert b"shot.png" not in a.body  # before the compaction point: not sent at all


def test_measure_sizes_the_guarded_body(stub):
    """Measure runs the payload guard as Assemble does: it reports the body that is sent
    (issue 14: Measure said 2,527,452 bytes where Assemble sent 1,267,394)."""
    conv = big_conversation_with_summary()
    for provider in range(1, 9):
        a = stub.Assemble(request(conv, provider=provider), timeout=30)
        m = stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(provider=provider), tools=TOOLS,
                                           system=SYSTEM), timeout=30)
        assert a.guard_tripped and a.pruned_part_ids, provider
        assert m.body_bytes == a.body_bytes == len(a.body) < 1_250_000, provider
        assert m.estimate == a.estimate and m.output_tokens == a.output_tokens, provider


def test_a_request_sets_its_own_payload_guard(stub):
    """A 1M-token window's body passes the default 1.25 MB at about 40% of the window: the request
    raises the guard for itself (compaction.request_prune_bytes), Measure and Assemble alike, and
    a guard lowered below the body trips where the default would not."""
    conv = big_conversation_with_summary()
    default = stub.Assemble(request(conv), timeout=30)
    assert default.guard_tripped and default.pruned_part_ids
    raised = pb.CompactionSettings(request_prune_bytes=4_000_000)
    a = stub.Assemble(request(conv, compaction=raised), timeout=30)
    m = stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(), tools=TOOLS, system=SYSTEM,
                                       compaction=raised), timeout=30)
    assert not a.guard_tripped and not a.pruned_part_ids and not a.over_payload_limit
    assert 1_250_000 < a.body_bytes == len(a.body) == m.body_bytes < 4_000_000
    small = stub.Assemble(request(compaction=pb.CompactionSettings(request_prune_bytes=1_000)), timeout=10)
    assert small.guard_tripped and small.over_payload_limit  # nothing old to prune: sent anyway, and said so
    assert not stub.Assemble(request(), timeout=10).guard_tripped
    for bad in (0, -5):
        with pytest.raises(grpc.RpcError) as e:
            stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(),
                                           compaction=pb.CompactionSettings(request_prune_bytes=bad)), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "compaction.request_prune_bytes" in e.value.details()


def test_measure_sizes_the_body_still_over(stub):
    conv = convo.small_conversation()
    conv.messages[2].parts[0].text.text = "z" * 2_000_000
    a = stub.Assemble(request(conv), timeout=30)
    m = stub.Measure(pb.MeasureRequest(conversation=conv, model=convo.model(), tools=TOOLS, system=SYSTEM),
                     timeout=30)
    assert a.over_payload_limit and m.body_bytes == a.body_bytes == len(a.body)


def test_payload_guard_still_over_sends_anyway(stub):
    conv = convo.small_conversation()
    conv.messages[2].parts[0].text.text = "z" * 2_000_000  # fresh content: nothing may be pruned
    a = stub.Assemble(request(conv), timeout=30)
    assert a.guard_tripped and a.over_payload_limit and not a.pruned_part_ids and a.body_bytes > 2_000_000


def test_anthropic_sdk_sends_exactly_the_assembled_body(stub):
    api = FakeMessagesAPI()
    try:
        a = stub.Assemble(request(editor=pb.EditorContext(current_time="2026-12-02T17:00:00+00:00")), timeout=10)
        client = anthropic.Anthropic(api_key="sk-test", base_url=api.url, max_retries=0, timeout=30)
        reply = client.messages.create(**json.loads(a.body))
        assert reply.content[0].text == SUMMARY
        assert api.requests[-1][2] == json.loads(a.body)
    finally:
        api.close()


def test_prefix_breaks_are_counted_by_segment():
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            first = stub.Assemble(request(), timeout=10)
            same = stub.Assemble(request(previous_cache_state=first.cache_state), timeout=10)
            assert same.cache_report.prefix_kept and not same.cache_report.segment  # same prefix: no break
            volatile = request(previous_cache_state=same.cache_state)
            volatile.system.soul = "You are a careful coding agent. It is 17:09:58."  # a timestamp in the system
            broken = stub.Assemble(volatile, timeout=10)
            assert (broken.cache_report.segment, broken.cache_report.index, broken.cache_report.cause) == \
                ("system", 0, "other")
        samples = scrape(s.metrics_port)
        key = (("cause", "other"), ("provider", "anthropic"), ("segment", "system"))
        assert samples[("contextsvc_prefix_breaks_total", key)] == 1
        assert samples[("contextsvc_cache_breakpoints_total", (("provider", "anthropic"),))] == 9
    finally:
        s.stop(grace=1)


def test_environment_goes_to_the_last_user_message_sent_after_a_compaction_with_a_tail(stub):
    """Projection moves the compaction marker to the head; the block must not follow it there."""
    compaction = pb.Part(id="p20", compaction=pb.CompactionPart(auto=True, tail_start_id="msg_003"))
    conv = convo.small_conversation()
    conv.messages.extend([
        convo.assistant("msg_004", convo.text("p5", "Done with the test."), usage=pb.Usage(input=1300, output=20)),
        convo.user("msg_005", compaction),
        convo.assistant("msg_006", convo.text("p6", "## Goal\nFix the test."), summary=True, parent_id="msg_005"),
    ])
    editor = pb.EditorContext(current_time="2026-12-02T17:08:32+00:00", working_directory="/repo")
    a = stub.Assemble(request(conv, editor=editor), timeout=10)
    body = json.loads(a.body)
    users = [msg for msg in body["messages"] if msg["role"] == "user"]
    assert "<environment_details>" not in json.dumps(users[0])  # the compaction marker, now first
    assert "<environment_details>" in json.dumps(users[-1])
    assert "keep the public API stable" in json.dumps(users[-1], ensure_ascii=False)


def test_moving_markers_of_the_last_two_messages_policy_are_not_prefix_breaks():
    """OpenRouter-style markers sit on the last two messages and move every step; only a real
    change of an already-cached message counts as a break."""
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            conv = convo.small_conversation()
            state = stub.Assemble(request(conv, provider=pb.PROVIDER_OPENROUTER), timeout=10).cache_state
            conv.messages.append(convo.assistant("msg_004", convo.tool("p9", "call_9", "read", {"path": "a.py"}, "x\n")))
            r = stub.Assemble(request(conv, provider=pb.PROVIDER_OPENROUTER, previous_cache_state=state), timeout=10)
            assert r.cache_report.prefix_kept and r.cache_report.cause == "new_turn"
            conv.messages.append(convo.assistant("msg_005", convo.text("p10", "Now the fix.")))
            conv.messages.append(convo.user("msg_006", convo.text("p11", "Go on")))
            r = stub.Assemble(request(conv, provider=pb.PROVIDER_OPENROUTER, previous_cache_state=r.cache_state),
                              timeout=10)
            assert r.cache_report.prefix_kept
            assert not any(k[0] == "contextsvc_prefix_breaks_total" for k in scrape(s.metrics_port))
            conv.messages[1].parts[0].text.text = "Reading the test, again."  # an old, cached message changed
            r = stub.Assemble(request(conv, provider=pb.PROVIDER_OPENROUTER, previous_cache_state=r.cache_state),
                              timeout=10)
            assert (r.cache_report.segment, r.cache_report.index, r.cache_report.cause) == ("messages", 1, "other")
        samples = scrape(s.metrics_port)
        key = (("cause", "other"), ("provider", "openrouter"), ("segment", "messages"))
        assert samples[("contextsvc_prefix_breaks_total", key)] == 1
    finally:
        s.stop(grace=1)


def test_the_transport_s_response_bytes_are_the_message_s():
    """What the transport sends for Assemble (the body copied once into the response's bytes,
    ContextService.serialized) is byte for byte the response message's serialization, for the
    seeded corpus of every provider, and for a body left empty."""
    import dataclasses

    from contextsvc import config
    from contextsvc.errors import BadInput
    from contextsvc.lowering.registry import PROVIDERS
    from contextsvc.rpc import conversion
    from contextsvc.rpc.servicer import ContextService
    from helpers import corpus

    wire_side, message_side = ContextService(config.Config()), ContextService(config.Config())
    send = wire_side.serialized("Assemble")
    sent = 0
    for provider in PROVIDERS:
        for case in corpus.cases(provider, 8):
            try:
                message = message_side.Assemble(case.request, None)
            except BadInput:
                with pytest.raises(BadInput):
                    send(case.request, None)
                continue
            data = send(case.request, None)
            assert data == message.SerializeToString() and message.body, case.name
            sent += 1
    assert sent >= 6 * len(PROVIDERS)  # the corpus refuses a few (five cache hints, ...): most have a body
    r = wire_side._assemble(request(), None)
    for body in (b"", r.body):
        empty = dataclasses.replace(r, body=body)
        assert conversion.assemble_wire(empty) == conversion.assemble_response(empty).SerializeToString()


def _mcp_tools(n: int, extra: str = "") -> list:
    """n MCP-style tool definitions of about 1 KB each (an agent with a few MCP servers)."""
    schema = json.dumps({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]})
    return [pb.ToolDefinition(name=f"mcp__srv{i // 10}__op_{i}", input_schema_json=schema,
                              description=f"Operation {i} fetches a record by id and returns its fields. " * 14 + extra)
            for i in range(n)]


def test_tools_the_previous_request_sent_are_not_counted_twice_beside_its_usage(stub):
    """The reported usage of the last answer holds the tools and system it was sent with. With
    the cache_state of that request, a projection from it adds only what is new: 40 MCP tools
    counted twice asked a 32K session to compact at 40% of its window, at nearly every step.
    Tools changed since swap what the state says the count holds for what is sent now (tools
    dropped since compacted sessions early), and without a cache_state the reference's
    over-count stands; Compact's tokens_before follows the same rule. (60 tools: half the
    window, counted twice over it.)"""
    mdl = convo.model(context=32_000, output=4_096)
    tools = _mcp_tools(60)
    first = [convo.user("m1", convo.text("p1", "Audit src/billing for float and Decimal mixing."))]

    def ask(messages, tools_=None, state=b""):
        return stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="mcp", messages=messages),
                                                model=mdl, tools=tools if tools_ is None else tools_, system=SYSTEM,
                                                previous_cache_state=state), timeout=10)

    sent = ask(first)
    # the provider's count of that body: our decision figure of it, tools and system included
    usage = pb.Usage(input=sent.figures.decision.tokens, output=60)
    messages = first + [
        convo.assistant("m2", convo.text("p2", "Reading the module."),
                        convo.tool("p3", "c1", "read", {"path": "src/billing/tax.py"}, "def tax(x):\n    return x * 0.2\n"),
                        usage=usage),
        convo.user("m3", convo.text("p4", "Go on."))]
    again = ask(messages, state=sent.cache_state)
    f = again.figures
    assert f.has_baseline and f.reported == usage.input + usage.output
    assert f.decision.tokens < f.limit
    assert f.overhead > f.limit // 3  # the tools alone are over a third of the window
    # beside the answer's count, what is new since (a message of a few words), not the tools again
    assert f.reported <= f.projected < f.reported + f.overhead // 4
    assert f.projected < f.limit and not f.should_compact

    # no cache_state: the tools may have changed since the count, so they are added again
    stateless = ask(messages).figures
    assert stateless.projected > again.figures.projected + f.overhead // 2
    assert stateless.should_compact
    # tools changed since the count: the state holds our figure of the ones the count holds, so
    # what is added is the difference (all of the tools again read 1.5x the request)
    longer = ask(messages, _mcp_tools(60, extra="Paginated, 50 per page."), state=sent.cache_state).figures
    assert 0 < longer.projected - f.projected < f.overhead // 10
    assert longer.projected >= longer.decision.tokens and not longer.should_compact
    # tools dropped since: the count still holds them, and what they were is taken out of it
    # (sessions whose MCP tool set shrank compacted early); never below the whole request's figure
    fewer = ask(messages, _mcp_tools(20), state=sent.cache_state).figures
    assert fewer.projected < f.projected - f.overhead // 2
    assert fewer.projected == fewer.decision.tokens and not fewer.should_compact
    # and the provider's ratio is read against the tools it counted, not the 20 left
    assert f.calibration_factor > 0 and abs(fewer.calibration_factor - f.calibration_factor) < 0.01
    # a state of another request than the one the answer counted (here the one after it) is not
    # what that count holds: the tools are added whole, as without one
    other = ask(messages, _mcp_tools(20), state=again.cache_state).figures
    assert other.projected > fewer.projected + f.overhead // 2
    stale = ask(messages, _mcp_tools(20)).figures  # without the state, what the count holds is unknown
    assert stale.projected > fewer.projected + f.overhead // 2

    def compact(state):
        return stub.Compact(pb.CompactRequest(conversation=pb.Conversation(session_id="mcp", messages=messages),
                                              model=mdl, tools=tools, system=SYSTEM, auto=True,
                                              previous_cache_state=state), timeout=30)

    assert compact(sent.cache_state).tokens_before == f.projected
    assert compact(b"").tokens_before == stateless.projected
    with pytest.raises(grpc.RpcError) as e:
        compact(b"not a state")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "previous_cache_state" in e.value.details()



def test_a_system_block_hint_where_there_is_none_says_so(stub):
    """It said "(0..-1)": the request sends no system block at all."""
    conv = pb.Conversation(session_id="hints", messages=[convo.user("msg_001", convo.text("p1", "Fix the parser."))])
    hint = [pb.CacheHint(system_block=0)]
    with pytest.raises(grpc.RpcError) as e:
        stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(), cache_hints=hint), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().endswith("cache_hints[0].system_block: 0 is not a system block index "
                                      "(the request sends no system block)"), e.value.details()
