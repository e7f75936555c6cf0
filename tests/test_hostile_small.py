"""Issue 16, smaller items over a real server: metrics of abandoned and oversized calls (13),
bad TLS files and unsendable tokens as config errors (14), garbage sent to health and
reflection (15)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import grpc
import pytest

from helpers import convo
from helpers.server import start_server, wait_for
from contextsvc.v1 import context_pb2 as pb
from helpers.metrics import scrape
from helpers.rpc import GARBAGE


def count(server, method, code):
    return scrape(server.metrics_port).get(("contextsvc_rpcs_total", (("code", code), ("method", method))), 0)


def slow_measure(animal="fox"):
    """An exact count of 25 MB of prose: seconds of work (about 2 s on a quick machine). Each
    animal makes other text: exact counts are cached, and a second call on the same text
    would finish from the first one's pieces."""
    conv = convo.small_conversation()
    conv.messages[2].parts[0].text.text = f"the quick brown {animal} jumps over the lazy dog. " * 560_000
    return convo.measure_request(conv, exact=True)


# ---- 13. metrics ---------------------------------------------------------------------------------

def test_abandoned_calls_are_not_counted_ok():
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}",
                                   options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            measure = ch.unary_unary("/contextsvc.v1.ContextService/Measure",
                                     request_serializer=pb.MeasureRequest.SerializeToString)
            with pytest.raises(grpc.RpcError) as e:
                measure(slow_measure("fox"), timeout=1.0)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            cancelled = measure.future(slow_measure("cat"))
            # cancelled once the server has read it (the request-size histogram counts it then)
            read = ("contextsvc_request_bytes_count", (("method", "Measure"),))
            assert wait_for(lambda: scrape(s.metrics_port).get(read, 0) == 2)
            time.sleep(0.3)
            cancelled.cancel()
            done = lambda: (count(s, "Measure", "DEADLINE_EXCEEDED") + count(s, "Measure", "CANCELLED")
                            + count(s, "Measure", "OK")) == 2
            assert wait_for(done, seconds=25)
            assert count(s, "Measure", "OK") == 0
            assert count(s, "Measure", "DEADLINE_EXCEEDED") == 1
            assert count(s, "Measure", "CANCELLED") == 1
    finally:
        s.stop(grace=1)


def test_response_over_the_size_limit_is_refused_and_counted_so():
    s = start_server(max_response_bytes=200_000)
    try:
        conv = convo.small_conversation()
        conv.messages[2].parts[0].text.text = "word " * 60_000  # a 300 KB body
        request = pb.AssembleRequest(conversation=conv, model=convo.model(), step=1)
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            assemble = ch.unary_unary("/contextsvc.v1.ContextService/Assemble",
                                      request_serializer=pb.AssembleRequest.SerializeToString)
            with pytest.raises(grpc.RpcError) as e:
                assemble(request, timeout=20)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_response_bytes" in e.value.details(), e.value.details()
        assert wait_for(lambda: count(s, "Assemble", "RESOURCE_EXHAUSTED") == 1)
        assert count(s, "Assemble", "OK") == 0
    finally:
        s.stop(grace=1)


# ---- 14. config errors ---------------------------------------------------------------------------

def serve_config(tmp_path, server_toml, env=None):
    path = tmp_path / "contextsvc.toml"
    path.write_text(f"[server]\n{server_toml}\n[truncation]\ndirectory = \"{tmp_path / 'store'}\"\n",
                    encoding="utf-8")
    cmd = [sys.executable, "-m", "contextsvc", "serve", "--port", "0", "--metrics-port", "0", "--config", str(path)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err
    return proc.returncode, err


@pytest.mark.parametrize("case", ["garbage-cert", "garbage-key", "key-of-another-cert", "garbage-ca",
                                  "non-ascii-token", "whitespace-token", "token-with-space",
                                  "non-ascii-token-env", "missing-cert", "missing-key", "missing-ca",
                                  "missing-token-file"])
def test_bad_tls_files_and_unsendable_tokens_are_config_errors(tmp_path, pki, case):
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    env = None
    cert, key, ca = pki / "server.pem", pki / "server.key", pki / "ca.pem"
    toml = {
        "garbage-cert": f'tls_cert_file = "{garbage}"\ntls_key_file = "{key}"',
        "garbage-key": f'tls_cert_file = "{cert}"\ntls_key_file = "{garbage}"',
        "key-of-another-cert": f'tls_cert_file = "{ca}"\ntls_key_file = "{key}"',
        "garbage-ca": f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\ntls_client_ca_file = "{garbage}"',
        "non-ascii-token": 'auth_token = "tökén"',
        "whitespace-token": 'auth_token = "   "',
        "token-with-space": 'auth_token = "two words"',
        "non-ascii-token-env": 'auth_token_env = "CONTEXTSVC_TEST_TOKEN"',
        "missing-cert": f'tls_cert_file = "{tmp_path / "gone.pem"}"\ntls_key_file = "{key}"',
        "missing-key": f'tls_cert_file = "{cert}"\ntls_key_file = "{tmp_path / "gone.key"}"',
        "missing-ca": f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\ntls_client_ca_file = "{tmp_path / "gone"}"',
        "missing-token-file": f'auth_token_file = "{tmp_path / "gone"}"',
    }[case]
    if case == "non-ascii-token-env":
        env = dict(os.environ, CONTEXTSVC_TEST_TOKEN="jeton-été")
    code, err = serve_config(tmp_path, toml, env)
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("contextsvc: config: [server]"), err
    if case.startswith("missing-"):  # the setting and the path (it said "[Errno 2] No such file or directory")
        setting = next(x.split(" = ")[0] for x in toml.splitlines() if "gone" in x)
        assert f"{setting} {tmp_path}" in lines[0] and "No such file" in lines[0], err


# ---- 15. garbage to health and reflection --------------------------------------------------------

@pytest.mark.parametrize("method,kind", [
    ("/grpc.health.v1.Health/Check", "unary"),
    ("/grpc.health.v1.Health/Watch", "server-stream"),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "bidi"),
])
def test_garbage_to_health_and_reflection_is_invalid_argument(method, kind):
    s = start_server()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            for data in GARBAGE:
                with pytest.raises(grpc.RpcError) as e:
                    if kind == "unary":
                        ch.unary_unary(method)(data, timeout=5)
                    elif kind == "server-stream":
                        list(ch.unary_stream(method)(data, timeout=5))
                    else:
                        list(ch.stream_stream(method)(iter([data]), timeout=5))
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (data, e.value.details())
                assert e.value.details().startswith("request: not a valid grpc."), e.value.details()
            from grpc_health.v1 import health_pb2, health_pb2_grpc
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        s.stop(grace=1)
