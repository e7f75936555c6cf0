"""The TypeScript client (clients/typescript): the package builds from the proto (ts-proto types,
tsc in strict mode) and apply.ts passes its unit tests under `node --test`. Its agent loop runs
against a real server in tests/test_agent_loop.py."""
from __future__ import annotations

import re
import subprocess

import pytest

from helpers import typescript
from helpers.restarts import assert_outcomes, calls_across_a_restart, script_calls
from helpers.server import start_server


def test_typescript_client_builds_from_the_proto_with_camel_case_types():
    typescript.build()
    generated = (typescript.CLIENT / "src" / "gen" / "contextsvc" / "v1" / "context.ts").read_text()
    assert "toolNames: { [key: string]: string }" in generated
    assert "previousCacheState: Buffer" in generated
    for module in ("index", "client", "apply", "agentLoop"):
        assert (typescript.CLIENT / "dist" / "src" / f"{module}.d.ts").is_file(), module


def test_typescript_apply_helpers_pass_their_unit_tests():
    node = typescript.build()
    out = subprocess.run([node, "--test", "dist/test/apply.test.js", "dist/test/usage.test.js"], cwd=typescript.CLIENT,
                         capture_output=True, text=True, timeout=120, env=typescript.ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", out.stdout, re.M))
    assert int(counts["tests"]) > 0 and counts["pass"] == counts["tests"] and counts["fail"] == "0", out.stdout


@pytest.mark.parametrize("retry", [True, False], ids=["retrying", "plain"])
def test_typescript_client_with_retries_calls_across_a_server_restart(tmp_path, retry):
    """connect(address, { retry: true }): every call is answered while the one server restarts;
    without the option the calls made meanwhile fail UNAVAILABLE."""
    node = typescript.build()
    outcomes = calls_across_a_restart(tmp_path, lambda port: script_calls(
        [node, "dist/test/callsOnRequest.js", f"127.0.0.1:{port}", *["--retry"] * retry], typescript.CLIENT,
        typescript.ENV))
    assert_outcomes(outcomes, retry)


def _one_call(flag: str) -> str:
    """What callsOnRequest.js writes for its one call under flag, against a server of its own."""
    node = typescript.build()
    s = start_server()
    try:
        out = subprocess.run([node, "dist/test/callsOnRequest.js", f"127.0.0.1:{s.port}", flag],
                             cwd=typescript.CLIENT, capture_output=True, text=True, timeout=60, env=typescript.ENV)
    finally:
        s.stop(grace=1)
    return out.stdout + out.stderr


def test_typescript_client_refuses_a_request_over_max_request_bytes_without_sending_it():
    """A proxy ends a request over the server's limit as CANCELLED, which the retries sent again
    (ten times 70 MiB through HAProxy); the channel refuses it first, RESOURCE_EXHAUSTED."""
    out = _one_call("--over-max")
    code, seconds = out.split()[:2]
    assert code == "RESOURCE_EXHAUSTED" and float(seconds) < 1, out


def test_typescript_client_takes_in_an_answer_over_grpc_s_default_4_mib():
    """An Assemble body is as large as its conversation: grpc's own 4 MiB limit on what a channel
    takes in refused a body with one 3.5 MB screenshot, RESOURCE_EXHAUSTED, at every step."""
    out = _one_call("--big-answer")
    code, size = out.split()[:2]
    assert code == "OK" and int(size) > 5 * 2**20, out


def test_typescript_client_names_a_number_it_cannot_encode_invalid_argument():
    """NaN in an int64 field (the types allow any number) failed in the client as INTERNAL, which
    reads as a server fault and names nothing."""
    out = _one_call("--nan")
    assert out.startswith("INVALID_ARGUMENT request not sent:") and "NaN" in out, out
