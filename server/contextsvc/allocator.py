"""Large buffers: the ones a step reuses kept in the heap, the rest returned to the system.

glibc's own policy moves its threshold for using mmap up to the largest block freed so far (up to
32 MB) and keeps twice that free at the top of each arena: after a few multi-megabyte requests the
process keeps hundreds of megabytes it no longer uses, spread over the worker threads' arenas.
Returning every freed block at once is the other extreme: the next step's request and response
(a megabyte each for a megabyte history, copied three or four times on their way through the
transport) are faulted in afresh at every call, about 1,200 page faults and 3 ms of CPU for one
Assemble of a 1 MB history (bench/bench_step.py).

So fixed settings for the whole process: a block of 4 MB or more has a mapping of its own,
returned when freed; each arena keeps at most 8 MB free at its top for the next step; and there
are at most 4 arenas (the work holds the GIL: more would only spread what is kept). What the
process holds unused is so at most 32 MB beyond what fragments the heaps. Elsewhere than glibc
this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util

# glibc's mallopt parameters
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

LARGE_BLOCK_BYTES = 4 << 20
KEPT_FREE_BYTES = 8 << 20  # per arena
ARENAS = 4


def return_large_blocks() -> bool:
    """Sets the fixed policy for the whole process; True when the allocator took it."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return all([bool(libc.mallopt(M_ARENA_MAX, ARENAS)),
                    bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)),
                    bool(libc.mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES))])
    except (OSError, AttributeError, TypeError):
        return False
