"""A client's calls while its one server stops and starts again on the same port."""
from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

from helpers.processes import launch, stop

Outcome = tuple[str, float]  # a call's status code name ("OK" when answered) and its seconds
CALLS_AFTER_RESTART = 3
PAUSE = 0.02  # seconds between calls


def calls_across_a_restart(tmp_path, calls: Callable[[int], Iterator[Outcome]]) -> list[Outcome]:
    """The outcomes of calls(port) (each next() makes one call), taken from one call answered by
    a `contextsvc serve` process, while that process stops (SIGTERM: it serves through its
    drain, then answers UNAVAILABLE and exits) and another starts on the same port, until CALLS_AFTER_RESTART
    calls after the new one is up. The restart runs in a thread, so that calls go on during it."""
    proc, port, _, _ = launch(tmp_path=tmp_path)
    servers = [proc]

    def restart():
        stop(servers[0])
        servers[0] = launch("--port", str(port), tmp_path=tmp_path)[0]

    client = calls(port)
    try:
        outcomes = [next(client)]
        with ThreadPoolExecutor(1) as pool:
            restarted = pool.submit(restart)
            while not restarted.done():
                time.sleep(PAUSE)
                outcomes.append(next(client))
            restarted.result()  # a server that did not start again fails here
        for _ in range(CALLS_AFTER_RESTART):
            time.sleep(PAUSE)
            outcomes.append(next(client))
        return outcomes
    finally:
        client.close()
        stop(servers[0])


def assert_outcomes(outcomes: list[Outcome], retry: bool):
    """With retries every call is answered, one of them after waiting out the restart; without,
    the calls made while the server was away fail UNAVAILABLE (or, one reaching it in the
    instant its listener closes, CANCELLED: docs/reliability.md)."""
    codes = {code for code, _ in outcomes}
    if retry:
        assert codes == {"OK"}, outcomes
        # a call answered in milliseconds did not meet the restart; one that did waited it out
        assert max(seconds for _, seconds in outcomes) > 0.25, f"no call waited out the restart: {outcomes}"
    else:
        assert "UNAVAILABLE" in codes and codes <= {"OK", "UNAVAILABLE", "CANCELLED"}, outcomes


def script_calls(command: list[str], cwd, env: dict) -> Iterator[Outcome]:
    """Calls made by a script that makes one per line it reads from stdin and writes a line
    `CODE SECONDS` for each; it ends when its stdin closes."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while True:
            proc.stdin.write("\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            assert line, f"{command} ended: {proc.stderr.read()}"
            code, seconds = line.split()
            yield code, float(seconds)
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        finally:
            proc.kill()
