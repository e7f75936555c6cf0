"""Prompt-cache breakpoints (docs/design.md §6): which places of the body get a marker, chosen
without naming a provider. What differs by provider (implicit cache or markers, the auto policy,
the marker's shape and where it goes) is its wire format's (lowering/wire_format.py). The hashes
of the body prefix up to each breakpoint are in prefix.py."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import BadInput
from .lowering.registry import FORMATS
from .lowering.wire_format import TTL_1H

TTL_DEFAULT = ""

# The model ids that honor markers behind a gateway, by substring: the Claude family, as upstream.
MARKER_MODELS = ("claude", "anthropic")


@dataclass(slots=True)
class Hint:
    """A caller-chosen breakpoint: exactly one target."""
    system_block: int = -1
    message_id: str = ""
    last_tool: bool = False
    ttl: str = TTL_DEFAULT


@dataclass(slots=True)
class Breakpoint:
    kind: str  # "tools", "system" or "message"
    index: int  # index within that list of the body
    segment: str  # "tools", "system", "history" or "tail"
    ttl: str = TTL_DEFAULT
    prefix_bytes: int = 0
    prefix_sha256: str = ""

    @property
    def location(self) -> str:
        return f"{self.kind if self.kind != 'message' else 'messages'}[{self.index}]"


@dataclass(slots=True)
class Policy:
    hints: list = field(default_factory=list)  # list[Hint]; kept, and auto fills the places left
    ttl: str = TTL_DEFAULT


def _last_user(roles: list) -> int:
    """The index of the last "user" element, or -1, looked for from the end: a history is a
    thousand elements, and its last user message is near the end."""
    for i in range(len(roles) - 1, -1, -1):
        if roles[i] == "user":
            return i
    return -1


def _stored(lowered) -> int:
    """The message elements that stand for stored messages at the end of the body: all but a
    closing user message (lowered.close_with_user), which the next step replaces."""
    return len(lowered.messages) - (1 if lowered.closed else 0)


def _segment(lowered, index: int) -> str:
    return "tail" if index >= _last_user(lowered.roles[:_stored(lowered)]) else "history"


def takes_auto_markers(provider: str, model_id: str, marker_models=MARKER_MODELS) -> bool:
    """Whether the auto policy places markers for this provider and model."""
    fmt = FORMATS[provider]
    if fmt.implicit_cache:
        return False
    if fmt.gateway:
        mid = model_id.lower()
        return any(s.lower() in mid for s in marker_models if s)
    return True


_ORDER = {"tools": 0, "system": 1, "message": 2}


def _sorted(breakpoints: list) -> list:
    return sorted(breakpoints, key=lambda b: (_ORDER[b.kind], b.index))


def _late_hour(breakpoints: list):
    """The first 1h breakpoint that follows a 5m one in prefix order (Anthropic refuses it)."""
    short = False
    for b in _sorted(breakpoints):
        if b.ttl == TTL_DEFAULT:
            short = True
        elif b.ttl == TTL_1H and short:
            return b
    return None


def _hinted_element(lowered, message_id: str, message_ids) -> int | None:
    """The message element a hint on message_id goes on: the last one holding that message. A
    message sent as nothing (an errored reply without content, a step of blank text, ignored
    parts, history before a compaction) is the service's doing, which a client cannot foresee:
    its hint goes to the nearest element sent before it in the conversation (message_ids, in
    stored order), else after it; -1 when there is none (the hint is left unused). None when
    message_id is not in the conversation."""
    last, first = {}, {}
    for i, ids in enumerate(lowered.sources):
        for mid in ids:
            last[mid] = i
            first.setdefault(mid, i)
    if message_id in last:
        return last[message_id]
    if message_id not in message_ids:
        return None
    at = message_ids.index(message_id)
    before = next((last[x] for x in reversed(message_ids[:at]) if x in last), None)
    if before is not None:
        return before
    return next((first[x] for x in message_ids[at + 1:] if x in first), -1)


def _no_tools(k: int) -> BadInput:
    return BadInput(f"cache_hints[{k}].last_tool", "there are no tools to mark")


def _no_message(k: int, message_id: str) -> BadInput:
    return BadInput(f"cache_hints[{k}].message_id", f"{message_id!r} is not a message of the conversation")


def _hinted(lowered, provider: str, tools: list, policy: Policy, message_ids) -> list:
    fmt = FORMATS[provider]
    n_sys = len(lowered.system)
    chosen = []
    for k, h in enumerate(policy.hints):
        if h.last_tool:
            if not tools:
                raise _no_tools(k)
            if not fmt.tool_marker:
                raise BadInput(f"cache_hints[{k}].last_tool",
                               f"{provider} takes cache markers on message content parts only; its tool "
                               "definitions refuse one (hint a system block or a message instead)")
            chosen.append(Breakpoint("tools", len(tools) - 1, "tools", h.ttl))
        elif h.message_id:
            idx = _hinted_element(lowered, h.message_id, message_ids)
            if idx is None:
                raise _no_message(k, h.message_id)
            if idx >= 0:
                chosen.append(Breakpoint("message", idx, _segment(lowered, idx), h.ttl))
        else:
            if not 0 <= h.system_block < n_sys:
                which = f"(0..{n_sys - 1})" if n_sys else "(the request sends no system block)"
                raise BadInput(f"cache_hints[{k}].system_block",
                               f"{h.system_block} is not a system block index {which}")
            chosen.append(Breakpoint("system", h.system_block, "system", h.ttl))
    if fmt.system_marker_closes_list:
        chosen = [Breakpoint("system", n_sys - 1, "system", b.ttl) if b.kind == "system" else b for b in chosen]
    unique = {}
    for b in chosen:
        unique.setdefault((b.kind, b.index), b)
    return list(unique.values())


def _auto(lowered, provider: str, tools: list, ttl: str) -> list:
    """The auto policy's breakpoints, most useful first (the first ones win when the caller's
    hints leave fewer places)."""
    # a closing user message stands for no stored message and is gone at the next step: the
    # marker goes on the model's turn before it, whose entry that step reads, where that turn can
    # carry one (not a turn of reasoning alone); else on the last user element before it
    n_sys, n_msg = len(lowered.system), _stored(lowered)
    fmt = FORMATS[provider]
    if fmt.native_auto:
        # The latest user message is the last *wire* user message, the one carrying the tool
        # results, not the last message a person typed: through a long tool loop the marker
        # then advances every step, and each step reads everything before it from the entry
        # the previous step wrote. Upstream marks the last two messages instead; a marker on
        # the typed message would stay behind while the loop grows past the provider's
        # lookback (20 blocks on Anthropic), and every step would be written again in full.
        # Then the last system block (its entry survives a compaction, which rewrites the
        # messages) and the last tool (it survives a change of the system prompt).
        closed_on = lowered.closed and n_msg > 0 and fmt.markable(lowered.messages[n_msg - 1])
        last_user = n_msg - 1 if closed_on else _last_user(lowered.roles[:n_msg])
        out = [Breakpoint("message", last_user, "tail", ttl)] if last_user >= 0 else []
        if n_sys:
            out.append(Breakpoint("system", n_sys - 1, "system", ttl))
        if tools:
            out.append(Breakpoint("tools", len(tools) - 1, "tools", ttl))
        return out
    # The gateways' policy (upstream's): the first two system blocks and the last two messages;
    # ranked the last message, the last of those system blocks, then the others.
    sys = [Breakpoint("system", i, "system", ttl) for i in range(min(2, n_sys))]
    msgs = [Breakpoint("message", i, _segment(lowered, i), ttl) for i in range(n_msg - 1, max(0, n_msg - 2) - 1, -1)]
    return msgs[:1] + sys[::-1][:1] + msgs[1:] + sys[::-1][1:]


def choose(lowered, provider: str, tools: list, policy: Policy, max_markers: int,
           auto_markers: int, model_id: str = "", marker_models=MARKER_MODELS,
           message_ids: list = ()) -> list:
    """The breakpoints to place, ordered as the provider's prefix is (tools, system, messages).

    The caller's hints are kept; the auto policy fills the places left, up to max_markers in
    all (auto_markers of its own on the native policy, which leaves one for the caller).
    message_ids: the conversation's message ids in stored order, where a hint on a message sent
    as nothing finds its nearest neighbour sent (none given: such a hint is refused).
    """
    fmt = FORMATS[provider]
    kinds = fmt.marker_kinds(model_id)
    if fmt.implicit_cache or not kinds:
        # the provider caches on its own (or not at all for this model, which refuses a marker)
        # and hints are no-ops, but one naming nothing there is refused as on every other
        # provider: a request is not good on some providers alone
        for k, h in enumerate(policy.hints):
            if h.last_tool and not tools:
                raise _no_tools(k)
            if h.message_id and h.message_id not in message_ids:
                raise _no_message(k, h.message_id)
        return []
    chosen = _hinted(lowered, provider, tools, policy, message_ids)
    if len(chosen) > max_markers:  # Anthropic, Bedrock and the gateways' upstreams all refuse more
        raise BadInput("cache_hints", f"{len(chosen)} breakpoints; {provider} accepts at most {max_markers}")
    # A message with no block that can carry a marker gets none (say, an assistant step of
    # reasoning alone on Anthropic, or tool calls alone on the gateways).
    # Nor does a place the model takes none in (Nova's tools).
    chosen = [b for b in chosen if b.kind in kinds and (b.kind != "message" or fmt.markable_for(lowered.messages[b.index],
                                                                                                     model_id))]
    if fmt.longer_ttls_first:
        late = _late_hour(chosen)
        if late is not None:
            raise BadInput("cache_hints", f"the 1h breakpoint at {late.location} follows a 5m one; "
                                          "Anthropic needs longer TTLs first")
    if takes_auto_markers(provider, model_id, marker_models):
        limit = auto_markers if fmt.native_auto else max_markers
        taken = {(b.kind, b.index) for b in chosen}
        ttls = {b.ttl for b in chosen}  # one TTL among them all: no order of theirs can break
        added = 0
        for b in _auto(lowered, provider, tools, policy.ttl):
            if len(chosen) >= max_markers or added >= limit:
                break
            if (b.kind, b.index) in taken or b.kind not in kinds or (b.kind == "message" and not fmt.markable_for(
                    lowered.messages[b.index], model_id)):
                continue
            # an auto marker that would break the caller's TTL order is left out, not the hint
            if fmt.longer_ttls_first and ttls != {b.ttl} and _late_hour([*chosen, b]) is not None:
                continue
            chosen.append(b)
            taken.add((b.kind, b.index))
            ttls.add(b.ttl)
            added += 1
    return _sorted(chosen)


def place(lowered, provider: str, breakpoints: list) -> list:
    """Puts each marker into the body, in the provider's wire format; returns the system and
    message elements it changed."""
    fmt = FORMATS[provider]
    changed = []
    for b in breakpoints:
        key, value = fmt.marker(b.ttl)
        element = fmt.place(lowered, b.kind, b.index, key, value)
        if element is not None:
            changed.append(element)
    return changed
