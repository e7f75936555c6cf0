"""The summarizers Compact asks: the embedded offline one and the Anthropic Messages API.

make_summarizer picks the configured one; offline_fallback is the one that answers when it fails.
"""
from __future__ import annotations

from ...config import Config
from . import offline


def make_summarizer(cfg: Config, memo=None):
    """memo (memo.Memo): the offline summarizer keeps each message's facts in it."""
    if cfg.summarizer.backend == "anthropic":
        from .anthropic import AnthropicSummarizer  # the SDK is loaded only when it is used

        return AnthropicSummarizer(cfg)
    return offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer), memo)


def offline_fallback(failed, cfg: Config, memo=None):
    """The summarizer that answers when `failed` is unavailable: the offline one when
    summarizer.fallback_to_offline allows and `failed` is not already offline, else None."""
    if not cfg.summarizer.fallback_to_offline or isinstance(failed, offline.OfflineSummarizer):
        return None
    return offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer), memo)
