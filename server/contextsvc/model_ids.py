"""Whether a stored message came from the request's model, when the two ids are written apart.

A provider answers a request for an alias with the snapshot that served it: Anthropic's
`claude-sonnet-4-5` comes back as `claude-sonnet-4-5-20250929`, OpenAI's `gpt-4o` as
`gpt-4o-2024-08-06`, and Gemini's ids may carry `models/`. An agent that stores the id its
provider answered with must not lose what follows from the same model: its usage anchoring the
self-calibration (step.figures), its reasoning keeping its signature (lowering.neutral). Two
dated snapshots of one alias are different models.

Provider ids are written apart too: agents store the id of their own provider layer (`google`
for Gemini, `amazon-bedrock`, `github-copilot`), and `openai` for a Responses answer; the
service's names are the wire formats' (`gemini`, `bedrock`, `openai-responses`).
"""
from __future__ import annotations

import functools
import re

_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")  # -20250929, -2024-08-06
_LATEST = "-latest"


@functools.lru_cache(maxsize=256)
def _split(model_id: str) -> tuple[str, bool]:
    """(the id without `models/`, a `-latest` or a date suffix; whether it named a dated snapshot)."""
    base = model_id.removeprefix("models/")
    if base.endswith(_LATEST):
        return base[:-len(_LATEST)], False
    dated = _DATED.search(base)
    return (base[:dated.start()], True) if dated else (base, False)


def same_model(stored: str, requested: str) -> bool:
    """stored (a message's model_id) is requested's model: the same id, or one is an alias of the
    other's snapshot."""
    if stored == requested:
        return True
    (a, a_dated), (b, b_dated) = _split(stored), _split(requested)
    return a == b and not (a_dated and b_dated)


# Provider ids agents store (the AI SDK's and models.dev's, LiteLLM's) -> the service's provider
# name whose signatures and reasoning items they wrote. OpenAI's Chat API returns no reasoning to
# sign, so an `openai` answer holding signed reasoning came from the Responses API.
_PROVIDER_ALIASES = {
    "google": "gemini", "google-vertex": "gemini", "vertex": "gemini", "vertex_ai": "gemini",
    "vertexai": "gemini", "google-generative-ai": "gemini",
    "amazon-bedrock": "bedrock", "aws-bedrock": "bedrock", "aws": "bedrock",
    "github-copilot": "copilot",
    "openai": "openai-responses", "openai_responses": "openai-responses",
    "openai_compatible": "openai-compatible",
}


def provider_name(stored: str) -> str:
    """The service's provider name a message's provider_id stands for (itself when it names none)."""
    return _PROVIDER_ALIASES.get(stored.lower(), stored.lower())


def same_provider(stored: str, requested: str) -> bool:
    """stored (a message's provider_id) names requested (a provider name of the service): the
    same name, or an id agents store for it."""
    return stored == requested or provider_name(stored) == requested
