"""Command line: `contextsvc serve [--host] [--port] [--metrics-port] [--config FILE]`."""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import os
import signal
import sys

from . import config as config_mod


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contextsvc", description="Context management for LLM agents over gRPC.")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gRPC service")
    serve.add_argument("--config", help="TOML config file (defaults are embedded)")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="gRPC port (default 50051; 0 picks a free one)")
    serve.add_argument("--metrics-port", type=int, help="Prometheus port (default 9464; 0 picks a free one)")
    serve.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    serve.add_argument("--processes", type=int,
                       help="serving processes sharing the port (default 1; 0 = one per CPU)")
    # one of a supervisor's processes (see supervisor.py), not for direct use
    serve.add_argument("--shared-port", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        cfg = config_mod.load(args.config)
    except (OSError, ValueError) as e:
        print(f"contextsvc: config: {e}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port),
                                   ("metrics_port", args.metrics_port),
                                   ("processes", args.processes)) if v is not None}
    try:
        cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, **overrides))
    except ValueError as e:
        print(f"contextsvc: config: {e}", file=sys.stderr)
        return 2

    from .app import Server
    from .serving_process import set_policies
    from .supervisor import READY_LINE, Supervisor, follow_parent, process_count

    set_policies()

    try:
        if args.shared_port:
            follow_parent()
            server = Server(cfg, metrics_enabled=not args.no_metrics, shared_port=True)
        elif process_count(cfg) > 1:
            server = Supervisor(cfg, args.config, metrics_enabled=not args.no_metrics)
        else:
            server = Server(cfg, metrics_enabled=not args.no_metrics)
    except (OSError, ValueError) as e:  # e.g. an unreadable token file, an unset token variable
        print(f"contextsvc: config: {e}", file=sys.stderr)
        return 2
    # `kill -USR1` writes every thread's stack to stderr: what a stuck call or stop is waiting on
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    server.stop_on_signals()  # before start: a signal right after the start line is honoured
    try:
        server.start()
    except OSError as e:
        print(f"contextsvc: {e}", file=sys.stderr)
        return 1
    if args.shared_port:
        print(READY_LINE, flush=True)
    server.wait()
    # The stop has drained every call it could and closed what the service owns. The interpreter's
    # own exit would then join every worker thread of grpc's pool: one call that ignored its
    # cancellation (or a thread the transport left) would hold the process past the grace period,
    # which is the operator's bound. So leave directly.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(server.exit_code)
