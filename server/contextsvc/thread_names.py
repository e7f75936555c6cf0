"""The server's threads named where the operating system shows them (top -H, ps -L,
/proc/PID/task/*/comm). Python keeps a thread's name to itself, so every thread of the process
shows as "python" and an operator, or a profiler reading /proc, cannot tell the core's workers
from the transport's loop or grpc's own threads."""
from __future__ import annotations

import ctypes
import sys
import threading

_PR_SET_NAME = 15  # prctl(2): names the calling thread
_NAME_BYTES = 15  # the kernel keeps a thread name's first 15 bytes


def _prctl():
    """libc's prctl on Linux; None elsewhere, or where the C library cannot be loaded (a name is
    for the operator's eyes: its absence never stops a thread, so a pool's initializer never
    fails)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def name_os_thread() -> None:
    """Gives the calling thread's Python name to its OS thread (Linux; elsewhere nothing): the
    initializer of a pool's threads, the first call of a thread's target."""
    if _PRCTL is not None:
        name = threading.current_thread().name.encode("utf-8", "replace")[:_NAME_BYTES]
        _PRCTL(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
