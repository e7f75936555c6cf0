"""Window arithmetic (docs/design.md §3 "Window, limit, overflow" and "Output budget", §4's gates):
what a model's context window leaves for the request and for the answer.

Below every stage that reads a window: the step's figures and decision, Prune's gates and
Compact's budgets all take these numbers from here, so each rule is written once.
"""
from __future__ import annotations

import math

from . import conversation as m
from .config import Config


def max_output(mdl: m.Model, cfg: Config) -> int:
    """min(model output limit, OUTPUT_TOKEN_MAX), or the cap when the model declares none."""
    cap = cfg.measure.output_token_max
    return min(mdl.limits.output, cap) if mdl.limits.output > 0 else cap


def usable(mdl: m.Model, settings: m.CompactionSettings, cfg: Config) -> int:
    context = mdl.limits.context
    if context == 0:
        return 0  # unknown window: never overflow
    if mdl.limits.input > 0:
        reserved = settings.reserved
        if reserved is None:
            reserved = min(cfg.measure.reserved_max, max_output(mdl, cfg))
        return max(0, mdl.limits.input - reserved)
    return max(0, context - max_output(mdl, cfg))


def limit(mdl: m.Model, settings: m.CompactionSettings, cfg: Config) -> int:
    u = usable(mdl, settings, cfg)
    if settings.threshold_percent is not None and mdl.limits.context > 0:
        # as JavaScript computes it: Math.floor(context * (percent / 100)), in doubles
        return min(u, math.floor(mdl.limits.context * (settings.threshold_percent / 100)))
    return u


def output_budget(mdl: m.Model, configured: int, reported: int, normalized: int,
                  media_count: int, cfg: Config) -> int:
    """The configured output cap, lowered to what the window has left (design.md §3)."""
    context = mdl.limits.context
    if context == 0:
        return configured
    used = max(reported, normalized + cfg.measure.media_token_pad * media_count)
    available = context - used - cfg.measure.output_headroom
    if available <= 0:
        return configured  # let the provider report the real overflow: it drives compaction
    if available >= configured:
        return configured
    return max(available, cfg.measure.min_output_tokens)


def prune_gates(protect_tokens: int, minimum_tokens: int, mdl: m.Model | None,
                settings: m.CompactionSettings, cfg: Config) -> tuple:
    """(PRUNE_PROTECT, PRUNE_MINIMUM) scaled to the window when the model's is known (design.md
    §4: min(config, usable / 4) and min(config, usable / 10))."""
    if mdl is not None and mdl.limits.context > 0:
        u = usable(mdl, settings, cfg)
        protect_tokens = min(protect_tokens, u // 4)
        minimum_tokens = min(minimum_tokens, u // 10)
    return protect_tokens, minimum_tokens
