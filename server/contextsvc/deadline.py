"""The caller's deadline, as the core sees it: the RPC layer builds a Deadline from its context
(the concurrency limit lives in rpc/admission.py)."""
from __future__ import annotations

import time
from typing import Callable, Optional

from .errors import DeadlineExceeded

# A per-message loop checks the deadline once every this many messages: a few microseconds per
# check, and 512 messages take at most a few milliseconds at any stage of a step. Per-part work
# counted with Deadline.count is checked as often, so that one message of many parts is too.
CHECK_EVERY = 512


class Deadline:
    """The time a call may still take, and whether its caller has gone.

    expires_at is a time.monotonic() value (None = no deadline); cancelled is polled between
    steps of long work so an abandoned call stops instead of finishing for nobody. if_abandoned,
    given by the RPC layer, keeps an undo to run should the call end without its answer reaching
    the transport, or returns False when the caller has gone already (undo_unless_answered).
    """

    __slots__ = ("expires_at", "_cancelled", "_uncounted", "_if_abandoned")

    def __init__(self, expires_at: Optional[float] = None, cancelled: Callable[[], bool] = lambda: False,
                 if_abandoned: Optional[Callable[[Callable[[], None]], bool]] = None):
        self.expires_at = expires_at
        self._cancelled = cancelled
        self._uncounted = CHECK_EVERY  # units of work left before count() checks
        self._if_abandoned = if_abandoned

    @classmethod
    def after(cls, seconds: Optional[float], cancelled: Callable[[], bool] = lambda: False,
              if_abandoned: Optional[Callable[[Callable[[], None]], bool]] = None) -> "Deadline":
        return cls(None if seconds is None else time.monotonic() + seconds, cancelled, if_abandoned)

    def remaining(self) -> Optional[float]:
        """Seconds left (never negative), None when there is no deadline."""
        if self.expires_at is None:
            return None
        return max(0.0, self.expires_at - time.monotonic())

    def expired(self) -> bool:
        return self._cancelled() or (self.expires_at is not None and time.monotonic() >= self.expires_at)

    def tick(self, i: int, what: str) -> None:
        """check() once every CHECK_EVERY turns of a per-message loop (i counts them)."""
        if not i % CHECK_EVERY:
            self.check(what)

    def count(self, what: str) -> None:
        """One unit of work (a part, an item of a part): check() once every CHECK_EVERY units,
        whichever loops they come from. For loops inside a message, where tick's per-loop
        index would check at every message (a clock read per message) or never (one message
        of 300,000 parts). About 75 ns a unit: a few ms on a 1 MB conversation's step."""
        self._uncounted -= 1
        if self._uncounted <= 0:
            self._uncounted = CHECK_EVERY
            self.check(what)

    def check(self, what: str) -> None:
        """Raises DeadlineExceeded when the caller's time is up or it has cancelled."""
        if self._cancelled():
            raise DeadlineExceeded(f"{what}: the caller cancelled the call")
        if self.expires_at is not None and time.monotonic() >= self.expires_at:
            raise DeadlineExceeded(f"{what}: the caller's deadline passed")

    def undo_unless_answered(self, what: str, undo: Callable[[], None]) -> None:
        """For work only the answer makes worth keeping (an output stored under an id that only
        the answer names): when the caller has gone already, undo() runs and DeadlineExceeded
        is raised; otherwise undo() runs later should the caller go before its answer is handed
        to the transport. undo must not raise: it runs where nobody would see the error."""
        if not self.expired() and (self._if_abandoned is None or self._if_abandoned(undo)):
            return
        undo()
        self.check(what)
        raise DeadlineExceeded(f"{what}: the caller has gone")  # seen by if_abandoned alone


NO_DEADLINE = Deadline()  # every thread counts on it: a race loses counts, and its check never raises


def ticking(compute: Callable, deadline: Deadline, what: str) -> Callable:
    """compute, checking the deadline once every CHECK_EVERY calls: for the per-message maps
    (memo.each) whose loop is not ours."""
    if deadline is NO_DEADLINE:
        return compute
    calls = 0

    def checked(x):
        nonlocal calls
        deadline.tick(calls, what)
        calls += 1
        return compute(x)
    return checked
