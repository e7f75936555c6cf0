"""Measure (docs/design.md §3): the figures, window and decision of the body that would be sent,
payload guard included. A reader of one step (step.run), which Assemble runs too: the two agree
on every figure for the same request."""
from __future__ import annotations

from dataclasses import dataclass

from . import conversation as m, step, tokens
from .config import Config
from .deadline import NO_DEADLINE, Deadline
from .memo import Memo
from .step import Measurement


@dataclass(slots=True)
class MeasureInput:
    conversation: m.Conversation
    model: m.Model
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    exact: bool = False
    configured_output_tokens: int = 0
    tools_disabled: bool = False  # tools stay in the body, with the provider's "no tool use" choice

    def plan(self, cfg: Config) -> step.Plan:
        return step.Plan.of(self.model, self.tools, self.system, self.compaction, cfg, exact=self.exact,
                            configured_output_tokens=self.configured_output_tokens,
                            tools_disabled=self.tools_disabled)


def measure(inp: MeasureInput, cfg: Config, exact_counters: tokens.ExactCounters | None = None,
            deadline: Deadline = NO_DEADLINE, memo: Memo | None = None) -> Measurement:
    """memo: what earlier steps computed per message (validation, lowering, prune's scans)."""
    return step.run(inp.conversation, inp.plan(cfg), memo=memo, exact_counters=exact_counters,
                    deadline=deadline).measurement
