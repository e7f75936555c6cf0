"""`contextsvc serve` launched as a real process."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time


STARTED = re.compile(r"serving gRPC on 127\.0\.0\.1:(\d+) \([^)]*\), metrics http://127\.0\.0\.1:(\d+)/metrics "
                     r"\([^)]*\), hot path (\w+)")
# no proxy watches these servers' health: a drain of a second keeps each stop short
BOUNDED_GRACE = "shutdown_grace_seconds = 20.0\ndrain_seconds = 1.0"


def launch(*args, tmp_path, server_toml=BOUNDED_GRACE, config_text="", env=None, start_line=STARTED):
    """(process, gRPC port, metrics port, hot path) once the server says it is up (start_line,
    its groups in that order); args go to `serve`. The config file, in tmp_path (a test's own
    directory, or one the caller removes), holds server_toml as its [server] section (by default
    a 1 s drain and only a 20 s grace, so that a call stuck at exit holds a test for less than
    the default), the store in that directory, then config_text. proc.log holds every line the
    server writes to stderr."""
    cmd = [sys.executable, "-m", "contextsvc", "serve", "--port", "0", "--metrics-port", "0", *args]
    path = tmp_path / "contextsvc.toml"
    path.write_text(f'[server]\n{server_toml}\n[truncation]\ndirectory = "{tmp_path / "store"}"\n{config_text}')
    cmd += ["--config", str(path)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    match = started(proc, start_line)
    return proc, int(match.group(1)), int(match.group(2)), match.group(3)


def started(proc, line_pattern: re.Pattern, seconds: float = 30):
    """The match of the server's start line in its stderr; from then on proc.log holds every
    line the server writes there (the pipe kept drained). Kills the process if no such line
    comes within seconds (or before it exits)."""
    deadline = time.monotonic() + seconds
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = line_pattern.search(line)
        if match:
            proc.log = lines
            threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
            return match
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))


def stop(proc, seconds=30):
    """SIGTERM, then the exit code. A process still running after seconds is asked for its
    threads' stacks (SIGUSR1), then killed, and the failure shows what it was waiting on."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        proc.wait()
        time.sleep(0.5)  # the drain thread reads what the stack dump wrote
        log = "".join(getattr(proc, "log", []))[-20_000:]
        raise AssertionError(f"the server had not exited {seconds} s after SIGTERM; its log:\n{log}") from None
