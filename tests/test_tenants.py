"""Tool outputs scoped per tenant: each bearer token the server accepts (auth_token and the lines
of auth_tokens_file) is a tenant, and an output stored with one token is read with that token
only, through a real server on a real Redis."""
from __future__ import annotations

import dataclasses

import grpc
import pytest
import redis

from contextsvc import config
from contextsvc.rpc.security import bearer_tokens, tenant_of
from contextsvc.truncation import TruncationSettings
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.redis_server import RedisServer
from helpers.server import start_server

OPERATOR, ALICE, BOB = "operator-token", "alice-token-7f3a", "bob-token-91c2"
BIG = "".join(f"line {i:05d} of a tenant's build log\n" for i in range(5000))


@pytest.fixture(scope="module")
def tenants_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("tenants")
    (d / "tokens").write_text(f"# one tenant a line\n{ALICE}\n\n{BOB}\n")
    redis_server = RedisServer(d / "redis").start()
    s = start_server(truncation_overrides=dict(backend="redis", redis_url=redis_server.url,
                                               redis_key_prefix="{tenants}:"),
                     auth_token=OPERATOR, auth_tokens_file=str(d / "tokens"))
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    yield pb_grpc.ContextServiceStub(channel), redis_server
    channel.close()
    s.stop(grace=1)
    redis_server.stop()


def _as(token: str):
    return [("authorization", f"Bearer {token}")]


def _read(stub, output_id: str, token: str):
    return stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id, limit=2), metadata=_as(token), timeout=5)


def _refusal(stub, output_id: str, token: str) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as e:
        _read(stub, output_id, token)
    return e.value.code().name, e.value.details()


def test_an_output_is_read_by_its_own_tenant_only(tenants_server):
    stub, redis_server = tenants_server
    stored = {token: stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=BIG), metadata=_as(token),
                                             timeout=5).output_id
              for token in (OPERATOR, ALICE, BOB)}
    never_stored = stored[ALICE][:-4] + ("0000" if not stored[ALICE].endswith("0000") else "1111")
    for owner, output_id in stored.items():
        assert _read(stub, output_id, owner).text == "line 00000 of a tenant's build log\nline 00001 of a tenant's build log"
        for other in {OPERATOR, ALICE, BOB} - {owner}:
            code, details = _refusal(stub, output_id, other)
            # exactly what an id never stored gets: nothing tells the id exists
            assert (code, details.replace(output_id, never_stored)) == _refusal(stub, never_stored, other)
            assert code == "NOT_FOUND"
    # the keys name tenants by a digest: whoever reads Redis learns no token
    keys = [k.decode() for k in redis.Redis(port=redis_server.port).keys("{tenants}:*")]
    assert {f"{{tenants}}:{tenant_of(t)}/{i}" for t, i in stored.items()} <= set(keys)
    assert not [k for k in keys if any(t in k for t in (OPERATOR, ALICE, BOB))]


def test_tokens_outside_the_list_are_refused(tenants_server):
    stub, _ = tenants_server
    for metadata in (None, _as("carol-token"), _as(ALICE + "x"), [("authorization", ALICE)]):
        with pytest.raises(grpc.RpcError) as e:
            stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text="x"), metadata=metadata, timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata


def test_tokens_file_settings(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE}\n{BOB}\n{ALICE}\n")
    server = config.ServerConfig(auth_tokens_file=str(tokens))
    assert bearer_tokens(server) == (ALICE, BOB)
    assert bearer_tokens(dataclasses.replace(server, auth_token=OPERATOR)) == (OPERATOR, ALICE, BOB)
    redis_backend = TruncationSettings(backend="redis", redis_url="redis://h/0")
    assert config.Config(server=server, truncation=redis_backend).server.auth_tokens_file
    with pytest.raises(ValueError, match="needs truncation.backend"):
        config.Config(server=server)  # the local store keeps no tenants apart
    for text, message in (("# none\n\n", "no token in it"), (f"{ALICE}\ntwo words\n", "line 2")):
        tokens.write_text(text)
        with pytest.raises(ValueError, match=message):
            bearer_tokens(server)
