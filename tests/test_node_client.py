"""The Node.js client (clients/node, @grpc/grpc-js on the repo's proto) against a real server.

The README's test command installs Node's packages (.ci/deps runs `npm ci`); a missing `node` or
missing packages fail this test rather than skipping it.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from helpers.restarts import assert_outcomes, calls_across_a_restart, script_calls
from helpers.server import start_server

CLIENT = pathlib.Path(__file__).resolve().parent.parent / "clients" / "node"


def _node():
    node = shutil.which("node")
    assert node, "node not installed: run .ci/deps (the README's test command does)"
    assert (CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir(), \
        "clients/node packages missing: run .ci/deps (npm ci in clients/node)"
    return node


def _run(address, **env):
    return subprocess.run([_node(), "check.js", address], cwd=CLIENT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **env})


def test_node_client_calls_every_rpc_and_checks_answers():
    s = start_server()
    try:
        out = _run(f"127.0.0.1:{s.port}")
    finally:
        s.stop(grace=1)
    assert out.returncode == 0, out.stdout + out.stderr
    for rpc in ("Health.Check", "Measure", "Assemble", "Assemble tool names", "Prune", "Compact",
                "Compact keeps the file just read", "TruncateToolOutput", "ReadTruncated", "error status",
                "request over maxRequestBytes"):
        assert rpc in out.stdout


def test_node_client_sends_the_bearer_token_and_fails_loudly_without_it():
    s = start_server(auth_token="node-token")
    try:
        good = _run(f"127.0.0.1:{s.port}", CONTEXTSVC_TOKEN="node-token")
        bad = _run(f"127.0.0.1:{s.port}")
    finally:
        s.stop(grace=1)
    assert good.returncode == 0, good.stdout + good.stderr
    assert bad.returncode == 1 and "UNAUTHENTICATED" in bad.stderr, bad.stdout + bad.stderr


@pytest.mark.parametrize("retry", [True, False], ids=["retrying", "plain"])
def test_node_client_with_retries_calls_across_a_server_restart(tmp_path, retry):
    """connect(address, { retry: true }): every call is answered while the one server restarts;
    without the option the calls made meanwhile fail UNAVAILABLE."""
    node = _node()
    outcomes = calls_across_a_restart(tmp_path, lambda port: script_calls(
        [node, "calls_on_request.js", f"127.0.0.1:{port}", *["--retry"] * retry], CLIENT, {"PATH": "/usr/bin:/bin"}))
    assert_outcomes(outcomes, retry)
