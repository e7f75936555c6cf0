"""Tool-output truncation: keep a preview in the context, store the full text, read it back.

Plain Python in and out; the gRPC servicer maps these types to and from the protobuf messages.
"""
from .cleanup import CleanupScheduler
from .ids import ID_LENGTH, ID_PREFIX, IdGenerator, format_output_id, output_id_created_ms, parse_output_id
from .lines import LineTooLong, ReadResult, first_line_over, read_lines
from .local_store import LocalDiskStore
from .settings import OUTPUT_ID, TruncationSettings, default_directory
from .store import CleanupReport, InvalidOutputId, OutputNotFound, Store, StoreError, StoreUnavailable
from .truncate import HEAD, TAIL, TruncationResult, build_hint, truncate_output

__all__ = [
    "TruncationSettings",
    "default_directory",
    "OUTPUT_ID",
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
    "IdGenerator",
    "parse_output_id",
    "format_output_id",
    "output_id_created_ms",
]
