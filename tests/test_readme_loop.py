"""The README's agent loop in Python, run as it is written: the code block is taken from README.md
and executed against a real server and a window-enforcing provider (tests/agent_loop's fake,
which counts with cl100k and judges each body with the provider's own library). A 32K session
of scripted steps: the provider never refuses a body, the loop prunes and compacts as it says,
and each step's answer is stored as the README's caller would."""
from __future__ import annotations

import json
import re
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


class TurnOver(Exception):
    """The README's: the turn ends and the person is asked."""


def readme_step(post_to_provider):
    """The `step` function of the README's Python loop, with the caller's post_to_provider."""
    block = re.search(r"```python\n(from contextsvc_client import apply_assemble.*?)```", README.read_text(), re.S)
    assert block, "README.md has the Python agent loop"
    namespace = {"post_to_provider": post_to_provider, "TurnOver": TurnOver}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    return namespace["step"]


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


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
            model, tools = loop.model(provider, window), loop.tool_definitions(script)
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
