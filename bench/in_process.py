"""Measure in process, as the server runs it: its servicer's parse, step and serialization, the
memo on (the bench scripts that time a step without the transport)."""
from __future__ import annotations

import statistics
import time

from contextsvc import config
from contextsvc.rpc import conversion, servicer
from contextsvc.v1 import context_pb2 as pb


def timed(requests: list) -> tuple:
    """(the first call, the median of the calls after the second) in ms, of Measure on each of
    the serialized requests in turn, on a fresh servicer."""
    service = servicer.ContextService(config.Config())
    parse, call = conversion.parser(pb.MeasureRequest, service.memo), service.serialized("Measure")
    times = []
    for data in requests:
        start = time.perf_counter()
        call(parse(data), None)
        times.append((time.perf_counter() - start) * 1e3)
    return times[0], statistics.median(times[2:])
