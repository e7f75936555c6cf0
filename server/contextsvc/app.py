"""The running server: gRPC with health and reflection, the metrics endpoint, graceful stop."""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import logging
import os
import threading
import time

import grpc

from . import native, truncation
from .config import Config
from .metrics import Metrics
from .rpc.admission import Admission
from .rpc import conversion
from .rpc.calls import CallSettings, HeldBytes, WaitingCalls, unary_handler
from .rpc.health import SERVING, Health
from .rpc.security import TokenCheck, bearer_token, bearer_tokens, server_credentials
from .rpc.servicer import ContextService
from .rpc.standard_services import HEALTH_SERVICE, REFLECTION_SERVICE, StandardServices
from .signals import stop_on_signals, wait_for_stop
from .thread_names import name_os_thread
from .v1 import context_pb2 as pb

log = logging.getLogger("contextsvc")

# how long past the grace period the transport's own shutdown may take before the stop goes on
TRANSPORT_STOP_SLACK_SECONDS = 10.0
# after a drain, how long new calls are refused UNAVAILABLE by name before the listener closes
REFUSAL_SECONDS = 1.0
# how long tasks still on the transport's loop after its shutdown get to end once cancelled
LOOP_CLOSE_SECONDS = 2.0

SERVICE = pb.DESCRIPTOR.services_by_name["ContextService"]
SERVICE_NAME = SERVICE.full_name


def make_store(settings: truncation.TruncationSettings, on_evict=None) -> truncation.Store:
    """The tool-output store of truncation.backend: the local directory, or the shared Redis."""
    if settings.backend == "redis":
        from .truncation.redis_store import RedisStore

        return RedisStore(settings, on_evict=on_evict)
    return truncation.LocalDiskStore(settings.directory, settings, on_evict=on_evict)


def start_line(cfg: Config, port: int, metrics_port: int | None, tokens: int) -> str:
    """What `contextsvc serve` logs once it serves: where, and what guards each port (TLS and
    the tokens, how many, guard gRPC; the metrics port is plain HTTP, its /healthz always open)."""
    s = cfg.server
    transport = ("TLS, client certificates" if s.tls_client_ca_file else "TLS" if s.tls_cert_file
                 else "plaintext")
    guard = "no token" if not tokens else "bearer token" if tokens == 1 else f"{tokens} bearer tokens (tenants)"
    grpc_part = f"{s.address(port)} ({transport}, {guard})"
    if metrics_port is None:
        return f"contextsvc serving gRPC on {grpc_part}, metrics off, hot path {native.IMPLEMENTATION}"
    guard = "bearer token" if s.metrics_auth else "open"
    return (f"contextsvc serving gRPC on {grpc_part}, metrics http://{s.address(metrics_port, s.metrics_bind)}"
            f"/metrics ({guard}, /healthz open), hot path {native.IMPLEMENTATION}")


def service_handler(settings: CallSettings, servicer: ContextService) -> grpc.GenericRpcHandler:
    """Every ContextService method, each through calls.unary_handler."""
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {
        m.name: unary_handler(settings, m.name, conversion.parser(getattr(pb, m.input_type.name), servicer.memo),
                              servicer.serialized(m.name))
        for m in SERVICE.methods})


class Server:
    """One service instance. start() binds; port and metrics_port then hold the bound ports.

    shared_port: this is one of several processes on one port (see supervisor.py): the port is
    bound with SO_REUSEPORT and metrics are recorded for the supervisor to serve, not served."""

    def __init__(self, cfg: Config, metrics_enabled: bool = True, shared_port: bool = False):
        self.cfg = cfg
        self.shared_port = shared_port
        self.metrics = Metrics() if metrics_enabled else None
        self.port = None
        self.metrics_port = None
        self._stopped = threading.Event()
        self._done = threading.Event()
        self.exit_code = 0  # 1 when the stop failed half-way
        s = cfg.server
        # config errors (an unreadable or invalid certificate, key or token) surface here, before
        # any socket is bound
        self._credentials = server_credentials(s)
        self._admission = Admission(s.workers, s.max_concurrent_rpcs, s.max_streams)
        self._token = bearer_token(s)  # the operator's: it guards the metrics too
        tokens = bearer_tokens(s)
        self._tokens = len(tokens)
        if cfg.summarizer.backend != "offline":
            # the SDK takes seconds to import: paid here, not out of the first caller's deadline
            importlib.import_module(cfg.summarizer.backend)  # each LLM backend is named after its SDK
        m = self.metrics
        self.store = make_store(cfg.truncation, on_evict=m.record_eviction if m else None)
        self._cleanup = truncation.CleanupScheduler(self.store, cfg.truncation,
                                                    on_report=m.record_cleanup if m else None)
        # the transport runs on an event loop of its own; the core's work on `workers` threads
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=s.workers, thread_name_prefix="rpc",
                                                               initializer=name_os_thread)
        self._loop = asyncio.new_event_loop()
        self._loop.call_soon(name_os_thread)
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="grpc-loop", daemon=True)
        self._loop_thread.start()
        check = TokenCheck(tokens) if tokens else None
        waiting = WaitingCalls(s.max_waiting_calls_per_client)
        unsent = HeldBytes(s.max_unsent_bytes, "responses are waiting for their clients to read them",
                           "server.max_unsent_bytes")
        working = HeldBytes(s.max_working_request_bytes, "requests are being worked on",
                            "server.max_working_request_bytes")
        settings = CallSettings(self._admission, self._executor, m, check, s.max_response_bytes, unsent,
                                s.request_wait_seconds, s.send_wait_seconds, waiting, working)
        names = (SERVICE_NAME, HEALTH_SERVICE) + ((REFLECTION_SERVICE,) if s.reflection else ())
        self._health = Health(self._loop, s.max_watch_streams, s.stream_idle_seconds)
        self._standard = StandardServices(self._health, self._admission, s.stream_idle_seconds, names,
                                          s.reflection, serving_names=("", SERVICE_NAME), token=check,
                                          request_wait=s.request_wait_seconds, waiting=waiting)
        handlers = [service_handler(settings, ContextService(cfg, m, self.store))] + self._standard.handlers()
        self._grpc = self._on_loop(self._make_transport(handlers))

    async def _make_transport(self, handlers) -> grpc.aio.Server:
        s = self.cfg.server
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", s.max_request_bytes),
                ("grpc.max_send_message_length", s.max_response_bytes),
                ("grpc.so_reuseport", int(self.shared_port)),
                # advertised in SETTINGS: a client opens at most this many calls per connection
                ("grpc.max_concurrent_streams", s.max_streams_per_connection),
                ("grpc.max_connection_age_ms", int(s.max_connection_age_seconds * 1000)),
                ("grpc.max_connection_age_grace_ms", int(s.connection_age_grace_seconds * 1000)),
            ],
            maximum_concurrent_rpcs=s.max_pending_rpcs or None,
        )
        server.add_generic_rpc_handlers(handlers)
        return server

    def _close_loop(self) -> None:
        """Cancels what still runs on the transport's loop, then stops and closes it: a task left
        on a stopped loop would keep its call (and the service behind it) for the process's life."""
        async def cancel_tasks():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=LOOP_CLOSE_SECONDS)

        try:
            self._on_loop(cancel_tasks(), LOOP_CLOSE_SECONDS + 1)
        except concurrent.futures.TimeoutError:
            log.warning("contextsvc: tasks on the transport's loop did not end; closing without them")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(LOOP_CLOSE_SECONDS)
        if not self._loop_thread.is_alive():
            self._loop.close()

    def _on_loop(self, coroutine, timeout: float | None = None):
        """Runs coroutine on the transport's loop and returns its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def start(self) -> "Server":
        s = self.cfg.server
        creds = self._credentials
        address = s.address(s.port)
        try:
            self.port = self._on_loop(self._bind(address, creds))
        except RuntimeError:  # grpc's "Failed to bind to address"
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot bind gRPC on {address} (server.port): Address already in use, "
                          "or not an address of this machine")
        if self.metrics is not None and not self.shared_port:
            self.metrics_port = self.metrics.serve(s.metrics_bind, s.metrics_port, health=self.serving,
                                                   token=self._token if s.metrics_auth else "")
        self._cleanup.start()
        for name in ("", SERVICE_NAME):
            self._health.set(name, SERVING)
        if self.shared_port:
            log.info("contextsvc process %d serving gRPC on %s", os.getpid(), s.address(self.port))
            return self
        log.info("%s", start_line(self.cfg, self.port, self.metrics_port, self._tokens))
        return self

    async def _bind(self, address: str, creds) -> int:
        port = self._grpc.add_secure_port(address, creds) if creds else self._grpc.add_insecure_port(address)
        if port:
            await self._grpc.start()
        return port

    def serving(self, service: str = "") -> bool:
        """What grpc.health.v1 Check answers for service ("" = the whole server) is SERVING:
        the metrics port's /healthz mirrors it for HTTP-only health checks."""
        return self._standard.check(service) == SERVING

    def stop(self, grace: float | None = None, drain: float = 0.0) -> None:
        """Stops taking work, lets in-flight calls finish within the grace period.

        For drain seconds first, health says NOT_SERVING while calls are still served as
        before, so a proxy's health checks take the replica out before it refuses anything
        (a refusal inside an HTTP/2 answer is one a proxy cannot retry). Then new calls are
        answered UNAVAILABLE by the service itself for REFUSAL_SECONDS, and the transport closes."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        try:
            self._stop(grace, drain)
        except Exception:  # the process must still end: cli waits for _done
            log.exception("contextsvc: stopping failed; exiting without the rest of the stop")
            self.exit_code = 1
        finally:
            self._done.set()

    def _stop(self, grace: float | None, drain: float) -> None:
        self._health.enter_graceful_shutdown()
        if drain > 0:
            time.sleep(drain)
        self._admission.close()
        if drain > 0:
            # refused by name for a while before the listener closes: a direct client's next
            # call meets a reason to go elsewhere, not a closed or cancelling transport
            time.sleep(REFUSAL_SECONDS)
        self._standard.end_watches()
        grace = self.cfg.server.shutdown_grace_seconds if grace is None else grace
        # grpc cancels what is left after the grace; its own shutdown gets a bounded wait too, so
        # that nothing in the transport can hold the stop (and the process) open indefinitely
        try:
            self._on_loop(self._grpc.stop(grace), grace + TRANSPORT_STOP_SLACK_SECONDS)
            transport_stopped = True
        except concurrent.futures.TimeoutError:
            transport_stopped = False
        self._close_loop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        # grpc cannot stop a thread: work that does not notice the cancellation keeps running;
        # `contextsvc serve` exits without it (cli.main)
        unfinished = self._admission.running()
        if unfinished:
            log.warning("contextsvc: %d calls still running after the %g s grace period; "
                        "stopping without them", unfinished, grace)
        elif not transport_stopped:
            log.warning("contextsvc: the gRPC transport had not stopped %g s after the grace period; "
                        "stopping without it", TRANSPORT_STOP_SLACK_SECONDS)
        else:
            log.info("contextsvc: in-flight calls finished")
        self._cleanup.stop()
        self.store.close()
        if self.metrics is not None and not self.shared_port:
            self.metrics.stop()
        log.info("contextsvc stopped")

    def wait(self) -> None:
        """Blocks until stop() has drained in-flight calls."""
        wait_for_stop(self._done)

    def stop_on_signals(self) -> None:
        stop_on_signals(functools.partial(self.stop, drain=self.cfg.server.drain_seconds),
                        "reporting NOT_SERVING, then finishing in-flight calls")
