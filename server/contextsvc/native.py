"""The hot path, chosen once at import: the compiled module or its pure-Python twin.

`contextsvc._native_c` (built from _native/hotpath.pyx) is used on CPython unless the
environment sets CONTEXTSVC_NO_EXTENSIONS=1 or it cannot be imported; otherwise
`contextsvc._native_py`, which is the specification of both, is used. IMPLEMENTATION says
which one ("cython" or "python").
"""
from __future__ import annotations

import importlib
import os
import platform
import warnings
from types import ModuleType

from . import _native_py

__all__ = ["IMPLEMENTATION", "implementations", *_native_py.__all__]

DISABLE_ENV = "CONTEXTSVC_NO_EXTENSIONS"
_COMPILED = "contextsvc._native_c"


def _import_compiled() -> ModuleType | None:
    try:
        return importlib.import_module(_COMPILED)
    except ModuleNotFoundError as exc:
        if exc.name != _COMPILED:
            raise
        return None
    except ImportError as exc:  # present but unloadable: say so, then carry on without it
        warnings.warn(f"{_COMPILED} failed to load ({exc}); using the Python implementation",
                      RuntimeWarning, stacklevel=3)
        return None


def _choose() -> tuple[ModuleType, str]:
    if os.environ.get(DISABLE_ENV) == "1" or platform.python_implementation() != "CPython":
        return _native_py, "python"
    compiled = _import_compiled()
    if compiled is None:
        return _native_py, "python"
    return compiled, "cython"


def implementations() -> dict[str, ModuleType]:
    """Every importable implementation by name ("python" always, "cython" when built)."""
    found = {"python": _native_py}
    if platform.python_implementation() == "CPython":
        try:
            found["cython"] = importlib.import_module(_COMPILED)
        except ImportError:
            pass
    return found


_impl, IMPLEMENTATION = _choose()

MAX_JSON_DEPTH = _native_py.MAX_JSON_DEPTH
TEXT_CLASSES = _native_py.TEXT_CLASSES
PROFILE_BLOCK = _native_py.PROFILE_BLOCK
CJK_COUNTS = _native_py.CJK_COUNTS
number_text = _native_py.number_text  # one definition of a number's text, shared by both
WIRE_DEPTH = _native_py.WIRE_DEPTH
WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = (_native_py.WIRE_VARINT, _native_py.WIRE_I64, _native_py.WIRE_LEN,
                                             _native_py.WIRE_I32)
WIRE_PLAIN, WIRE_STRING, WIRE_MESSAGE = _native_py.WIRE_PLAIN, _native_py.WIRE_STRING, _native_py.WIRE_MESSAGE
wire_schema = _native_py.wire_schema  # one definition of the scanner's schema, shared by both
json_text = _impl.json_text
has_float = _impl.has_float
json_size = _impl.json_size
json_lengths = _impl.json_lengths
utf16_len = _impl.utf16_len
estimate_tokens = _impl.estimate_tokens
split_turns = _impl.split_turns
select_tail = _impl.select_tail
text_profile = _impl.text_profile
json_profile = _impl.json_profile
sum_profiles = _impl.sum_profiles
Calibration = _impl.Calibration
calibrated_pair = _impl.calibrated_pair
message_spans = _impl.message_spans
wire_entries = _impl.wire_entries
resident_size = _impl.resident_size
