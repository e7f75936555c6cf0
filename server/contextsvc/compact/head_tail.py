"""Select (docs/design.md §5): split the history into the head to summarize and the tail kept verbatim."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .. import conversation as m, native
from ..config import Config
from ..deadline import NO_DEADLINE, Deadline
from ..lowering import MediaLedger, lower, to_model_messages
from ..memo import each
from ..step.plan import image_pixels, media_refused
from .edits import ReplaceToolOutput, apply
from .serialize import clip


@dataclass(slots=True)
class Selection:
    head: list  # messages to summarize, in order
    tail: list  # messages kept verbatim, in order
    tail_start_id: str  # "" when nothing is kept
    budget: int  # token budget the tail was selected under
    sizes: list  # estimate of each input message (no pre-flight factor)
    cuts: tuple = ()  # ReplaceToolOutput of the kept tail's newest tool outputs, cut to the budget


def starts_turn(msg: m.Message) -> bool:
    """A user message starts a turn, except a compaction marker."""
    return msg.role == m.USER and msg.compaction() is None


def message_size(msg: m.Message, mdl: m.Model, deadline: Deadline = NO_DEADLINE, per_medium: int = 0,
                 pixels: tuple | None = None) -> int:
    """Estimate of the JSON of the message's lowered model messages, media as placeholders, and
    per_medium for each media item they hold (the decision figure's measure.media_decision_tokens:
    a tail sized without its screenshots was kept whole, over the limit, or found to fit from the
    first message, so the person's newest image and question were summarized away). pixels:
    media_pixels, where the model reads an image at several items (Claude from Opus 4.7). A model
    that takes text alone is sent each medium as its note (Plan.media_refused), and so sized."""
    ledger = MediaLedger(placeholders=True, image_pixels=pixels, refused=media_refused(mdl))
    lowered = lower(mdl.provider, model_id=mdl.id, system=[], messages=to_model_messages([msg], mdl),
                    tools=[], max_output=0, ledger=ledger, deadline=deadline)
    json_lengths = native.json_lengths
    return native.estimate_tokens(sum(json_lengths(e)[1] for e in lowered.messages)) + ledger.media_count * per_medium


def sizes(messages: list, mdl: m.Model, memo=None, deadline: Deadline = NO_DEADLINE, per_medium: int = 0,
          pixels: tuple | None = None) -> list:
    """memo (memo.Memo): each message's size kept under its digest, the provider, model,
    per_medium and pixels (message_size)."""
    return each(memo, "size", messages, (mdl.provider, mdl.id, per_medium, pixels),
                lambda x: message_size(x, mdl, deadline, per_medium, pixels))


def media_pixels(mdl: m.Model, cfg: Config, per_medium: int) -> tuple | None:
    """The pixels argument of message_size for media at per_medium an item (the decision's)."""
    return image_pixels(mdl, per_medium, cfg.measure.exact_encoding)


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
           deadline: Deadline = NO_DEADLINE, tail_budget: int | None = None) -> Selection:
    """sizes holds the estimate of every message the walk can reach (the last tail_turns turns);
    the others are never read and are reported as 0. tail_budget: in place of the settings'
    budget (a tail chosen again, smaller). Media count media_decision_tokens an item, unless
    nothing of the current turn fits so: then the reference's sizing (placeholders) chooses,
    rather than summarize the screenshots the person just sent with their question."""
    b = budget(usable, settings, cfg) if tail_budget is None else tail_budget
    chosen = _select(messages, mdl, b, settings, cfg, message_sizes, memo, deadline, cfg.measure.media_decision_tokens)
    if chosen is None:
        chosen = _select(messages, mdl, b, settings, cfg, message_sizes, memo, deadline, 0)
    return chosen


def _select(messages: list, mdl: m.Model, b: int, settings: m.CompactionSettings, cfg: Config,
            message_sizes: list | None, memo, deadline: Deadline, per_medium: int) -> Selection | None:
    """select with media at per_medium an item; None when nothing of the current turn fits and
    per_medium could be what keeps it out."""
    turns = tail_turns(settings, cfg)
    pixels = media_pixels(mdl, cfg, per_medium)
    starts = native.split_turns([starts_turn(x) for x in messages])
    if message_sizes is not None:
        sz = message_sizes
    else:
        if turns == 0 or not starts:
            first = len(messages)  # the walk reads nothing
        else:
            first = starts[-min(turns, len(starts))]
        sz = [0] * first + sizes(messages[first:], mdl, memo, deadline, per_medium, pixels)
    kept = native.select_tail(starts, sz, turns, b) if messages else -1
    if kept < 0 and turns > 0 and starts and len(messages) - 1 > starts[-1]:
        # Nothing of the current turn fits: its newest message is kept anyway with its tool
        # outputs cut to the budget (parallel calls: each to the same length), or the model would
        # read those files again.
        last = messages[-1]
        cuts = cut_outputs(last, mdl, b, deadline, per_medium, pixels)
        if cuts:
            return Selection(list(messages[:-1]), [last], last.id, b, sz, cuts)
    if kept < 0 and per_medium and message_sizes is None:
        return None
    if kept <= 0:
        return Selection(list(messages), [], "", b, sz)
    return Selection(list(messages[:kept]), list(messages[kept:]), messages[kept].id, b, sz)


def sent_outputs(msg: m.Message) -> list:
    """The message's completed tool parts whose outputs are still sent, in order."""
    if msg.role != m.ASSISTANT:
        return []
    return [p for p in msg.parts if isinstance(p.content, m.Tool) and p.content.status == m.COMPLETED
            and not p.content.compacted and p.content.output]


def cut_outputs(msg: m.Message, mdl: m.Model, budget_: int, deadline: Deadline = NO_DEADLINE,
                per_medium: int = 0, pixels: tuple | None = None) -> tuple:
    """ReplaceToolOutput of the tool outputs of msg cut (serialize.clip) to the most characters
    each with which the message's size is within budget_ (an output no longer than that stays
    whole: one output is cut alone, parallel ones each keep their head and tail); () when msg has
    none, or is over budget_ even with them cut to nothing."""
    parts = sent_outputs(msg)
    if not parts:
        return ()

    def cut(chars: int) -> list:
        return [ReplaceToolOutput(p.id, clip(p.content.output, chars)) for p in parts
                if len(p.content.output) > chars]

    def fits(chars: int) -> bool:
        return message_size(apply([msg], cut(chars))[0], mdl, deadline, per_medium, pixels) <= budget_

    if not fits(0):
        return ()
    lo, hi = 0, max(len(p.content.output) for p in parts)  # fits(lo); the whole outputs do not fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return tuple(cut(lo))
