"""One step of an agent loop, as Measure and Assemble both see it (docs/design.md "A step through
the modules"): check -> inject -> pieces and request -> figures -> decision -> payload guard.
When the guard changes what is sent, the pass from pieces on runs once more for it, so every
figure is of the body that is sent; a body the guard replaces is given no figures. A history the
guard pruned at an earlier step goes to the guard first, and the body it replaces is sized from
the guard's rather than built (_guarded_again).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import operator
from dataclasses import dataclass
from typing import Optional

from .. import conversation as m, projection, validate, window
from ..deadline import NO_DEADLINE, Deadline
from ..errors import BadInput
from ..memo import Memo, message_prefix_digests
from ..positions import positions
from .decision import decide
from .figures import figures
from .baseline import KnownPairs
from .call_ids import holds_calls, own_ids
from .guard import Guard, guard_keys, lowering_alone, over_before, payload_guard, pruned_before
from .inject import Injected, Turn, inject
from .measurement import Measurement, gather
from .plan import Plan
from .request import Request, build


# How far the whole body's bytes, sized from the guard's (Guard.freed), may be from the bytes of
# the whole body built: the two bodies are their messages' elements, joined the same way, and
# differ only where the guard's copies do, but for the cache markers (the same places in both,
# unless a copy could not carry one); a whole body within this of the guard is built, as ever.
FREED_SLACK_BYTES = 1024


@dataclass(slots=True)
class Step:
    measurement: Measurement
    request: Request  # what is sent (after the payload guard)
    guard: Guard
    injected: Injected
    plan: Plan  # the plan the body was built with (Plan.for_history: its tools may stand for earlier calls)


def check(conv: m.Conversation, plan: Plan, memo: Memo | None = None, deadline: Deadline = NO_DEADLINE) -> None:
    """The request's own checks, each naming the field (errors.BadInput). memo: each message's
    checks kept across steps (validate.conversation)."""
    validate.request(conv, plan.model, plan.tools, plan.compaction, memo=memo, deadline=deadline)
    if plan.configured_output_tokens < 0:
        raise BadInput("configured_output_tokens", "must not be negative")


def run(conv: m.Conversation, plan: Plan, turn: Optional[Turn] = None, memo: Memo | None = None,
        exact_counters=None, now: Optional[dt.datetime] = None, deadline: Deadline = NO_DEADLINE,
        checked: bool = False) -> Step:
    """The step for conv under plan. turn: the per-turn injections (none without one). memo: what
    earlier steps computed per message. exact_counters: the service's (its cache of counts).
    checked: the caller already ran check() on this conversation. deadline: the caller's,
    checked between stages and inside the per-element loops (errors.DeadlineExceeded)."""
    if not checked:
        check(conv, plan, memo, deadline)
    # what the stages read of every message (a pass over a thousand each), found once: by the
    # conversion when conv came off the wire (conversation.Scanned), read again here only for
    # the messages the injections changed or added. The guard's edits (prune marks, media notes)
    # move no compaction point either, so its build takes the same points.
    scanned = conv.scanned
    points = scanned.points if scanned is not None else projection.compaction_points(conv.messages)
    injected = inject(conv.messages, turn, now, points) if turn is not None else Injected(conv.messages, [], "")
    sent = dataclasses.replace(conv, messages=injected.messages)
    if scanned is not None:
        # nothing injected: the very messages (else the first one the injections changed)
        kept = _first_changed(sent.messages, conv.messages) if injected.injected else len(conv.messages)
        sent.scanned = scanned.extended(kept, sent.messages)
        points = sent.scanned.points
    # a call id used again gets one of its own (an inject adds no tool part: the ids it read stand)
    first_calls, repeats = (sent.scanned.first_calls, sent.scanned.repeats) if scanned is not None \
        else m.repeated_calls(sent.messages)
    if repeats:
        sent.messages, renamed = own_ids(sent.messages, points, memo, deadline)
        if renamed and scanned is not None:
            sent.scanned = sent.scanned.renamed(renamed, sent.messages)
    if first_calls and not plan.tools:
        plan = plan.for_history(holds_calls(sent.messages, points))
    if plan.media_rules_apply(sent.messages):
        plan = plan.for_images(projection.project(sent.messages, points, deadline), memo)
    # what the lowering's keys and the guard's are made of: the digests of the first messages
    digests = None
    if memo is not None:
        digests = message_prefix_digests(sent.messages, sent.scanned.digests if scanned is not None else None)
    # a history the guard pruned at an earlier step is most likely over it again: the guard's
    # body is built first, the whole one sized from it (_guarded_again); one built after all is
    # hashed only if it is sent. Its keys are looked for when the body is to be hashed, or the
    # session was over the guard before (a Measure of a history under it does not pay for them).
    keys = guard_keys(sent, plan, digests) if digests is not None and (plan.hashes or over_before(sent, memo)) \
        else None
    again = keys is not None and pruned_before(keys, memo)
    if again:
        step = _guarded_again(sent, plan, memo, exact_counters, deadline, keys, points, injected)
        if step is not None:
            return step
    hashed = not (again and plan.hashes)
    request = build(sent, plan if hashed else dataclasses.replace(plan, hashes=False), memo, deadline, points,
                    digests)
    over, measurement = _over_guard(request, plan), None
    if not (hashed or over):
        request, hashed = build(sent, plan, memo, deadline, points, digests), True
    if over is None:  # within a few bytes of the guard: the output budget decides
        measurement = finish(sent, request, plan, memo, exact_counters, deadline)
        over = measurement.body_bytes > plan.guard_bytes
    guard = payload_guard(sent, over, plan, memo, deadline, keys, points)
    if guard.conversation is not None:
        # the messages as they were before the guard changed some: the baseline is rebased on those
        request = build(guard.conversation, plan, memo, deadline, points, guard.digests)
        measurement = finish(guard.conversation, request, plan, memo, exact_counters, deadline, sent, guard.pairs)
    elif measurement is None:
        if not hashed:
            request = build(sent, plan, memo, deadline, points, digests)
        measurement = finish(sent, request, plan, memo, exact_counters, deadline)
    return Step(measurement, request, guard, injected, plan)


def _guarded_again(sent: m.Conversation, plan: Plan, memo: Memo, exact_counters, deadline: Deadline, keys: list,
                   points: list, injected: Injected) -> Step | None:
    """The step of a history the guard pruned at an earlier step, when the guard's memo entry
    gives the prune again (Guard.freed: the bytes its marks take off): the guard's body is built
    first, and the whole body, which it replaces, is sized from it without being built. None
    when that cannot tell the whole body over the guard: the step then builds it first, as any
    other does."""
    if lowering_alone(plan, sent.messages, points) is None:  # the guard could not tell its freed bytes
        return None
    guard = payload_guard(sent, True, plan, memo, deadline, keys, points)
    if guard.conversation is None or guard.freed is None:
        return None
    request = build(guard.conversation, plan, memo, deadline, points, guard.digests)
    request.lowered.set_max_output(0)
    if request.body_bytes() + guard.freed <= plan.guard_bytes + FREED_SLACK_BYTES:
        return None
    measurement = finish(guard.conversation, request, plan, memo, exact_counters, deadline, sent, guard.pairs)
    return Step(measurement, request, guard, injected, plan)


def _first_changed(now: list, was: list) -> int:
    """The index of the first item of now that is not the very one of was, compared in C."""
    changed = positions(list(map(operator.is_, now, was)), False)
    return changed[0] if changed else min(len(now), len(was))


def _over_guard(request: Request, plan: Plan) -> bool | None:
    """Whether the body is over the payload guard whatever output budget its figures give it
    (the budget is written into the body, between 0 and the configured cap): None when the
    budget decides. So a body the guard replaces is never given figures."""
    limit = plan.guard_bytes
    low = request.lowered
    low.set_max_output(0)
    if request.body_bytes() > limit:
        return True
    configured = plan.configured_output_tokens or window.max_output(plan.model, plan.cfg)
    low.set_max_output(max(configured, plan.cfg.measure.min_output_tokens))  # window.output_budget's most
    if request.body_bytes() <= limit:
        return False
    return None


def finish(conv: m.Conversation, request: Request, plan: Plan, memo: Memo | None = None, exact_counters=None,
           deadline: Deadline = NO_DEADLINE, before: m.Conversation | None = None,
           known: KnownPairs | None = None) -> Measurement:
    """The Measurement of a built request: its figures, the decision, and the output budget
    written into the body. before: conv as it was before this step changed some of its messages
    (the payload guard), one message for one, and known: what the guard knows of those changes
    (Guard.pairs)."""
    fig = figures(conv, request, plan, exact_counters, memo, before, deadline, known)
    dec = decide(conv.messages, fig, plan, request.last_compaction)
    mdl, cfg = plan.model, plan.cfg
    max_out = window.max_output(mdl, cfg)
    configured = plan.configured_output_tokens or max_out
    # the provider's count stands for what it counted: after a prune (a rebase), without what the
    # prune took out; the rebase subtracts an estimate, so never below the decision figure then
    # (what the answer reasoned that does not go back is no part of it: Decision.unsent)
    counted = max(dec.rebased - dec.unsent, dec.total) if dec.has_baseline and dec.rebased != dec.reported \
        else dec.reported - dec.unsent
    counted = max(counted, dec.total + fig.unseen_reasoning) if fig.unseen_reasoning else counted
    out_tokens = window.output_budget(mdl, configured, counted, fig.normalized, fig.media_count, cfg)
    request.lowered.set_max_output(out_tokens)
    measurement = gather(request.body_bytes(), fig, dec, plan.usable, plan.limit, max_out, out_tokens)
    cap = plan.fmt.max_request_bytes
    if cap and measurement.body_bytes > cap and mdl.limits.context > 0 and plan.auto:
        # refused whatever its tokens, at every later step too: a summary lets the payload guard
        # strip the history's media (a session of a person's screenshots reached 36 MB with
        # should_compact false, the guard unable to strip before a summary exists)
        measurement.should_compact = True
    endpoints = exact_counters.endpoints if exact_counters is not None else None
    if fig.exact is not None and endpoints:
        # the provider's own count, reported only: the decision above was taken without it
        counted = endpoints.exact(request, plan.model, fig.exact, fig.projections["exact"][2], deadline)
        if counted is not None:
            measurement.exact, measurement.exact_for_model = counted
    return measurement
