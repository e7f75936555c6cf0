"""`Bulkhead`: calls to a remote store (Redis) kept apart from the rest of the service.

A store that hangs must cost the callers of the store RPCs a quick UNAVAILABLE, and nobody
else anything: Measure, Assemble, Prune and Compact never touch the store, and they share the
server's concurrency limit with the store RPCs. So every store call here
- runs on a thread of the bulkhead's own, at most ``max_concurrent`` at once; one more is
  answered UNAVAILABLE at once (a hung store then holds at most that many of the server's
  slots, and only until the deadline);
- is waited for at most ``timeout`` seconds, and never past its caller's deadline (less
  DEADLINE_MARGIN, so the answer reaches the caller in time): UNAVAILABLE when the bulkhead's
  own timeout passed, DEADLINE_EXCEEDED when the caller's deadline came first, while the
  thread waits out the socket timeout;
- may name an undo, run should the store answer after its caller stopped waiting (a write that
  landed although its caller was answered UNAVAILABLE or DEADLINE_EXCEEDED is nobody's);
- passes a circuit breaker: after ``failures_to_open`` calls in a row that got no answer (a
  refused or reset connection, the deadline passed), calls are answered UNAVAILABLE at once
  for ``open_seconds``; then one trial call goes through, and its answer closes the breaker or
  opens it again.
An error the store answered with (a refused write, a missing id) is an answer: it neither
counts towards opening the breaker nor is it retried here. A wait cut short by its caller's
deadline is no evidence either way (the store may only be slower than that caller's budget).
"""
from __future__ import annotations

import concurrent.futures
import time
from typing import Callable

from ..deadline import NO_DEADLINE, Deadline
from ..errors import DeadlineExceeded
from ..gate import Gate
from .store import StoreUnavailable

__all__ = ["Bulkhead", "NoAnswer", "DEADLINE_MARGIN"]

# What a store call leaves of its caller's deadline for the answer to travel back (the executor
# hand-off and the response on a loopback or LAN connection take well under this).
DEADLINE_MARGIN = 0.05


class NoAnswer(StoreUnavailable):
    """The store gave no answer (connection refused or reset, timed out): what the breaker
    counts."""


class Bulkhead:
    """Concurrency limit, deadline and circuit breaker (gate.Gate) around the calls to one store;
    ``name`` names it in every refusal ("Redis")."""

    def __init__(self, name: str, max_concurrent: int, timeout: float, failures_to_open: int,
                 open_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self._timeout = timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrent, thread_name_prefix="store")
        self._gate = Gate(name, max_concurrent, failures_to_open, open_seconds, StoreUnavailable, clock)

    def budget(self, what: str, deadline: Deadline = NO_DEADLINE) -> float:
        """Seconds a call may wait for the store: the bulkhead's timeout, or less when the
        caller's deadline (less DEADLINE_MARGIN) comes first; DeadlineExceeded when nothing is
        left of it."""
        remaining = deadline.remaining()
        if remaining is None or remaining - DEADLINE_MARGIN >= self._timeout:
            return self._timeout
        if remaining - DEADLINE_MARGIN <= 0:
            raise DeadlineExceeded(f"{what}: the caller's deadline leaves no time to ask {self.name}")
        return remaining - DEADLINE_MARGIN

    def call(self, what: str, deadline: Deadline, fn: Callable, *args,
             undo_if_late: Callable[[], None] | None = None, **kwargs):
        """fn(*args, **kwargs) on a bulkhead thread; StoreUnavailable naming the store when it is
        refused here, got no answer, or did not answer within the bulkhead's timeout;
        DeadlineExceeded naming it when the caller's deadline came first. undo_if_late() runs on
        the bulkhead's thread when fn returns after the wait for it was given up."""
        wait = self.budget(what, deadline)
        trial = self._gate.admit(what)
        try:
            future = self._pool.submit(self._run, fn, args, kwargs)
        except BaseException:
            self._gate.release()
            raise
        try:
            result = future.result(wait)
        except concurrent.futures.TimeoutError:
            if undo_if_late is not None:
                future.add_done_callback(_if_returned(undo_if_late))
            if wait < self._timeout:
                self._gate.undecided(trial)
                raise DeadlineExceeded(f"{what}: {self.name} gave no answer within the {wait:.3f} s its caller's "
                                       "deadline left") from None
            self._gate.failed(trial, f"no answer within {self._timeout:g} s")
            raise NoAnswer(f"{what}: {self.name} unreachable: no answer within {self._timeout:g} s") from None
        except NoAnswer as e:
            self._gate.failed(trial, str(e).removeprefix(f"{what}: "))
            raise
        except BaseException:
            self._gate.answered()  # the store answered, with an error
            raise
        self._gate.answered()
        return result

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, fn, args, kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            self._gate.release()  # held until the store answers or the socket times out


def _if_returned(undo: Callable[[], None]) -> Callable[[concurrent.futures.Future], None]:
    """A done callback: undo() once the future's call has returned. One that raised is left
    alone: the store refused it (nothing changed) or gave no answer (nor would it to an undo)."""
    def done(future: concurrent.futures.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            undo()
    return done
