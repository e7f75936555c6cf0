"""`Gate`: how many calls to a remote dependency (Redis, an LLM summarizer) may be waiting on it
at once, and a circuit breaker that stops asking one that gives no answer.

Calls of the service that never touch the dependency share the server's concurrency limit with
those that do; a dependency that hangs must cost its own callers a quick refusal, and nobody
else anything. So a call
- takes one of ``max_concurrent`` slots, or is refused at once (a hung dependency then holds at
  most that many of the server's slots);
- passes a circuit breaker: after ``failures_to_open`` calls in a row that got no answer (a
  refused or reset connection, a timeout), calls are refused at once for ``open_seconds``; then
  one trial call goes through, and its answer closes the breaker or opens it again.
An error the dependency answered with is an answer: it closes the breaker. A wait cut short by
its caller's deadline is no evidence either way (the dependency may only be slower than that
caller's budget). Refusals are ``error`` (an errors.Unavailable) naming the dependency.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from .errors import Unavailable

__all__ = ["Gate"]


class Gate:
    def __init__(self, name: str, max_concurrent: int, failures_to_open: int, open_seconds: float,
                 error: type = Unavailable, clock: Callable[[], float] = time.monotonic,
                 setting: str = ""):
        self.name = name  # names the dependency in every refusal ("Redis")
        self._max = max_concurrent  # 0 = no bound
        self._failures_to_open = failures_to_open
        self._open_seconds = open_seconds
        self._error = error
        self._clock = clock
        self._setting = setting  # the setting that bounds the slots, for the refusal's message
        self._slots = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._lock = threading.Lock()
        self._failures = 0  # calls in a row with no answer
        self._last_failure = ""
        self._open_until: float | None = None  # set: open until then, half-open after
        self._trial = False  # half-open: the one call let through is in flight

    def admit(self, what: str) -> bool:
        """Takes a slot (give it back with release()); True when this call is the half-open
        breaker's trial; `error` (naming what, when given, then the dependency) when the breaker is
        open or every slot is taken."""
        trial = False
        about = f"{what}: {self.name}" if what else self.name
        with self._lock:
            if self._open_until is not None:
                left = self._open_until - self._clock()
                if left > 0 or self._trial:
                    raise self._error(
                        f"{about} unreachable: not tried, {self._failures} calls in a row "
                        f"got no answer ({self._last_failure}); next try in {max(left, 0):.1f} s")
                self._trial = trial = True
        if self._slots is not None and not self._slots.acquire(blocking=False):
            if trial:
                with self._lock:
                    self._trial = False
            raise self._error(f"{about} busy: {self._max} calls already waiting on it"
                              + (f" ({self._setting})" if self._setting else ""))
        return trial

    def release(self) -> None:
        """Gives back the slot admit() took, once the dependency answered or the call gave up
        waiting on it (a thread still waiting on its socket keeps the slot until then)."""
        if self._slots is not None:
            self._slots.release()

    def answered(self) -> None:
        with self._lock:
            self._failures = 0
            self._open_until = None
            self._trial = False

    def undecided(self, trial: bool) -> None:
        """A wait cut short by its caller: a half-open breaker lets the next call try."""
        if trial:
            with self._lock:
                self._trial = False

    def failed(self, trial: bool, why: str) -> None:
        """The call got no answer: counted towards opening the breaker (a trial's opens it)."""
        with self._lock:
            self._failures += 1
            self._last_failure = why
            if trial or self._failures >= self._failures_to_open:
                self._open_until = self._clock() + self._open_seconds
            if trial:
                self._trial = False
