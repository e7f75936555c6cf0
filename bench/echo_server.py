"""The framework's floor for bench_floor.py: a trivial grpc.aio service in its own process, built
as contextsvc's server is (the transport on an event loop of its own thread, the work on a
thread pool, the serving process's allocator and collector policies), whose one unary method
answers any request with a fixed response of a given size.

--measure: the same service whose worker answers with contextsvc's own Measure of the request
(the servicer's parse, Measure and serialization, the memo on, as `serve` runs them), with
nothing else of contextsvc's transport: no admission, deadlines, metrics or request-wait
bookkeeping. Beside contextsvc and the plain echo it tells what the step costs in a server from
what contextsvc's transport adds to grpc's.

Prints "serving PORT" on stdout once it serves; ends on SIGTERM.
Usage: python bench/echo_server.py (--response-bytes N | --measure) [--port P (SO_REUSEPORT, shared)]
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import signal
import sys
import threading
from typing import Callable

import grpc

from contextsvc.serving_process import set_policies
from contextsvc.thread_names import name_os_thread

METHOD = "/bench.Echo/Echo"
WORKERS = 20  # contextsvc's server.workers default
WORKER_NAME = "rpc"  # its workers' names' prefix, as contextsvc names them (bench_floor reads their CPU)


def identity(data: bytes) -> bytes:
    return data


def measure() -> Callable[[bytes], bytes]:
    """The request's Measure response bytes, as contextsvc's server computes them."""
    from contextsvc import config
    from contextsvc.rpc import conversion, servicer
    from contextsvc.v1 import context_pb2 as pb

    service = servicer.ContextService(config.Config())
    parse, call = conversion.parser(pb.MeasureRequest, service.memo), service.serialized("Measure")
    return lambda request: call(parse(request), None)


def handler(executor, work: Callable[[bytes], bytes]) -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(executor, work, request)

    service, method = METHOD.strip("/").split("/")
    return grpc.method_handlers_generic_handler(service, {
        method: grpc.unary_unary_rpc_method_handler(echo, request_deserializer=identity,
                                                    response_serializer=identity)})


async def start(port: int, executor, work: Callable[[bytes], bytes]) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers([handler(executor, work)])
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    answer = ap.add_mutually_exclusive_group(required=True)
    answer.add_argument("--response-bytes", type=int, help="answer a fixed response of this size")
    answer.add_argument("--measure", action="store_true", help="answer contextsvc's Measure of the request")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    set_policies()  # the serving process's, as `contextsvc serve` sets them
    if args.measure:
        work = measure()
    else:
        response = b"x" * args.response_bytes
        work = lambda request: response  # noqa: E731
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=WORKER_NAME,
                                                     initializer=name_os_thread)
    loop = asyncio.new_event_loop()
    loop.call_soon(name_os_thread)
    threading.Thread(target=loop.run_forever, name="grpc-loop", daemon=True).start()
    server, port = asyncio.run_coroutine_threadsafe(
        start(args.port, executor, work), loop).result()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"serving {port}", flush=True)
    stop.wait()
    asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
