"""A real `contextsvc serve` process on an ephemeral port, for the bench scripts."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading


def serve(*args):
    """(process, gRPC port) once the server's start line says it is up; args go to `serve`."""
    proc = subprocess.Popen([sys.executable, "-m", "contextsvc", "serve", "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"serving gRPC on [\d.]+:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, int(m.group(1))
    raise SystemExit("server did not start")


def process_tree(pid) -> list[int]:
    """pid and its children (a server started with --processes N supervises N children)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == pid:
                children.append(int(entry))
    return [pid] + sorted(children)


def _named_cpu(stat_path: str) -> tuple[str, float]:
    """(name, user + system CPU seconds) of a process's or a thread's stat file."""
    with open(stat_path) as f:
        name, fields = f.read().split("(", 1)[1].rsplit(")", 1)
    fields = fields.split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid) -> float:
    """User + system CPU one process has used."""
    return _named_cpu(f"/proc/{pid}/stat")[1]


def thread_cpu_seconds(pid, prefix: str) -> float:
    """User + system CPU of the threads of pid's processes whose names start with prefix (the
    kernel keeps a thread name's first 15 bytes), living ones only: a pool's workers live as
    long as the pool."""
    total = 0.0
    for proc in process_tree(pid):
        for task in os.listdir(f"/proc/{proc}/task"):
            try:
                name, seconds = _named_cpu(f"/proc/{proc}/task/{task}/stat")
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            if name.startswith(prefix):
                total += seconds
    return total


def cpu_seconds(pid) -> float:
    """CPU the server's processes have used, summed (shows whether they are saturated)."""
    return sum(process_cpu_seconds(p) for p in process_tree(pid))


def rss_mb(pid) -> float:
    """Resident memory of the server's processes, summed."""
    kb = 0
    for p in process_tree(pid):
        with open(f"/proc/{p}/status") as f:
            kb += int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return kb / 1024


def peak_rss_mb(pid) -> float:
    """The peak resident memory of one process (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024
