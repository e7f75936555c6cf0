"""`contextsvc serve` launched as a real process."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


STARTED = re.compile(r"serving gRPC on 127\.0\.0\.1:(\d+), metrics http://127\.0\.0\.1:(\d+)/metrics, hot path (\w+)")


def launch(*args, config_text="", tmp_path=None):
    cmd = [sys.executable, "-m", "contextsvc", "serve", "--port", "0", "--metrics-port", "0", *args]
    config_dir = tmp_path or Path(tempfile.mkdtemp(prefix="contextsvc-cli-"))
    path = config_dir / "contextsvc.toml"
    path.write_text(f'[server]\nshutdown_grace_seconds = 20.0\n[truncation]\ndirectory = "{config_dir / "store"}"\n'
                    + config_text)
    cmd += ["--config", str(path)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    lines = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = STARTED.search(line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, int(match.group(1)), int(match.group(2)), match.group(3)
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))
