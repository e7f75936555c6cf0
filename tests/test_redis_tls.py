"""RedisStore over TLS (rediss://) to a real redis-server TLS port, with a CA and a server
certificate made here."""
from __future__ import annotations

import datetime
import ipaddress
import time

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from contextsvc.truncation import StoreUnavailable, TruncationSettings
from contextsvc.truncation.redis_store import RedisStore
from helpers.redis_server import RedisServer, free_port


def _certificate(subject: str, key, issuer: x509.Name | None = None, issuer_key=None, ca: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _pem(path, *objects) -> str:
    with open(path, "wb") as f:
        for o in objects:
            f.write(o.public_bytes(serialization.Encoding.PEM) if isinstance(o, x509.Certificate)
                    else o.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
    return str(path)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    """(Redis with a TLS port as well as its plain one, the CA file, a CA that did not sign it)."""
    d = tmp_path_factory.mktemp("redis-tls")
    ca_key, server_key, other_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("contextsvc test CA", ca_key, ca=True)
    server = _certificate("redis", server_key, issuer=ca.subject, issuer_key=ca_key)
    ca_file = _pem(d / "ca.pem", ca)
    other_ca_file = _pem(d / "other-ca.pem", _certificate("another CA", other_key, ca=True))
    tls_port = free_port()
    # clients are not asked for a certificate: the store authenticates Redis, Redis's password
    # (or ACL user) authenticates the store
    r = RedisServer(d / "redis", "--tls-port", str(tls_port), "--tls-cert-file", _pem(d / "server.pem", server),
                    "--tls-key-file", _pem(d / "server.key", server_key), "--tls-ca-cert-file", ca_file,
                    "--tls-auth-clients", "no").start()
    r.tls_port = tls_port
    yield r, ca_file, other_ca_file
    r.stop()


def _store(url: str, ca_file: str = "") -> RedisStore:
    return RedisStore(TruncationSettings(backend="redis", redis_url=url, redis_tls_ca_file=ca_file,
                                         redis_key_prefix="{tls}:"))


def test_outputs_round_trip_over_tls_with_the_ca_file(tls_redis):
    server, ca_file, _ = tls_redis
    store = _store(f"rediss://127.0.0.1:{server.tls_port}/0", ca_file)
    text = "över TLS ✓\n" * 1000
    output_id = store.put(text)
    assert store.get(output_id) == text
    # the same Redis, read on its plain port: the output went there
    assert redis.Redis(port=server.port).get("{tls}:" + output_id) == text.encode()
    store.close()


@pytest.mark.parametrize("url, ca", [("rediss://127.0.0.1:{port}/0", "other"),  # not signed by that CA
                                     ("rediss://localhost:{port}/0", "ca"),  # certificate names 127.0.0.1 only
                                     ("redis://127.0.0.1:{port}/0", "")])  # plain text to a TLS port
def test_a_redis_whose_certificate_is_not_trusted_is_unavailable(tls_redis, url, ca):
    server, ca_file, other_ca_file = tls_redis
    store = _store(url.format(port=server.tls_port), {"ca": ca_file, "other": other_ca_file, "": ""}[ca])
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="Redis"):
        store.put("never stored")
    assert time.monotonic() - started < 2.0
    store.close()


def test_the_ca_file_needs_a_tls_url():
    with pytest.raises(ValueError, match="redis_tls_ca_file"):
        TruncationSettings(backend="redis", redis_url="redis://h/0", redis_tls_ca_file="/ca.pem")
