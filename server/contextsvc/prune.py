"""Prune (SPEC section 4): mark old tool outputs compacted, never touching structure.

Scans from the newest message backwards through the SPEC's gates and returns the ids of the tool
parts to mark. `apply` produces the conversation those marks give (Compact uses it to measure
what is left after its post-compaction prune).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from . import model as m, native, validate
from .config import Config
from .errors import BadInput

NORMAL = "normal"
PAYLOAD_LIMIT = "payload-limit"
POST_COMPACTION = "post-compaction"
REASONS = (NORMAL, PAYLOAD_LIMIT, POST_COMPACTION)

DISABLED = "disabled"
NOTHING_TO_PRUNE = "nothing-to-prune"
MINIMUM = "minimum"


@dataclass(slots=True)
class PruneResult:
    part_ids: list = field(default_factory=list)  # tool parts to mark compacted
    tokens_freed: int = 0  # estimate of the outputs those parts carry
    acted: bool = False
    stopped_by: str = ""  # when not acted: "disabled", "nothing-to-prune" or "minimum"
    reason: str = NORMAL
    tokens_scanned: int = 0  # estimate of every unprotected completed output scanned


def enabled(reason: str, settings: m.CompactionSettings, cfg: Config) -> bool:
    """payload-limit and post-compaction always run; normal only when asked for."""
    if reason != NORMAL:
        return True
    return settings.prune if settings.prune is not None else cfg.prune.enabled


def prune(conversation: m.Conversation, reason: str, settings: m.CompactionSettings,
          cfg: Config) -> PruneResult:
    if reason not in REASONS:
        raise BadInput("reason", f"must be one of {', '.join(REASONS)}, got {reason!r}")
    validate.conversation(conversation)
    validate.compaction_settings(settings)
    if not enabled(reason, settings, cfg):
        return PruneResult(reason=reason, stopped_by=DISABLED)

    pc = cfg.prune
    protected = set(pc.protected_tools)
    estimate = native.estimate_tokens
    msgs = conversation.messages
    turns = 0
    total = 0
    freed = 0
    chosen = []  # (message index, part index)
    stop = False
    for i in range(len(msgs) - 1, -1, -1):
        msg = msgs[i]
        if msg.role == m.USER:
            turns += 1
        if turns < pc.protected_turns:
            continue  # the freshest turns are never touched
        if msg.role == m.ASSISTANT and msg.summary:
            break  # never cross a compaction point
        parts = msg.parts
        for j in range(len(parts) - 1, -1, -1):
            c = parts[j].content
            if not isinstance(c, m.Tool):
                continue
            if c.tool in protected:
                continue  # loaded instructions are live rules
            if c.compacted:
                stop = True  # everything older was handled before
                break
            if c.status != m.COMPLETED:
                continue
            cost = estimate(c.output)
            total += cost
            if total > pc.protect_tokens:
                freed += cost
                chosen.append((i, j))
        if stop:
            break

    if not chosen:
        return PruneResult(reason=reason, stopped_by=NOTHING_TO_PRUNE, tokens_scanned=total)
    if freed <= pc.minimum_tokens:
        return PruneResult(reason=reason, stopped_by=MINIMUM, tokens_scanned=total)
    ids = []
    for i, j in chosen:
        pid = msgs[i].parts[j].id
        if not pid:
            raise BadInput(f"conversation.messages[{i}].parts[{j}].id",
                           "is required on a tool part that prune marks compacted")
        ids.append(pid)
    return PruneResult(part_ids=ids, tokens_freed=freed, acted=True, reason=reason,
                       tokens_scanned=total)


def apply(conversation: m.Conversation, part_ids, now_ms: int) -> m.Conversation:
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
        if not any(p.id in wanted and isinstance(p.content, m.Tool) for p in msg.parts):
            out.append(msg)
            continue
        parts = []
        for p in msg.parts:
            if p.id in wanted and isinstance(p.content, m.Tool) and not p.content.compacted:
                p = m.Part(p.id, dataclasses.replace(p.content, time_compacted_ms=now_ms))
            parts.append(p)
        out.append(dataclasses.replace(msg, parts=parts))
    return m.Conversation(messages=out, session_id=conversation.session_id)
