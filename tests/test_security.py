"""TLS, mTLS and the bearer token, over real sockets with certificates made at test time."""
from __future__ import annotations

import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helpers import convo
from helpers.server import start_server
from helpers.metrics import scrape
from contextsvc.v1 import context_pb2_grpc as pb_grpc


def _read(path):
    return path.read_bytes()


def _measure(channel, metadata=None):
    return pb_grpc.ContextServiceStub(channel).Measure(convo.measure_request(), timeout=10,
                                                        metadata=metadata)


def _tls_channel(pki, port, client_cert=False):
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(pki / "ca.pem"),
        private_key=_read(pki / "client.key") if client_cert else None,
        certificate_chain=_read(pki / "client.pem") if client_cert else None)
    return grpc.secure_channel(f"127.0.0.1:{port}", creds)


def test_tls_serves_and_rejects_plaintext(pki):
    s = start_server(tls_cert_file=str(pki / "server.pem"), tls_key_file=str(pki / "server.key"))
    try:
        with _tls_channel(pki, s.port) as ch:
            assert _measure(ch).estimate.tokens > 0
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                _measure(ch)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        s.stop(grace=1)


def test_mtls_requires_a_client_certificate(pki):
    s = start_server(tls_cert_file=str(pki / "server.pem"), tls_key_file=str(pki / "server.key"),
                     tls_client_ca_file=str(pki / "ca.pem"))
    try:
        with _tls_channel(pki, s.port, client_cert=True) as ch:
            assert _measure(ch).estimate.tokens > 0
        with _tls_channel(pki, s.port, client_cert=False) as ch:
            with pytest.raises(grpc.RpcError) as e:
                _measure(ch)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("source", ["inline", "file", "env"])
def test_bearer_token(source, tmp_path, monkeypatch):
    token = "s3cret-token"
    if source == "inline":
        kw = {"auth_token": token}
    elif source == "file":
        (tmp_path / "token").write_text(token + "\n")
        kw = {"auth_token_file": str(tmp_path / "token")}
    else:
        monkeypatch.setenv("CONTEXTSVC_TEST_TOKEN", token)
        kw = {"auth_token_env": "CONTEXTSVC_TEST_TOKEN"}
    s = start_server(**kw)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            assert _measure(ch, [("authorization", f"Bearer {token}")]).estimate.tokens > 0
            for metadata in (None, [("authorization", "Bearer wrong")],
                             [("authorization", token)]):
                with pytest.raises(grpc.RpcError) as e:
                    _measure(ch, metadata)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
                assert "bearer token" in e.value.details()
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        metrics = scrape(s.metrics_port)
        assert metrics[("contextsvc_rpcs_total", (("code", "UNAUTHENTICATED"), ("method", "Measure")))] == 3
        assert metrics[("contextsvc_rpcs_total", (("code", "OK"), ("method", "Measure")))] == 1
    finally:
        s.stop(grace=1)


def test_config_rejects_half_tls_settings():
    from contextsvc.config import ServerConfig
    with pytest.raises(ValueError, match="together"):
        ServerConfig(tls_cert_file="x.pem")
    with pytest.raises(ValueError, match="mTLS"):
        ServerConfig(tls_client_ca_file="ca.pem")


def test_serve_refuses_to_start_without_the_configured_token(tmp_path):
    import os
    import sys

    import contextsvc
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nport = 0\nmetrics_port = 0\nauth_token_env = "CONTEXTSVC_UNSET_TOKEN"\n')
    root = os.path.dirname(os.path.dirname(contextsvc.__file__))
    env = {k: v for k, v in os.environ.items() if k != "CONTEXTSVC_UNSET_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-m", "contextsvc", "serve", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "CONTEXTSVC_UNSET_TOKEN is unset" in out.stderr, out.stderr


def _get(url, token=None):
    """(status, body) of a GET, errors included."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_start_line_names_the_guards_and_metrics_ask_for_the_token(pki, tmp_path):
    """With TLS and a token, the start line says what guards each port, /metrics asks for the
    token when metrics_auth is on, and /healthz stays open for HTTP health checks."""
    from helpers.processes import launch, stop

    token = "m3trics-token"
    proc, port, metrics_port, _ = launch(tmp_path=tmp_path, server_toml=(
        f'shutdown_grace_seconds = 20.0\ntls_cert_file = "{pki / "server.pem"}"\n'
        f'tls_key_file = "{pki / "server.key"}"\nauth_token = "{token}"\nmetrics_auth = true'))
    try:
        line = next(x for x in proc.log if "serving gRPC" in x)
        assert f"127.0.0.1:{port} (TLS, bearer token)" in line, line
        assert f"127.0.0.1:{metrics_port}/metrics (bearer token, /healthz open)" in line, line
        base = f"http://127.0.0.1:{metrics_port}"
        assert _get(f"{base}/metrics")[0] == 401
        assert _get(f"{base}/metrics", "wrong")[0] == 401
        status, text = _get(f"{base}/metrics", token)
        assert status == 200 and "contextsvc_rpcs" in text
        assert _get(f"{base}/healthz") == (200, "SERVING\n")
    finally:
        assert stop(proc) == 0


def test_metrics_and_healthz_bind_their_own_address(tmp_path):
    import re
    import socket

    from helpers.processes import launch, stop

    line = re.compile(r"serving gRPC on 127\.0\.0\.1:(\d+) \(plaintext, no token\), metrics "
                      r"http://127\.0\.0\.2:(\d+)/metrics \(open, /healthz open\), hot path (\w+)")
    proc, port, metrics_port, _ = launch(tmp_path=tmp_path, start_line=line,
                                         server_toml='shutdown_grace_seconds = 20.0\nmetrics_host = "127.0.0.2"')
    try:
        assert _get(f"http://127.0.0.2:{metrics_port}/healthz") == (200, "SERVING\n")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", metrics_port), timeout=5)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert _measure(ch).estimate.tokens > 0
    finally:
        assert stop(proc) == 0


def test_metrics_auth_needs_a_token():
    from contextsvc.config import ServerConfig

    with pytest.raises(ValueError, match="metrics_auth"):
        ServerConfig(metrics_auth=True)
    assert ServerConfig(metrics_auth=True, auth_token_env="CONTEXTSVC_TOKEN").metrics_bind == "127.0.0.1"
