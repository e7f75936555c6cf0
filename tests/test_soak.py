"""A 60-second soak of a real server process (bench/soak.py): no errors, bounded memory.

RSS is taken after the first 10-second interval (imports, tokenizer tables and caches warm) and
may grow by at most RSS_GROWTH_BOUND_MIB after that; the load repeats the same conversations,
so a steady server holds steady memory. Latency figures are printed, never asserted.
"""
from __future__ import annotations

import soak

SECONDS = 60
RSS_GROWTH_BOUND_MIB = 48


def test_soak_60_seconds_no_errors_and_bounded_rss(capsys):
    r = soak.run(seconds=SECONDS, interval=10, callers=3)
    with capsys.disabled():
        print(f"\nsoak {SECONDS} s: {r.calls} calls, errors {dict(r.errors)}, drift {r.latency_drift:.2f}x, "
              f"RSS {r.rss_start_kib // 1024} -> {r.rss_end_kib // 1024} MiB (max {r.rss_max_kib // 1024})")
    assert r.calls > 0 and len(r.intervals) >= 5
    assert not r.errors, dict(r.errors)
    growth_mib = (r.rss_max_kib - r.rss_start_kib) / 1024
    assert growth_mib <= RSS_GROWTH_BOUND_MIB, f"RSS grew {growth_mib:.1f} MiB after warm-up"
