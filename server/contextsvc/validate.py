"""Semantic checks of a request, in core types. Each failure names the field and why."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Optional

from . import conversation as m
from .config import PRUNE_PROTECT_RULES
from .errors import BadInput
from .deadline import NO_DEADLINE, Deadline, ticking
from .lowering.registry import FORMATS
from .lowering.tool_ids import wire_name
from .memo import VALID_TOOLS, VALIDATED, each

# The largest token figure a request may carry: 2^53 - 1 (JSON's exact integers). Usage figures
# and limits are summed (a usage's parts, reported + tail + overhead, output + reserved), and
# the sums go back on the wire as int64: figures up to this bound cannot overflow any such sum,
# and no real model or bill comes near it (a 10M-token window is 2^23.3).
MAX_TOKENS = 2**53 - 1


def _tokens(value: int, path) -> None:
    """A token figure: not negative, not beyond MAX_TOKENS; path is the field or builds it."""
    if value < 0:
        raise BadInput(path() if callable(path) else path, "must not be negative")
    if value > MAX_TOKENS:
        raise BadInput(path() if callable(path) else path,
                       f"{value} is beyond any real token count (at most {MAX_TOKENS}, 2^53 - 1)")


def conversation(conv: m.Conversation, path: str = "conversation", memo=None,
                 deadline: Deadline = NO_DEADLINE) -> None:
    """Runs on every call, so field paths are only formatted for the error raised.

    memo (memo.Memo): each message's own checks are kept under its digest, so a step checks
    its new messages and only the uniqueness of ids across the conversation. Anything wrong
    sends the whole conversation through the full checks, which raise the first error in order."""
    if memo is not None and conv.messages and _known_good(conv, memo, deadline):
        return
    _conversation(conv, path, deadline)


def _own_ids(msg: m.Message, deadline: Deadline = NO_DEADLINE):
    """(message id, its part ids) when the message passes its own checks, else False (kept in
    the memo like any answer: None would read as not kept)."""
    try:
        _conversation(m.Conversation([msg]), deadline=deadline)
    except BadInput:
        return False
    return msg.id, tuple(p.id for p in msg.parts if p.id)


@dataclass(frozen=True, slots=True)
class _Ids:
    """The message and part ids of a conversation whose checks passed (memo.VALIDATED): its own
    beyond the earlier step it continues (below), which holds the rest but those of the earlier
    step's messages it no longer holds (hidden: edited or dropped since). Sets are never changed
    once kept; a chain FLATTEN_AFTER deep is put together into one, so a step copies no set of
    the whole history (one in FLATTEN_AFTER does)."""
    ids: set
    part_ids: set
    below: Optional["_Ids"]
    depth: int
    hidden_ids: frozenset = frozenset()
    hidden_part_ids: frozenset = frozenset()

    def holds(self, message_id: str, part_ids: tuple) -> bool:
        """Whether message_id or one of part_ids is one of its ids."""
        node, hidden_ids, hidden_parts = self, frozenset(), frozenset()
        while node is not None:
            if message_id in node.ids and message_id not in hidden_ids:
                return True
            if not node.part_ids.isdisjoint(part_ids) and (
                    not hidden_parts or any(p in node.part_ids and p not in hidden_parts for p in part_ids)):
                return True
            if node.hidden_ids or node.hidden_part_ids:
                hidden_ids, hidden_parts = hidden_ids | node.hidden_ids, hidden_parts | node.hidden_part_ids
            node = node.below
        return False

    def flat(self) -> tuple[set, set]:
        """Its ids and those it holds below, in two new sets (each layer's added in place)."""
        if self.below is None:
            return set(self.ids), set(self.part_ids)
        ids, part_ids = self.below.flat()
        ids -= self.hidden_ids
        part_ids -= self.hidden_part_ids
        ids |= self.ids
        part_ids |= self.part_ids
        return ids, part_ids


FLATTEN_AFTER = 16


def _known_good(conv: m.Conversation, memo, deadline: Deadline = NO_DEADLINE) -> bool:
    """Whether every message passes its own checks (kept per message) and no id repeats; the
    ids of the earlier step a conversation continues (Lineage) are taken as that step left them,
    but those of its messages this one no longer holds, and this one's are kept for the next."""
    ids, part_ids, start, below = set(), set(), 0, None
    lineage = conv.lineage
    if lineage is not None and lineage.kept:
        below = memo.get((VALIDATED, lineage.kept_digest))
        start = lineage.kept if below is not None else 0
    # the ids of the earlier step's messages this conversation no longer holds are free again
    hidden = (frozenset(msg.id for msg in lineage.dropped),
              frozenset(p.id for msg in lineage.dropped for p in msg.parts if p.id)) \
        if below is not None and lineage.dropped else (frozenset(), frozenset())
    held = _Ids(set(), set(), below, 0, *hidden) if hidden[0] else below  # what is below, as this one holds it
    own_ids = ticking(lambda msg: _own_ids(msg, deadline), deadline, "validation")
    for own in each(memo, "valid", conv.messages[start:], (), own_ids):
        if own is False or own[0] in ids or (held is not None and held.holds(*own)):
            return False
        ids.add(own[0])
        n = len(part_ids)
        part_ids.update(own[1])
        if len(part_ids) - n != len(own[1]):
            return False
    # kept when it adds messages, or drops some (a revert: what it holds is the earlier step's less those)
    if lineage is not None and (start < len(conv.messages) or hidden[0]):
        if below is not None and below.depth >= FLATTEN_AFTER:
            flat_ids, flat_parts = held.flat()
            ids, part_ids, below, hidden = flat_ids | ids, flat_parts | part_ids, None, ()
        kept = _Ids(ids, part_ids, below, below.depth + 1 if below is not None else 0, *hidden)
        # the id strings are the messages' own
        memo.put_charged((VALIDATED, lineage.digest), kept, sum(map(sys.getsizeof, (ids, part_ids, *hidden))))
    return True


def _conversation(conv: m.Conversation, path: str = "conversation", deadline: Deadline = NO_DEADLINE) -> None:
    if not conv.messages:
        raise BadInput(f"{path}.messages", "must hold at least one message")
    ids = {}
    part_ids = {}
    for i, msg in enumerate(conv.messages):
        deadline.tick(i, "validation")
        if not msg.id or msg.id in ids:
            mp = f"{path}.messages[{i}]"
            if not msg.id:
                raise BadInput(f"{mp}.id", "is required")
            raise BadInput(f"{mp}.id", f"{msg.id!r} duplicates {path}.messages[{ids[msg.id]}].id; "
                           "ids must be unique within the conversation")
        ids[msg.id] = i
        if msg.time_created_ms < 0 or msg.time_completed_ms < 0:
            name = "time_created_ms" if msg.time_created_ms < 0 else "time_completed_ms"
            raise BadInput(f"{path}.messages[{i}].{name}", "must not be negative")
        _usage(msg.usage, lambda i=i: f"{path}.messages[{i}].usage")
        for j, part in enumerate(msg.parts):
            deadline.count("validation")
            c = part.content
            if part.id:
                if part.id in part_ids:
                    first_i, first_j = part_ids[part.id]
                    raise BadInput(f"{path}.messages[{i}].parts[{j}].id", f"{part.id!r} duplicates "
                                   f"{path}.messages[{first_i}].parts[{first_j}].id")
                part_ids[part.id] = (i, j)
            if isinstance(c, m.Tool):
                pp = None
                if not part.id:  # refused from the first step, not at the first prune a session needs
                    pp = ("id", "is required on a tool part: Prune, the payload guard and Compact mark it "
                          "compacted by its id")
                elif not c.call_id:
                    pp = ("tool.call_id", "is required on a tool part")
                elif not c.tool:
                    pp = ("tool.tool", "is required (the tool name)")
                elif msg.role != m.ASSISTANT:
                    pp = ("tool", "tool calls belong to assistant messages")
                elif c.time_compacted_ms < 0:
                    pp = ("tool.state.time_compacted_ms", "must not be negative")
                if pp:
                    raise BadInput(f"{path}.messages[{i}].parts[{j}].{pp[0]}", pp[1])
            elif isinstance(c, m.ProviderCompaction):
                pp = None
                if not c.provider_id:
                    pp = ("provider_compaction.provider_id", "is required (the provider that wrote the item)")
                elif not getattr(FORMATS.get(c.provider_id), "compaction_items", False):
                    takers = ", ".join(f.name for f in FORMATS.values() if f.compaction_items)
                    pp = ("provider_compaction.provider_id",
                          f"{c.provider_id!r} writes no compaction items this service carries (only {takers})")
                elif not c.encrypted_content:
                    pp = ("provider_compaction.encrypted_content", "is required (the item's opaque state)")
                elif msg.role != m.ASSISTANT:
                    pp = ("provider_compaction", "provider compaction items belong to assistant messages")
                if pp:
                    raise BadInput(f"{path}.messages[{i}].parts[{j}].{pp[0]}", pp[1])
            elif isinstance(c, m.StepFinish):
                _usage(c.tokens, lambda i=i, j=j: f"{path}.messages[{i}].parts[{j}].step_finish.tokens")


def request(conv: m.Conversation, mdl: m.Model, tool_defs: list, settings: m.CompactionSettings,
            memo=None, deadline: Deadline = NO_DEADLINE) -> None:
    """The checks every conversation-carrying request shares."""
    conversation(conv, memo=memo, deadline=deadline)
    model(mdl)
    fmt = FORMATS.get(mdl.provider)
    most = fmt.tool_limit(mdl.id) if fmt is not None else 0
    if most and len(tool_defs) > most:  # refused by the provider whatever else the request holds
        raise BadInput("tools", f"{len(tool_defs)} tool definitions; {fmt.name} takes at most {most} in a request "
                                f"to {mdl.id} (so many MCP tools loaded at once: leave some servers out)")
    if memo is None or not tool_defs:
        tools(tool_defs, fmt=fmt)
    else:  # checked once for the same definitions (a refused list is kept by nothing: refused every time)
        memo.for_objects(VALID_TOOLS, tool_defs, (mdl.provider,), lambda: (tools(tool_defs, fmt=fmt), 0))
    compaction_settings(settings)


def _usage(u: m.Usage, path) -> None:
    if 0 <= min(u.input, u.output, u.reasoning, u.cache_read, u.cache_write, u.total, u.cleared) and \
            max(u.input, u.output, u.reasoning, u.cache_read, u.cache_write, u.total, u.cleared) <= MAX_TOKENS:
        return
    for name in ("input", "output", "reasoning", "cache_read", "cache_write", "total", "cleared"):
        _tokens(getattr(u, name), lambda name=name: f"{path()}.{name}")


def model(x: m.Model, path: str = "model") -> None:
    if not x.id:
        raise BadInput(f"{path}.id", "is required")
    for name in ("context", "input", "output"):
        _tokens(getattr(x.limits, name), f"{path}.limits.{name}")


def tools(xs: list, path: str = "tools", fmt=None) -> None:
    """Names present and distinct; with fmt (the request's WireFormat), also distinct as written
    in its body: a name valid there that equals another's mapped form would merge the two."""
    seen, written = set(), {}
    for i, t in enumerate(xs):
        if not t.name:
            raise BadInput(f"{path}[{i}].name", "is required")
        if t.name in seen:
            raise BadInput(f"{path}[{i}].name", f"{t.name!r} is defined twice")
        seen.add(t.name)
        if fmt is not None:
            wire = wire_name(fmt, t.name)
            if wire in written:
                raise BadInput(f"{path}[{i}].name", f"{t.name!r} is written {wire!r} on {fmt.name}, as "
                                                    f"{path}[{written[wire]}].name is")
            written[wire] = i


def compaction_settings(s: m.CompactionSettings, path: str = "compaction") -> None:
    if s.threshold_percent is not None:
        p = s.threshold_percent
        if not math.isfinite(p) or p <= 0 or p > 100:
            raise BadInput(f"{path}.threshold_percent", f"must be in (0, 100], got {p}")
    for name in ("reserved", "tail_turns", "preserve_recent_tokens"):
        v = getattr(s, name)
        if v is not None:
            _tokens(v, f"{path}.{name}")
    if s.max_attempts is not None and s.max_attempts < 1:  # none would answer every Compact ContextOverflow
        raise BadInput(f"{path}.max_attempts", f"must be at least 1 (unset: the configured default), got {s.max_attempts}")
    if s.request_prune_bytes is not None and s.request_prune_bytes <= 0:
        raise BadInput(f"{path}.request_prune_bytes", f"must be a positive byte count, got {s.request_prune_bytes}")
    ps = s.prune_settings
    if ps.protect is not None and ps.protect not in PRUNE_PROTECT_RULES:
        raise BadInput(f"{path}.prune_settings.protect",
                       f"must be one of {', '.join(PRUNE_PROTECT_RULES)}, got {ps.protect!r}")
    for name in ("protected_results", "protected_turns", "protect_tokens", "minimum_tokens"):
        v = getattr(ps, name)
        if v is not None:
            _tokens(v, f"{path}.prune_settings.{name}")
