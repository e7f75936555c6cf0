"""How many tokens: the reference estimator, the pre-flight factor and the exact counter.

Every figure is reported with the method that produced it.
"""
from __future__ import annotations

import threading
from fractions import Fraction

from . import native

ESTIMATE = "estimate:chars/4"  # UTF-16 code units / 4, JavaScript Math.round
PREFLIGHT = "estimate:ceil(chars/4*1.3)"
EXACT_PREFIX = "tiktoken:"


def estimate_units(units: int) -> int:
    """The reference estimate for a text of `units` UTF-16 code units."""
    return native.estimate_tokens(units)


def preflight(tokens: int, factor: Fraction) -> int:
    """ceil(tokens * factor), exactly (no float: ceil(10 * 1.3) is 13)."""
    scaled = tokens * factor
    return -(-scaled.numerator // scaled.denominator)


def json_array_units(units: list) -> int:
    """UTF-16 length of a JSON array whose elements have these lengths."""
    return 2 + sum(units) + max(0, len(units) - 1)


# Model ids whose own tokenizer is cl100k (gpt-4o, gpt-4.1 and later use o200k).
def cl100k_is_native(model_id: str) -> bool:
    mid = model_id.lower().rsplit("/", 1)[-1]
    if mid.startswith("gpt-3.5"):
        return True
    return mid.startswith("gpt-4") and not mid.startswith(("gpt-4o", "gpt-4.", "gpt-4-o"))


class ExactCounter:
    """tiktoken over the encoding shipped offline; loaded on first use (about 1 s)."""

    def __init__(self, encoding_name: str):
        self.encoding_name = encoding_name
        self._encoding = None
        self._lock = threading.Lock()

    @property
    def method(self) -> str:
        return EXACT_PREFIX + self.encoding_name.removesuffix("_offline")

    def _get(self):
        if self._encoding is None:
            with self._lock:
                if self._encoding is None:
                    import tiktoken

                    self._encoding = tiktoken.get_encoding(self.encoding_name)
        return self._encoding

    def count(self, text: str) -> int:
        # Special-token strings in content are plain text to the model's tokenizer.
        return len(self._get().encode_ordinary(text))
