"""Shared fixtures: a real server on loopback (ephemeral ports) and its client stub."""
from __future__ import annotations

import dataclasses
import tempfile
import time

import grpc
import pytest

from contextsvc import config
from contextsvc.app import Server
from contextsvc.v1 import context_pb2_grpc as pb_grpc


def wait_for(predicate, seconds=20.0):
    """Polls until predicate() is true; the bound only keeps a broken build from hanging."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def start_server(truncation_overrides=None, summarizer_overrides=None, **server_overrides) -> Server:
    base = config.Config()
    store = tempfile.mkdtemp(prefix="contextsvc-test-store-")
    cfg = dataclasses.replace(
        base,
        server=dataclasses.replace(base.server, host="127.0.0.1", port=0, metrics_port=0, **server_overrides),
        truncation=dataclasses.replace(base.truncation, directory=store, **(truncation_overrides or {})),
        summarizer=dataclasses.replace(base.summarizer, **(summarizer_overrides or {})),
    )
    return Server(cfg).start()


@pytest.fixture(scope="module")
def server():
    s = start_server()
    yield s
    s.stop(grace=1)


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}",
                               options=[("grpc.max_send_message_length", 256 * 1024 * 1024)])
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.ContextServiceStub(channel)
