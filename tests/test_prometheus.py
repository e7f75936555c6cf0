"""A real Prometheus (Debian's `prometheus`) scrapes a real server; the dashboard's queries run on it.

The README's test command installs Prometheus (.ci/deps); a missing binary fails these tests
rather than skipping them.
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import grpc
import pytest

from helpers import convo
from helpers.server import start_server
from contextsvc.v1 import context_pb2_grpc as pb_grpc

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "contextsvc.json"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
# what Grafana substitutes before it sends a query
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


def _binary(name):
    path = shutil.which(name)
    assert path, f"{name} not installed: run .ci/deps (the README's test command does)"
    return path


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tmp, target_port):
        self.port = _free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: contextsvc\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(tmp / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [_binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def query(self, expr, at=None):
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def value(self, expr):
        return self.value_at(expr, None)

    def value_at(self, expr, at):
        answer = self.query(expr, at)
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            v = self.value(expr)
            if v is not None and predicate(v):
                return v
            assert time.monotonic() < deadline, f"{expr} = {v}"
            time.sleep(0.3)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    server = start_server()
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), server.metrics_port)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield server, prom, pb_grpc.ContextServiceStub(channel)
    channel.close()
    prom.stop()
    server.stop(grace=1)


def _dashboard_exprs():
    dash = json.loads(DASHBOARD.read_text())
    exprs = {}
    for panel in dash["panels"]:
        for target in panel["targets"]:
            exprs.setdefault(panel["title"], []).append(target["expr"])
    return exprs


def _as_sent_by_grafana(expr):
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def _measure(stub, overflow):
    conversation = convo.small_conversation()
    if overflow:
        conversation.messages[1].usage.input = 500_000  # past the 200k context
    stub.Measure(convo.measure_request(conversation), timeout=10)


def test_overflow_rate_from_the_dashboard_reads_back_through_prometheus(stack):
    _, prom, stub = stack
    # phase 1: four overflowing requests create both series; wait for a scrape holding all four
    for _ in range(4):
        _measure(stub, overflow=True)
    prom.wait_for("sum(contextsvc_measure_requests_total)", lambda v: v == 4)
    baseline = prom.value("max(timestamp(contextsvc_measure_requests_total))")
    # phase 2: 8 measured, 2 of them overflowing
    for i in range(8):
        _measure(stub, overflow=i in (2, 5))
    prom.wait_for("sum(contextsvc_measure_requests_total)", lambda v: v == 12)
    prom.wait_for("sum(contextsvc_measure_overflowed_total)", lambda v: v == 6)
    now = prom.value("max(timestamp(contextsvc_measure_requests_total))") + 0.5
    (overall, _by_provider) = _dashboard_exprs()["Overflow rate (measured requests that overflowed)"]
    # a window opening just before the baseline scrape: it sees phase 2 alone, so 2 / 8
    window = f"{round((now - baseline + 0.2) * 1000)}ms"
    rate = prom.value_at(overall.replace("$__rate_interval", window), now)
    assert rate == pytest.approx(0.25)


def test_every_dashboard_expression_is_valid_promql(stack):
    _, prom, stub = stack
    _measure(stub, overflow=False)
    exprs = [e for group in _dashboard_exprs().values() for e in group]
    assert len(exprs) >= 12
    for expr in exprs:
        answer = prom.query(_as_sent_by_grafana(expr))
        assert answer["status"] == "success", (expr, answer)
    # and every metric a panel reads is one the service really exports
    with urllib.request.urlopen(f"http://127.0.0.1:{stack[0].metrics_port}/metrics", timeout=5) as r:
        exported = r.read().decode()
    families = {m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", exported, re.M)}
    for expr in exprs:
        for name in re.findall(r"\bcontextsvc_[a-z_]+", expr):
            histogram = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in families or histogram in families, f"{name} (in {expr}) is not exported"


def test_shipped_prometheus_config_is_valid():
    out = subprocess.run([_binary("promtool"), "check", "config", str(SCRAPE_CONFIG)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_is_importable_grafana_json():
    dash = json.loads(DASHBOARD.read_text())
    assert isinstance(dash["schemaVersion"], int) and dash["title"] and dash["uid"]
    assert [v["type"] for v in dash["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"] and p["gridPos"]["w"] > 0
