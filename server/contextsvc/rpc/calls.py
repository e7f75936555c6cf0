"""Each ContextService method as a grpc.aio handler, the same steps for every method.

The transport is asynchronous so that no thread waits on a client: a call waiting for its request,
or for its client to read the response, is a coroutine, not a worker. The steps of a call:
1. the bearer token, from the headers, before the request body is read;
2. the request, awaited for at most `server.request_wait_seconds` (within the caller's deadline):
   a client that opens calls and never sends them holds nothing but the coroutine;
3. admission (admission.py): a free slot (past the limit, a spare thread for a connection's
   first call while another connection's burst holds most slots), or RESOURCE_EXHAUSTED at once;
4. parsing and the core's work on the bounded executor (the hot path is CPU-bound and holds
   the GIL);
5. the response, refused when over `server.max_response_bytes`, and sent only while the bytes all
   unread responses hold stay under `server.max_unsent_bytes` (_hold says how long they are held).
   The handler returns it: grpc sends the message and the status in one batch, so a replica that
   dies mid-call leaves its proxy either no response (which it retries elsewhere) or a whole one,
   never a message without its status.
What the core keeps only for a caller who gets the answer (a stored output, CallView.if_abandoned)
is undone when the call ends cancelled or refused instead.
Errors of the core become statuses (statuses.py); count, latency and request size are recorded per
method and status.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Executor
from typing import Callable

import grpc
from google.protobuf.message import DecodeError

from .admission import Admission
from .security import TokenCheck
from .statuses import identity, status_for
from ..errors import Exhausted

log = logging.getLogger("contextsvc")

# HTTP/2's default initial stream window: a response this small is sent whether or not its
# client reads, so no client can hold it in the transport
INITIAL_WINDOW_BYTES = 65535
# a cancellation this close to the call's deadline is the caller's deadline passing (see behavior)
DEADLINE_LAG_SECONDS = 0.25


class CallView:
    """What the core reads of its call from the executor thread (servicer._deadline): the time
    left, whether the caller is still there, the tenant its token names ("" without tokens), and
    what to undo should the call end without handing its answer to grpc (if_abandoned)."""
    __slots__ = ("_end", "_active", "tenant", "_lock", "_undo")

    def __init__(self, remaining: float | None):
        self._end = None if remaining is None else time.monotonic() + remaining
        self._active = True
        self.tenant = ""
        self._lock = threading.Lock()  # if_abandoned (a worker) against abandoned (the event loop)
        self._undo: list[Callable[[], None]] = []

    def time_remaining(self) -> float | None:
        return None if self._end is None else self._end - time.monotonic()

    def is_active(self) -> bool:
        return self._active and (self._end is None or time.monotonic() < self._end)

    def end(self) -> None:
        with self._lock:
            self._active = False

    def if_abandoned(self, undo: Callable[[], None]) -> bool:
        """Keeps undo, to run should the call end without its answer; False, keeping nothing,
        when the caller has gone already (the core then undoes at once)."""
        with self._lock:
            if not self.is_active():
                return False
            self._undo.append(undo)
            return True

    def abandoned(self) -> list[Callable[[], None]]:
        """Ends a call whose answer grpc will not send: the undos kept, to run."""
        with self._lock:
            self._active = False
            undo, self._undo = self._undo, []
        return undo


class HeldBytes:
    """Bytes the calls hold together (what: of what, setting: the limit's name), bounded by limit
    (0: none). One call is always let through (nothing else held), whatever its size."""

    def __init__(self, limit: int, what: str, setting: str):
        self.limit = limit  # 0 = no bound
        self.what = what
        self.setting = setting
        self._lock = threading.Lock()
        self.held = 0

    def take(self, what: str, n: int) -> None:
        with self._lock:
            if self.limit and self.held and self.held + n > self.limit:
                raise Exhausted(f"{what}: {self.held} bytes of {self.what} ({self.setting} {self.limit}); "
                                "retry later")
            self.held += n

    def give(self, n: int) -> None:
        with self._lock:
            self.held -= n


class WaitingCalls:
    """Calls open in the transport per client address (the peer's host), bounded by limit (0:
    none): from the call's start until it is over, so both a call waiting for its request
    message and one whose response its client does not read count. Used on the transport's
    event loop only (calls start there, and grpc runs done callbacks there): no lock."""

    def __init__(self, limit: int):
        self.limit = limit
        self._by_client: dict = {}

    def enter(self, client: str) -> bool:
        n = self._by_client.get(client, 0)
        if self.limit and n >= self.limit:
            return False
        self._by_client[client] = n + 1
        return True

    def leave(self, client: str) -> None:
        n = self._by_client[client] - 1
        if n:
            self._by_client[client] = n
        else:
            del self._by_client[client]


def client_of(peer: str) -> str:
    """The address part of grpc's peer string ("ipv4:10.0.0.7:53412" -> "ipv4:10.0.0.7")."""
    return peer.rsplit(":", 1)[0] if peer.startswith(("ipv4:", "ipv6:")) else peer


class CallSettings:
    """What every call of the service shares: limits, the executor, metrics, the token."""

    def __init__(self, admission: Admission, executor: Executor, metrics, token: TokenCheck | None,
                 max_response_bytes: int, unsent: HeldBytes, request_wait: float, send_wait: float,
                 waiting: WaitingCalls | None = None, working: HeldBytes | None = None):
        # the limits are the server's config (config.ServerConfig says what each is for)
        self.admission = admission
        self.executor = executor
        self.metrics = metrics
        self.token = token
        self.max_response_bytes = max_response_bytes  # 0 = grpc's own limit only
        self.unsent = unsent
        self.request_wait = request_wait
        self.send_wait = send_wait
        self.waiting = waiting or WaitingCalls(0)
        self.working = working or HeldBytes(0, "", "")


class Refused(Exception):
    """Ends the call with this status (raised inside the handler, turned into an abort once)."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code = code
        self.details = details


def _bounded(remaining: float | None, bound: float) -> float:
    return bound if remaining is None else max(0.0, min(remaining, bound))


def hold_open(context, waiting: WaitingCalls, peer: str) -> None:
    """Counts the call against its client (the peer's address) until it is over; Refused when
    that client has waiting.limit calls open already. One client's calls that never send their
    request (headers alone, a thousand streams), or never read their responses (a flow-control
    window of 0: even a small response and its status then stay in the transport), would
    otherwise fill the transport's bound (server.max_pending_rpcs) for as long as their
    connections live, and every other caller and health check be refused. A refusal is a status
    alone, which HTTP/2 sends whatever the client's window."""
    client = client_of(peer)
    if not waiting.enter(client):
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"{waiting.limit} calls of this client ({client}) are open, waiting for their request "
                      "message or for their response to be read (server.max_waiting_calls_per_client): send "
                      "each call's request as it opens, and read its response")
    context.add_done_callback(lambda _context: waiting.leave(client))


async def receive(context, method: str, request_wait: float) -> bytes:
    """The call's one request message (_read_request), within request_wait seconds
    (server.request_wait_seconds) or the call's deadline."""
    return await _read_request(context, method, _bounded(context.time_remaining(), request_wait))


async def _read_request(context, method: str, wait: float) -> bytes:
    # context.read(), not the request iterator: grpc's iterator holds the last message it yielded
    # until the cycle collector finds it
    try:
        async with asyncio.timeout(wait):  # no task of its own per call, as wait_for would make
            data = await context.read()
    except TimeoutError:
        raise Refused(grpc.StatusCode.DEADLINE_EXCEEDED,
                       f"{method}: no request message arrived within {wait:g} s "
                       "(server.request_wait_seconds, or the call's deadline)") from None
    if data is grpc.aio.EOF:
        # A call grpc ended before its message arrived sees the end too: one whose message is
        # over server.max_request_bytes (refused RESOURCE_EXHAUSTED to its caller by grpc
        # itself), or one its caller cancelled. Its cancellation is pending by now, and it ends
        # as cancelled (the two cannot be told apart here), not as a caller that sent no message.
        await asyncio.sleep(0)
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"request: no {method} request message sent")
    return data


def unary_handler(settings: CallSettings, method: str, parse: Callable[[bytes], object],
                  work: Callable[[object, CallView], bytes]) -> grpc.RpcMethodHandler:
    """The handler of one unary method. Registered as a client stream (the bytes on the wire are
    the same: one message each way) so that the call starts before its request has arrived."""
    metrics = None if settings.metrics is None else settings.metrics.method(method)

    async def behavior(_requests, context):
        start = time.perf_counter()
        view = CallView(context.time_remaining())
        code = grpc.StatusCode.OK
        recorded = False
        if metrics is not None:
            metrics.started()
            context.add_done_callback(metrics.finished)  # once the status is sent, or the call ended

        def record() -> None:
            nonlocal recorded
            view.end()
            if metrics is not None and not recorded:
                metrics.call(code.name, time.perf_counter() - start)
            recorded = True

        try:
            # aborted here, once _answer's frame (holding the request) has gone: the abort's
            # exception would otherwise keep it alive with its traceback
            answer = await _answer(settings, method, parse, work, context, view, metrics)
            if isinstance(answer, tuple):
                code = answer[0]
                record()  # before the status leaves: a caller that has it finds the call counted
                _undo_abandoned(settings, method, view)
                await context.abort(*answer)
            # Handed to grpc now, which sends it with the status in one batch. A cancellation
            # from here on does not reach this handler (grpc-python neither cancels it nor says
            # whether that batch was sent), nor could the server tell a response its client
            # read from one it dropped on cancelling: what the core kept for it stays.
            return answer
        except asyncio.CancelledError:
            # the caller's deadline starts when it sends, ours when its headers arrive: its own
            # cancellation at its deadline reaches us a moment before ours passes
            left = context.time_remaining()
            code = (grpc.StatusCode.DEADLINE_EXCEEDED if left is not None and left <= DEADLINE_LAG_SECONDS
                    else grpc.StatusCode.CANCELLED)
            _undo_abandoned(settings, method, view)
            raise
        finally:
            record()  # (an answer is sent once the handler returns: counted before it too)

    return grpc.stream_unary_rpc_method_handler(behavior, request_deserializer=identity,
                                                response_serializer=identity)


def _undo_abandoned(settings: CallSettings, method: str, view: CallView) -> None:
    """Runs what the core kept to undo should its caller not get the answer (an output stored
    under an id only the answer names), on the executor: a store call may wait on a network, and
    the event loop must not."""
    for undo in view.abandoned():
        try:
            settings.executor.submit(undo)
        except RuntimeError:  # the executor has shut down with the server: retention removes it
            log.warning("%s: the server is stopping; what the core kept for a caller that left stays", method)


async def _answer(settings: CallSettings, method: str, parse, work, context,
                  view: CallView, metrics) -> tuple | bytes:
    """Steps 1-5 of the call: the response's bytes, or the (status, details) it is refused with."""
    try:
        if settings.token is not None:
            reason, view.tenant = settings.token.check(context.invocation_metadata())
            if reason:
                return grpc.StatusCode.UNAUTHENTICATED, reason
        peer = context.peer()
        hold_open(context, settings.waiting, peer)
        data = await receive(context, method, settings.request_wait)
        if metrics is not None:
            metrics.request(len(data))
        out = await _run(settings, method, parse, work, data, view, peer)
        del data
        _hold(settings, method, context, len(out))
        return out
    except Refused as e:
        return e.code, e.details
    except Exception as e:  # noqa: BLE001 - the core's errors by their status, any other INTERNAL
        status = status_for(e)
        if status is None:
            log.exception("%s failed", method)
            return grpc.StatusCode.INTERNAL, f"{method}: internal error ({type(e).__name__})"
        return status, str(e)


async def _run(settings: CallSettings, method: str, parse, work, data: bytes, view: CallView,
               peer: str) -> bytes:
    """work(parse(data), view), the response's bytes, on the executor (parsing a large request
    would hold the event loop), in an admission slot held until the thread is done with it (a
    caller who leaves does not stop the thread: admission counts it as abandoned), its bytes
    counted against server.max_working_request_bytes for as long (what a request costs while it
    is worked on is a few times its bytes: 32 requests of 60 MB at once took 2.8 GB)."""
    admission, working, size = settings.admission, settings.working, len(data)
    working.take(method, size)
    try:
        ticket = admission.enter_call(method, view.is_active, peer)
    except BaseException:
        working.give(size)
        raise
    max_response = settings.max_response_bytes

    def run() -> tuple:
        # answers (refusal, bytes) rather than raising: an exception crossing the future would
        # carry this frame (and the request) in its traceback, and the two futures wrap_future
        # links refer to each other: it would stay until the cycle collector runs
        try:
            try:
                request = parse(data)
            except (DecodeError, ValueError, RuntimeError) as e:
                return (grpc.StatusCode.INVALID_ARGUMENT,
                        f"request: not a valid {method} request message ({e})"), b""
            out = work(request, view)
        except Exception as e:  # noqa: BLE001 - the core's errors by their status, any other INTERNAL
            status = status_for(e)
            if status is None:
                log.exception("%s failed", method)
                return (grpc.StatusCode.INTERNAL, f"{method}: internal error ({type(e).__name__})"), b""
            return (status, str(e)), b""
        finally:
            admission.leave(ticket)
            working.give(size)
        # a response over the limit is refused with a reason (and counted so) instead of failing
        # in the transport after an OK was recorded
        if max_response and len(out) > max_response:
            return (grpc.StatusCode.RESOURCE_EXHAUSTED, f"{method}: the response is {len(out)} bytes, "
                    f"over server.max_response_bytes ({max_response})"), b""
        return None, out

    future = settings.executor.submit(run)
    try:
        refusal, out = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        view.end()
        if future.cancel():  # never started: its slot and bytes are given back here
            admission.leave(ticket)
            working.give(size)
        raise
    if refusal is not None:
        raise Refused(*refusal)
    return out


def _hold(settings: CallSettings, method: str, context, n: int) -> None:
    """Counts a response larger than a stream's initial HTTP/2 window against max_unsent_bytes
    until its call is over: its client has read it, or the call ended (its deadline, a reset, the
    connection closed, which max_connection_age_seconds bounds). A client that does not read
    can hold such a response in the transport; one still unread after send_wait_seconds is
    logged."""
    if n <= INITIAL_WINDOW_BYTES:
        return
    unsent = settings.unsent
    unsent.take(method, n)
    stalled = asyncio.get_running_loop().call_later(
        settings.send_wait, log.warning, "%s: the client had not read the %d-byte response after %g s "
        "(server.send_wait_seconds); it stays counted until read or the connection closes",
        method, n, settings.send_wait)

    def over(_context) -> None:
        stalled.cancel()
        unsent.give(n)

    context.add_done_callback(over)
