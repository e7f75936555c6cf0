"""The providers: each name and the wire format that lowers, marks and checks its bodies
(docs/design.md §6). Everything else derives from this table: lowering.lower, the breakpoints,
PROVIDERS and the protobuf enum mapping (rpc/conversion.py, by name: `openai-compatible` is
PROVIDER_OPENAI_COMPATIBLE). Each format module passes its own WireFormat to the media and id
helpers (media.py, tool_ids.py), which read its tables and never this one."""
from __future__ import annotations

from . import anthropic, bedrock, gemini, openai_chat, openai_responses
from .wire_format import WireFormat

# In the order of the proto enum.
FORMATS: dict[str, WireFormat] = {f.name: f for f in (
    anthropic.FORMAT,
    openai_chat.OPENAI,
    openai_chat.OPENAI_COMPATIBLE,
    bedrock.FORMAT,
    openai_chat.OPENROUTER,
    openai_chat.ALIBABA,
    openai_chat.COPILOT,
    gemini.FORMAT,
    openai_responses.FORMAT,
)}

PROVIDERS = tuple(FORMATS)


def enum_name(provider: str) -> str:
    """The protobuf Provider value's name of a provider."""
    return "PROVIDER_" + provider.upper().replace("-", "_")
