"""ContextService's core, as plain Python: measure, assemble, prune and compact one agent step
(`measure.measure`, `assemble.assemble`, `prune.prune`, `compact.compact`), truncate a tool
output. The gRPC face is `contextsvc.rpc`; the process is `contextsvc.app`."""
from . import assemble, compact, measure, prune
from .assemble import AssembleInput
from .compact import CompactInput
from .config import Config
from .measure import MeasureInput
from .truncation import truncate_output

__all__ = ["measure", "MeasureInput", "assemble", "AssembleInput", "prune", "compact", "CompactInput",
           "truncate_output", "Config"]
