"""SIGTERM and SIGINT start a graceful stop (in a thread: a signal handler must return fast)."""
from __future__ import annotations

import logging
import signal
import threading
from typing import Callable

log = logging.getLogger("contextsvc")


def stop_on_signals(stop: Callable[[], None], what: str) -> None:
    """On SIGTERM or SIGINT, logs what the stop does and runs stop() in its own thread."""
    def handle(signum, _frame):
        log.info("signal %d: %s", signum, what)
        threading.Thread(target=stop, name="stop", daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def wait_for_stop(done: threading.Event) -> None:
    """Waits for done in one-second slices. A signal the kernel hands to another thread only
    flags CPython's main thread, whose handler runs when that thread next runs bytecode: a main
    thread blocked in an untimed wait would never run it, and SIGTERM would be lost."""
    while not done.wait(1.0):
        pass
