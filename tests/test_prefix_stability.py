"""The cached prefix survives every step of an agent session (docs/design.md §6, "Prefix reuse").

A session is driven the way an agent loop drives Assemble: tool steps, a new turn, a user message
sent mid-run, the last allowed step, then another turn. Between any two consecutive bodies, the
elements in cache order (tools, system, messages), with the cache markers removed, are the same,
except at the new tail: the previous body's last message may only have grown (a later message
merged into it), or be the last step's trailing message, which is never stored.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from helpers import convo
from contextsvc import assemble, breakpoints, config, conversation as m
from contextsvc.lowering.registry import PROVIDERS
from contextsvc.step import environment
import contextsvc_client
from contextsvc.v1 import context_pb2 as pb
from helpers.prefix import cache_order

READ = m.ToolDefinition("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})
GREP = m.ToolDefinition("grep", "Search files", {"type": "object", "properties": {"pattern": {"type": "string"}}})
SYSTEM = m.SystemPrompt(soul="You are a careful coding agent.", agent_prompt="Prefer small diffs.",
                        env=m.EnvInfo("/repo", True, "linux", "2026-12-02"),
                        instructions=[m.Instruction("AGENTS.md", "Run the tests.")])
CLAUDE = "claude-sonnet-4-5"
# the model each provider's loop asks for: Claude where it is served, Gemini's own on Gemini (from
# Gemini 3 a message sent mid-run goes before the tool results it joins: tested below)
MODEL = {m.GEMINI: "gemini-2.5-pro"}


def grown(old, new) -> bool:
    """new is old, or old with more content blocks after its own (a later message merged in)."""
    if old == new:
        return True
    content = "parts" if "parts" in old else "content"
    if not (isinstance(old, dict) and isinstance(new, dict)) or set(old) != set(new):
        return False
    if any(old[k] != new[k] for k in old if k != content):
        return False
    a, b = old[content], new[content]
    return isinstance(a, list) and isinstance(b, list) and b[:len(a)] == a


def first_break(provider: str, before: dict, after: dict, last_step: bool) -> str:
    """Where after stops repeating before in cache order, or ""."""
    one, two = cache_order(provider, before), cache_order(provider, after)
    for segment in ("tools", "system"):
        if one[segment] != two[segment]:
            return segment
    old, new = one["messages"], two["messages"]
    # the last step's trailing user message is never stored: the body after it replaces it
    keep = len(old) - 1 if last_step else len(old)
    for i in range(keep):
        if i >= len(new):
            return f"messages[{i}] gone"
        if new[i] != old[i] and not (i == keep - 1 and not last_step and grown(old[i], new[i])):
            return f"messages[{i}]"
    return ""


# ---- an agent loop over the core -----------------------------------------------------------

def store(messages: list, persist: list) -> list:
    """What a client does with Assemble's persist parts (in-process twin of contextsvc_client.apply_persist)."""
    out = list(messages)
    for p in persist:
        i = next(k for k, x in enumerate(out) if x.id == p.message_id)
        parts = list(out[i].parts)
        same = next((k for k, x in enumerate(parts) if x.id == p.part.id), None)
        if same is None:
            parts.append(p.part)
        else:
            parts[same] = p.part
        out[i] = dataclasses.replace(out[i], parts=parts)
    return out


class Loop:
    """An agent loop: keeps the history, calls Assemble each step, stores what it returns."""

    def __init__(self, provider: str, model_id: str = "", max_steps: int = 0):
        self.provider, self.max_steps = provider, max_steps
        self.model_id = model_id or MODEL.get(provider, CLAUDE)
        self.messages: list = []
        self.bodies: list = []  # (body, was the last step)
        self.step = 0
        self.clock = 0
        self.n = 0

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n:03d}"

    def user(self, text: str):
        mid = self._id("msg")
        self.messages.append(m.Message(mid, m.USER, [m.Part(f"{mid}-t", m.Text(text))]))

    def new_turn(self, text: str):
        self.user(text)
        self.step = 0

    def assistant_calls(self, tool: str, arg: dict, output: str):
        mid = self._id("msg")
        call = f"call_{self.n}"
        self.messages.append(m.Message(mid, m.ASSISTANT, [
            m.Part(f"{mid}-s", m.StepStart()),
            m.Part(f"{mid}-x", m.Text(f"Using {tool}.")),
            m.Part(f"{mid}-c", m.Tool(call, tool, m.COMPLETED, arg, output=output)),
            m.Part(f"{mid}-f", m.StepFinish("tool-calls")),
        ], time_completed_ms=1, model_id=self.model_id, usage=m.Usage(input=1000 + self.n, output=20)))

    def assistant_says(self, text: str):
        mid = self._id("msg")
        self.messages.append(m.Message(mid, m.ASSISTANT, [
            m.Part(f"{mid}-x", m.Text(text)), m.Part(f"{mid}-f", m.StepFinish("stop"))],
            time_completed_ms=1, model_id=self.model_id))

    def assemble(self) -> assemble.Assembled:
        self.step += 1
        self.clock += 37  # the editor's clock moves at every step: the block must not
        editor = environment.Editor(current_time=f"2026-12-02T17:{self.clock // 60:02d}:{self.clock % 60:02d}+00:00",
                                 working_directory="/repo", active_file=f"src/f{self.step}.py",
                                 open_tabs=[f"src/f{self.step}.py"])
        inp = assemble.AssembleInput(
            m.Conversation(list(self.messages), "sess-prefix"),
            m.Model(self.model_id, self.provider, m.ModelLimits(200_000, 0, 32_000)),
            [READ, GREP], SYSTEM, m.CompactionSettings(), editor=editor, step=self.step,
            max_steps=self.max_steps)
        a = assemble.assemble(inp, config.Config())
        self.messages = store(self.messages, a.persist)
        last = bool(self.max_steps) and self.step >= self.max_steps
        self.bodies.append((json.loads(a.body), last))
        return a


def session(provider: str) -> Loop:
    """Two turns of tool steps, a mid-run message, the last allowed step, a third turn."""
    loop = Loop(provider, max_steps=5)
    loop.new_turn("Fix the failing test in tests/test_app.py")
    loop.assemble()
    loop.assistant_calls("read", {"path": "tests/test_app.py"}, "def test_x():\n    assert f() == 2\n")
    loop.assemble()
    loop.assistant_calls("grep", {"pattern": "def f"}, "src/app.py:3:def f():")
    loop.assemble()
    loop.assistant_says("Fixed: f() now returns 2.")
    loop.new_turn("Now add a test for g()")  # the second turn
    loop.assemble()
    loop.assistant_calls("read", {"path": "src/app.py"}, "def g():\n    return 3\n")
    loop.assemble()
    loop.user("Also keep the public API stable")  # sent while the loop runs
    loop.assemble()
    loop.assistant_calls("grep", {"pattern": "g("}, "src/app.py:7:def g():")
    loop.assemble()
    loop.assistant_calls("read", {"path": "tests/test_g.py"}, "# empty\n")
    loop.assemble()  # step 5 of 5: the last allowed step
    loop.assistant_says("Added the test; the API is unchanged.")
    loop.new_turn("Thanks. Run the linter too.")  # the third turn
    loop.assemble()
    loop.assistant_calls("grep", {"pattern": "lint"}, "Makefile:4:lint:")
    loop.assemble()
    return loop


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_step_and_turn_keeps_the_prefix_for_every_provider(provider):
    loop = session(provider)
    assert len(loop.bodies) == 10
    for k in range(1, len(loop.bodies)):
        (before, last), (after, _) = loop.bodies[k - 1], loop.bodies[k]
        assert first_break(provider, before, after, last) == "", f"request {k} -> {k + 1}"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_user_message_keeps_its_environment_block_for_the_session(provider):
    loop = session(provider)
    users = [x for x in loop.messages if x.role == m.USER]
    blocks = [environment.stored_environment(x) for x in users]
    assert all(blocks), "every user message that was the latest holds a stored block"
    # computed once per user message: the clock of the step that first saw it, not a later one
    assert "17:00:37" in blocks[0] and "17:02:28" in blocks[1] and "17:03:42" in blocks[2]
    assert len(set(blocks)) == len(blocks)
    text = json.dumps(loop.bodies[-1][0], ensure_ascii=False)
    assert all(text.count(b.replace("\n", "\\n")) == 1 for b in blocks)  # each sent once, as stored


def test_a_stored_block_is_recognized_under_the_client_s_own_part_id():
    loop = Loop(m.ANTHROPIC)
    loop.new_turn("Hello")
    a = loop.assemble()
    (p,) = a.persist
    assert p.part.id.endswith(environment.ENVIRONMENT_SUFFIX) and p.part.content.synthetic
    # a client that names its own part ids stores the block under another id
    loop.messages = [dataclasses.replace(x, parts=[x.parts[0], m.Part("prt_01J9", p.part.content)])
                     for x in loop.messages]
    loop.assistant_calls("read", {"path": "a.py"}, "x = 1\n")
    b = loop.assemble()
    assert b.persist == [] and "environment_details" not in b.injected
    assert b.environment_details == a.environment_details
    assert json.dumps(loop.bodies[1][0]).count("<environment_details>") == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_wrapped_mid_run_message_stays_wrapped(provider):
    loop = Loop(provider)
    loop.new_turn("Fix the failing test")
    loop.assemble()
    loop.assistant_calls("read", {"path": "a.py"}, "x = 1\n")
    loop.assemble()
    loop.user("Also keep the public API stable")
    a = loop.assemble()
    assert "mid_run_reminder" in a.injected
    wrapped = [p for p in a.persist if not p.part.id.endswith(environment.ENVIRONMENT_SUFFIX)]
    assert [p.part.content.text.split("\n")[:3] for p in wrapped] == [
        ["<system-reminder>", "The user sent the following message:", "Also keep the public API stable"]]
    for _ in range(3):  # later steps: a newer assistant has finished; the message stays as it was
        loop.assistant_calls("grep", {"pattern": "api"}, "none")
        b = loop.assemble()
        assert "mid_run_reminder" not in b.injected and not [
            p for p in b.persist if not p.part.id.endswith(environment.ENVIRONMENT_SUFFIX)]
        text = json.dumps(loop.bodies[-1][0], ensure_ascii=False)
        assert text.count("The user sent the following message:") == 1  # wrapped once, never twice
    for k in range(1, len(loop.bodies)):
        assert first_break(provider, loop.bodies[k - 1][0], loop.bodies[k][0], False) == "", k


def test_on_gemini_3_a_message_sent_mid_run_rewrites_its_turn_once():
    """Gemini 3 refuses text after the function responses of a user turn, so the person's
    message sent mid-run goes before the tool results it joins: the prefix is rewritten from that
    turn at that step (what the cache had of the tool results is written again), and kept at
    every other step."""
    loop = Loop(m.GEMINI, "gemini-3.8-flash")
    loop.new_turn("Fix the failing test")
    loop.assemble()
    loop.assistant_calls("read", {"path": "a.py"}, "x = 1\n")
    loop.assemble()
    loop.user("Also keep the public API stable")
    loop.assemble()
    for _ in range(2):
        loop.assistant_calls("grep", {"pattern": "api"}, "none")
        loop.assemble()
    breaks = [first_break(m.GEMINI, loop.bodies[k - 1][0], loop.bodies[k][0], False) for k in range(1, len(loop.bodies))]
    assert breaks[0] == "" and breaks[1] != "" and breaks[2:] == ["", ""], breaks


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_last_step_keeps_the_tools_and_disables_them(provider):
    loop = Loop(provider, max_steps=2)
    loop.new_turn("Fix it")
    loop.assemble()
    loop.assistant_calls("read", {"path": "a.py"}, "x = 1\n")
    last = loop.assemble()
    assert "max_steps" in last.injected
    loop.assistant_says("Done so far: read a.py.")
    loop.new_turn("Go on")
    loop.assemble()
    (one, _), (two, _), (three, _) = loop.bodies
    for body in (one, two, three):
        assert cache_order(provider, body)["tools"], "tool definitions stay in every body"
    # byte for byte: the tools and system elements of the three bodies, markers removed
    for a, b in ((one, two), (two, three)):
        x, y = cache_order(provider, a), cache_order(provider, b)
        assert json.dumps(x["tools"]) == json.dumps(y["tools"]) and json.dumps(x["system"]) == json.dumps(y["system"])
    assert "MAXIMUM STEPS REACHED" in json.dumps(cache_order(provider, two)["messages"][-1])
    if provider == m.BEDROCK:  # Converse has no "none" choice: only the trailing message says so
        assert "toolChoice" not in json.dumps(two)
    elif provider == m.ANTHROPIC:  # a changed tool_choice invalidates the cached messages: kept
        assert "tool_choice" not in one and "tool_choice" not in two and "tool_choice" not in three
    else:
        disabled = {m.GEMINI: ("toolConfig", {"functionCallingConfig": {"mode": "NONE"}})}
        key, value = disabled.get(provider, ("tool_choice", "none"))
        assert two[key] == value and one.get(key) != value and three.get(key) != value


# ---- breakpoint policy ---------------------------------------------------------------------

def assembled(provider, model_id=CLAUDE, hints=(), cfg=None, **kw):
    loop = Loop(provider, model_id)
    loop.new_turn("Fix the failing test")
    loop.assemble()
    loop.assistant_calls("read", {"path": "a.py"}, "x = 1\n")
    inp = assemble.AssembleInput(
        m.Conversation(list(loop.messages), "sess-policy"), m.Model(model_id, provider), [READ, GREP], SYSTEM,
        m.CompactionSettings(), step=2, policy=breakpoints.Policy(hints=list(hints)), **kw)
    return assemble.assemble(inp, cfg or config.Config())


GATEWAYS = (m.OPENROUTER, m.OPENAI_COMPATIBLE, m.COPILOT)


@pytest.mark.parametrize("provider", GATEWAYS)
def test_gateways_mark_only_the_models_that_honor_markers(provider):
    key = "copilot_cache_control" if provider == m.COPILOT else "cache_control"
    for model_id in ("gpt-5", "qwen3-coder", "openai/gpt-4.1"):
        a = assembled(provider, model_id)
        assert a.breakpoints == [] and key not in a.body.decode(), model_id
    for model_id in ("claude-sonnet-4-5", "anthropic/claude-opus-4.1", "Claude-Haiku"):
        assert len(assembled(provider, model_id).breakpoints) == 4, model_id
    # the list is configuration
    base = config.Config()
    cfg = dataclasses.replace(base, assemble=dataclasses.replace(base.assemble, marker_models=("qwen",)))
    assert len(assembled(provider, "qwen3-coder", cfg=cfg).breakpoints) == 4
    assert assembled(provider, CLAUDE, cfg=cfg).breakpoints == []
    # and Measure measures the same body
    a = assembled(provider, "gpt-5")
    assert len(a.body) == a.measurement.body_bytes
    # the caller's explicit hint is kept even where auto places nothing
    a = assembled(provider, "gpt-5", hints=[breakpoints.Hint(system_block=0)])
    assert [b.location for b in a.breakpoints] == ["system[0]"]


def test_alibaba_marks_every_model():
    for model_id in ("qwen3-coder-plus", "qwen-max", CLAUDE):
        assert len(assembled(m.ALIBABA, model_id).breakpoints) == 4, model_id


def test_config_takes_the_marker_models_list():
    cfg = config.from_mapping({"assemble": {"marker_models": ["claude", "kimi"]}})
    assert cfg.assemble.marker_models == ("claude", "kimi")
    assert config.Config().assemble.marker_models == ("claude", "anthropic")
    with pytest.raises(ValueError):
        config.from_mapping({"assemble": {"marker_models": "claude"}})


@pytest.mark.parametrize("provider", (m.ANTHROPIC, m.BEDROCK))
def test_hints_are_kept_and_auto_fills_the_places_left(provider):
    auto = [b.location for b in assembled(provider).breakpoints]
    # the last tool, the last system block, the last wire user message (the tool results)
    assert auto == ["tools[1]", "system[1]", "messages[2]"]
    a = assembled(provider, hints=[breakpoints.Hint(message_id="msg_001")])
    assert [b.location for b in a.breakpoints] == ["tools[1]", "system[1]", "messages[0]", "messages[2]"]
    # two hints leave two places: the latest user message first, then the last system block
    a = assembled(provider, hints=[breakpoints.Hint(message_id="msg_001"), breakpoints.Hint(system_block=0)])
    expected = ["system[0]", "system[1]", "messages[0]", "messages[2]"]
    if provider == m.BEDROCK:  # one cachePoint closes the system list: the hint takes auto's place there
        expected = ["tools[1]", "system[1]", "messages[0]", "messages[2]"]
    assert [b.location for b in a.breakpoints] == expected
    # a hint where auto would mark anyway takes that place, and auto fills the rest
    a = assembled(provider, hints=[breakpoints.Hint(last_tool=True)])
    assert [b.location for b in a.breakpoints] == ["tools[1]", "system[1]", "messages[2]"]


def test_gateway_hints_are_kept_and_auto_fills_up_to_four():
    a = assembled(m.OPENROUTER, hints=[breakpoints.Hint(message_id="msg_001")])
    # auto ranks the last message, the last system block, the one before, the first system block
    assert [b.location for b in a.breakpoints] == ["system[1]", "messages[0]", "messages[1]", "messages[2]"]


def test_bedrock_auto_marks_the_last_tool_system_and_wire_user_message():
    a = assembled(m.BEDROCK)
    body = json.loads(a.body)
    assert body["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default"}}
    assert body["system"][-1] == {"cachePoint": {"type": "default"}}
    last = body["messages"][-1]
    assert last["role"] == "user" and "toolResult" in last["content"][0]
    assert last["content"][-1] == {"cachePoint": {"type": "default"}}
    assert sum(json.dumps(x).count("cachePoint") for x in body["messages"]) == 1
    assert len(a.body) == a.measurement.body_bytes


@pytest.mark.parametrize("provider", (m.ANTHROPIC, m.BEDROCK, m.OPENROUTER, m.ALIBABA, m.OPENAI_COMPATIBLE,
                                      m.COPILOT))
def test_never_more_than_four_markers_with_hints(provider):
    hints = [breakpoints.Hint(message_id="msg_001"), breakpoints.Hint(message_id="msg_002"), breakpoints.Hint(system_block=0)]
    assert len(assembled(provider, hints=hints).breakpoints) <= 4


# ---- over a real server --------------------------------------------------------------------

def test_a_client_storing_persist_parts_keeps_the_prefix_over_the_wire(stub):
    """Two turns and a mid-run message over gRPC, the client storing what Assemble returns."""
    tools = [pb.ToolDefinition(name="read", description="Read a file",
                               input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')]
    system = pb.SystemPrompt(soul="You are a careful coding agent.", agent_prompt="Prefer small diffs.")
    messages, bodies = [], []
    clock = [0]

    def step(n):
        clock[0] += 41
        editor = pb.EditorContext(current_time=f"2026-12-02T18:{clock[0] // 60:02d}:{clock[0] % 60:02d}+00:00",
                                  working_directory="/repo", open_tabs=[f"f{clock[0]}.py"])
        a = stub.Assemble(pb.AssembleRequest(
            conversation=pb.Conversation(session_id="sess-wire", messages=messages),
            model=convo.model(provider=pb.PROVIDER_ANTHROPIC), tools=tools, system=system, editor=editor,
            step=n), timeout=10)
        messages[:] = contextsvc_client.apply_persist(messages, a)
        bodies.append(json.loads(a.body))
        return a

    def call(mid, k):
        messages.append(convo.assistant(mid, convo.tool(f"{mid}-t", f"call_{k}", "read", {"path": f"f{k}"}, "ok"),
                                        usage=pb.Usage(input=1000, output=10)))

    messages.append(convo.user("msg_001", convo.text("u1", "Fix the test")))
    first = step(1)
    assert [p.message_id for p in first.persist] == ["msg_001"] and first.environment_details
    call("msg_002", 2)
    step(2)
    messages.append(convo.assistant("msg_003", convo.text("a3", "Done.")))
    messages.append(convo.user("msg_004", convo.text("u4", "Now the docs")))
    step(1)
    call("msg_005", 5)
    step(2)
    messages.append(convo.user("msg_006", convo.text("u6", "And the changelog")))  # mid-run
    mid = step(3)
    assert "mid_run_reminder" in mid.injected
    call("msg_007", 7)
    step(4)
    stored = {m_.id: m_ for m_ in messages}
    assert stored["msg_001"].parts[-1].text.text == "\n\n" + first.environment_details
    assert stored["msg_006"].parts[0].text.text.startswith("<system-reminder>")
    for k in range(1, len(bodies)):
        assert first_break(m.ANTHROPIC, bodies[k - 1], bodies[k], False) == "", k


def test_apply_persist_replaces_by_id_or_appends():
    msgs = [convo.user("msg_001", convo.text("u1", "Fix it")), convo.assistant("msg_002", convo.text("a2", "ok"))]
    r = pb.AssembleResponse(persist=[
        pb.PersistPart(message_id="msg_001", part=convo.text("u1", "<system-reminder>\nwrapped")),
        pb.PersistPart(message_id="msg_001", part=convo.text("msg_001~environment", "\n\nblock", synthetic=True))])
    out = contextsvc_client.apply_persist(msgs, r)
    assert [p.text.text for p in out[0].parts] == ["<system-reminder>\nwrapped", "\n\nblock"]
    assert msgs[0].parts[0].text.text == "Fix it" and out[1] is msgs[1]  # the caller's objects untouched
    assert contextsvc_client.apply_persist(msgs, pb.AssembleResponse()) == msgs
    with pytest.raises(ValueError, match="persist\\[0\\].message_id"):
        contextsvc_client.apply_persist(msgs, pb.AssembleResponse(persist=[pb.PersistPart(message_id="nope")]))
