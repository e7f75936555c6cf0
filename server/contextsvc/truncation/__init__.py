"""Tool-output truncation: keep a preview in the context, store the full text, read it back.

Plain Python in and out; the gRPC servicer maps these types to and from the protobuf messages.
"""
from .settings import TruncationSettings, default_directory
from .store import (
    ID_LENGTH,
    ID_PREFIX,
    CleanupReport,
    CleanupScheduler,
    InvalidOutputId,
    LineTooLong,
    LocalDiskStore,
    OutputNotFound,
    ReadResult,
    Store,
    StoreError,
    StoreUnavailable,
    format_output_id,
    output_id_created_ms,
    first_line_over,
    parse_output_id,
    read_lines,
)
from .truncate import HEAD, TAIL, TruncationResult, build_hint, truncate_output

__all__ = [
    "TruncationSettings",
    "default_directory",
    "truncate_output",
    "TruncationResult",
    "build_hint",
    "HEAD",
    "TAIL",
    "Store",
    "LocalDiskStore",
    "CleanupReport",
    "CleanupScheduler",
    "ReadResult",
    "read_lines",
    "first_line_over",
    "LineTooLong",
    "StoreError",
    "OutputNotFound",
    "InvalidOutputId",
    "StoreUnavailable",
    "ID_PREFIX",
    "ID_LENGTH",
    "parse_output_id",
    "format_output_id",
    "output_id_created_ms",
]
