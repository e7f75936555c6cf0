"""The README's agent loops, in Python and in Node, and its Python agent on OpenAI Responses, run
as they are written: each code block is taken from README.md and executed against a real server
and a window-enforcing provider (tests/agent_loop's fake, which counts with cl100k and judges each
body with the provider's own library; the Responses agent reaches it through the `openai` SDK). A
32K session of scripted steps: the provider never refuses a body, the loop prunes and compacts as
it says, and each step's answer is stored as the README's caller would."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import types
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from agent_loop import loop, session
from agent_loop.fake_provider import FakeProvider
from helpers.server import start_server
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_block(pattern: str, what: str) -> str:
    block = re.search(pattern, README.read_text(), re.S)
    assert block, f"README.md has {what}"
    return block.group(1)


PYTHON_LOOP = r"```python\n(from contextsvc_client import apply_assemble.*?)```"
RESPONSES_AGENT = r"```python\n(import json\nimport openai\n.*?)```"
OPENAI_BASE_URL = '"https://api.openai.com/v1"'


def readme_step(post_to_provider):
    """The `step` function of the README's Python loop, with the caller's post_to_provider."""
    namespace = {"post_to_provider": post_to_provider}
    exec(compile(readme_block(PYTHON_LOOP, "the Python agent loop"), "README.md", "exec"), namespace)
    return namespace["step"]


def readme_responses_agent(base_url: str) -> dict:
    """The README's Python loop and its Responses block run in one namespace, as a reader's module
    would, the `openai` client pointed at base_url: `step` calls the block's post_to_provider."""
    code = readme_block(RESPONSES_AGENT, "the Python agent on OpenAI Responses")
    assert code.count(OPENAI_BASE_URL) == 1, "the Responses block sets the client's base_url"
    namespace = {}
    exec(compile(readme_block(PYTHON_LOOP, "the Python agent loop"), "README.md", "exec"), namespace)
    exec(compile(code.replace(OPENAI_BASE_URL, json.dumps(base_url)), "README.md", "exec"), namespace)
    return namespace


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_the_readme_python_loop_ends_the_turn_when_the_provider_keeps_refusing(stub):
    """The block defines what it raises: a provider refusing every body as too long ends the
    turn with the README's TurnOver, after three overflow compactions, not with a NameError."""
    refusals = []

    def post_to_provider(body: bytes):
        refusals.append(body)
        return types.SimpleNamespace(status=400, out={"error": "prompt is too long"}, tool_calls=[], too_long=True)

    namespace = {"post_to_provider": post_to_provider}
    exec(compile(readme_block(PYTHON_LOOP, "the Python agent loop"), "README.md", "exec"), namespace)
    messages = [pb.Message(id="u1", role=pb.ROLE_USER, parts=[
        pb.Part(id="p1", text=pb.TextPart(text="Fix the failing test in tests/test_app.py"))])]
    with pytest.raises(namespace["TurnOver"]) as over:
        namespace["step"](stub, messages, loop.model("anthropic", 32_000), [], loop.SYSTEM,
                          pb.EditorContext(current_time=loop.CURRENT_TIME), 0, b"")
    assert len(refusals) == 3
    # what the caller stores: the overflow compactions applied, not the history before them
    kept = over.value.messages
    assert any(x.role == pb.ROLE_ASSISTANT and x.summary for x in kept), [x.id for x in kept]


@pytest.mark.parametrize("provider", ["anthropic"])
def test_the_readme_python_loop_runs_a_32k_session(provider):
    window = 32_000
    server = start_server()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}", options=[
        ("grpc.max_send_message_length", 256 << 20), ("grpc.max_receive_message_length", 256 << 20)])
    stub = pb_grpc.ContextServiceStub(channel)
    calls = {"Prune": 0, "Compact": 0}
    counting = types.SimpleNamespace(**{name: getattr(stub, name) for name in ("Assemble", "Measure",
                                                                                "TruncateToolOutput")})
    for name in calls:
        def counted(request, timeout=None, _rpc=getattr(stub, name), _name=name):
            calls[_name] += 1
            return _rpc(request, timeout=timeout)
        setattr(counting, name, counted)
    try:
        with FakeProvider() as fp:
            url = fp.url(provider, window)

            def post_to_provider(body: bytes):
                status, out = _post(url, body)
                return types.SimpleNamespace(status=status, out=out, tool_calls=[],
                                             too_long=status != 200 and "too long" in json.dumps(out))

            step = readme_step(post_to_provider)
            script = session.generate(7, steps=24, big_every=3)
            model, tools = loop.model(provider, window), loop.tool_definitions(script["tools"])
            store = loop.Session(stub, url, provider, window)  # stores answers as the scripted agent does
            messages, attempts, state = [], 0, b""
            for spec in script["steps"]:
                if spec["user"]:
                    messages.append(loop.user_message(spec["user"]))
                    attempts = 0
                editor = pb.EditorContext(current_time=loop.CURRENT_TIME, working_directory="/work/app")
                messages, answer, attempts, state = step(counting, messages, model, tools, loop.SYSTEM, editor,
                                                         attempts, state)
                assert answer.status == 200, answer.out
                store.messages = messages
                store.store_answer(spec, answer.out["usage"]["input_tokens"])
                messages = store.messages
            refused = [e for e in fp.log if e.refused]
            assert not refused, refused[:3]
            assert calls["Prune"] and calls["Compact"], calls  # the session needed both
    finally:
        channel.close()
        server.stop(grace=1)


def test_the_readme_responses_agent_runs_a_32k_session_through_the_openai_sdk(monkeypatch):
    """Every body goes through `client.responses.create` over HTTP; none is refused, the session
    prunes and compacts, and each accepted body repeats the previous one's elements (the cached
    prefix) on every step that neither pruned nor compacted, as its cache_report says."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the SDK requires a key; the fake ignores it
    provider, window = "openai-responses", 32_000
    server = start_server()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}", options=[
        ("grpc.max_send_message_length", 256 << 20), ("grpc.max_receive_message_length", 256 << 20)])
    stub = pb_grpc.ContextServiceStub(channel)
    # what changed the messages in this step, its last Assemble, each POST, each step's changes
    changed, last, sent, steps = set(), {}, [], []

    def assemble(request, timeout=None):
        a = last["assemble"] = stub.Assemble(request, timeout=timeout)
        if a.pruned_part_ids:   # the payload guard's prune, which the README's loop stores
            changed.add("prune")
        return a

    def prune(request, timeout=None):
        p = stub.Prune(request, timeout=timeout)
        if p.acted:
            changed.add("prune")
        return p

    def compact(request, timeout=None):
        changed.add("compaction")
        return stub.Compact(request, timeout=timeout)

    watched = types.SimpleNamespace(Assemble=assemble, Prune=prune, Compact=compact, Measure=stub.Measure,
                                    TruncateToolOutput=stub.TruncateToolOutput)
    try:
        with FakeProvider() as fp:
            agent = readme_responses_agent(fp.url(provider, window))
            readme_post = agent["post_to_provider"]

            def post_to_provider(body: bytes):
                answer = readme_post(body)
                sent.append(loop.sent_entry(len(steps), 400 if answer.too_long else 200, changed,
                                            last["assemble"].cache_report))
                return answer

            agent["post_to_provider"] = post_to_provider   # `step` looks it up in the module, as a reader's would
            assert agent["model"].provider == pb.PROVIDER_OPENAI_RESPONSES
            script = session.generate(9, steps=24, big_every=3)
            model = pb.Model(id=agent["model"].id, provider=agent["model"].provider,
                             limits=loop.model(provider, window).limits)   # the README's model at the test window
            tools = loop.tool_definitions(script["tools"])
            store = loop.Session(stub, fp.url(provider, window), provider, window)
            messages, attempts, state = [], 0, b""
            for spec in script["steps"]:
                if spec["user"]:
                    messages.append(loop.user_message(spec["user"]))
                    attempts = 0
                changed.clear()
                editor = pb.EditorContext(current_time=loop.CURRENT_TIME, working_directory="/work/app")
                messages, answer, attempts, state = agent["step"](watched, messages, model, tools, loop.SYSTEM,
                                                                  editor, attempts, state)
                steps.append(sorted(changed))
                store.messages = messages
                store.store_answer(spec, answer.response.usage.input_tokens)
                messages = store.messages
            refused = [e for e in fp.log if e.refused]
            assert not refused, refused[:3]
            assert all(e.provider == provider for e in fp.log) and len(fp.log) == len(steps)
            assert any("prune" in c for c in steps) and any("compaction" in c for c in steps), steps
            problems = loop.cache_violations({"sent": sent}, fp.log)
            assert not problems, "\n".join(problems)
            assert any(not c for c in steps[1:]), steps   # some step kept the prefix, and was checked
    finally:
        channel.close()
        server.stop(grace=1)


NODE_CLIENT = Path(__file__).resolve().parent.parent / "clients" / "node"

# Runs the README's `step` over a scripted session; prints {"calls": {...}} when done.
NODE_HARNESS = """
const fs = require("node:fs");
const { Session, userMessage, SYSTEM } = require(%(client)s + "/agent_loop.js");
const URL_ = process.argv[3];
async function postToProvider(body) {
  const r = await fetch(URL_, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  const out = await r.json();
  return { status: r.status, out, toolCalls: [], tooLong: r.status !== 200 && JSON.stringify(out).includes("too long") };
}
%(step)s
(async () => {
  const [scriptPath, url, address] = process.argv.slice(2);
  const script = JSON.parse(fs.readFileSync(scriptPath, "utf8"));
  const raw = connect(address);
  const calls = { Prune: 0, Compact: 0 };
  const client = { ...raw };
  for (const name of Object.keys(calls)) client[name] = (req, ms) => { calls[name] += 1; return raw[name](req, ms); };
  const store = new Session(raw, url, "anthropic", 32000);
  store.sessionId = script.session_id;
  let messages = [], attempts = 0, state = Buffer.alloc(0);
  for (const spec of script.steps) {
    if (spec.user) { messages.push(userMessage(spec.user)); attempts = 0; }
    const editor = { current_time: "2026-01-05T10:00:00+00:00", working_directory: "/work/app" };
    const r = await step(client, messages, { model: store.model, tools: script.tools, system: SYSTEM, editor, attempts, state });
    if (r.answer.status !== 200) throw new Error(JSON.stringify(r.answer.out));
    ({ messages, attempts, state } = r);
    store.messages = messages;
    await store.storeAnswer(spec, r.answer.out.usage.input_tokens);
    messages = store.messages;
  }
  raw.close();
  console.log(JSON.stringify({ calls }));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def readme_node_step() -> str:
    """The README's Node loop, its requires pointed at clients/node."""
    block = re.search(r"```js\n(const \{ connect \} = require\(\"./client\"\);.*?)```", README.read_text(), re.S)
    assert block, "README.md has the Node agent loop"
    return (block.group(1).replace('require("./client")', f"require({json.dumps(str(NODE_CLIENT / 'client.js'))})")
            .replace('require("./apply")', f"require({json.dumps(str(NODE_CLIENT / 'apply.js'))})"))


def test_the_readme_node_loop_runs_a_32k_session(tmp_path):
    node = shutil.which("node")
    assert node, "node not installed: run .ci/deps (the README's test command does)"
    harness = tmp_path / "readme_loop.js"
    harness.write_text(NODE_HARNESS % {"client": json.dumps(str(NODE_CLIENT)), "step": readme_node_step()})
    server = start_server()
    try:
        with FakeProvider() as fp:
            url = fp.url("anthropic", 32_000)
            path = session.write(session.generate(8, steps=24, big_every=3), tmp_path / "script.json")
            out = subprocess.run([node, str(harness), str(path), url, f"127.0.0.1:{server.port}"], cwd=NODE_CLIENT,
                                 capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
            assert out.returncode == 0, out.stderr
            calls = json.loads(out.stdout.strip().splitlines()[-1])["calls"]
            refused = [e for e in fp.log if e.refused]
            assert not refused, refused[:3]
            assert calls["Prune"] and calls["Compact"], calls  # the session needed both
    finally:
        server.stop(grace=1)


STORED_ANSWER = r"```python\n(import json\nimport time\nfrom contextsvc_client import client_tool_name, usage_from.*?)```"


def test_the_readmes_stored_answer_is_what_the_next_assemble_sends_back(stub):
    """The README's stored_answer and tool_ran, as written: an Anthropic answer (the SDK's own
    type) of thinking, text and a call of a tool whose name the body mapped, stored and its tool
    run; the next body, judged by the anthropic judge, sends the thinking signed, the call by its
    mapped name with its result, and the usage stored reads the provider's count once."""
    import anthropic.types as at

    from judges import judge_for

    code = readme_block(STORED_ANSWER, "the stored-answer helpers")
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - the README's own code, as written
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=200_000, output=16_000))
    tools = [pb.ToolDefinition(name="github.create_issue", description="File an issue",
                               input_schema_json='{"type":"object","properties":{"title":{"type":"string"}}}')]
    user = pb.Message(id="u1", role=pb.ROLE_USER, parts=[pb.Part(id="u1p", text=pb.TextPart(text="file the bug"))])
    a = stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="stored", messages=[user]),
                                         model=model, tools=tools), timeout=10)
    wire_name = json.loads(a.body)["tools"][0]["name"]
    assert wire_name != "github.create_issue" and a.tool_names[wire_name] == "github.create_issue"
    response = at.Message.model_validate({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use", "stop_sequence": None,
        "content": [{"type": "thinking", "thinking": "File it with a clear title.", "signature": "EqQBCkYIBxgCKkD"},
                    {"type": "text", "text": "Filing it."},
                    {"type": "tool_use", "id": "toolu_01", "name": wire_name, "input": {"title": "Crash on save"}}],
        "usage": {"input_tokens": 40, "cache_read_input_tokens": 1_000, "cache_creation_input_tokens": 200,
                  "output_tokens": 90}})
    stored = ns["stored_answer"](a, response, model, "u1")
    assert stored.usage.input + stored.usage.cache_read + stored.usage.cache_write == 1_240
    done = ns["tool_ran"](stored, "toolu_01", "issue #42 opened")
    assert stored.parts[2].tool.state.status == pb.TOOL_STATUS_RUNNING  # the stored one is not changed
    follow = pb.Message(id="u2", role=pb.ROLE_USER, parts=[pb.Part(id="u2p", text=pb.TextPart(text="thanks"))])
    nxt = stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="stored",
                                                                        messages=[user, done, follow]),
                                           model=model, tools=tools, previous_cache_state=a.cache_state), timeout=10)
    body = json.loads(nxt.body)
    assert judge_for("anthropic")(body) == []
    turn = body["messages"][1]["content"]
    assert [b["type"] for b in turn] == ["thinking", "text", "tool_use"]
    assert turn[2]["name"] == wire_name and turn[0]["signature"] == "EqQBCkYIBxgCKkD"
    result = body["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and "issue #42 opened" in json.dumps(result)
    assert nxt.cache_report.prefix_kept


STORED_RESPONSE = r"```python\n(def stored_response\(a, response, model, parent_id\):.*?)```"


def test_the_readmes_stored_response_is_what_the_next_assemble_sends_back(stub):
    """The README's stored_response, as written, after its stored_answer block (the imports): a
    Responses answer (the SDK's own type) of encrypted reasoning, text and a call, stored with its
    reasoning tokens; the next body, judged by the Responses judge, carries the reasoning item
    with its state, the call by its mapped name and its output."""
    from openai.types.responses import Response

    from judges import judge_for

    ns = {}
    exec(compile(readme_block(STORED_ANSWER, "the stored-answer helpers"), "README.md", "exec"), ns)  # noqa: S102
    exec(compile(readme_block(STORED_RESPONSE, "the Responses stored answer"), "README.md", "exec"), ns)  # noqa: S102
    model = pb.Model(id="gpt-5", provider=pb.PROVIDER_OPENAI_RESPONSES, limits=pb.ModelLimits(context=400_000, output=128_000))
    tools = [pb.ToolDefinition(name="github.create_issue", description="File an issue",
                               input_schema_json='{"type":"object","properties":{"title":{"type":"string"}}}')]
    user = pb.Message(id="u1", role=pb.ROLE_USER, parts=[pb.Part(id="u1p", text=pb.TextPart(text="file the bug"))])
    a = stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="stored-r", messages=[user]),
                                         model=model, tools=tools), timeout=10)
    wire_name = json.loads(a.body)["tools"][0]["name"]
    response = Response.model_validate({
        "id": "resp_01", "object": "response", "created_at": 1, "model": "gpt-5", "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "output": [
            {"type": "reasoning", "id": "rs_01", "summary": [{"type": "summary_text", "text": "File it."}],
             "encrypted_content": "gAAAAABo" + "x" * 40},
            {"type": "message", "id": "msg_01", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Filing it.", "annotations": []}]},
            {"type": "function_call", "id": "fc_01", "call_id": "call_01", "name": wire_name,
             "arguments": '{"title": "Crash on save"}'}],
        "usage": {"input_tokens": 1_240, "input_tokens_details": {"cached_tokens": 1_000, "cache_write_tokens": 0}, "output_tokens": 900,
                  "output_tokens_details": {"reasoning_tokens": 800}, "total_tokens": 2_140}})
    stored = ns["stored_response"](a, response, model, "u1")
    assert stored.usage.reasoning == 800 and stored.usage.input + stored.usage.cache_read == 1_240
    done = ns["tool_ran"](stored, "call_01", "issue #42 opened")
    nxt = stub.Assemble(pb.AssembleRequest(conversation=pb.Conversation(session_id="stored-r", messages=[user, done]),
                                           model=model, tools=tools, previous_cache_state=a.cache_state), timeout=10)
    body = json.loads(nxt.body)
    assert judge_for("openai-responses")(body) == []
    items = body["input"][1:]
    assert [x.get("type", x.get("role")) for x in items] == ["reasoning", "assistant", "function_call", "function_call_output"]
    assert items[0]["encrypted_content"] == "gAAAAABo" + "x" * 40 and items[2]["name"] == wire_name
    assert "issue #42 opened" in items[3]["output"]
