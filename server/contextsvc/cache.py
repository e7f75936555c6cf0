"""Prompt-cache breakpoints (SPEC section 6): where markers go, their shape per provider, and
hashes of the body prefix up to each one."""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from threading import Lock

from . import model as m, native
from .errors import BadInput

TTL_DEFAULT = ""
TTL_1H = "1h"

# Providers whose cache is implicit: no markers (OpenAI also gets prompt_cache_key).
IMPLICIT = (m.OPENAI, m.GEMINI)
# Providers with Anthropic's native "auto" policy: last tool, last system block, latest user.
NATIVE_AUTO = (m.ANTHROPIC,)


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
    hints: list = field(default_factory=list)  # list[Hint]; explicit hints win over auto
    ttl: str = TTL_DEFAULT


def _segment(lowered, index: int) -> str:
    last_user = max((i for i, r in enumerate(lowered.roles) if r == "user"), default=-1)
    return "tail" if index >= last_user else "history"


def choose(lowered, provider: str, tools: list, policy: Policy, max_markers: int,
           auto_markers: int) -> list:
    """The breakpoints to place, ordered as the provider's prefix is (tools, system, messages)."""
    if provider in IMPLICIT:
        return []
    n_sys, n_msg = len(lowered.system), len(lowered.messages)
    chosen = []
    if policy.hints:
        for k, h in enumerate(policy.hints):
            if h.last_tool:
                if not tools:
                    raise BadInput(f"cache_hints[{k}].last_tool", "there are no tools to mark")
                chosen.append(Breakpoint("tools", len(tools) - 1, "tools", h.ttl))
            elif h.message_id:
                idx = max((i for i, ids in enumerate(lowered.sources) if h.message_id in ids), default=-1)
                if idx < 0:
                    raise BadInput(f"cache_hints[{k}].message_id", f"{h.message_id!r} is not in the request")
                chosen.append(Breakpoint("message", idx, _segment(lowered, idx), h.ttl))
            else:
                if not 0 <= h.system_block < n_sys:
                    raise BadInput(f"cache_hints[{k}].system_block",
                                   f"{h.system_block} is not a system block index (0..{n_sys - 1})")
                chosen.append(Breakpoint("system", h.system_block, "system", h.ttl))
    elif provider in NATIVE_AUTO:
        if tools:
            chosen.append(Breakpoint("tools", len(tools) - 1, "tools", policy.ttl))
        if n_sys:
            chosen.append(Breakpoint("system", n_sys - 1, "system", policy.ttl))
        users = [i for i, r in enumerate(lowered.roles) if r == "user"]
        if users:
            chosen.append(Breakpoint("message", users[-1], "tail", policy.ttl))
        chosen = chosen[:auto_markers]
    else:
        # The first two system messages and the last two non-system messages.
        chosen += [Breakpoint("system", i, "system", policy.ttl) for i in range(min(2, n_sys))]
        chosen += [Breakpoint("message", i, _segment(lowered, i), policy.ttl)
                   for i in range(max(0, n_msg - 2), n_msg)]
    if provider == m.BEDROCK:  # one cachePoint closes the system list
        system = [b for b in chosen if b.kind == "system"]
        chosen = [b for b in chosen if b.kind != "system"]
        if system:
            chosen.append(Breakpoint("system", n_sys - 1, "system", system[0].ttl))
    unique = {}
    for b in chosen:
        unique.setdefault((b.kind, b.index), b)
    chosen = sorted(unique.values(), key=lambda b: ({"tools": 0, "system": 1, "message": 2}[b.kind], b.index))
    if len(chosen) > max_markers:  # Anthropic, Bedrock and the gateways' upstreams all refuse more
        raise BadInput("cache_hints", f"{len(chosen)} breakpoints; {provider} accepts at most {max_markers}")
    # A message with no block that can carry a marker gets none (say, an assistant step of
    # reasoning alone on Anthropic, or tool calls alone on the gateways).
    chosen = [b for b in chosen if b.kind != "message" or _markable(provider, lowered.messages[b.index])]
    if provider == m.ANTHROPIC:
        # The Messages API rejects a 1-hour entry placed after a 5-minute one.
        ttls = [b.ttl for b in chosen]
        late = next((b for k, b in enumerate(chosen) if b.ttl == TTL_1H and TTL_DEFAULT in ttls[:k]), None)
        if late is not None:
            raise BadInput("cache_hints", f"the 1h breakpoint at {late.location} follows a 5m one; "
                                          "Anthropic needs longer TTLs first")
    return chosen


def _marker(provider: str, ttl: str) -> tuple:
    """(key, value) of the marker for this provider."""
    if provider == m.BEDROCK:
        return "cachePoint", {"type": "default"}
    value = {"type": "ephemeral"}
    if ttl == TTL_1H and provider == m.ANTHROPIC:
        value["ttl"] = "1h"
    key = "copilot_cache_control" if provider == m.COPILOT else "cache_control"
    return key, value


def place(lowered, provider: str, breakpoints: list) -> list:
    """Puts each marker into the body, in the provider's wire format; returns the system and
    message elements it changed."""
    body = lowered.body
    changed = []
    for b in breakpoints:
        key, value = _marker(provider, b.ttl)
        if b.kind == "tools":
            tools = body["toolConfig"]["tools"] if provider == m.BEDROCK else body["tools"]
            if provider == m.BEDROCK:
                tools.append({key: value})  # a cachePoint block after the tool specs
            else:
                tools[b.index][key] = value
            continue
        element = (lowered.system if b.kind == "system" else lowered.messages)[b.index]
        changed.append(element)
        if provider == m.BEDROCK:
            if b.kind == "system":
                lowered.system.append({key: value})  # the block after the last system text
            else:
                element["content"].append({key: value})
        elif provider == m.ANTHROPIC and b.kind == "system":
            element[key] = value
        else:
            _marked_part(provider, element)[key] = value
    return changed


def _markable(provider: str, element: dict) -> bool:
    """Whether a message has a part a marker can go on (see _marked_part); changes nothing."""
    if provider == m.BEDROCK:
        return True
    content = element.get("content")
    if provider == m.ANTHROPIC:
        return any(b.get("type") not in _UNMARKABLE for b in content)
    return bool(content)


# Anthropic refuses cache_control on these blocks.
_UNMARKABLE = ("thinking", "redacted_thinking")


def _marked_part(provider: str, element: dict):
    """The content part of a markable message (see _markable) its marker goes on.

    Anthropic: the last block that is not reasoning. Chat Completions gateways: the last content
    part, where they document the marker; a plain-string content becomes one text part for it.
    Placed after the prefix hashes are taken, so that form never counts as a change. Not for
    Bedrock, whose cachePoint is a block of its own.
    """
    content = element["content"]
    if provider == m.ANTHROPIC:
        return next(b for b in reversed(content) if b.get("type") not in _UNMARKABLE)
    if isinstance(content, str):
        element["content"] = content = [{"type": "text", "text": content}]
    return content[-1]


def prefix_hashes(lowered, provider: str, breakpoints: list, texts: dict | None = None) -> dict:
    """Fills prefix_bytes/prefix_sha256: the canonical JSON of the elements the cache covers,
    in prefix order (tools, then system, then messages), up to and including each marked one.
    Returns the prefix digest at every element, keyed (kind, index): the next request of the
    session checks its old breakpoints against it, wherever the markers have moved since.

    Runs before the markers are placed: a marker moving along the history is not a change of
    the cached content. texts, when given, receives each system and message element's JSON
    text by id(element), for the body to reuse.
    """
    body = lowered.body
    tools = (body.get("toolConfig") or {}).get("tools", []) if provider == m.BEDROCK else body.get("tools", [])
    order = [("tools", i, t) for i, t in enumerate(tools)]
    order += [("system", i, s) for i, s in enumerate(lowered.system)]
    order += [("message", i, e) for i, e in enumerate(lowered.messages)]
    wanted = {}
    for b in breakpoints:
        wanted.setdefault((b.kind, b.index), []).append(b)
    h = hashlib.sha256()
    size = 0
    chain = {}
    for kind, i, element in order:
        text = native.json_text(element)  # the body's own text: the prefix is what is sent
        if texts is not None and kind != "tools":
            texts[id(element)] = text
        chunk = text.encode()
        h.update(chunk)
        size += len(chunk)
        chain[(kind, i)] = h.digest()
        for b in wanted.get((kind, i), ()):
            b.prefix_bytes = size
            b.prefix_sha256 = h.hexdigest()
    return chain


class PrefixTracker:
    """Remembers each session's breakpoint prefixes to tell, request to request, whether the
    cached prefix survived and which segment broke it. Bounded: least recently seen sessions go
    first."""

    def __init__(self, max_sessions: int):
        self._max = max_sessions
        self._seen = OrderedDict()
        self._lock = Lock()

    def observe(self, session_id: str, breakpoints: list, chain: dict) -> str:
        """The segment whose cached prefix is gone since this session's last request, or "".

        An old breakpoint's prefix survives when this request has the same prefix digest at the
        same element, whether or not a marker sits there now (the last-two-messages policy
        moves its older marker every step). The tail is not checked: it grows every step.
        """
        if not session_id or not breakpoints or chain is None:
            return ""
        now = [((b.kind, b.index), chain[(b.kind, b.index)], b.segment)
               for b in breakpoints if b.segment != "tail"]
        with self._lock:
            before = self._seen.pop(session_id, None)
            self._seen[session_id] = now
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)
        for key, digest, segment in before or ():
            if chain.get(key) != digest:
                return segment
        return ""
