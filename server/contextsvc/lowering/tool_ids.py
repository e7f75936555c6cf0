"""Tool call ids and tool names as each provider accepts them (docs/design.md §6, "What the body
must pass").

A session can hold ids minted by another provider (`functions.read:1`, `toolu_01...`, long
Responses-API ids), and MCP tools are named `github.create_issue`, up to 128 characters. Each id
or name is written in the provider's alphabet and length by a rule that is a function of that id
or name alone: one already valid passes unchanged, any other one is sanitized and suffixed with a
hash of the original. So a call and its result always agree, two never merge (the hash tells them
apart), and a new tool or id never changes how an old one is written, which would break the
cached prefix. The model calls a tool by its written name; name_map turns it back.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True, eq=False)  # each is a constant: hashed by identity in the caches below
class IdRule:
    valid: re.Pattern  # a whole id in the allowed alphabet
    invalid: re.Pattern  # one character outside it
    max_len: int
    lead: re.Pattern | None = None  # what the first character must be, if anything
    min_len: int = 1


def id_rule(char_class: str, max_len: int, lead: str = "", min_len: int = 1) -> IdRule:
    return IdRule(re.compile(f"[{char_class}]+"), re.compile(f"[^{char_class}]"), max_len,
                  re.compile(f"[{lead}]") if lead else None, min_len)


# Anthropic documents ids ^[a-zA-Z0-9_-]+$; Bedrock the same pattern with 1..64 characters; Gemini
# ids are free-form, kept to the same safe set. 64 bounds Anthropic too, where no limit is
# documented, so a long foreign id never becomes the one thing a request is refused for. Tool
# names are ^[a-zA-Z0-9_-]{1,64}$ at Anthropic, OpenAI and Bedrock. Each format's rules are its
# WireFormat's ids and names (the Chat Completions ones in openai_chat.py).
WORD = id_rule("a-zA-Z0-9_-", 64)

# 12 hex digits (48 bits) of SHA-256: a collision among a session's few thousand ids is
# vanishingly unlikely, and the suffix leaves most of a 40-character id readable.
_HASH_LEN = 12


def wire_id(fmt, call_id: str, rule: IdRule | None = None) -> str:
    """call_id as written in the body of fmt (a WireFormat), for the call and its result alike;
    rule: the model's own, where it has one (Mistral's), else fmt's."""
    return _wire_id(rule or fmt.ids, call_id)


def wire_name(fmt, name: str) -> str:
    """A tool's name as written in the body of fmt (a WireFormat), in its definition, calls and
    results alike: unchanged when valid there, else mapped as ids are (a function of the name
    alone)."""
    return name if fmt.names is None else _wire_id(fmt.names, name)


def name_map(fmt, names) -> dict:
    """{name as written in the body of fmt: the caller's name} for each of names that is written
    otherwise (what AssembleResponse.tool_names returns)."""
    written = ((wire_name(fmt, name), name) for name in names)
    return {wire: name for wire, name in written if wire != name}


# ids and names up to this long are cached (a session repeats them every step); a longer one is
# written afresh each time, so the cache's memory stays bounded whatever a client sends
_CACHED_LEN = 256


def _wire_id(rule: IdRule, call_id: str) -> str:
    return _cached_wire_id(rule, call_id) if len(call_id) <= _CACHED_LEN else _write(rule, call_id)


@lru_cache(maxsize=8192)
def _cached_wire_id(rule: IdRule, call_id: str) -> str:
    return _write(rule, call_id)


def _write(rule: IdRule, call_id: str) -> str:
    if (rule.min_len <= len(call_id) <= rule.max_len and rule.valid.fullmatch(call_id)
            and (rule.lead is None or rule.lead.match(call_id))):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    if rule.max_len <= _HASH_LEN:  # no room for a readable part: the digest's hex digits alone
        return digest[:rule.max_len]
    readable = rule.invalid.sub("_", call_id)
    if rule.lead is not None and not rule.lead.match(readable):
        readable = "_" + readable
    return f"{readable[:rule.max_len - _HASH_LEN - 1]}_{digest}"
