"""Settings of tool-output truncation and of the store that keeps the full outputs.

`TruncationSettings` holds every tunable of the subsystem; `from_mapping` builds it from a
config-file table (for example ``[truncation]`` in TOML), rejecting unknown keys and bad
values with a `ValueError` that names the key.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["TruncationSettings", "default_directory", "OUTPUT_ID"]

_GIB = 1024 * 1024 * 1024

# Stands for the stored output's id in a hint.
OUTPUT_ID = "{output_id}"
# The reference's two hints, the id in place of its file path. They name the reference agent's
# tools (Grep, Read, Task): an agent whose tools have other names sets its own.
DEFAULT_HINT = (
    "The tool call succeeded but the output was truncated. Full output saved under id: "
    f"{OUTPUT_ID}\nUse Grep to search the full content or Read with offset/limit to view "
    "specific sections."
)
DEFAULT_HINT_WITH_TASK_TOOL = (
    "The tool call succeeded but the output was truncated. Full output saved under id: "
    f"{OUTPUT_ID}\nUse the Task tool to have explore agent process this output with Grep and "
    "Read (with offset/limit). Do NOT read the full output yourself - delegate to save context."
)


def default_directory() -> str:
    """``$XDG_CACHE_HOME/contextsvc/tool-output``, or ``~/.cache/contextsvc/tool-output``.

    The XDG base-directory spec says a relative ``XDG_CACHE_HOME`` is invalid and must be
    ignored, so only an absolute value is used.
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "contextsvc", "tool-output")


@dataclass(frozen=True)
class TruncationSettings:
    """Every constant of tool-output truncation. Values are validated on construction."""

    # 2000 lines is about what a model can usefully scan in one tool result; more is noise.
    max_lines: int = 2000
    # 50 KiB (~12k tokens) keeps one tool result from eating a large share of the window.
    max_bytes: int = 51200
    # 7 days covers a long-running session being resumed later, without keeping data forever.
    retention_seconds: float = 7 * 24 * 3600
    # Hourly is frequent enough that expired outputs do not pile up; each run is cheap.
    cleanup_interval_seconds: float = 3600
    # A minute after start keeps the first scan off the start-up path of the service.
    cleanup_first_delay_seconds: float = 60
    # 1 GiB bounds disk use at ~20k full 50 KiB outputs; 0 disables the cap (retention only).
    max_store_bytes: int = _GIB
    # Same as max_lines: a default ranged read returns at most what a preview would show.
    read_default_limit: int = 2000
    # A temp file older than this that no live writer owns is a crash leftover (10 minutes
    # is far longer than any write takes, so a slow writer in another process is never hit).
    temp_grace_seconds: float = 600
    # A cache directory: the outputs are re-creatable and may be deleted by the user at will.
    directory: str = field(default_factory=default_directory)
    # "local": the directory above, enough for one replica (the embedded default); "redis":
    # the Redis at redis_url, shared by every replica behind one address (docs/design.md §11).
    backend: str = "local"
    # e.g. "redis://127.0.0.1:6379/0", "rediss://..." (TLS) or "unix:///run/redis.sock".
    redis_url: str = ""
    # With a rediss:// URL: the PEM file of the CAs that signed Redis's certificate (the system's
    # CAs when empty); the certificate must name the URL's host.
    redis_tls_ca_file: str = ""
    # Or Redis Sentinel: its addresses ("host:port", one is enough, three is the usual) and the
    # name of the master they watch; the store follows a failover to the promoted replica.
    redis_sentinels: tuple[str, ...] = ()
    redis_sentinel_master: str = ""
    # With Sentinel: a file holding the password Redis asks for (its requirepass, the same on
    # master and replicas; a redis_url carries its own), one holding the sentinels' password, and
    # TLS to both (verified with redis_tls_ca_file, or the system's CAs). Files, so the password
    # comes from a mounted secret rather than the config; read once at start.
    redis_password_file: str = ""
    redis_sentinel_password_file: str = ""
    redis_sentinel_tls: bool = False
    # A put is acknowledged once Redis WAITs for this many replicas to have it, so a failover
    # loses no acknowledged output (none acknowledging within half the call's time: UNAVAILABLE).
    # None: 1 with Sentinel (its failover promotes a replica), 0 with a single Redis.
    redis_min_replicas_acked: int | None = None
    # Every key of the store starts with this; the braces make it a Redis Cluster hash tag, so
    # the keys one script touches share a slot.
    redis_key_prefix: str = "{contextsvc}:tool-output:"
    # The hint after a truncated preview ("{output_id}" stands for the id), and the one for a
    # caller with a task tool (TruncateToolOutputRequest.has_task_tool); a request may set its own.
    hint: str = DEFAULT_HINT
    hint_with_task_tool: str = DEFAULT_HINT_WITH_TASK_TOOL
    # Half a second: Redis on the same network answers a connect in well under a millisecond,
    # so a longer wait only delays the UNAVAILABLE answer while Redis is down.
    redis_connect_timeout_seconds: float = 0.5
    # Two seconds covers a 64 MiB value on a busy network; a read that waits longer means
    # Redis is stuck, and the call gets UNAVAILABLE rather than hanging.
    redis_timeout_seconds: float = 2.0
    # The bulkhead around Redis calls (bulkhead.py): at most this many at once (a hung Redis
    # then holds no more of server.max_concurrent_rpcs than this), each answered UNAVAILABLE
    # after redis_call_timeout_seconds (below the 5 s deadline the README suggests for the store
    # RPCs; raise it with max_bytes for very large outputs); after redis_breaker_failures calls
    # in a row with no answer, store calls are answered UNAVAILABLE at once for
    # redis_breaker_open_seconds, then one trial call decides.
    redis_max_concurrent_calls: int = 4
    redis_call_timeout_seconds: float = 1.0
    redis_breaker_failures: int = 2
    redis_breaker_open_seconds: float = 1.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check(f.name, getattr(self, f.name))
        if self.backend == "redis" and not (self.redis_url or self.redis_sentinels):
            raise ValueError("truncation setting 'redis_url' (or 'redis_sentinels') is required when "
                             "backend is 'redis'")
        if self.redis_url and self.redis_sentinels:
            raise ValueError("truncation settings 'redis_url' and 'redis_sentinels' are exclusive: "
                             "with Sentinel, the master's address is asked of the sentinels")
        if self.redis_tls_ca_file and not (self.redis_url.startswith("rediss://") or self.redis_sentinel_tls):
            raise ValueError("truncation setting 'redis_tls_ca_file' needs a rediss:// redis_url "
                             "or redis_sentinel_tls")
        for key in ("redis_password_file", "redis_sentinel_password_file", "redis_sentinel_tls"):
            if getattr(self, key) and not self.redis_sentinels:
                raise ValueError(f"truncation setting {key!r} is for Sentinel (redis_sentinels); "
                                 "a redis_url carries its own password and scheme")
        if bool(self.redis_sentinels) != bool(self.redis_sentinel_master):
            raise ValueError("truncation settings 'redis_sentinels' and 'redis_sentinel_master' go together")

    @property
    def replicas_to_ack(self) -> int:
        """Replicas that must have a put before it is acknowledged (redis_min_replicas_acked)."""
        if self.redis_min_replicas_acked is not None:
            return self.redis_min_replicas_acked
        return 1 if self.redis_sentinels else 0

    def hint_for(self, has_task_tool: bool) -> str:
        """The configured hint template for a caller with or without a task tool."""
        return self.hint_with_task_tool if has_task_tool else self.hint

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> "TruncationSettings":
        """Build settings from a config table; keys absent from ``d`` keep their defaults.

        Raises ValueError naming the key for an unknown key, a value of the wrong type
        (booleans are not accepted as numbers) or a value out of range.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"truncation settings must be a table, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in d:
            if key not in known:
                raise ValueError(
                    f"unknown truncation setting {key!r} (known: {', '.join(sorted(known))})"
                )
        values: dict[str, Any] = {}
        for key, value in d.items():
            _check(key, value)
            if key == "directory":
                value = os.path.expanduser(value)
            if key == "redis_sentinels":
                value = tuple(value)
            values[key] = value
        return cls(**values)


# name -> (accepted types, minimum, minimum is exclusive)
_RULES: dict[str, tuple[tuple[type, ...], float | None, bool]] = {
    "max_lines": ((int,), 0, True),
    "max_bytes": ((int,), 0, True),
    "retention_seconds": ((int, float), 0, True),
    "cleanup_interval_seconds": ((int, float), 0, True),
    "cleanup_first_delay_seconds": ((int, float), 0, False),
    "max_store_bytes": ((int,), 0, False),
    "read_default_limit": ((int,), 0, True),
    "temp_grace_seconds": ((int, float), 0, False),
    "directory": ((str,), None, False),
    "backend": ((str,), None, False),
    "redis_url": ((str,), None, False),
    "redis_tls_ca_file": ((str,), None, False),
    "redis_sentinels": ((list, tuple), None, False),
    "redis_sentinel_master": ((str,), None, False),
    "redis_password_file": ((str,), None, False),
    "redis_sentinel_password_file": ((str,), None, False),
    "redis_sentinel_tls": ((bool,), None, False),
    "redis_min_replicas_acked": ((int, type(None)), 0, False),
    "redis_key_prefix": ((str,), None, False),
    "hint": ((str,), None, False),
    "hint_with_task_tool": ((str,), None, False),
    "redis_connect_timeout_seconds": ((int, float), 0, True),
    "redis_timeout_seconds": ((int, float), 0, True),
    "redis_max_concurrent_calls": ((int,), 0, True),
    "redis_call_timeout_seconds": ((int, float), 0, True),
    "redis_breaker_failures": ((int,), 0, True),
    "redis_breaker_open_seconds": ((int, float), 0, True),
}

BACKENDS = ("local", "redis")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _check(key: str, value: Any) -> None:
    types, minimum, exclusive = _RULES[key]
    names = " or ".join(t.__name__ for t in types)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise ValueError(f"truncation setting {key!r} must be {names}, got {type(value).__name__}")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise ValueError(f"truncation setting {key!r} must be finite, got {value!r}")
    if minimum is not None and value is not None:
        if exclusive and not value > minimum:
            raise ValueError(f"truncation setting {key!r} must be > {minimum}, got {value!r}")
        if not exclusive and not value >= minimum:
            raise ValueError(f"truncation setting {key!r} must be >= {minimum}, got {value!r}")
    if key == "directory" and (not value or "\0" in value):
        raise ValueError(f"truncation setting {key!r} must be a non-empty path without NUL")
    if key in ("hint", "hint_with_task_tool") and OUTPUT_ID not in value:
        raise ValueError(f"truncation setting {key!r} must hold {OUTPUT_ID}, where the id goes")
    if key == "backend" and value not in BACKENDS:
        raise ValueError(f"truncation setting 'backend' must be one of {', '.join(BACKENDS)}, "
                         f"got {value!r}")
    if key == "redis_url" and value and not value.startswith(_REDIS_SCHEMES):
        # the value is not echoed: a URL may carry a password
        raise ValueError(f"truncation setting 'redis_url' must start with "
                         f"{', '.join(_REDIS_SCHEMES)}")
    if key == "redis_sentinels":
        for address in value:
            host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"truncation setting 'redis_sentinels' holds {address!r}: "
                                 "each must be \"host:port\"")
    if key == "redis_key_prefix" and not value:
        raise ValueError("truncation setting 'redis_key_prefix' must not be empty")
