"""How long work goes on after the caller's deadline, and the server's peak RSS (issue 16, item 3).

Starts a real `contextsvc serve` process per case, sends one call with a short deadline, then
polls /metrics until the server has counted the call (it counts a call when its work ends,
whatever the caller saw): the time from the caller's deadline to then is how long the abandoned
work went on. Prints one line per case with the server's peak RSS.

    PYTHONPATH=server python bench/bench_deadline.py [case ...]
"""
from __future__ import annotations

import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import convo  # noqa: E402
from helpers.processes import launch  # noqa: E402
from contextsvc.v1 import context_pb2 as pb  # noqa: E402
from contextsvc.v1 import context_pb2_grpc as pb_grpc  # noqa: E402
from server_process import peak_rss_mb  # noqa: E402

OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]


def letters(n_mb=30):
    return convo.measure_request(pb.Conversation(session_id="s", messages=[
        convo.user("m1", convo.text("p1", "a" * (n_mb << 20)))]), exact=True)


def many(n=200_000):
    msgs = []
    for i in range(n):
        role = convo.user if i % 2 == 0 else convo.assistant
        msgs.append(role(f"m{i}", convo.text(f"p{i}", f"message {i} text")))
    return pb.Conversation(session_id="s", messages=msgs)


def compact_many(n=60_000):
    from helpers.rpc import compact_request
    return compact_request(many(n), context=8_000)


CASES = {
    # name: (method, request builder, deadline seconds)
    "measure-exact-30mb": ("Measure", letters, 2.0),
    "measure-200k": ("Measure", lambda: convo.measure_request(many()), 1.0),
    "assemble-200k": ("Assemble", lambda: pb.AssembleRequest(conversation=many(), model=convo.model()), 1.0),
    "prune-200k": ("Prune", lambda: pb.PruneRequest(conversation=many(), reason=pb.PRUNE_REASON_PAYLOAD_LIMIT), 0.5),
    "compact-60k": ("Compact", compact_many, 1.0),
}




def counted(metrics_port: int, method: str) -> float:
    """How many calls of this method the server has finished (any status)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("contextsvc_rpcs_total{") and f'method="{method}"' in line)


def run(name: str) -> str:
    method, build, seconds = CASES[name]
    request = build()
    with tempfile.TemporaryDirectory(prefix="bench-deadline-") as tmp:
        proc, port, metrics_port, _ = launch(tmp_path=Path(tmp), config_text="")
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as ch:
                stub = pb_grpc.ContextServiceStub(ch)
                stub.Measure(convo.measure_request(), timeout=30)
                base = peak_rss_mb(proc.pid)
                before = counted(metrics_port, method)
                start = time.monotonic()
                try:
                    getattr(stub, method)(request, timeout=seconds)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                answered = time.monotonic() - start
                while counted(metrics_port, method) == before:
                    time.sleep(0.01)
                past = time.monotonic() - start - seconds
                return (f"{name:20s} deadline {seconds:.1f}s  caller saw {code} after {answered:.2f}s  "
                        f"work ended {past:+.2f}s past the deadline  peak RSS {peak_rss_mb(proc.pid):.0f} MB "
                        f"(idle {base:.0f} MB)")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        print(run(case), flush=True)
