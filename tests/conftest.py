"""Shared fixtures: a real server on loopback (ephemeral ports) and its client stub; `impl`, each
implementation of the hot path in turn (the compiled module and its Python twin), for any suite;
`pki`, a CA with a server and a client certificate made by openssl at test time; `api`, a fake
Anthropic Messages API on loopback, its key in CONTEXTSVC_TEST_KEY; `openai_api`, a fake OpenAI
Chat Completions API the same way; `model_api`, each fake model
API in turn (Anthropic Messages, OpenAI Chat Completions), for what every model backend shares."""
from __future__ import annotations

import subprocess

import grpc
import pytest

from contextsvc import _native_py
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import FakeMessagesAPI
from helpers.fake_openai import FakeChatCompletionsAPI
from helpers.implementations import IMPL_NAMES, compiled
from helpers.server import start_server


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
