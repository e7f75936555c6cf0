"""Large buffers straight from the operating system, and back to it when freed.

glibc serves a freed block from its heap again and moves its threshold for using mmap up to the
largest block freed so far (up to 32 MB): after a few multi-megabyte requests and responses the
process keeps hundreds of megabytes it no longer uses, spread over the worker threads' arenas. A
fixed threshold keeps every block of a megabyte or more in a mapping of its own, returned when
freed. Elsewhere than glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util

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
