"""The TypeScript client (clients/typescript) built once per test run: `npm run build` generates
the types from the proto with ts-proto and compiles the package and its unit tests with tsc.

The README's test command installs its packages (.ci/deps runs `npm ci`); a missing `node` or
missing packages fail the test rather than skipping it."""
from __future__ import annotations

import functools
import pathlib
import shutil
import subprocess

CLIENT = pathlib.Path(__file__).resolve().parent.parent.parent / "clients" / "typescript"
ENV = {"PATH": "/usr/bin:/bin"}


@functools.cache
def build() -> str:
    """The `node` to run the compiled package with (dist/src, dist/test), after a fresh build."""
    node = shutil.which("node", path=ENV["PATH"])
    assert node, "node not installed: run .ci/deps (the README's test command does)"
    assert (CLIENT / "node_modules" / "ts-proto").is_dir(), \
        "clients/typescript packages missing: run .ci/deps (npm ci in clients/typescript)"
    shutil.rmtree(CLIENT / "dist", ignore_errors=True)
    shutil.rmtree(CLIENT / "src" / "gen", ignore_errors=True)
    out = subprocess.run([shutil.which("npm", path=ENV["PATH"]), "run", "build"], cwd=CLIENT,
                         capture_output=True, text=True, timeout=300, env=ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    return node
