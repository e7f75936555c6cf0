"""A real `contextsvc serve` process on an ephemeral port, for the bench scripts."""
from __future__ import annotations

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
