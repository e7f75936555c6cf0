"""RedisStore over TLS (rediss://) to a real redis-server TLS port, with a CA and a server
certificate made here."""
from __future__ import annotations

import pytest
import redis

from contextsvc.truncation import TruncationSettings
from contextsvc.truncation.redis_store import RedisStore
from helpers.certificates import certificate, new_key, pem
from helpers.redis_server import RedisServer, free_port, refused_within


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    """(Redis with a TLS port as well as its plain one, the CA file, a CA that did not sign it)."""
    d = tmp_path_factory.mktemp("redis-tls")
    ca_key, server_key, other_key = (new_key() for _ in range(3))
    ca = certificate("contextsvc test CA", ca_key, ca=True)
    server = certificate("redis", server_key, issuer=ca.subject, issuer_key=ca_key)
    ca_file = pem(d / "ca.pem", ca)
    other_ca_file = pem(d / "other-ca.pem", certificate("another CA", other_key, ca=True))
    tls_port = free_port()
    # clients are not asked for a certificate: the store authenticates Redis, Redis's password
    # (or ACL user) authenticates the store
    r = RedisServer(d / "redis", "--tls-port", str(tls_port), "--tls-cert-file", pem(d / "server.pem", server),
                    "--tls-key-file", pem(d / "server.key", server_key), "--tls-ca-cert-file", ca_file,
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
    refused_within(lambda: store.put("never stored"), "Redis")
    store.close()


def test_the_ca_file_needs_a_tls_url():
    with pytest.raises(ValueError, match="redis_tls_ca_file"):
        TruncationSettings(backend="redis", redis_url="redis://h/0", redis_tls_ca_file="/ca.pem")
