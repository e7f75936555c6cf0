"""Select (docs/design.md §5): split the history into the head to summarize and the tail kept verbatim."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .. import conversation as m, native
from ..config import Config
from ..lowering import MediaLedger, lower, to_model_messages
from ..memo import each


@dataclass(slots=True)
class Selection:
    head: list  # messages to summarize, in order
    tail: list  # messages kept verbatim, in order
    tail_start_id: str  # "" when nothing is kept
    budget: int  # token budget the tail was selected under
    sizes: list  # estimate of each input message (no pre-flight factor)


def starts_turn(msg: m.Message) -> bool:
    """A user message starts a turn, except a compaction marker."""
    return msg.role == m.USER and msg.compaction() is None


def message_size(msg: m.Message, mdl: m.Model) -> int:
    """Estimate of the JSON of the message's lowered model messages (media as placeholders)."""
    lowered = lower(mdl.provider, model_id=mdl.id, system=[], messages=to_model_messages([msg]),
                    tools=[], max_output=0, ledger=MediaLedger(placeholders=True))
    json_lengths = native.json_lengths
    return native.estimate_tokens(sum(json_lengths(e)[1] for e in lowered.messages))


def sizes(messages: list, mdl: m.Model, memo=None) -> list:
    """memo (memo.Memo): each message's size kept under its digest, the provider and model."""
    return each(memo, "size", messages, (mdl.provider, mdl.id), lambda x: message_size(x, mdl))


def budget(usable: int, settings: m.CompactionSettings, cfg: Config) -> int:
    if settings.preserve_recent_tokens is not None:
        return settings.preserve_recent_tokens
    cc = cfg.compact
    share = math.floor(usable * Fraction(cc.preserve_recent_ratio))
    return min(cc.preserve_recent_max, max(cc.preserve_recent_min, share))


def tail_turns(settings: m.CompactionSettings, cfg: Config) -> int:
    return settings.tail_turns if settings.tail_turns is not None else cfg.compact.tail_turns


def select(messages: list, mdl: m.Model, usable: int, settings: m.CompactionSettings,
           cfg: Config, message_sizes: list | None = None, memo=None) -> Selection:
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
        sz = [0] * first + sizes(messages[first:], mdl, memo)
    kept = native.select_tail(starts, sz, turns, b) if messages else -1
    if kept <= 0:
        return Selection(list(messages), [], "", b, sz)
    return Selection(list(messages[:kept]), list(messages[kept:]), messages[kept].id, b, sz)
