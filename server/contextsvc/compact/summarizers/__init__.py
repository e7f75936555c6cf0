"""The summarizers Compact asks: the embedded offline one, the Anthropic Messages API and the
OpenAI Chat Completions API (or any server speaking it).

make_summarizer picks the configured one; offline_fallback is the one that answers when it fails.
"""
from __future__ import annotations

from ... import conversation as m
from ...config import Config, SummarizerConfig
from . import offline


def make_summarizer(cfg: Config, memo=None):
    """memo (memo.Memo): the offline summarizer keeps each message's facts in it. A model
    summarizer's slots and circuit breaker (summarizer.max_concurrent, breaker_*) are its own:
    keep one for every call (the servicer does; compact() called without one makes a new one
    each time)."""
    # the SDKs are loaded only when they are used
    if cfg.summarizer.backend == "anthropic":
        from .anthropic import AnthropicSummarizer

        return AnthropicSummarizer(cfg)
    if cfg.summarizer.backend == "openai":
        from .openai import OpenAISummarizer

        return OpenAISummarizer(cfg)
    return offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer), memo)


def provider_of(backend: str, sc: SummarizerConfig) -> str:
    """The provider id a summary written by backend carries ("" for the offline one)."""
    if backend == "anthropic":
        return m.ANTHROPIC
    if backend == "openai":
        return m.OPENAI_COMPATIBLE if sc.base_url else m.OPENAI
    return ""


def offline_fallback(failed, cfg: Config, memo=None):
    """The summarizer that answers when `failed` is unavailable: the offline one when
    summarizer.fallback_to_offline allows and `failed` is not already offline, else None."""
    if not cfg.summarizer.fallback_to_offline or isinstance(failed, offline.OfflineSummarizer):
        return None
    return offline.OfflineSummarizer(offline.OfflineLimits.of(cfg.summarizer), memo)
