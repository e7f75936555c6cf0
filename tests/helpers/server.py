"""A real server on loopback (ephemeral ports), and polling for what it does."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time

from contextsvc import config
from contextsvc.app import Server
from contextsvc.v1 import context_pb2 as pb
from helpers.metrics import scrape


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


class HeldAt:
    """Wraps fn so that each call waits, once entered, until the test sets `release`: a point of
    a server's work where a test makes something happen (its caller leaving, say)."""

    def __init__(self, fn):
        self._fn = fn
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, *args, **kwargs):
        self.entered.set()
        if not self.release.wait(60):
            raise TimeoutError("HeldAt: never released")
        try:
            return self._fn(*args, **kwargs)
        finally:
            self.returned.set()


def truncate_and_leave(server, stub, text: str, leaves: str, held: HeldAt, metadata=None) -> None:
    """A TruncateToolOutput of text whose caller leaves ("cancels", or its "deadline" passes)
    while the server's work is at held: released once the server has counted the call as its
    caller ended it, and waited for until held's call has returned."""
    code = {"cancels": "CANCELLED", "deadline": "DEADLINE_EXCEEDED"}[leaves]
    key = ("contextsvc_rpcs_total", (("code", code), ("method", "TruncateToolOutput")))
    before = scrape(server.metrics_port).get(key, 0)
    # the deadline leaves time to reach held (a parse and a truncation: milliseconds) on a loaded machine
    future = stub.TruncateToolOutput.future(pb.TruncateToolOutputRequest(text=text), metadata=metadata,
                                            timeout=60 if leaves == "cancels" else 3)
    assert held.entered.wait(30), "the call never reached the point held"
    if leaves == "cancels":
        future.cancel()
    assert wait_for(lambda: scrape(server.metrics_port).get(key, 0) == before + 1, 30), f"not counted {code}"
    held.release.set()
    assert held.returned.wait(30)


def stubs_with_and_without_memo():
    """A generator for a module fixture: yields the stubs of two servers, with the memo and with
    none (memo_bytes 0), whose bodies a test holds equal; stops them after."""
    import grpc
    from contextsvc.v1 import context_pb2_grpc as pb_grpc

    servers = [start_server(), start_server(memo_bytes=0)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{s.port}") for s in servers]
    yield [pb_grpc.ContextServiceStub(c) for c in channels]
    for c, s in zip(channels, servers):
        c.close()
        s.stop(grace=1)
