"""The fuzz properties of tests/test_fuzz.py for longer: many more examples, fresh randomness.

    PYTHONPATH=server python bench/fuzz_long.py              # 5000 examples per property
    PYTHONPATH=server python bench/fuzz_long.py --examples 20000 -k compact

Runs pytest on tests/test_fuzz.py with CONTEXTSVC_FUZZ_EXAMPLES and CONTEXTSVC_FUZZ_RANDOM set,
so each run explores new inputs (a failure prints the falsifying example to reproduce).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=5000)
    p.add_argument("-k", default="", help="pytest -k expression selecting properties")
    a = p.parse_args()
    env = {**os.environ, "CONTEXTSVC_FUZZ_EXAMPLES": str(a.examples), "CONTEXTSVC_FUZZ_RANDOM": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_fuzz.py"),
           "--hypothesis-show-statistics"]
    if a.k:
        cmd += ["-k", a.k]
    t = time.monotonic()
    rc = subprocess.call(cmd, env=env, cwd=ROOT)
    print(f"fuzz_long: {a.examples} examples per property, {time.monotonic() - t:.0f} s, exit {rc}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
