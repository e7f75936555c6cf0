"""Compact (docs/design.md §5): select, serialize, summarize, prune, and report the outcome.

The entry point is `contextsvc.compact.compact.compact(CompactInput, Config, summarizer=None)`;
the submodule keeps the name `compact`, so the function is not re-exported here.
"""
from .compact import (COMPACTED, CONTEXT_OVERFLOW, CONTINUE_PROMPT, INSUFFICIENT, NOTHING_TO_DO,
                      CompactInput, CompactResult)
from .retention import Retention

__all__ = ["CompactInput", "CompactResult", "Retention", "COMPACTED", "INSUFFICIENT",
           "CONTEXT_OVERFLOW", "NOTHING_TO_DO", "CONTINUE_PROMPT"]
