"""Concurrent steps and the memo's lock: CPU a step with 16 threads beside one, in one run.

16 sessions of ~10 KB (bench_floor's workload: each grown by one step per call, cycling through
--variants steps) are measured in process through the server's own parse and Measure: once by
one thread taking the sessions in turn, once by 16 threads (one a session, as 16 callers keep 16
of the server's workers busy). Each under the shipped memo, whose lookups take no lock, and under
the same memo taking its lock at every lookup and step start (as it did before), the baseline.
The four runs alternate for --rounds rounds. Printed per side: CPU ms a step and voluntary
context switches a step (getrusage, every thread of the process), medians over the rounds.
Usage: python bench/memo_threads.py [--rounds 5] [--variants 32]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_floor import CALLERS as SESSIONS, SMALL_TEXT, requests_per_caller  # noqa: E402

from contextsvc import config, memo  # noqa: E402
from contextsvc.rpc import conversion, servicer  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402


class LockedLookups(memo.Memo):
    """The baseline: every lookup and step start under the memo's lock (the thread's tally made
    first: making it takes the lock)."""

    def get(self, key):
        self._tally()
        with self._lock:
            return super().get(key)

    def get_many(self, keys, counted=True):
        self._tally()
        with self._lock:
            return super().get_many(keys, counted)

    def touch(self, keys):
        self._tally()
        with self._lock:
            super().touch(keys)

    def begin_step(self):
        with self._lock:
            self._step.refused = 0
        super().begin_step()


def service(memo_class) -> tuple:
    """(service, parse) with a memo of memo_class at the configured bound and hold."""
    cfg = config.Config()
    svc = servicer.ContextService(cfg)
    svc.memo.__class__ = memo_class  # same state, the lookups' locking alone differs
    return svc, conversion.parser(pb.MeasureRequest, svc.memo)


def run(svc, parse, sessions: list[list[bytes]], threads: int) -> tuple[float, float]:
    """(CPU ms a step, voluntary context switches a step) of every session's steps once."""
    def steps(own: list[list[bytes]]):
        for i in range(len(own[0])):
            for session in own:
                svc.Measure(parse(session[i]), None).SerializeToString()

    shares = [sessions[k::threads] for k in range(threads)]
    calls = sum(map(len, sessions))
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    if threads == 1:
        steps(sessions)
    else:
        workers = [threading.Thread(target=steps, args=(share,)) for share in shares]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (time.process_time() - cpu) / calls * 1e3, (after.ru_nvcsw - before.ru_nvcsw) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", type=int, default=32)
    args = ap.parse_args()
    sessions = requests_per_caller(args.variants)
    sides = {name: service(cls) for name, cls in (("lock-free lookups", memo.Memo),
                                                   ("locked lookups", LockedLookups))}
    for svc, parse in sides.values():
        run(svc, parse, sessions, 1)  # every message in the memo
    figures: dict = {}
    for _ in range(args.rounds):
        for name, (svc, parse) in sides.items():
            for threads in (1, SESSIONS):
                figures.setdefault((name, threads), []).append(run(svc, parse, sessions, threads))
    print(f"{SESSIONS} sessions of ~{SMALL_TEXT // 1000} KB, {args.variants} steps each; "
          f"medians of {args.rounds} rounds")
    for name in sides:
        one = statistics.median(f[0] for f in figures[(name, 1)])
        for threads in (1, SESSIONS):
            cpu = statistics.median(f[0] for f in figures[(name, threads)])
            switches = statistics.median(f[1] for f in figures[(name, threads)])
            print(f"  {name:18} {threads:2} thread(s): {cpu:.3f} CPU ms a step ({cpu / one:.2f}x of one "
                  f"thread), {switches:5.1f} context switches a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
