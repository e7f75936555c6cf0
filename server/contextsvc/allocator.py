"""How the serving process manages its memory: large buffers straight from the operating
system, and back to it when freed; the cycle collector run less often.

glibc serves a freed block from its heap again and moves its threshold for using mmap up to the
largest block freed so far (up to 32 MB): after a few multi-megabyte requests and responses the
process keeps hundreds of megabytes it no longer uses, spread over the worker threads' arenas. A
fixed threshold keeps every block of a megabyte or more in a mapping of its own, returned when
freed. Elsewhere than glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_BLOCK_BYTES = 1 << 20


def return_large_blocks() -> bool:
    """Sets the fixed threshold for the whole process; True when the allocator took it."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES))
    except (OSError, AttributeError, TypeError):
        return False


# A step makes thousands of short-lived containers (keys, lists of a history's length) while the
# memo holds millions of long-lived ones: at the default threshold (700) the youngest generation
# is collected several times a step and the middle one every few steps, about a tenth of a
# step's time on a megabyte history (an in-process Measure of bench_step.py's 1 MB step, 120
# steps: 3.44 ms median at the default, 3.05-3.24 ms at these).
COLLECTOR_THRESHOLDS = (50_000, 20, 20)


def collect_less_often() -> None:
    """Sets the cycle collector's thresholds for the whole process (COLLECTOR_THRESHOLDS)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
