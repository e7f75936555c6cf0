"""The two implementations of the hot path: the compiled module and its Python twin
(contextsvc.native picks one; the suites run both, through conftest's `impl` fixture).

The compiled one must be importable unless CONTEXTSVC_NO_EXTENSIONS=1: a missing build fails,
it is not skipped."""
from __future__ import annotations

import os

NO_EXTENSIONS = os.environ.get("CONTEXTSVC_NO_EXTENSIONS") == "1"
IMPL_NAMES = ["python"] if NO_EXTENSIONS else ["python", "cython"]


def compiled():
    import contextsvc._native_c as compiled

    return compiled
