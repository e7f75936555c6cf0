"""Every constant of docs/design.md, as configuration with its default.

One source of truth: the core reads its numbers from these dataclasses, never from literals.
A config file is TOML with one table per section (see README); unknown keys are errors, so a
typo never silently falls back to a default.
"""
from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from . import encodings
from .truncation.settings import TruncationSettings

MiB = 1024 * 1024
# the deepest JSON nesting server.max_json_depth may allow: each level can take a few Python
# frames in the recursive stages (json.dumps, lowering), under the limit of 1000
MAX_JSON_DEPTH = 256


def check_token(token: str, where: str) -> str:
    """A bearer token a client can send: visible ASCII, no spaces (an HTTP header value; a
    whitespace-only or non-ASCII token would refuse every client)."""
    if not token.strip():
        raise ValueError(f"{where}: empty or only whitespace")
    bad = next((c for c in token if not "!" <= c <= "~"), None)
    if bad is not None:
        raise ValueError(f"{where}: holds {bad!r}; a bearer token is visible ASCII with no spaces "
                         "(a client cannot send anything else in a header)")
    return token


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"  # loopback unless the operator opens it up
    port: int = 50051  # the conventional gRPC port
    metrics_port: int = 9464  # the conventional Prometheus exporter port; 0 picks a free one
    # the address /metrics and /healthz (plain HTTP) bind; "" = host. TLS and the token guard the
    # gRPC port only: "127.0.0.1" keeps the metrics off the network while gRPC is open
    metrics_host: str = ""
    # /metrics asks for the service's bearer token ("authorization: Bearer <token>", 401 without);
    # /healthz stays open for HTTP health checks. Needs a token (auth_token, _file or _env)
    metrics_auth: bool = False
    max_request_bytes: int = 64 * MiB  # a 1M-token conversation with media fits; larger is abuse
    max_response_bytes: int = 64 * MiB  # Assemble returns a body as large as its input
    # serving processes sharing the port (SO_REUSEPORT, Linux): the hot path holds the GIL, so
    # one process uses one core. 0 = one per CPU. Each has its own caches and limits below.
    processes: int = 1
    # threads doing the calls' work (the transport itself runs on one event loop and holds no
    # thread per call): max_concurrent_rpcs calls plus room for work its callers have abandoned
    workers: int = 20
    # ContextService calls served at once; one more gets RESOURCE_EXHAUSTED at once instead of
    # queueing (the hot path is CPU-bound: a queue only adds latency). Below workers, so a call
    # is refused, not queued, while abandoned work still runs; while one connection holds more
    # than half of it, a connection with no call in flight may take a spare worker past it, so one
    # connection's burst refuses no other. 0 = no limit.
    max_concurrent_rpcs: int = 16
    # calls the transport holds at once, every service included (calls still waiting for their
    # request or for their client to read the response count); beyond it grpc itself answers
    # RESOURCE_EXHAUSTED, so a flood of connections never queues without bound. 0 = no bound.
    max_pending_rpcs: int = 1024
    # calls of one client (its address) open at once, from their start until they are over (so
    # those waiting for their request message, and those whose response it does not read); one
    # more is refused RESOURCE_EXHAUSTED at once, so that one client's idle calls (headers sent,
    # no body; or a flow-control window of 0) never fill max_pending_rpcs for every other caller
    # and the health checks. Behind a proxy,
    # or over a Unix socket, every caller is one address: raise it there. Keep it well below
    # max_pending_rpcs. 0 = no bound.
    max_waiting_calls_per_client: int = 256
    # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: calls one connection may have open at once
    max_streams_per_connection: int = 100
    # a call whose request message has not arrived this long after it opened is ended
    # (DEADLINE_EXCEEDED); the caller's own deadline, when shorter, bounds it instead
    request_wait_seconds: float = 10.0
    # a response larger than a stream's window that its client has not read this long after it
    # was sent is logged as stalled; its bytes stay counted against max_unsent_bytes until the
    # call ends (read, the caller's deadline, or the connection closed at its age)
    send_wait_seconds: float = 30.0
    # bytes of responses written but not yet read by their clients, all calls together; a response
    # that would pass it gets RESOURCE_EXHAUSTED. 0 = no bound
    max_unsent_bytes: int = 256 * MiB
    # bytes of the requests being worked on, all calls together; a call whose request would pass
    # it gets RESOURCE_EXHAUSTED at once, once its request has arrived (one call always goes
    # through, whatever its size). A request costs a few times its bytes while it is worked on:
    # this bounds what concurrent large requests take (32 of 60 MB at once took 2.8 GB).
    # 0 = no bound
    max_working_request_bytes: int = 256 * MiB
    # a connection this old is asked to go (GOAWAY: its client reconnects) and closed
    # connection_age_grace_seconds later with whatever it still holds: the end of what a client
    # that never reads can keep
    max_connection_age_seconds: float = 600.0
    connection_age_grace_seconds: float = 60.0
    shutdown_grace_seconds: float = 30.0  # SIGTERM lets in-flight calls finish this long
    # before that, health says NOT_SERVING this long while calls are still served: longer than
    # a proxy takes to see it (the shipped HAProxy and Envoy configs: about 2 s), so the proxy
    # has stopped sending before the replica refuses anything
    drain_seconds: float = 5.0
    # memory for what is kept per message for the next step (memo.py: the converted message,
    # its lowering and element JSON, prune's scan, validation, Compact's sizes, the offline
    # summarizer's facts), charged at the objects' real size (a converted message takes about
    # 3.7 bytes per wire byte, its lowering about 3 times its JSON: a 1 MB session about 8 MiB);
    # least recently used go first; 0 disables
    memo_bytes: int = 96 * MiB
    # what any step used within this many seconds is not evicted to make room (a new entry that
    # would need it is not kept instead): sessions that together outgrow memo_bytes, stepped in
    # turn, keep those that fit rather than each evicting the next one's entries; a session idle
    # longer gives way. Above the time an agent takes between two steps; 0: a plain LRU
    memo_hold_seconds: float = 120.0
    # TLS: PEM certificate chain and private key; both empty = plaintext (loopback, or TLS ends
    # at a proxy in front)
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # mTLS: PEM CA bundle; when set, every client must present a certificate it signed
    tls_client_ca_file: str = ""
    # bearer token every ContextService call must carry ("authorization: Bearer <token>");
    # health stays open. Prefer auth_token_file or auth_token_env: a config file is often readable
    auth_token: str = ""
    auth_token_file: str = ""  # a file holding the token (e.g. a mounted secret); whitespace stripped
    auth_token_env: str = ""  # the name of an environment variable holding the token
    # tenants: a file of bearer tokens, one a line (blank lines and # comments skipped), each
    # accepted beside the token above. A token is a tenant: the tool outputs stored under it are
    # read with it only (their store keys hold a digest of it); needs truncation.backend "redis"
    auth_tokens_file: str = ""
    # JSON nesting accepted in tool inputs and tool schemas, checked once at conversion: real
    # schemas nest under 20 levels; every later stage stays far from Python's recursion limit
    # (1000 frames) at this depth, which is why it cannot be set above MAX_JSON_DEPTH
    max_json_depth: int = MAX_JSON_DEPTH
    # a conversation's session_id longer than this (UTF-8 bytes) is refused: real ids are UUIDs or
    # a few of them joined (under 200 bytes); OpenAI takes 64 characters as prompt_cache_key
    max_session_id_bytes: int = 1024
    # reflection streams open at once; one more is refused at once
    max_streams: int = 3
    # a stream (reflection, health Watch) with no message either way this long is closed: an
    # open stream costs memory (grpcurl needs well under 1 s)
    stream_idle_seconds: float = 60.0
    reflection: bool = True  # server reflection (grpcurl); behind auth_token when one is set
    # health Watch streams open at once (they hold no thread, but each counts against
    # max_pending_rpcs): one more is refused, so idle watchers cannot fill the transport's bound
    # (keep it well below max_pending_rpcs)
    max_watch_streams: int = 64

    def __post_init__(self):
        # held bare ("::", not "[::]"): sockets and the metrics server take it so; address() brackets
        for name in ("host", "metrics_host"):
            object.__setattr__(self, name, getattr(self, name).strip().removeprefix("[").removesuffix("]"))
        if self.metrics_auth and not (self.auth_token or self.auth_token_file or self.auth_token_env):
            raise ValueError("[server] metrics_auth needs a token: auth_token, auth_token_file or auth_token_env")
        if self.processes < 0:
            raise ValueError("[server] processes must be 0 (one per CPU) or more")
        if self.workers < 1:
            raise ValueError("[server] workers must be at least 1")
        if self.max_concurrent_rpcs and self.max_concurrent_rpcs >= self.workers:
            raise ValueError(f"[server] max_concurrent_rpcs ({self.max_concurrent_rpcs}) must be below "
                             f"workers ({self.workers}): the spare threads take work callers abandoned")
        if self.max_waiting_calls_per_client < 0:
            raise ValueError("[server] max_waiting_calls_per_client must be 0 (no bound) or more")
        if self.memo_hold_seconds < 0:
            raise ValueError("[server] memo_hold_seconds must be 0 (a plain LRU) or more")
        for name in ("max_unsent_bytes", "max_working_request_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"[server] {name} must be 0 (no bound) or more")
        for name in ("max_streams_per_connection", "request_wait_seconds", "send_wait_seconds",
                     "max_connection_age_seconds", "connection_age_grace_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"[server] {name} must be positive")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("[server] tls_cert_file and tls_key_file must be set together")
        if self.max_session_id_bytes < 1:
            raise ValueError("[server] max_session_id_bytes must be at least 1")
        if not 1 <= self.max_json_depth <= MAX_JSON_DEPTH:
            raise ValueError(f"[server] max_json_depth must be in [1, {MAX_JSON_DEPTH}]")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("[server] tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        if self.auth_token:
            check_token(self.auth_token, "[server] auth_token")
        if self.stream_idle_seconds <= 0:
            raise ValueError("[server] stream_idle_seconds must be positive")

    def address(self, port: int, host: str | None = None) -> str:
        """host:port as gRPC and URLs write it (an IPv6 host in brackets); host defaults to
        the gRPC one."""
        host = self.host if host is None else host
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def metrics_bind(self) -> str:
        """The host /metrics and /healthz bind."""
        return self.metrics_host or self.host


COMPACTION_FIGURES = ("estimate", "calibrated", "self-calibrated", "exact", "exact-where-known")
COUNT_ENDPOINTS = ("anthropic", "gemini")  # the providers whose count endpoint measure can ask


@dataclass(frozen=True)
class MeasureConfig:
    chars_per_token: int = 4  # the reference agent's estimator: UTF-16 chars / 4, JS Math.round
    preflight_factor: str = "1.3"  # the estimate undercounts code and JSON by 15-30%
    output_token_max: int = 32000  # OUTPUT_TOKEN_MAX: the cap on any request's output budget
    reserved_max: int = 20000  # reserved = min(this, max_output(model)) below an input limit
    media_token_pad: int = 2048  # what one media item is assumed to cost in the output cap
    output_headroom: int = 2048  # kept free between input and output when capping
    min_output_tokens: int = 1024  # never cap the output budget below this
    auto: bool = True  # backward-looking overflow check (config compaction.auto)
    # the offline encoding that stands in for a model whose own tokenizer is not offline (Claude,
    # Gemini, ...): "cl100k_base" (what the calibrated ratios are fitted on) or "o200k_base"; a
    # model with its own (GPT-4o/4.1/5 and o-series: o200k; GPT-4, GPT-3.5: cl100k) counts with it
    exact_encoding: str = "cl100k_base"
    exact_cache_entries: int = 65536  # exact counts of request pieces kept per encoding (about 150 bytes each)
    # the decision figure (should_compact, Compact's tokens_before/after): "calibrated" (per
    # content class, plus decision_margin), "self-calibrated" (the same scaled by the provider's
    # own count of an earlier prefix, plus the margin), "estimate" (the reference's
    # ceil(chars/4 * 1.3)), "exact" (only when the request asks for exact counts; otherwise
    # calibrated decides, so every replica answers alike) or "exact-where-known" (the model's own
    # tokenizer's exact count wherever it is offline, cl100k and o200k models, counted whether or
    # not the request asks; calibrated for every other model)
    compaction_figure: str = "calibrated"
    # safety margin on the calibrated figures: "measured" = per content class, the p95 of the
    # under-count on held-back real material (shipped with the ratios by bench/calibrate.py),
    # applied to each class's share of the request; or one fixed fraction for every class
    decision_margin: str = "measured"
    # margin on an exact count by the proxy encoding (exact_encoding) standing in for another
    # model's tokenizer (not measured here: tokenizers of one generation differ by about this much)
    exact_margin_fraction: str = "0.15"
    # what one media item costs in the decision figure: never its base64 length, never zero
    # (the output budget's per-item pad)
    media_decision_tokens: int = 2048
    # the calibrated figures serialize the request once more (about 10 ms per MB); off = zeros
    calibrated_figures: bool = True
    self_calibration_min_tokens: int = 1000  # below this, provider-side overhead skews the factor
    self_calibration_min_factor: float = 0.5  # a factor outside these bounds means the reported
    self_calibration_max_factor: float = 2.0  # usage is not of this prefix (pruned since, etc.)
    # the providers' token-counting endpoints the reported exact figure comes from, for their own
    # models ("anthropic", "gemini"; count_endpoints.py); never the decision figure. Each reads its
    # key from the environment variable named, and base_url "" is the SDK's default endpoint
    count_endpoints: tuple = ()
    anthropic_count_base_url: str = ""
    anthropic_count_api_key_env: str = "ANTHROPIC_API_KEY"
    gemini_count_base_url: str = ""
    gemini_count_api_key_env: str = "GEMINI_API_KEY"
    # one count's time at most; never more than half of what the caller's deadline leaves
    count_endpoint_timeout_seconds: float = 2.0
    count_endpoint_cache_entries: int = 4096  # counts of whole requests kept, by request digest

    def __post_init__(self):
        unknown = [e for e in self.count_endpoints if e not in COUNT_ENDPOINTS]
        if unknown:
            raise ValueError(f"[measure] count_endpoints: unknown {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(COUNT_ENDPOINTS)}")
        try:
            encodings.canonical(self.exact_encoding)
        except ValueError as e:
            raise ValueError(f"[measure] exact_encoding: {e}") from None
        if self.compaction_figure not in COMPACTION_FIGURES:
            raise ValueError(f"[measure] compaction_figure must be one of {', '.join(COMPACTION_FIGURES)}, "
                             f"not {self.compaction_figure!r}")
        if not self.calibrated_figures and self.compaction_figure in ("calibrated", "self-calibrated"):
            raise ValueError(f"[measure] compaction_figure {self.compaction_figure!r} needs calibrated_figures")
        if not self.measured_margins and not 0 <= Fraction(self.decision_margin) < 1:
            raise ValueError(f"[measure] decision_margin must be \"measured\" or in [0, 1), not {self.decision_margin!r}")
        if not 0 <= Fraction(self.exact_margin_fraction) < 1:
            raise ValueError(f"[measure] exact_margin_fraction must be in [0, 1), not {self.exact_margin_fraction!r}")
        if self.media_decision_tokens < 1:
            raise ValueError("[measure] media_decision_tokens must be at least 1: media are never free")
        if not 0 < self.self_calibration_min_factor <= self.self_calibration_max_factor:
            raise ValueError("[measure] self_calibration_min_factor must be positive and at most "
                             "self_calibration_max_factor")

    @functools.cached_property  # parsed once, not at every step (the settings are frozen)
    def factor(self) -> Fraction:
        """The pre-flight factor as an exact rational: ceil(10 * 1.3) must be 13, not 14."""
        return Fraction(self.preflight_factor)

    @property
    def measured_margins(self) -> bool:
        """The decision figure takes the per-class margins shipped with the ratios."""
        return self.decision_margin == "measured"

    @functools.cached_property
    def margin(self) -> Fraction:
        """1 + the fixed decision_margin, as an exact rational (1 with measured margins: they
        are applied per class, in the figure itself)."""
        return 1 if self.measured_margins else 1 + Fraction(self.decision_margin)

    @functools.cached_property
    def exact_margin(self) -> Fraction:
        return 1 + Fraction(self.exact_margin_fraction)


PRUNE_PROTECT_RULES = ("tool_results", "turns")  # what protects the freshest tool outputs


@dataclass(frozen=True)
class PruneConfig:
    enabled: bool = False  # "normal" prune breaks the cache; off unless the operator asks
    # an agent turn can be 60 tool steps with no user message: count results, not turns
    protect: str = "tool_results"
    # newest completed results never touched: Claude Code's microcompact and OpenHands' masking
    # window both keep 5; only as many as fit in protect_tokens (at least the newest)
    protected_results: int = 5
    protected_turns: int = 2  # with protect = "turns": the reference never touches the last 2
    # PRUNE_PROTECT: newest tool outputs kept up to this total (the reference's value); with a
    # known window the gate is min(this, usable / 4), so a 32K window is not all protected
    protect_tokens: int = 40000
    # PRUNE_MINIMUM: breaking the cache must free more than this (the reference's value); with a
    # known window min(this, usable / 10)
    minimum_tokens: int = 20000
    protected_tools: tuple = ("skill",)  # loaded instructions are live rules

    def __post_init__(self):
        if self.protect not in PRUNE_PROTECT_RULES:
            raise ValueError(f"[prune] protect must be one of {', '.join(PRUNE_PROTECT_RULES)}, "
                             f"not {self.protect!r}")
        for name in ("protected_results", "protected_turns", "protect_tokens", "minimum_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"[prune] {name} must not be negative")


@dataclass(frozen=True)
class CompactConfig:
    tail_turns: int = 2  # DEFAULT_TAIL_TURNS: turns kept verbatim
    preserve_recent_min: int = 2000  # MIN_PRESERVE_RECENT_TOKENS
    preserve_recent_max: int = 8000  # MAX_PRESERVE_RECENT_TOKENS
    preserve_recent_ratio: str = "0.25"  # share of the usable window for the verbatim tail
    tool_output_max_chars: int = 2000  # TOOL_OUTPUT_MAX_CHARS in the summary request
    max_attempts: int = 3  # compactions per agent turn before ContextOverflow
    chunk_ratio: str = "0.6"  # chunk budget as a share of the usable window
    chunk_min_tokens: int = 1000  # never chunk smaller than this
    chunk_output_tokens: int = 2048  # output budget of one chunk summary
    chunk_concurrency: int = 3  # chunks summarized at a time
    chunk_clip_chars: int = 16000  # a chunk still over budget goes as a clipped transcript
    merge_depth: int = 3  # halve-and-reduce depth when merging partial summaries

    def __post_init__(self):
        if self.max_attempts < 1:  # none would answer every Compact ContextOverflow
            raise ValueError(f"[compact] max_attempts must be at least 1, not {self.max_attempts}")


# the cache_state versions this server writes (prefix.encode), the newest last; it reads 1 too
CACHE_STATE_VERSIONS = (2, 3, 4, 5)


@dataclass(frozen=True)
class AssembleConfig:
    request_prune_bytes: int = 1_250_000  # REQUEST_PRUNE_BYTES: payload guard threshold
    anthropic_max_breakpoints: int = 4  # Anthropic (also behind Bedrock and the gateways) takes at most four markers
    anthropic_auto_breakpoints: int = 3  # the auto policy leaves one marker for the caller
    prompt_dir: str = ""  # operator-supplied model-family prompt texts; "" = none
    # digests in a response's cache_state at most (8 bytes and a count each): a longer session
    # groups its elements, so the state stays under about 20 KB whatever the session's length
    cache_state_groups: int = 2048
    # the cache_state version written (prefix.STATE_VERSION; every version up to it is read): 2
    # while a rolling upgrade from a server that reads no later one is under way, since such a
    # replica refuses a later state (INVALID_ARGUMENT); version 2 carries no figures of the tools
    # and system, so a projection adds them whole when they change
    cache_state_version: int = CACHE_STATE_VERSIONS[-1]
    # model ids (case-insensitive substrings) that honor cache markers behind the gateways
    # (OpenRouter, OpenAI-compatible, Copilot): the Claude family, as upstream; other models there
    # get no auto markers (Alibaba marks every model, Anthropic and Bedrock always take them)
    marker_models: tuple = ("claude", "anthropic")

    def __post_init__(self):
        if self.cache_state_version not in CACHE_STATE_VERSIONS:
            raise ValueError(f"[assemble] cache_state_version must be one of "
                             f"{', '.join(map(str, CACHE_STATE_VERSIONS))}, not {self.cache_state_version}")


# backend: (default model, default key variable). A fast model is enough for a templated summary.
SUMMARIZER_BACKENDS = {
    "offline": ("", ""),
    "anthropic": ("claude-haiku-4-5", "ANTHROPIC_API_KEY"),
    "openai": ("gpt-4.1-mini", "OPENAI_API_KEY"),  # also any Chat Completions server, by base_url
}


@dataclass(frozen=True)
class SummarizerConfig:
    backend: str = "offline"  # works with no key and no network; or "anthropic", "openai"
    model: str = ""  # "" = the backend's default (SUMMARIZER_BACKENDS)
    base_url: str = ""  # "" = the SDK's default endpoint
    api_key_env: str = ""  # the key is read from this environment variable; "" = the backend's default
    timeout_seconds: float = 60.0  # one summary request
    max_retries: int = 2  # retries on timeouts, connection errors, 408/409/429/5xx
    retry_pause_seconds: float = 0.5  # pause before the first retry, doubled for each next one
    fallback_to_offline: bool = True  # a failing backend degrades instead of failing the call
    offline_max_items: int = 12  # offline summary: bullets per section; the oldest go first
    offline_max_goals: int = 3  # offline summary: the most recent user requests kept as the goal
    offline_max_item_chars: int = 400  # offline summary: a longer bullet is cut (paths rarely are)
    # with fallback_to_offline, the summarizer must give up this long before the caller's
    # deadline, so the offline summary (milliseconds to a second on a long session) still reaches
    # the caller; never more than half the time left
    fallback_reserve_seconds: float = 1.0
    # the reply's byte cap (on the wire and inflated): this many bytes per output token asked for,
    # at least reply_min_bytes. An English token is about 4 bytes; a CJK one 1-2 characters, 6-12
    # bytes as JSON escapes (\uXXXX): 16 covers both. The floor covers the JSON envelope
    reply_bytes_per_token: int = 16
    reply_min_bytes: int = 65536
    # summary requests waiting on the backend at once (0 = no bound); one more is answered at once
    # as the backend being unavailable (the offline fallback, with fallback_to_offline), so a hung
    # backend holds at most this many of server.max_concurrent_rpcs: Measure and Assemble, which
    # never ask it, keep the rest. After breaker_failures requests in a row got no answer (timed
    # out, connection failed), none is sent for breaker_open_seconds; then one trial decides
    max_concurrent: int = 4
    breaker_failures: int = 2
    breaker_open_seconds: float = 30.0

    def __post_init__(self):
        if self.max_concurrent < 0 or self.breaker_failures < 1 or self.breaker_open_seconds < 0:
            raise ValueError("[summarizer] max_concurrent must be 0 (no bound) or more, breaker_failures 1 or "
                             "more, breaker_open_seconds 0 or more")
        if self.backend not in SUMMARIZER_BACKENDS:
            raise ValueError(f"[summarizer] backend must be one of {', '.join(map(repr, SUMMARIZER_BACKENDS))}")
        model, key_env = SUMMARIZER_BACKENDS[self.backend]
        object.__setattr__(self, "model", self.model or model)
        object.__setattr__(self, "api_key_env", self.api_key_env or key_env)


@dataclass(frozen=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    compact: CompactConfig = field(default_factory=CompactConfig)
    assemble: AssembleConfig = field(default_factory=AssembleConfig)
    summarizer: SummarizerConfig = field(default_factory=SummarizerConfig)
    truncation: TruncationSettings = field(default_factory=TruncationSettings)

    def __post_init__(self):
        if self.server.auth_tokens_file and self.truncation.backend != "redis":
            raise ValueError("[server] auth_tokens_file (several tenants) needs truncation.backend "
                             "\"redis\": only the Redis store keeps each tenant's outputs apart")


def _section(cls, table: Mapping[str, Any], name: str):
    if not isinstance(table, Mapping):
        raise ValueError(f"[{name}] must be a table")
    if hasattr(cls, "from_mapping"):
        return cls.from_mapping(dict(table))
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in fields:
            raise ValueError(f"[{name}] unknown key {key!r}; known: {', '.join(sorted(fields))}")
        default = fields[key].default
        if default is dataclasses.MISSING:
            default = fields[key].default_factory()
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"[{name}] {key} must be a list of strings")
            value = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"[{name}] {key} must be true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"[{name}] {key} must be a non-negative integer")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"[{name}] {key} must be a non-negative number")
            value = float(value)
        elif isinstance(default, str):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    key in {"preflight_factor", "preserve_recent_ratio", "chunk_ratio"}:
                value = str(value)
            if not isinstance(value, str):
                raise ValueError(f"[{name}] {key} must be a string")
        values[key] = value
    section = cls(**values)
    for key in ("preflight_factor", "preserve_recent_ratio", "chunk_ratio"):
        if hasattr(section, key):
            try:
                ratio = Fraction(getattr(section, key))
            except (ValueError, ZeroDivisionError):
                raise ValueError(f"[{name}] {key} must be a decimal number") from None
            if ratio <= 0:
                raise ValueError(f"[{name}] {key} must be positive")
    return section


def from_mapping(data: Mapping[str, Any]) -> Config:
    sections = {f.name: f for f in dataclasses.fields(Config)}
    values = {}
    for name, table in data.items():
        if name not in sections:
            raise ValueError(f"unknown config section [{name}]; known: {', '.join(sorted(sections))}")
        values[name] = _section(sections[name].default_factory, table, name)
    return Config(**values)


def load(path: str | None) -> Config:
    """The embedded defaults, overridden by the TOML file at path when given."""
    if not path:
        return Config()
    with open(path, "rb") as f:
        return from_mapping(tomllib.load(f))
