"""Assemble (docs/design.md §6): the provider-ready body and everything done to it.

A reader of one step (step.run), as Measure is, with the body serialized and the prefix digests
on: the two agree on every figure for the same request, payload guard included.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from . import breakpoints, conversation as m, prefix, provider_management, step
from .config import Config
from .deadline import NO_DEADLINE, Deadline
from .lowering.tool_ids import name_map
from .memo import Memo
from .step import Measurement
from .step.environment import Editor


@dataclass(slots=True)
class AssembleInput:
    conversation: m.Conversation
    model: m.Model
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    editor: Optional[Editor] = None
    step: int = 1
    max_steps: int = 0
    plan_reminder: str = ""
    policy: breakpoints.Policy = field(default_factory=breakpoints.Policy)
    configured_output_tokens: int = 0
    tools_disabled: bool = False
    exact: bool = False  # also the exact token count (MeasureInput.exact)
    previous_cache_state: bytes = b""  # the session's previous response's cache_state


@dataclass(slots=True)
class Report:
    """What changed in the cached prefix since the previous request (prefix.compare), priced."""
    prefix_kept: bool
    segment: str = ""  # "" = the same elements
    index: int = 0
    cause: str = ""
    rewrite: tuple = (0, "")  # (tokens, method): the decision figure of what is written again
    reused_elements: int = 0
    resolution: int = 1

    @property
    def broken(self) -> bool:
        """Something the previous request had is gone or changed: its cache is not read."""
        return not self.prefix_kept


@dataclass(slots=True)
class Assembled:
    body: bytes  # b"" when not serialized (Measure), as are tool_names and headers
    measurement: Measurement
    breakpoints: list
    pruned_part_ids: list
    media_stripped: int
    injected: list
    guard_tripped: bool
    over_payload_limit: bool
    environment_details: str
    cache_state: bytes = b""  # the digests to pass back with the next request; b"" when not hashed
    report: Optional[Report] = None  # when previous_cache_state was given
    persist: list = field(default_factory=list)  # list[Persist]: parts the client stores
    tool_names: dict = field(default_factory=dict)  # tool name in the body -> the request's, where they differ
    headers: dict = field(default_factory=dict)  # HTTP headers the body must be sent with
    tokens_pruned: int = 0  # the payload guard's prune: its estimate of the outputs it marked


def assemble(inp: AssembleInput, cfg: Config, now: Optional[dt.datetime] = None,
             exact_counters=None, deadline: Deadline = NO_DEADLINE, memo: Memo | None = None) -> Assembled:
    """The body to send, with every figure Measure gives for it and its cache state."""
    return run(inp, cfg, now, serialize=True, hashes=True, exact_counters=exact_counters, deadline=deadline,
               memo=memo)


def run(inp: AssembleInput, cfg: Config, now: Optional[dt.datetime] = None, *, serialize: bool,
        hashes: bool, exact_counters=None, deadline: Deadline = NO_DEADLINE, memo: Memo | None = None) -> Assembled:
    """One step as Assemble and Measure both answer it.

    serialize: also the body's JSON and what is sent with it, its tool names and headers
    (Assemble). hashes: the prefix digests (a serialization pass over the elements); implied by
    a previous_cache_state. deadline: the caller's (errors.DeadlineExceeded when it passes or
    the caller cancels). memo: what earlier steps computed per message is not redone.
    """
    turn = step.Turn(inp.editor, inp.step, inp.max_steps, inp.plan_reminder)
    plan = step.Plan.of(inp.model, inp.tools, inp.system, inp.compaction, cfg, inp.policy, exact=inp.exact,
                        configured_output_tokens=inp.configured_output_tokens,
                        # Disabled tools stay defined: providers refuse tool blocks in history
                        # without them, and they head the cached prefix. The provider's own "no
                        # tool use" choice disables them (on the last step, where it costs no cache).
                        tools_disabled=inp.tools_disabled, last_step=turn.last_step,
                        now_ms=int((now or dt.datetime.now()).timestamp() * 1000), hashes=hashes)
    step.check(inp.conversation, plan, memo, deadline)
    turn.check()
    previous = None
    if inp.previous_cache_state:  # read past the request's checks: theirs are the errors named first
        previous = prefix.decode(inp.previous_cache_state)
        hashes = True
        plan = dataclasses.replace(plan, hashes=True, previous=previous)
    s = step.run(inp.conversation, plan, turn, memo, exact_counters, now, deadline, checked=True)
    deadline.check("assemble")
    result, request, guard = s.measurement, s.request, s.guard
    body = request.body_json() if serialize else b""  # tests hold len(body) == result.body_bytes
    state = prefix.encode(request.digests, cfg.assemble.cache_state_groups, result.overhead_figures,
                          cfg.assemble.cache_state_version) if hashes else b""
    return Assembled(
        body=body,
        measurement=result,
        breakpoints=request.breakpoints,
        pruned_part_ids=guard.pruned_part_ids,
        media_stripped=guard.media_stripped,
        injected=s.injected.injected,
        guard_tripped=guard.tripped,
        over_payload_limit=result.body_bytes > s.plan.guard_bytes,
        environment_details=s.injected.environment_details,
        cache_state=state,
        report=_report(previous, request, result) if previous is not None else None,
        persist=s.injected.persist,
        tool_names=name_map(plan.fmt, (t.name for t in inp.tools)) if serialize else {},
        headers=provider_management.body_fields(s.plan.management, plan.fmt, s.plan.tools)[1] if serialize else {},
        tokens_pruned=guard.tokens_pruned,
    )


def _report(previous: prefix.State, request, result: Measurement) -> Report:
    c = request.change
    if c is None:
        return Report(prefix_kept=True, reused_elements=previous.elements, resolution=previous.group)
    return Report(prefix_kept=c.prefix_kept, segment=c.segment, index=c.index, cause=c.cause,
                  rewrite=(result.rewrite, result.decision[1]), reused_elements=c.flat,
                  resolution=c.resolution)
