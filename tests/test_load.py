"""A short run of bench/load.py (the mixed agent workload on a separate server process): no errors.

Speed is printed by the script, never asserted here.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import contextsvc

LOAD = pathlib.Path(__file__).resolve().parent.parent / "bench" / "load.py"


@pytest.mark.parametrize("processes", [1, 2])
def test_short_load_run_has_no_errors(processes):
    package_root = str(pathlib.Path(contextsvc.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(LOAD), "--callers", "6", "--seconds", "10", "--processes", str(processes),
                          "--json"],
                         capture_output=True, text=True, timeout=180, env=env)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["errors"] == {}
    # every RPC of the mix ran, including the periodic ones
    assert set(summary["per_rpc"]) == {"Assemble", "Measure", "Prune", "Compact", "TruncateToolOutput",
                                       "ReadTruncated"}
    assert all(row["count"] > 0 for row in summary["per_rpc"].values())
    assert summary["processes"] == processes
