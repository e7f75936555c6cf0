"""Prune (docs/design.md §4): mark old tool outputs compacted, never touching structure.

Scans the history as it is sent (what follows the last compaction) from the newest message
backwards through the gates of design.md §4 and returns the ids of the tool parts to mark. `apply` produces the conversation those marks give (Compact uses it to measure
what is left after its post-compaction prune).
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Optional

from . import conversation as m, native, projection, validate, window
from .lowering import documents
from .lowering.registry import FORMATS
from .config import PRUNE_PROTECT_RULES, Config
from .errors import BadInput
from .deadline import NO_DEADLINE, Deadline, ticking
from .memo import each

NORMAL = "normal"
PAYLOAD_LIMIT = "payload-limit"
POST_COMPACTION = "post-compaction"
REASONS = (NORMAL, PAYLOAD_LIMIT, POST_COMPACTION)

DISABLED = "disabled"
NOTHING_TO_PRUNE = "nothing-to-prune"
MINIMUM = "minimum"

TOOL_RESULTS, TURNS = PRUNE_PROTECT_RULES  # newest N completed results (default); last N turns


@dataclass(slots=True)
class PruneResult:
    part_ids: list = field(default_factory=list)  # tool parts to mark compacted
    tokens_freed: int = 0  # estimate of the outputs those parts carry
    acted: bool = False
    stopped_by: str = ""  # when not acted: "disabled", "nothing-to-prune" or "minimum"
    reason: str = NORMAL
    tokens_scanned: int = 0  # estimate of every unprotected completed output scanned
    # not acted: (part id, estimate) of each completed output past the newest protected results,
    # oldest first; the gates kept them (PRUNE_PROTECT, PRUNE_MINIMUM), but a prune that makes the
    # request fit may mark them (prune_fit)
    spare: tuple = ()
    # acted past those gates, since marking its parts makes the request fit (prune_fit)
    fits: bool = False


def enabled(reason: str, settings: m.CompactionSettings, cfg: Config) -> bool:
    """An explicit `prune: false` turns every reason off (as upstream). Unset, payload-limit and
    post-compaction run (the cache is being rebuilt anyway) and normal follows the config."""
    if settings.prune is not None:
        return settings.prune
    return reason != NORMAL or cfg.prune.enabled


@dataclass(frozen=True, slots=True)
class Gates:
    """The thresholds one prune runs with, after config, window scaling and request overrides."""
    protect: str  # TOOL_RESULTS or TURNS
    protected_results: int
    protected_turns: int
    protect_tokens: int  # PRUNE_PROTECT
    minimum_tokens: int  # PRUNE_MINIMUM
    protected_tools: frozenset
    # what each media item a tool output carries counts besides its text (measure.media_decision_tokens:
    # the decision figure's; a prune blind to screenshots freed nothing, and the loop compacted)
    media_tokens: int = 0
    pages_per_item: int = 1  # of an attached PDF, as the model's format counts them (WireFormat)

    def key(self) -> tuple:
        """The gates as plain data, for a memo key: a dataclass's __eq__ and __hash__ run as
        Python code, and the memo's lookups rely on theirs running in C (memo.Memo). Every
        field, as its fields say: a gate added later changes the key too."""
        return _GATE_VALUES(self)


_GATE_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(Gates)))


def gates(settings: m.CompactionSettings, cfg: Config, mdl: Optional[m.Model] = None) -> Gates:
    """Config values, the token gates scaled to the window when the model's is known (design.md §4:
    min(config, usable / 4) and min(config, usable / 10)), then each per-request value wins."""
    pc, ps = cfg.prune, settings.prune_settings
    protect_tokens, minimum_tokens = window.prune_gates(pc.protect_tokens, pc.minimum_tokens, mdl, settings, cfg)

    def pick(override, default):
        return default if override is None else override

    return Gates(
        protect=pick(ps.protect, pc.protect),
        protected_results=pick(ps.protected_results, pc.protected_results),
        protected_turns=pick(ps.protected_turns, pc.protected_turns),
        protect_tokens=pick(ps.protect_tokens, protect_tokens),
        minimum_tokens=pick(ps.minimum_tokens, minimum_tokens),
        protected_tools=frozenset(pick(ps.protected_tools, pc.protected_tools)),
        media_tokens=cfg.measure.media_decision_tokens,
        pages_per_item=FORMATS[mdl.provider].pages_per_item if mdl is not None and mdl.provider in FORMATS else 1,
    )


def prune(conversation: m.Conversation, reason: str, settings: m.CompactionSettings,
          cfg: Config, model: Optional[m.Model] = None, memo=None,
          deadline: Deadline = NO_DEADLINE) -> PruneResult:
    """The tool parts to mark, scanning what would be sent (projection.project) newest first.

    `model` is optional: with a known context window it scales the token gates. `memo`
    (memo.Memo) keeps each message's tool parts as the scan reads them.
    """
    if reason not in REASONS:
        raise BadInput("reason", f"must be one of {', '.join(REASONS)}, got {reason!r}")
    validate.conversation(conversation, memo=memo, deadline=deadline)
    validate.compaction_settings(settings)
    if model is not None:
        validate.model(model)
    if not enabled(reason, settings, cfg):
        return PruneResult(reason=reason, stopped_by=DISABLED)

    g = gates(settings, cfg, model)
    by_turns = g.protect == TURNS
    # Send order: a post-compaction prune must reach the kept tail, which is stored before the
    # summary but sent after it. The projection keeps the stored message objects.
    msgs = projection.project(conversation.messages, deadline=deadline)
    turns = 0
    results = 0  # completed tool results passed under the tool-results rule
    protected = 0  # their tokens
    total = 0
    freed = 0
    chosen = []  # (message, part index)
    spare = []  # (message, part index, estimate) past the protected results, newest first
    stop = False
    media = (g.media_tokens, g.pages_per_item)
    scans = each(memo, "prune", msgs, media,
                 ticking(lambda msg: tool_outputs(msg, *media, deadline), deadline, "prune"))
    for i in range(len(msgs) - 1, -1, -1):
        deadline.tick(i, "prune")
        msg = msgs[i]
        if by_turns:
            if msg.role == m.USER:
                turns += 1
            if turns < g.protected_turns:
                continue  # the freshest turns are never touched
        if msg.role == m.ASSISTANT and msg.summary:
            break  # never cross a compaction point
        for j, tool, compacted, status, cost in scans[i]:
            deadline.count("prune")
            if tool in g.protected_tools:
                continue  # loaded instructions are live rules
            if compacted:
                stop = True  # everything older was handled before
                break
            if status != m.COMPLETED:
                continue
            if not by_turns and results < g.protected_results:
                # The freshest results are never touched nor counted: N of them, or as many as
                # fit in the protected tokens (at least the newest), since five 12K-token test
                # logs would outgrow a 32K window and prune could then never act there.
                if results == 0 or protected + cost <= g.protect_tokens:
                    results += 1
                    protected += cost
                    continue
                results = g.protected_results
            total += cost
            spare.append((msg, j, cost))
            if total > g.protect_tokens:
                freed += cost
                chosen.append((msg, j))
        if stop:
            break

    # every tool part has an id (validate)
    spare_ids = tuple((msg.parts[j].id, cost) for msg, j, cost in reversed(spare))
    if not chosen or freed <= g.minimum_tokens:
        return PruneResult(reason=reason, stopped_by=MINIMUM if chosen else NOTHING_TO_PRUNE, tokens_scanned=total,
                           spare=spare_ids)
    ids = [msg.parts[j].id for msg, j in chosen]
    return PruneResult(part_ids=ids, tokens_freed=freed, acted=True, reason=reason, tokens_scanned=total,
                       spare=spare_ids)


def passed_over(newest: list, g: Gates, memo=None) -> bool:
    """Whether the scan passes over these messages, the newest of a conversation, as if they
    were not there, so the conversation before them is pruned the same as with them (the payload
    guard's answer for an earlier step then stands): none is a summary or a compaction marker
    (they cut what is sent and stop the scan), none is a user message under the turns rule (it
    counts a turn), and each of their tool parts is one the scan skips without counting it (a
    protected tool, or an output neither completed nor compacted)."""
    for msg in newest:
        if msg.summary or msg.compaction() is not None or (g.protect == TURNS and msg.role == m.USER):
            return False
    return all(tool in g.protected_tools or (not compacted and status != m.COMPLETED)
               for scan in each(memo, "prune", newest, (g.media_tokens, g.pages_per_item),
                                lambda msg: tool_outputs(msg, g.media_tokens, g.pages_per_item))
               for _, tool, compacted, status, _ in scan)


def tool_outputs(msg: m.Message, media_tokens: int = 0, pages_per_item: int = 1,
                 deadline: Deadline = NO_DEADLINE) -> tuple:
    """What the scan reads of a message: (part index, tool, compacted, status, estimate of the
    output) of each tool part, newest first, an output's estimate holding media_tokens for each
    media item its attachments carry (a PDF: its pages, pages_per_item an item), which marking it
    drops; only the message and those decide it."""
    estimate = native.estimate_tokens
    out = []
    parts = msg.parts
    for j in range(len(parts) - 1, -1, -1):
        deadline.count("prune")
        c = parts[j].content
        if isinstance(c, m.Tool):
            cost = 0
            if c.status == m.COMPLETED and not c.compacted:
                cost = estimate(c.output) + media_tokens * sum(_media_items(a, pages_per_item) for a in c.attachments)
            out.append((j, c.tool, c.compacted, c.status, cost))
    return tuple(out)


def _media_items(f: m.File, pages_per_item: int) -> int:
    if not f.is_media:
        return 0
    return documents.items(f.data, pages_per_item) if f.data is not None else 1


def apply(conversation: m.Conversation, part_ids, now_ms: int, deadline: Deadline = NO_DEADLINE) -> m.Conversation:
    """A copy with those tool parts marked compacted at now_ms; the input is left untouched.

    Only the messages and parts that change are copied; the rest are shared.
    """
    wanted = set(part_ids)
    if not wanted:
        return m.Conversation(messages=list(conversation.messages), session_id=conversation.session_id)
    if now_ms <= 0:
        raise BadInput("now_ms", "must be positive to mark parts compacted")
    out = []
    for msg in conversation.messages:
        deadline.count("prune")
        if not any(p.id in wanted and isinstance(p.content, m.Tool) for p in msg.parts):
            out.append(msg)
            continue
        parts = []
        for p in msg.parts:
            deadline.count("prune")
            if p.id in wanted and isinstance(p.content, m.Tool) and not p.content.compacted:
                p = m.Part(p.id, dataclasses.replace(p.content, time_compacted_ms=now_ms))
            parts.append(p)
        out.append(dataclasses.replace(msg, parts=parts))
    return m.Conversation(messages=out, session_id=conversation.session_id)
