"""Lowering: conversation -> provider request body.

`neutral` turns stored messages into provider-neutral model messages (placeholders, dropped
errors, tool results split out); one module per wire format turns those into the body dict.
"""
from __future__ import annotations

from .. import model as m
from . import anthropic, bedrock, gemini, openai_chat
from .media import MediaLedger
from .neutral import to_model_messages

_FORMATS = {
    m.ANTHROPIC: anthropic.body,
    m.BEDROCK: bedrock.body,
    m.GEMINI: gemini.body,
    m.OPENAI: openai_chat.body,
    m.OPENAI_COMPATIBLE: openai_chat.body,
    m.OPENROUTER: openai_chat.body,
    m.ALIBABA: openai_chat.body,
    m.COPILOT: openai_chat.body,
}


def lower(provider: str, **kwargs):
    """The body for provider; see each format module's body() for the arguments."""
    return _FORMATS[provider](provider=provider, **kwargs)


__all__ = ["lower", "to_model_messages", "MediaLedger"]
