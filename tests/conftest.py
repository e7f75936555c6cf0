"""Shared fixtures: a real server on loopback (ephemeral ports) and its client stub; `impl`, each
implementation of the hot path in turn (the compiled module and its Python twin), for any suite;
`pki`, a CA with a server and a client certificate made by openssl at test time; `api`, a fake
Anthropic Messages API on loopback, its key in CONTEXTSVC_TEST_KEY; `openai_api`, a fake OpenAI
Chat Completions API the same way; `model_api`, each fake model
API in turn (Anthropic Messages, OpenAI Chat Completions), for what every model backend shares.
Every run checks that the tests leave no temporary file behind (`temp_dir_left_empty`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import grpc
import pytest

from contextsvc import _native_py
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import FakeMessagesAPI
from helpers.fake_openai import FakeChatCompletionsAPI
from helpers.implementations import IMPL_NAMES, compiled
from helpers.server import start_server


@pytest.fixture(scope="session", autouse=True)
def temp_dir_left_empty(tmp_path_factory):
    """Points the temporary directory (tempfile's, and TMPDIR for the servers and tools the tests
    start) at a new directory of this run's own, and fails the run if anything is left in it at
    the end; the directory itself is removed either way. pytest's tmp_path directories stay
    where pytest keeps them (its basetemp, fixed before the switch)."""
    tmp_path_factory.getbasetemp()
    run_dir = tempfile.mkdtemp(prefix="contextsvc-tests-")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", run_dir)
        mp.setenv("TMPDIR", run_dir)
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken would copy its bundled files to $TMPDIR: read in place
        yield
    left = sorted(os.listdir(run_dir))
    shutil.rmtree(run_dir, ignore_errors=True)
    assert not left, f"the tests left these in the temporary directory: {left}"


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


@pytest.fixture(scope="module", params=IMPL_NAMES)
def impl(request):
    if request.param == "python":
        return _native_py
    try:
        return compiled()
    except ImportError as exc:
        pytest.fail(f"contextsvc._native_c is not importable ({exc}); build it, or set "
                    "CONTEXTSVC_NO_EXTENSIONS=1 to test the Python implementation alone")


@pytest.fixture()
def api(monkeypatch):
    monkeypatch.setenv("CONTEXTSVC_TEST_KEY", "sk-test-123")
    fake = FakeMessagesAPI()
    yield fake
    fake.close()


@pytest.fixture()
def openai_api(monkeypatch):
    monkeypatch.setenv("CONTEXTSVC_TEST_KEY", "sk-test-123")
    fake = FakeChatCompletionsAPI()
    yield fake
    fake.close()


@pytest.fixture(params=[FakeMessagesAPI, FakeChatCompletionsAPI], ids=lambda cls: cls.BACKEND)
def model_api(request, monkeypatch):
    monkeypatch.setenv("CONTEXTSVC_TEST_KEY", "sk-test-123")
    fake = request.param()
    yield fake
    fake.close()


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all CA-signed."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", *ext, cwd=d)
    return d
