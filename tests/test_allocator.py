"""The serving process's allocator policy (allocator.py), in a process of its own as `serve` sets
it: a step-sized buffer freed and allocated again is reused, not faulted in afresh at every step;
a buffer of many megabytes goes back to the system when freed."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import json, resource, sys
    from contextsvc.allocator import return_large_blocks

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def rss_kb():
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS")).split()[1])

    took = return_large_blocks() if sys.argv[1] == "policy" else None
    step = 2 << 20  # a step's request or response of a 1-2 MB history
    for _ in range(3):  # the first ones fault the heap in
        b = bytes(step); b = bytearray(b); del b
    before = faults()
    for _ in range(20):
        b = bytes(step); b = bytearray(b); del b
    per_step = (faults() - before) / 20
    base = rss_kb()
    big = bytearray(64 << 20)
    big[::4096] = b"x" * len(big[::4096])  # every page touched
    held = rss_kb() - base
    del big
    print(json.dumps({"took": took, "faults_per_step": per_step, "held_kb": held,
                      "kept_after_free_kb": rss_kb() - base}))
""")


def probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_step_sized_buffer_is_reused_and_a_huge_one_returned():
    out = probe("policy")
    assert out["took"] is True
    # two 2 MB buffers a step: faulted in afresh each time would be about 1,000 faults
    assert out["faults_per_step"] < 50, out
    assert out["held_kb"] > 60_000, out  # the 64 MB buffer was resident
    assert out["kept_after_free_kb"] < 16_000, out  # and went back when freed
