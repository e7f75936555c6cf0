"""A real server on loopback (ephemeral ports), and polling for what it does."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time

from contextsvc import config
from contextsvc.app import Server


def wait_for(predicate, seconds=20.0):
    """Polls until predicate() is true; the bound only keeps a broken build from hanging."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


class DisposableServer(Server):
    """A Server whose truncation store, a new temporary directory, is removed when it stops."""

    def stop(self, grace: float | None = None, drain: float = 0.0) -> None:
        super().stop(grace, drain)
        shutil.rmtree(self.cfg.truncation.directory, ignore_errors=True)


def start_server(truncation_overrides=None, summarizer_overrides=None, measure_overrides=None,
                 assemble_overrides=None, **server_overrides) -> DisposableServer:
    base = config.Config()
    store = tempfile.mkdtemp(prefix="contextsvc-test-store-")
    cfg = dataclasses.replace(
        base,
        server=dataclasses.replace(base.server, host="127.0.0.1", port=0, metrics_port=0, **server_overrides),
        truncation=dataclasses.replace(base.truncation, directory=store, **(truncation_overrides or {})),
        summarizer=dataclasses.replace(base.summarizer, **(summarizer_overrides or {})),
        measure=dataclasses.replace(base.measure, **(measure_overrides or {})),
        assemble=dataclasses.replace(base.assemble, **(assemble_overrides or {})),
    )
    return DisposableServer(cfg).start()
