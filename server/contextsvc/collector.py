"""The cycle collector in a serving process: full collections rare, the young ones as before.

The memo (server.memo_bytes) holds a few hundred thousand long-lived objects, and what a step
keeps there holds no reference cycle: an evicted entry is freed by its reference count
(tests/test_collector.py). CPython runs a full collection whenever a quarter of the long-lived
objects are new since the last one, which a memo turning over reaches every 800-1,700 steps of
new history, and a full collection walks every tracked object with the interpreter lock held:
100-150 ms with a full 96 MiB memo, during which no call runs, and 13% of the CPU of a stream
of new 10 KB steps. So a full collection waits for FULL_AFTER collections of the middle
generation instead of 10 (minutes apart under full load). The young generations keep their
thresholds: the cycles a call leaves in the transport (grpc's call state, an error's
traceback: a few KB, never the request, tests/test_collector.py) are collected young when they
are dead by then; one still alive at a middle-generation collection (a long Compact, a health
watch) moves to the oldest generation and waits for a full collection, which also comes at
least every FULL_AT_LEAST_EVERY_SECONDS, so that a server whose load never reaches FULL_AFTER
does not keep them for hours.
"""
from __future__ import annotations

import gc
import threading
import time

FULL_AFTER = 1000  # collections of the middle generation before a full one is considered
FULL_AT_LEAST_EVERY_SECONDS = 600.0


def rare_full_collections(at_least_every: float = FULL_AT_LEAST_EVERY_SECONDS) -> None:
    """Sets the serving process's thresholds (the young generations' as they are) and starts the
    thread that runs a full collection every at_least_every seconds."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)
    threading.Thread(target=_collect_every, args=(at_least_every,), name="full-collection", daemon=True).start()


def _collect_every(seconds: float) -> None:
    while True:
        time.sleep(seconds)
        gc.collect()
