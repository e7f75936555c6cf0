"""Prometheus metrics (docs/design.md §8). One registry per server, served over HTTP.

Label sets are bounded: method and code come from the service definition and the gRPC status
enum, never from request data.
"""
from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from typing import Callable
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from .http_server import HttpServer

# Latency buckets from 0.5 ms (a small Measure) to 60 s (an LLM summary).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30, 60)
# Request sizes from 1 KiB to the 64 MiB default limit.
SIZE_BUCKETS = tuple(1024 * 4 ** i for i in range(9))  # 1 KiB to 64 MiB (the default request limit)


HEALTH_PATH = "/healthz"

# the memo's counts reach its series at most this often (Metrics.sync_memo)
MEMO_SYNC_SECONDS = 1.0

# Previous cache states whose break this process has counted, newest kept: the Assembles of one
# step come seconds apart, far fewer other sessions step in between. 16-byte keys, ~3 MB in all.
COUNTED_STATES = 16_384


class _CountedStates:
    """previous_cache_state digests a prefix break was counted against, LRU-bounded.

    Every Assemble of a step passes the state of the body sent last; a step that prunes or
    compacts assembles again against the same state, and only the body sent breaks the cache.
    A change of the cached prefix between two sent bodies is so counted once, at the first
    Assemble that shows it (later ones move only further from that state)."""

    def __init__(self, size: int = COUNTED_STATES):
        self._size = size
        self._seen: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def first(self, state: bytes) -> bool:
        """True the first time state is given (since it was last evicted)."""
        key = hashlib.sha256(state).digest()[:16]
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
            return True


class _Endpoint:
    """Serves self.registry at /metrics, and with a health callable the health at /healthz."""

    registry: CollectorRegistry
    _http: HttpServer | None = None

    def serve(self, host: str, port: int, health: Callable[[str], bool] | None = None,
              token: str = "") -> int:
        """Starts the /metrics endpoint; returns the bound port (port 0 picks a free one).

        health(service) -> serving: answers GET /healthz[?service=NAME] with 200 when serving,
        503 otherwise, for proxies whose active checks speak HTTP/1 but not gRPC (HAProxy).
        token: every path but /healthz asks for "authorization: Bearer <token>"."""
        app = make_wsgi_app(self.registry)
        if token:
            app = _with_token(app, token)
        if health is not None:
            app = _with_health(app, health)
        self._http = HttpServer(app)
        try:
            return self._http.start(host, port)
        except OSError as e:
            raise OSError(f"cannot serve metrics on {host or '*'}:{port} (server.metrics_port): "
                          f"{e.strerror or e}") from None

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()
            self._http = None


def _with_token(app, token: str):
    """The WSGI app, answering 401 to a request without the bearer token (compared in constant
    time, as the gRPC check does)."""
    expected = f"Bearer {token}".encode()

    def wsgi(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        body = b"a bearer token is required (authorization: Bearer <token>)\n"
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("Content-Length", str(len(body))),
                                            ("WWW-Authenticate", 'Bearer realm="contextsvc"')])
        return [body]

    return wsgi


def _with_health(app, health: Callable[[str], bool]):
    """The WSGI app, with HEALTH_PATH answered from health() instead."""

    def wsgi(environ, start_response):
        if environ.get("PATH_INFO") != HEALTH_PATH:
            return app(environ, start_response)
        service = parse_qs(environ.get("QUERY_STRING", "")).get("service", [""])[0]
        try:
            serving = health(service)
        except Exception:
            serving = False
        status = "200 OK" if serving else "503 Service Unavailable"
        body = b"SERVING\n" if serving else b"NOT_SERVING\n"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
        return [body] if environ.get("REQUEST_METHOD") != "HEAD" else [b""]

    return wsgi


class MethodMetrics:
    """The series one RPC method records into, looked up once per method and status code rather
    than by label at every call (a lookup takes the metric's lock). A series appears at its first
    record, as with labels(). Used from the transport's one loop thread."""
    __slots__ = ("_metrics", "_method", "_request_bytes", "_by_code", "_in_flight")

    def __init__(self, metrics: "Metrics", method: str):
        self._metrics = metrics
        self._method = method
        self._request_bytes = None
        self._by_code: dict = {}
        self._in_flight = metrics.in_flight.labels(method)

    def started(self) -> None:
        self._in_flight.inc()

    def finished(self, _context=None) -> None:
        self._in_flight.dec()

    def request(self, nbytes: int) -> None:
        if self._request_bytes is None:
            self._request_bytes = self._metrics.request_bytes.labels(self._method)
        self._request_bytes.observe(nbytes)

    def call(self, code: str, seconds: float) -> None:
        series = self._by_code.get(code)
        if series is None:
            m = self._metrics
            series = self._by_code[code] = (m.rpcs.labels(self._method, code),
                                            m.latency.labels(self._method, code))
        series[0].inc()
        series[1].observe(seconds)
        self._metrics.sync_memo()


class Metrics(_Endpoint):
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpcs = Counter("contextsvc_rpcs", "RPCs handled, by method and status code.",
                            ["method", "code"], registry=r)
        self.in_flight = Gauge("contextsvc_rpcs_in_flight",
                               "Calls begun and not yet over (their status sent, or the call ended), "
                               "by method: what a replica killed now would fail.", ["method"], registry=r,
                               multiprocess_mode="livesum")  # a killed serving process's calls are over
        self.latency = Histogram("contextsvc_rpc_duration_seconds",
                                 "RPC handling time, by method and status code.",
                                 ["method", "code"], buckets=LATENCY_BUCKETS, registry=r)
        self.request_bytes = Histogram("contextsvc_request_bytes", "Serialized request size, by method.",
                                       ["method"], buckets=SIZE_BUCKETS, registry=r)
        self.measured = Counter("contextsvc_measure_requests",
                                "Measured requests; the overflow rate is overflowed / measured.",
                                ["provider"], registry=r)
        self.overflowed = Counter("contextsvc_measure_overflowed",
                                  "Measured requests whose projection reached the compaction limit.",
                                  ["provider"], registry=r)
        self._children: dict = {}  # (metric, label) -> its child series (_series)
        self.prune_runs = Counter("contextsvc_prune_runs", "Prune runs, by reason and outcome (acted or noop).",
                                  ["reason", "outcome"], registry=r)
        self.prune_tokens = Counter("contextsvc_prune_tokens_freed", "Estimated tokens freed by prune, by reason.",
                                    ["reason"], registry=r)
        self.compactions = Counter("contextsvc_compaction_attempts",
                                   "Compact calls, by outcome and the summarizer that answered.",
                                   ["outcome", "backend"], registry=r)
        self.summarizer_fallbacks = Counter("contextsvc_summarizer_fallbacks",
                                            "Summaries the offline summarizer made after the configured "
                                            "backend failed.", registry=r)
        self.retention = Histogram("contextsvc_summary_retention_ratio",
                                   "Share of the head's verbatim items (paths, commands, errors, "
                                   "identifiers) found verbatim in the new summary.",
                                   buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
                                   registry=r)
        self.breakpoints = Counter("contextsvc_cache_breakpoints", "Cache breakpoints placed, by provider.",
                                   ["provider"], registry=r)
        self.prefix_breaks = Counter("contextsvc_prefix_breaks",
                                     "Changes of the cached prefix since the body last sent (its "
                                     "cache_state passed back), once per such state however often a "
                                     "step assembles again, by provider, the segment of the first "
                                     "changed element and the cause.",
                                     ["provider", "segment", "cause"], registry=r)
        self._broken_states = _CountedStates()
        self.payload_guard = Counter("contextsvc_payload_guard_trips",
                                     "Assembles over REQUEST_PRUNE_BYTES, by outcome: under (the guard "
                                     "got them under) or still-over.",
                                     ["outcome"], registry=r)
        self.truncations = Counter("contextsvc_truncations", "TruncateToolOutput calls, by what cut.",
                                   ["cut_by"], registry=r)
        self.store_evicted = Counter("contextsvc_truncation_evicted_outputs",
                                     "Stored outputs evicted to stay under the size cap.", registry=r)
        self.store_evicted_bytes = Counter("contextsvc_truncation_evicted_bytes",
                                           "Bytes of stored outputs evicted by the size cap.", registry=r)
        self.store_expired = Counter("contextsvc_truncation_expired_outputs",
                                     "Stored outputs removed after their retention.", registry=r)

        self.memo_lookups = Counter("contextsvc_memo_lookups",
                                    "Lookups in the per-message memo (server.memo_bytes), by outcome "
                                    "(hit or miss); a step pays for its misses.", ["outcome"], registry=r)
        self.memo_refused = Counter("contextsvc_memo_refused",
                                    "Memo entries not kept because keeping them would have evicted what "
                                    "a step used within server.memo_hold_seconds (or the step's own): "
                                    "the sessions stepping now outgrow server.memo_bytes.", registry=r)
        self.memo_bytes = Gauge("contextsvc_memo_bytes", "Bytes the memo's entries are charged (their "
                                "objects' real size), at most server.memo_bytes.", registry=r,
                                multiprocess_mode="livesum")
        self._memo = None
        self._memo_seen = (0, 0, 0)  # hits, misses, refused already counted
        self._memo_synced = 0.0

    def watch_memo(self, memo) -> None:
        """memo's counts go into the memo series, at most once a second (sync_memo)."""
        self._memo = memo

    def sync_memo(self) -> None:
        """Adds what the memo counted since the last sync (called at every call's end: a
        clock read, the counters' locks once a second)."""
        memo = self._memo
        if memo is None:
            return
        now = time.monotonic()
        if now - self._memo_synced < MEMO_SYNC_SECONDS:
            return
        self._memo_synced = now
        counts = (memo.hits, memo.misses, memo.refused)
        hits, misses, refused = (max(0, a - b) for a, b in zip(counts, self._memo_seen))
        self._memo_seen = counts
        self._series(self.memo_lookups, "hit").inc(hits)
        self._series(self.memo_lookups, "miss").inc(misses)
        self.memo_refused.inc(refused)
        self.memo_bytes.set(memo.size_bytes)

    def method(self, name: str) -> MethodMetrics:
        return MethodMetrics(self, name)

    def record_prune(self, reason: str, acted: bool, tokens_freed: int) -> None:
        self.prune_runs.labels(reason, "acted" if acted else "noop").inc()
        if acted:
            self.prune_tokens.labels(reason).inc(tokens_freed)

    def record_compaction(self, outcome: str, backend: str, fell_back: bool, retention) -> None:
        self.compactions.labels(outcome, backend or "none").inc()
        if fell_back:
            self.summarizer_fallbacks.inc()
        if retention is not None and retention.items:
            self.retention.observe(retention.ratio)

    def record_assemble(self, provider: str, breakpoints: int, report, tripped: bool,
                        still_over: bool, previous_state: bytes) -> None:
        """report: the assemble.Report, None when the caller passed no previous cache state
        (previous_state, the state compared against). Labels come from fixed vocabularies:
        segment tools/system/messages, cause compaction/prune/other (an append only is no break)."""
        self.breakpoints.labels(provider).inc(breakpoints)
        if report is not None and report.broken and self._broken_states.first(previous_state):
            self.prefix_breaks.labels(provider, report.segment, report.cause).inc()
        if tripped:
            self.payload_guard.labels("still-over" if still_over else "under").inc()

    def record_eviction(self, count: int, nbytes: int) -> None:
        self.store_evicted.inc(count)
        self.store_evicted_bytes.inc(nbytes)

    def record_cleanup(self, report) -> None:
        self.store_expired.inc(report.expired)

    def record_measure(self, provider: str, should_compact: bool) -> None:
        # every Measure and Assemble records here: a provider's series is looked up once (a
        # labels() lookup takes the metric's lock), and appears at its first record as with labels()
        self._series(self.measured, provider).inc()
        if should_compact:
            self._series(self.overflowed, provider).inc()

    def _series(self, metric, label: str):
        """metric's child for label, kept (the labels here are the registry's few providers)."""
        series = self._children.get((metric, label))
        if series is None:  # two threads may both look it up: labels() gives both the same child
            series = self._children[metric, label] = metric.labels(label)
        return series


class CollectedMetrics(_Endpoint):
    """/metrics for several serving processes: prometheus_client's multiprocess mode.

    Each process records to files in `directory` (the PROMETHEUS_MULTIPROC_DIR it was started
    with); this endpoint sums them, so counters stay monotonic across a process restart."""

    def __init__(self, directory: str):
        from prometheus_client import multiprocess

        self.directory = directory
        self.registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(self.registry, path=directory)
