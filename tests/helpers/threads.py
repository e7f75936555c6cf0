"""Test code run on several threads at once, the interpreter switching between them every
microsecond: interleavings a server meets now and then happen within one test."""
from __future__ import annotations

import sys
import threading
from typing import Callable


def at_once(run: Callable[[int], None], threads: int) -> list:
    """run(k) for k in range(threads), each on a thread of its own, started together, with the
    switch interval at 1 µs; the (k, exception) of each that raised."""
    errors: list = []
    start = threading.Barrier(threads)

    def thread(k: int) -> None:
        start.wait()
        try:
            run(k)
        except BaseException as e:  # noqa: BLE001 - returned with its thread's index
            errors.append((k, e))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=thread, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    return errors
