"""A stop that fails half-way still ends the server: `contextsvc serve` waits for it (Server.wait),
and a process that never exits after SIGTERM is worse than one whose last steps went wrong."""
from __future__ import annotations

import threading

from helpers.server import start_server


def test_a_stop_that_fails_half_way_still_ends_the_server():
    s = start_server()

    def close():
        raise OSError("connection pool already closed")

    s.store.close = close  # the stop's last steps close the store (Redis: its connection pool)
    stopper = threading.Thread(target=s.stop, kwargs={"grace": 1}, daemon=True)
    stopper.start()
    stopper.join(10)
    ended = threading.Event()
    threading.Thread(target=lambda: (s.wait(), ended.set()), daemon=True).start()
    assert ended.wait(10), "wait() still blocked after the stop failed"
    assert s.exit_code == 1  # serve says the stop failed
