"""One step of an agent loop, the one pass every RPC that looks at a conversation makes
(docs/design.md "A step through the modules"): inject, pieces, request, figures, decision, guard.
Each stage is a function of the previous stage's output and one frozen Plan."""
from .inject import Turn
from .measurement import Measurement
from .plan import Plan
from .run import Step, check, run

__all__ = ["run", "check", "Plan", "Turn", "Step", "Measurement"]
