"""Media and opaque state inside a body: placed verbatim, accounted for twice (SPEC section 3).

The body carries the real bytes. The token estimate counts each such value as its placeholder
and adds what it really costs to `extra`, so the ledger records, per value, how many UTF-16 units
of the body JSON the placeholder saves and what the value costs.
"""
from __future__ import annotations

import base64

from .. import native

MEDIA_PLACEHOLDER = "[encoded media]"
OPAQUE_PLACEHOLDER = "[opaque reasoning state]"

_MEDIA_UNITS = native.json_lengths(MEDIA_PLACEHOLDER)[1]
_OPAQUE_UNITS = native.json_lengths(OPAQUE_PLACEHOLDER)[1]


class MediaLedger:
    """Collects media and opaque values while a body is built."""

    __slots__ = ("media_count", "saved_units", "extra", "placeholders", "_pending", "saved_by")

    def __init__(self, placeholders: bool = False):
        self.placeholders = placeholders  # build the estimate's text instead of the real body
        self.media_count = 0
        self.saved_units = 0  # over the whole body
        self.extra = 0
        self._pending = 0  # saved units not yet attributed to a body element
        self.saved_by = {}  # id(element) -> saved units inside it

    def _save(self, units: int) -> None:
        self.saved_units += units
        self._pending += units

    def claim(self, element) -> None:
        """Attributes the values placed since the last claim to this body element."""
        if self._pending:
            self.saved_by[id(element)] = self.saved_by.get(id(element), 0) + self._pending
            self._pending = 0

    def binary(self, data: bytes) -> str:
        """Inline bytes as base64; they cost ceil(bytes / 4) tokens."""
        self.media_count += 1
        encoded = base64.b64encode(data).decode("ascii")
        self._save(len(encoded) + 2 - _MEDIA_UNITS)
        self.extra += -(-len(data) // 4)
        return MEDIA_PLACEHOLDER if self.placeholders else encoded

    def encoded(self, value: str, raw_bytes: int) -> str:
        """An already-encoded media string (base64 from a data: URL) of raw_bytes bytes."""
        self.media_count += 1
        self._save(native.json_lengths(value)[1] - _MEDIA_UNITS)
        self.extra += -(-raw_bytes // 4)
        return MEDIA_PLACEHOLDER if self.placeholders else value

    def url(self, value: str) -> str:
        """A media URL: costs its own estimate."""
        self.media_count += 1
        self._save(native.json_lengths(value)[1] - _MEDIA_UNITS)
        self.extra += native.estimate_tokens(value)
        return MEDIA_PLACEHOLDER if self.placeholders else value

    def opaque(self, value: str) -> str:
        """Encrypted reasoning state (signatures, redacted thinking): costs its estimate."""
        self._save(native.json_lengths(value)[1] - _OPAQUE_UNITS)
        self.extra += native.estimate_tokens(value)
        return OPAQUE_PLACEHOLDER if self.placeholders else value


def split_data_url(url: str):
    """(mime, base64 payload) of a base64 data: URL, else None."""
    if not url.startswith("data:"):
        return None
    head, sep, payload = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")] or "application/octet-stream", payload


def base64_size(payload: str) -> int:
    """Decoded size of a base64 string without decoding it."""
    n = len(payload)
    pad = payload.endswith("==") + payload.endswith("=") if n else 0
    return max(0, n * 3 // 4 - pad)
