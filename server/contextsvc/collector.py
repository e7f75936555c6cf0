"""The cycle collector in a serving process: full collections rare, the young ones as before.

The memo (server.memo_bytes) holds a few hundred thousand long-lived objects, and what a step
keeps there holds no reference cycle: an evicted entry is freed by its reference count
(tests/test_collector.py). CPython runs a full collection whenever a quarter of the long-lived
objects are new since the last one, which a memo turning over reaches every 800-1,700 steps of
new history, and a full collection walks every tracked object with the interpreter lock held:
100-150 ms with a full 96 MiB memo, during which no call runs, and 8% of the CPU of a stream of
new 10 KB steps. So a full collection waits for FULL_AFTER collections of the middle generation
instead of 10 (minutes apart under full load); the young generations keep their thresholds, so
the cycles a call leaves (asyncio's futures linked to each other, an exception's traceback) are
collected young, as before.
"""
from __future__ import annotations

import gc

FULL_AFTER = 1000  # collections of the middle generation before a full one is considered


def rare_full_collections() -> None:
    """Sets the serving process's thresholds: the young generations' as they are."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)
