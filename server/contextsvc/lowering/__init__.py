"""Lowering: conversation -> provider request body.

`neutral` turns stored messages into provider-neutral model messages (placeholders, dropped
errors, tool results split out); one module per wire format turns those into the body dict and
owns the rest of what is provider-specific (wire_format.WireFormat); registry.py lists them.
"""
from __future__ import annotations

from .media import MediaLedger
from .neutral import to_model_messages
from .registry import FORMATS, PROVIDERS


def lower(provider: str, **kwargs):
    """The body for provider; see each format module's body() for the arguments."""
    return FORMATS[provider].body(provider=provider, **kwargs)


__all__ = ["lower", "to_model_messages", "MediaLedger", "FORMATS", "PROVIDERS"]
