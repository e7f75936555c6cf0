"""`RedisStore`: the tool-output `Store` shared by every replica behind one address.

With several replicas behind a proxy that balances per call, the ReadTruncated of an output
may reach another replica than the TruncateToolOutput that stored it; a Redis all replicas
use makes the output visible to each as soon as `put` returns (docs/design.md §11).

Keys (``P`` is ``redis_key_prefix``, a Redis Cluster hash tag by default; ``N`` an output's
name: its id, or ``<tenant>/<id>`` when the server has tokens, the tenant being a digest of the
caller's token, so another tenant's get of the id finds no key)
    ``P<N>``        the UTF-8 text, expiring at the id's time + retention (``SET ... PXAT``),
                    so Redis itself drops outputs past their retention
    ``Pindex``      sorted set of the names, scored by their creation time (ms): oldest first;
                    the size cap and retention are the store's, over every tenant
    ``Psizes``      hash name -> bytes, so eviction and expiry know what they free
    ``Pbytes``      total bytes of the indexed outputs

Every change of these keys runs as one Lua script, which Redis executes atomically: a put
writes the text, indexes it, adds its size and evicts the oldest outputs while the total is
over ``max_store_bytes``, all at once, so the cap holds across replicas without a lock and no
reader sees an id without its text. A script whose first write fails (Redis out of memory
under ``noeviction``) changes nothing.

Ids are generated as by `LocalDiskStore`, on the replica, and carry their creation time:
expiry is read from the id (``get`` of an expired id is not found even before Redis or
cleanup dropped it). Ids of different replicas collide only if they share the millisecond,
the sequence and 40 random bits; a put does not check for an existing key.

Failures
    Connection refused, a timeout or any Redis error raise `StoreUnavailable` with the reason;
    the gRPC layer answers UNAVAILABLE. Every command runs in a `Bulkhead` (bulkhead.py): a
    few at once, each answered within ``redis_call_timeout_seconds`` or its caller's deadline
    if that comes first (put and get take the RPC's deadline), and none tried while a
    circuit breaker holds Redis for down, so a hung or dead Redis costs a store call a second
    at most and the other RPCs nothing. A command whose connection failed is retried once on a
    fresh one (pooled connections go stale when Redis restarts); a timeout is not retried (a
    hung Redis would only be waited for twice). A put answered as failed whose write lands all the
    same (Redis answers after the wait for it was given up, or too few replicas acknowledge it)
    is deleted again: its id was handed to nobody. Nothing else in the service depends on Redis.

Replicas and Sentinel
    With ``redis_sentinels`` the master's address is asked of Sentinel, and a connection that
    fails (the master died, or was demoted and refuses writes) is retried on the master
    Sentinel names then. A put is acknowledged only after ``WAIT`` reports that
    ``replicas_to_ack`` replicas have it (same connection, one pipeline), so the replica a
    failover promotes holds every acknowledged output; a put no replica took within half of
    the call's time is answered UNAVAILABLE (Redis answered: the breaker does not count it).

Durability is Redis's: run it with ``appendonly yes`` (an output acknowledged to a client
survives a restart of Redis) and ``maxmemory-policy noeviction`` (Redis refuses a write rather
than dropping outputs behind the index's back); the README shows the command line.
"""
from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Callable

from ..deadline import NO_DEADLINE, Deadline
from .bulkhead import Bulkhead, NoAnswer
from .ids import IdGenerator, parse_output_id
from .settings import TruncationSettings
from .store import CleanupReport, OutputNotFound, Store, StoreUnavailable, report_evictions

try:  # the redis client is needed only when backend = "redis"
    import redis
    import redis.sentinel
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError:  # pragma: no cover - the dependency is declared in pyproject.toml
    redis = None

__all__ = ["RedisStore"]

log = logging.getLogger(__name__)

# Expired outputs removed per script run in cleanup: each run blocks Redis for its duration,
# and 500 small deletions take well under a millisecond.
CLEANUP_BATCH = 500

# evict(index, sizes, bytes, prefix, cap, keep) -> {count, bytes}: removes the oldest outputs
# while the total is over cap, never `keep` (the id a put is about to return) nor the newest.
_EVICT_LUA = """
local function evict(index, sizes, bytes, prefix, cap, keep)
  local count, freed = 0, 0
  if cap <= 0 then return {0, 0} end
  local total = tonumber(redis.call('GET', bytes) or '0')
  if total <= cap then return {0, 0} end
  local newest = redis.call('ZRANGE', index, -1, -1)[1]
  while total > cap do
    local victim = nil
    for _, id in ipairs(redis.call('ZRANGE', index, 0, 2)) do
      if id ~= keep and id ~= newest then victim = id break end
    end
    if not victim then break end
    local size = tonumber(redis.call('HGET', sizes, victim) or '0')
    redis.call('DEL', prefix .. victim)
    redis.call('ZREM', index, victim)
    redis.call('HDEL', sizes, victim)
    total = redis.call('DECRBY', bytes, size)
    count = count + 1
    freed = freed + size
  end
  return {count, freed}
end
"""

# KEYS: text key, index, sizes, bytes. ARGV: id, text, created_ms, expire_at_ms, cap, prefix.
# The SET comes first: if Redis refuses it (out of memory), nothing else has changed.
_PUT_LUA = _EVICT_LUA + """
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[4])
local size = string.len(ARGV[2])
local old = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], size)
redis.call('INCRBY', KEYS[4], size - old)
return evict(KEYS[2], KEYS[3], KEYS[4], ARGV[6], tonumber(ARGV[5]), ARGV[1])
"""

# KEYS: text key, index, sizes, bytes. ARGV: id. Returns 1 if the text existed.
_DELETE_LUA = """
local existed = redis.call('DEL', KEYS[1])
local size = redis.call('HGET', KEYS[3], ARGV[1])
if size then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('DECRBY', KEYS[4], tonumber(size))
end
redis.call('ZREM', KEYS[2], ARGV[1])
return existed
"""

# KEYS: index, sizes, bytes. ARGV: cutoff_ms (created before it = expired), prefix, batch,
# cap. Removes up to `batch` expired outputs; once fewer were left, enforces the cap.
# Returns {expired, expired_bytes, evicted, evicted_bytes, remaining, remaining_bytes}.
_CLEANUP_LUA = _EVICT_LUA + """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[3])
local freed = 0
for _, id in ipairs(ids) do
  local size = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  redis.call('DEL', ARGV[2] .. id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('DECRBY', KEYS[3], size)
  freed = freed + size
end
local ev = {0, 0}
if #ids < tonumber(ARGV[3]) then
  ev = evict(KEYS[1], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[4]), '')
end
return {#ids, freed, ev[1], ev[2], redis.call('ZCARD', KEYS[1]),
        tonumber(redis.call('GET', KEYS[3]) or '0')}
"""


class RedisStore(Store):
    """A `Store` in Redis at ``settings.redis_url``, shared by all replicas using that URL.

    Thread-safe (redis-py's connection pool). Constructing it does not connect: a Redis that is
    down at start makes puts and gets UNAVAILABLE until it is back, and the service starts.
    ``on_evict(count, bytes)`` is called after a put or a cleanup evicted outputs for the cap.
    ``client``: a ready `redis.Redis` (tests); by default one is built from the settings.
    """

    def __init__(
        self,
        settings: TruncationSettings,
        clock: Callable[[], float] = time.time,
        on_evict: Callable[[int, int], None] | None = None,
        client: "redis.Redis | None" = None,
    ) -> None:
        if redis is None:
            raise RuntimeError("truncation backend 'redis' needs the redis package: pip install redis")
        super().__init__(settings, clock)
        self._on_evict = on_evict
        self._prefix = settings.redis_key_prefix
        self._index_key = self._prefix + "index"
        self._sizes_key = self._prefix + "sizes"
        self._bytes_key = self._prefix + "bytes"
        self._lock = threading.Lock()
        self._ids = IdGenerator()
        self._redis = client if client is not None else _client(settings)
        self._replicas = settings.replicas_to_ack
        self._bulkhead = Bulkhead(
            "Redis", settings.redis_max_concurrent_calls, settings.redis_call_timeout_seconds,
            settings.redis_breaker_failures, settings.redis_breaker_open_seconds)
        self._put_script = self._redis.register_script(_PUT_LUA)
        self._delete_script = self._redis.register_script(_DELETE_LUA)
        self._cleanup_script = self._redis.register_script(_CLEANUP_LUA)

    def close(self) -> None:
        self._bulkhead.close()
        self._redis.close()

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _name(output_id: str, tenant: str) -> str:
        """What the store calls a tenant's output (the module's docstring)."""
        return f"{tenant}/{output_id}" if tenant else output_id

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _keys(self, name: str) -> list[str]:
        return [self._key(name), self._index_key, self._sizes_key, self._bytes_key]

    def _call(self, what: str, deadline: Deadline, fn, *args, undo_if_late=None, **kwargs):
        return self._bulkhead.call(what, deadline, self._command, what, fn, args, kwargs,
                                   undo_if_late=undo_if_late)

    @staticmethod
    def _command(what: str, fn, args, kwargs):
        try:
            return fn(*args, **kwargs)
        except redis.ResponseError as e:
            # OOM under noeviction, a read-only replica, a script error: Redis said no
            raise StoreUnavailable(f"{what}: Redis refused: {_first_line(e)}") from e
        except redis.RedisError as e:
            raise NoAnswer(f"{what}: Redis unreachable: {_first_line(e)}") from e

    # -- Store ---------------------------------------------------------------------------

    def put(self, text: str | bytes, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> str:
        what = "storing tool output"
        data = self._utf8(text)
        with self._lock:
            output_id = self._ids.next(self._now_ms())
        created_ms = parse_output_id(output_id)[0]
        # alive while now - created <= retention (Store._expired): the key goes one ms later
        expire_at_ms = created_ms + self._retention_ms + 1
        name = self._name(output_id, tenant)
        keys = self._keys(name)
        args = [name, data, created_ms, expire_at_ms, self._settings.max_store_bytes, self._prefix]
        # a put answered as failed handed out no id: should it land all the same (Redis answers
        # after the wait was given up, or too few replicas acknowledge it), it is deleted again
        unheard = partial(self._delete_unheard, output_id, name)
        if not self._replicas:
            evicted, freed = self._call(what, deadline, self._put_script, keys=keys, args=args,
                                        undo_if_late=unheard)
        else:
            # half the call's time for the replicas: a missing acknowledgement is then answered
            # as such, before the bulkhead gives up on Redis
            wait_ms = max(1, int(self._bulkhead.budget(what, deadline) * 500))
            (evicted, freed), acked = self._call(what, deadline, self._put_acked, keys, args, wait_ms,
                                                 undo_if_late=unheard)
            if acked < self._replicas:
                unheard()
                raise StoreUnavailable(
                    f"{what}: Redis: {acked} of the {self._replicas} replicas required "
                    f"(redis_min_replicas_acked) had it within {wait_ms} ms; not acknowledged")
        report_evictions(self._on_evict, int(evicted), int(freed))
        return output_id

    def _delete_unheard(self, output_id: str, name: str) -> None:
        """Deletes an output stored by a put its caller was answered as failed. Not through the
        bulkhead: this may run on one of its threads. A failure is logged, never raised: the
        output then stays until retention or eviction."""
        try:
            self._delete_script(keys=self._keys(name), args=[name])
        except redis.RedisError as e:
            log.warning("deleting tool output %s, stored by a put answered as failed, failed: %s",
                        output_id, _first_line(e))

    def _put_acked(self, keys: list[str], args: list, wait_ms: int):
        """The put script, then WAIT on the same connection: ((evicted, freed), replicas acked)."""
        pipe = self._redis.pipeline(transaction=False)
        self._put_script(keys=keys, args=args, client=pipe)
        pipe.wait(self._replicas, wait_ms)
        return tuple(pipe.execute())

    def get_bytes(self, output_id: str, deadline: Deadline = NO_DEADLINE, tenant: str = "") -> bytes:
        """The stored UTF-8 as Redis holds it (no decode and re-encode for ranged reads)."""
        created_ms = parse_output_id(output_id)[0]  # InvalidOutputId before any Redis access
        if self._expired(created_ms, self._now_ms()):
            raise OutputNotFound(f"tool output {output_id} not found (expired)")
        data = self._call(f"reading tool output {output_id}", deadline, self._redis.get,
                          self._key(self._name(output_id, tenant)))
        if data is None:
            raise OutputNotFound(f"tool output {output_id} not found")
        return data

    def delete(self, output_id: str, tenant: str = "") -> bool:
        parse_output_id(output_id)
        name = self._name(output_id, tenant)
        existed = self._call(f"deleting tool output {output_id}", NO_DEADLINE, self._delete_script,
                             keys=self._keys(name), args=[name])
        return bool(existed)

    def list_ids(self) -> list[str]:
        """The names of the stored outputs: ids, ``<tenant>/<id>`` for a tenant's."""
        cutoff = self._now_ms() - self._retention_ms
        ids = self._call("listing tool outputs", NO_DEADLINE, self._redis.zrangebyscore,
                         self._index_key, cutoff, "+inf")
        return [i.decode("ascii") for i in ids]

    def usage(self) -> tuple[int, int]:
        pipe = self._redis.pipeline(transaction=True)
        pipe.zcard(self._index_key)
        pipe.get(self._bytes_key)
        count, total = self._call("reading tool-output store usage", NO_DEADLINE, pipe.execute)
        return int(count), int(total or 0)

    def cleanup(self, now: float | None = None) -> CleanupReport:
        """Expiry in batches of CLEANUP_BATCH (Redis serves other clients between them), then
        the cap. Safe on several replicas at once: each script sees a consistent store."""
        cutoff = self._now_ms(now) - self._retention_ms
        expired = expired_bytes = 0
        while True:
            n, freed, evicted, evicted_bytes, remaining, remaining_bytes = self._call(
                "cleaning up tool outputs", NO_DEADLINE, self._cleanup_script,
                keys=[self._index_key, self._sizes_key, self._bytes_key],
                args=[cutoff, self._prefix, CLEANUP_BATCH, self._settings.max_store_bytes])
            expired += int(n)
            expired_bytes += int(freed)
            if int(n) < CLEANUP_BATCH:
                break
        report_evictions(self._on_evict, int(evicted), int(evicted_bytes))
        return CleanupReport(
            expired=expired,
            evicted=int(evicted),
            bytes_freed=expired_bytes + int(evicted_bytes),
            evicted_bytes=int(evicted_bytes),
            remaining=int(remaining),
            remaining_bytes=int(remaining_bytes),
        )


def _client(settings: TruncationSettings) -> "redis.Redis":
    """The client of settings.redis_url, or of the master Sentinel names."""
    common = dict(
        socket_connect_timeout=settings.redis_connect_timeout_seconds,
        socket_timeout=settings.redis_timeout_seconds,
        # one retry, at once, on a connection error only: enough for a pooled connection that
        # went stale when Redis restarted (or, with Sentinel, failed over); more, or a retry
        # after a timeout, would only delay the UNAVAILABLE answer during an outage
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        health_check_interval=30,
    )
    if settings.redis_sentinels:
        tls = dict(ssl=True, ssl_ca_certs=settings.redis_tls_ca_file or None) if settings.redis_sentinel_tls else {}
        sentinel = redis.sentinel.Sentinel(
            [_host_port(a) for a in settings.redis_sentinels],
            sentinel_kwargs=dict(socket_connect_timeout=settings.redis_connect_timeout_seconds,
                                 socket_timeout=settings.redis_timeout_seconds,
                                 password=_secret(settings, "redis_sentinel_password_file"), **tls))
        return sentinel.master_for(settings.redis_sentinel_master,
                                   password=_secret(settings, "redis_password_file"), **tls, **common)
    if settings.redis_tls_ca_file:
        common["ssl_ca_certs"] = settings.redis_tls_ca_file
    return redis.Redis.from_url(settings.redis_url, **common)


def _secret(settings: TruncationSettings, key: str) -> str | None:
    """The password in the file setting `key` names (its last line break dropped), or None."""
    path = getattr(settings, key)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().removesuffix("\n").removesuffix("\r")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"truncation setting {key!r}: cannot read {path} ({type(e).__name__})") from None


def _host_port(address: str) -> tuple[str, int]:
    """("host", port) of "host:port" or "[v6]:port" (settings checked the form)."""
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:200]
