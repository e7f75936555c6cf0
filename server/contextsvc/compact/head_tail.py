"""Select (docs/design.md §5): split the history into the head to summarize and the tail kept verbatim."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from .. import conversation as m, native
from ..config import Config
from ..deadline import NO_DEADLINE, Deadline
from ..lowering import MediaLedger, lower, to_model_messages
from ..memo import each
from .edits import ReplaceToolOutput, apply
from .serialize import clip


@dataclass(slots=True)
class Selection:
    head: list  # messages to summarize, in order
    tail: list  # messages kept verbatim, in order
    tail_start_id: str  # "" when nothing is kept
    budget: int  # token budget the tail was selected under
    sizes: list  # estimate of each input message (no pre-flight factor)
    cut: Optional[ReplaceToolOutput] = None  # the kept tail's newest tool output, cut to the budget


def starts_turn(msg: m.Message) -> bool:
    """A user message starts a turn, except a compaction marker."""
    return msg.role == m.USER and msg.compaction() is None


def message_size(msg: m.Message, mdl: m.Model, deadline: Deadline = NO_DEADLINE) -> int:
    """Estimate of the JSON of the message's lowered model messages (media as placeholders)."""
    lowered = lower(mdl.provider, model_id=mdl.id, system=[], messages=to_model_messages([msg], mdl),
                    tools=[], max_output=0, ledger=MediaLedger(placeholders=True), deadline=deadline)
    json_lengths = native.json_lengths
    return native.estimate_tokens(sum(json_lengths(e)[1] for e in lowered.messages))


def sizes(messages: list, mdl: m.Model, memo=None, deadline: Deadline = NO_DEADLINE) -> list:
    """memo (memo.Memo): each message's size kept under its digest, the provider and model."""
    return each(memo, "size", messages, (mdl.provider, mdl.id), lambda x: message_size(x, mdl, deadline))


def budget(usable: int, settings: m.CompactionSettings, cfg: Config) -> int:
    if settings.preserve_recent_tokens is not None:
        return settings.preserve_recent_tokens
    cc = cfg.compact
    share = math.floor(usable * Fraction(cc.preserve_recent_ratio))
    return min(cc.preserve_recent_max, max(cc.preserve_recent_min, share))


def tail_turns(settings: m.CompactionSettings, cfg: Config) -> int:
    return settings.tail_turns if settings.tail_turns is not None else cfg.compact.tail_turns


def select(messages: list, mdl: m.Model, usable: int, settings: m.CompactionSettings,
           cfg: Config, message_sizes: list | None = None, memo=None,
           deadline: Deadline = NO_DEADLINE) -> Selection:
    """sizes holds the estimate of every message the walk can reach (the last tail_turns turns);
    the others are never read and are reported as 0."""
    b = budget(usable, settings, cfg)
    turns = tail_turns(settings, cfg)
    starts = native.split_turns([starts_turn(x) for x in messages])
    if message_sizes is not None:
        sz = message_sizes
    else:
        if turns == 0 or not starts:
            first = len(messages)  # the walk reads nothing
        else:
            first = starts[-min(turns, len(starts))]
        sz = [0] * first + sizes(messages[first:], mdl, memo, deadline)
    kept = native.select_tail(starts, sz, turns, b) if messages else -1
    if kept < 0 and turns > 0 and starts and len(messages) - 1 > starts[-1]:
        # Nothing of the current turn fits: its newest message is kept anyway with its newest
        # tool output cut to the budget, or the model would read that file again.
        last = messages[-1]
        cut = cut_newest_output(last, mdl, b)
        if cut is not None:
            return Selection(list(messages[:-1]), [last], last.id, b, sz, cut)
    if kept <= 0:
        return Selection(list(messages), [], "", b, sz)
    return Selection(list(messages[:kept]), list(messages[kept:]), messages[kept].id, b, sz)


def newest_output(msg: m.Message) -> Optional[m.Part]:
    """The message's newest completed tool part whose output is still sent."""
    if msg.role != m.ASSISTANT:
        return None
    return next((p for p in reversed(msg.parts) if isinstance(p.content, m.Tool)
                 and p.content.status == m.COMPLETED and not p.content.compacted and p.content.output), None)


def cut_newest_output(msg: m.Message, mdl: m.Model, budget_: int) -> Optional[ReplaceToolOutput]:
    """The newest tool output of msg cut (serialize.clip) to the most characters with which the
    message's size is within budget_; None when msg has none, or is over budget_ even with it cut
    to nothing."""
    part = newest_output(msg)
    if part is None:
        return None

    def fits(chars: int) -> bool:
        cut = apply([msg], [ReplaceToolOutput(part.id, clip(part.content.output, chars))])[0]
        return message_size(cut, mdl) <= budget_

    if not fits(0):
        return None
    lo, hi = 0, len(part.content.output)  # fits(lo); the whole output does not fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return ReplaceToolOutput(part.id, clip(part.content.output, lo))
