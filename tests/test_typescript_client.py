"""The TypeScript client (clients/typescript): the package builds from the proto (ts-proto types,
tsc in strict mode) and apply.ts passes its unit tests under `node --test`. Its agent loop runs
against a real server in tests/test_agent_loop.py."""
from __future__ import annotations

import re
import subprocess

from helpers import typescript


def test_typescript_client_builds_from_the_proto_with_camel_case_types():
    typescript.build()
    generated = (typescript.CLIENT / "src" / "gen" / "contextsvc" / "v1" / "context.ts").read_text()
    assert "toolNames: { [key: string]: string }" in generated
    assert "previousCacheState: Buffer" in generated
    for module in ("index", "client", "apply", "agentLoop"):
        assert (typescript.CLIENT / "dist" / "src" / f"{module}.d.ts").is_file(), module


def test_typescript_apply_helpers_pass_their_unit_tests():
    node = typescript.build()
    out = subprocess.run([node, "--test", "dist/test/apply.test.js"], cwd=typescript.CLIENT, capture_output=True,
                         text=True, timeout=120, env=typescript.ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", out.stdout, re.M))
    assert int(counts["tests"]) > 0 and counts["pass"] == counts["tests"] and counts["fail"] == "0", out.stdout
