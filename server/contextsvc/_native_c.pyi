"""Types of the compiled hot path (_native/hotpath.pyx): the API of its Python twin,
_native_py.py (see there what each function does), plus the string-kernel switches."""
from collections.abc import Callable, Sequence

__all__ = [
    "MAX_JSON_DEPTH",
    "number_text",
    "json_text",
    "has_float",
    "json_size",
    "json_lengths",
    "utf16_len",
    "estimate_tokens",
    "split_turns",
    "select_tail",
    "TEXT_CLASSES",
    "PROFILE_BLOCK",
    "CJK_COUNTS",
    "text_profile",
    "json_profile",
    "sum_profiles",
    "Calibration",
    "calibrated_pair",
    "WIRE_DEPTH",
    "WIRE_VARINT",
    "WIRE_I64",
    "WIRE_LEN",
    "WIRE_I32",
    "WIRE_PLAIN",
    "WIRE_STRING",
    "WIRE_MESSAGE",
    "wire_schema",
    "message_spans",
    "wire_entries",
    "resident_size",
]

MAX_JSON_DEPTH: int
TEXT_CLASSES: tuple[str, ...]
PROFILE_BLOCK: int
CJK_COUNTS: tuple[str, ...]
WIRE_DEPTH: int
WIRE_VARINT: int
WIRE_I64: int
WIRE_LEN: int
WIRE_I32: int
WIRE_PLAIN: int
WIRE_STRING: int
WIRE_MESSAGE: int

def number_text(x: float) -> str: ...
def json_text(value: object) -> str: ...
def has_float(value: object) -> bool: ...
def json_size(value: object) -> int: ...
def json_lengths(value: object) -> tuple[int, int]: ...
def utf16_len(s: str) -> int: ...
def estimate_tokens(x: str | int) -> int: ...
def split_turns(starts: Sequence[object]) -> list[int]: ...
def select_tail(starts: Sequence[int], sizes: Sequence[int], tail_turns: int, budget: int) -> int: ...
def text_profile(s: str) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]: ...
def json_profile(value: object) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]: ...
def sum_profiles(profiles: list[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]],
                 extra: tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
                 ) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]: ...
class Calibration:
    def __init__(self, per_unit: Sequence[float], per_run: Sequence[float], per_cjk: Sequence[float],
                 margins: Sequence[float] = ()) -> None: ...
def calibrated_pair(profile: tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]],
                    calibration: Calibration) -> tuple[float, float]: ...
def wire_schema(types: Sequence[dict[int, tuple[int, int, int]]], spans_field: int) -> tuple: ...
def message_spans(data: bytes | bytearray | memoryview, schema: tuple, at: int = 0) -> list[tuple[int, int]]: ...
def wire_entries(data: bytes | bytearray | memoryview, start: int, end: int, until: int = 0,
                 limit: int = 0) -> list[tuple[int, int, int, int, int]]: ...
def resident_size(obj: object, fields: Callable[[type], Callable[[object], tuple]]) -> int: ...

# The string kernel sets (AVX2, SSE2, portable): for tests and benchmarks.
def _kernels() -> list[str]: ...
def _kernel() -> str: ...
def _use_kernel(name: str) -> str: ...
