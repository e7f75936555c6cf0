"""What `contextsvc serve` sets for its whole process before it serves, in one place: the
benches that time a step as a server runs it set the very same."""
from __future__ import annotations

import functools


@functools.cache  # once a process: the collector's policy starts a thread
def set_policies() -> None:
    """The allocator's (allocator.py: a step's buffers reused, multi-megabyte ones returned when
    freed) and the cycle collector's (collector.py: no walk of the whole memo every thousand
    steps)."""
    from .allocator import return_large_blocks
    from .collector import rare_full_collections

    return_large_blocks()
    rare_full_collections()
