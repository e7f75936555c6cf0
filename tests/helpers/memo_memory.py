"""What a memo really holds, by tracemalloc (which the caller has started)."""
from __future__ import annotations

import gc
import tracemalloc


def cleared(memo) -> tuple[int, int]:
    """(bytes of real memory clearing memo frees, bytes its entries were charged); memo is empty
    after."""
    gc.collect()
    filled = tracemalloc.get_traced_memory()[0]
    accounted = memo.size_bytes
    memo.clear()
    gc.collect()
    return filled - tracemalloc.get_traced_memory()[0], accounted
