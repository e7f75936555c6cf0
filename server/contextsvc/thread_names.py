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
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def name_os_thread() -> None:
    """Gives the calling thread's Python name to its OS thread (Linux; elsewhere nothing): the
    initializer of a pool's threads, the first call of a thread's target."""
    if _libc is not None:
        name = threading.current_thread().name.encode("utf-8", "replace")[:_NAME_BYTES]
        _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
