"""`CleanupScheduler`: runs a store's cleanup on a daemon thread, for any `Store`."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from .settings import TruncationSettings
from .store import CleanupReport, Store

__all__ = ["CleanupScheduler"]

log = logging.getLogger(__name__)


class CleanupScheduler:
    """Runs ``store.cleanup`` on a daemon thread: first after ``cleanup_first_delay_seconds``,
    then every ``cleanup_interval_seconds``. A failing run is logged and the schedule goes on.
    ``clock`` gives the ``now`` passed to each cleanup (epoch seconds).
    """

    def __init__(
        self,
        store: Store,
        settings: TruncationSettings,
        clock: Callable[[], float] = time.time,
        on_report: Callable[[CleanupReport], None] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._on_report = on_report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.runs = 0  # completed runs, successful or not
        self.failures = 0
        self.last_report: CleanupReport | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="contextsvc-tool-output-cleanup", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait for it (a run in progress finishes first)."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def run_once(self) -> CleanupReport | None:
        try:
            report = self._store.cleanup(self._clock())
        except Exception:
            self.failures += 1
            log.exception("tool-output cleanup failed")
            report = None
        else:
            self.last_report = report
            if report.expired or report.evicted or report.temp_removed:
                log.info(
                    "tool-output cleanup: %d expired, %d evicted, %d temp files, %d bytes freed",
                    report.expired, report.evicted, report.temp_removed, report.bytes_freed,
                )
            if self._on_report is not None:
                try:
                    self._on_report(report)
                except Exception:
                    log.exception("cleanup on_report hook failed")
        self.runs += 1
        return report

    def _run(self) -> None:
        delay = self._settings.cleanup_first_delay_seconds
        while not self._stop.wait(delay):
            self.run_once()
            delay = self._settings.cleanup_interval_seconds
