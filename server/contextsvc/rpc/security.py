"""Transport security and caller authentication: TLS/mTLS credentials and a bearer-token check.

Both are optional and off by default (the server binds loopback). Health checks stay open so
load balancers and Kubernetes probes need no secret.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import ssl

import grpc

from ..config import check_token


def server_credentials(cfg) -> grpc.ServerCredentials | None:
    """TLS credentials from [server] tls_* paths, or None for plaintext."""
    if not cfg.tls_cert_file:
        return None
    key = _file("tls_key_file", cfg.tls_key_file, binary=True)
    cert = _file("tls_cert_file", cfg.tls_cert_file, binary=True)
    ca = _file("tls_client_ca_file", cfg.tls_client_ca_file, binary=True) if cfg.tls_client_ca_file else None
    _check_pem(cfg)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


def _file(setting: str, path: str, binary: bool = False):
    """The contents of a file a [server] setting names; a config error naming both when it
    cannot be read."""
    try:
        with open(path, "rb") if binary else open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"[server] {setting} {path}: {e.strerror or e}") from None


def _check_pem(cfg) -> None:
    """grpc takes any bytes here and fails later with "Failed to bind to address": the files
    are loaded once by Python's ssl first, so a bad one is a config error naming it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    except ssl.SSLError as e:
        raise ValueError(f"[server] tls_cert_file {cfg.tls_cert_file} / tls_key_file {cfg.tls_key_file}: "
                         f"not a PEM certificate chain and its private key ({e.reason or e})") from None
    if cfg.tls_client_ca_file:
        try:
            ctx.load_verify_locations(cfg.tls_client_ca_file)
        except ssl.SSLError as e:
            raise ValueError(f"[server] tls_client_ca_file {cfg.tls_client_ca_file}: "
                             f"not a PEM CA bundle ({e.reason or e})") from None


def bearer_token(cfg) -> str:
    """The configured token: auth_token, else the file auth_token_file, else the env auth_token_env."""
    if cfg.auth_token:
        return cfg.auth_token
    if cfg.auth_token_file:
        token = _file("auth_token_file", cfg.auth_token_file).strip()
        if not token:
            raise ValueError(f"[server] auth_token_file {cfg.auth_token_file}: empty")
        return check_token(token, f"[server] auth_token_file {cfg.auth_token_file}")
    if cfg.auth_token_env:
        token = os.environ.get(cfg.auth_token_env, "").strip()
        if not token:
            raise ValueError(f"[server] auth_token_env: ${cfg.auth_token_env} is unset or empty")
        return check_token(token, f"[server] auth_token_env ${cfg.auth_token_env}")
    return ""


def bearer_tokens(cfg) -> tuple[str, ...]:
    """Every token a caller may present: bearer_token's, then those of auth_tokens_file."""
    single = bearer_token(cfg)
    listed = []
    if cfg.auth_tokens_file:
        where = f"[server] auth_tokens_file {cfg.auth_tokens_file}"
        for n, line in enumerate(_file("auth_tokens_file", cfg.auth_tokens_file).splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                listed.append(check_token(line, f"{where} line {n}"))
        if not listed:
            raise ValueError(f"{where}: no token in it")
    return tuple(dict.fromkeys(([single] if single else []) + listed))


def tenant_of(token: str) -> str:
    """The tenant a token names, as the store keys its outputs: a digest, so that whoever reads
    the store's keys learns no token."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


class TokenCheck:
    """The bearer tokens a guarded call may carry ("authorization: Bearer <token>"), each naming
    a tenant."""

    def __init__(self, tokens):
        self._expected = [(f"Bearer {t}".encode(), tenant_of(t)) for t in tokens]

    def check(self, metadata) -> tuple[str | None, str]:
        """(why the call is refused, or None when its token is right; the tenant it names)."""
        given = ""
        for key, value in metadata or ():
            if key == "authorization":
                given = value if isinstance(value, str) else value.decode("latin-1")
                break
        if not given:
            return "authorization: bearer token missing", ""
        raw = given.encode("utf-8", "surrogateescape")
        tenant = ""
        # constant-time, and every token compared: how long a refusal takes tells nothing of
        # which token, or what prefix of one, matched
        for expected, name in self._expected:
            if hmac.compare_digest(raw, expected):
                tenant = name
        return (None, tenant) if tenant else ("authorization: bearer token rejected", "")

    def refusal(self, metadata) -> str | None:
        """Why the call is refused, or None when its token is right."""
        return self.check(metadata)[0]
