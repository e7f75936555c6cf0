"""Transport security and caller authentication: TLS/mTLS credentials and a bearer-token check.

Both are optional and off by default (the server binds loopback). Health checks stay open so
load balancers and Kubernetes probes need no secret.
"""
from __future__ import annotations

import hmac
import os

import grpc


def server_credentials(cfg) -> grpc.ServerCredentials | None:
    """TLS credentials from [server] tls_* paths, or None for plaintext."""
    if not cfg.tls_cert_file:
        return None
    with open(cfg.tls_key_file, "rb") as f:
        key = f.read()
    with open(cfg.tls_cert_file, "rb") as f:
        cert = f.read()
    ca = None
    if cfg.tls_client_ca_file:
        with open(cfg.tls_client_ca_file, "rb") as f:
            ca = f.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


def bearer_token(cfg) -> str:
    """The configured token: auth_token, else the file auth_token_file, else the env auth_token_env."""
    if cfg.auth_token:
        return cfg.auth_token
    if cfg.auth_token_file:
        with open(cfg.auth_token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"[server] auth_token_file {cfg.auth_token_file}: empty")
        return token
    if cfg.auth_token_env:
        token = os.environ.get(cfg.auth_token_env, "").strip()
        if not token:
            raise ValueError(f"[server] auth_token_env: ${cfg.auth_token_env} is unset or empty")
        return token
    return ""


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls to the guarded service without "authorization: Bearer <token>"."""

    def __init__(self, token: str, service_prefix: str):
        self._expected = f"Bearer {token}".encode()
        self._prefix = service_prefix  # health and reflection stay open

    def intercept_service(self, continuation, details):
        if not details.method.startswith(self._prefix):
            return continuation(details)
        given = ""
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value if isinstance(value, str) else value.decode("latin-1")
                break
        # constant-time: the comparison takes as long whatever prefix of the token matched
        if given and hmac.compare_digest(given.encode(), self._expected):
            return continuation(details)
        reason = "authorization: bearer token missing" if not given else "authorization: bearer token rejected"
        return _deny(reason)


def _deny(reason: str):
    def abort(_request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    # the request is never read: its bytes pass through undecoded
    return grpc.unary_unary_rpc_method_handler(abort, request_deserializer=lambda data: data)
