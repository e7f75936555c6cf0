"""Compact (docs/design.md §5): select, serialize, summarize, prune, and report the outcome.

The entry point is `contextsvc.compact.compact(CompactInput, Config, summarizer=None)`; the run is
in `run.py`, its chunked fallback in `chunked.py`, the summarizer choice in `summarizers/`.
"""
from .retention import Retention
from .run import (
    COMPACTED, CONTEXT_OVERFLOW, CONTINUE_PROMPT, INSUFFICIENT, NOTHING_TO_DO, CompactInput,
    CompactResult, compact,
)
from .summarizers import make_summarizer

__all__ = ["compact", "make_summarizer", "CompactInput", "CompactResult", "Retention", "COMPACTED",
           "INSUFFICIENT", "CONTEXT_OVERFLOW", "NOTHING_TO_DO", "CONTINUE_PROMPT"]
