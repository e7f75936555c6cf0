"""Judges: would the provider accept this request body?

Each judge module has one job, `judge(body) -> list[str]` for one wire format: the problems the
provider would refuse the body for, empty when it would accept it. `judge_for(provider)` picks
the judge for a provider name of contextsvc.lowering.registry.PROVIDERS.
"""
from __future__ import annotations

import functools


def judge_for(provider: str):
    """The judge function of a provider name ("anthropic", "openai", "bedrock", ...)."""
    if provider == "anthropic":
        from .anthropic_judge import judge
        return judge
    if provider == "bedrock":
        from .bedrock_judge import judge
        return judge
    if provider == "gemini":
        from .gemini_judge import judge
        return judge
    if provider == "openai-responses":
        from .responses_judge import judge
        return judge
    from .openai_judge import PROVIDERS, judge
    if provider not in PROVIDERS:
        raise KeyError(f"no judge for provider {provider!r}")
    return functools.partial(judge, provider=provider)
