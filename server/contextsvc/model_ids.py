"""Whether a stored message came from the request's model, when the two ids are written apart.

A provider answers a request for an alias with the snapshot that served it: Anthropic's
`claude-sonnet-4-5` comes back as `claude-sonnet-4-5-20250929`, OpenAI's `gpt-4o` as
`gpt-4o-2024-08-06`, and Gemini's ids may carry `models/`. An agent that stores the id its
provider answered with must not lose what follows from the same model: its usage anchoring the
self-calibration (step.figures), its reasoning keeping its signature (lowering.neutral). Two
dated snapshots of one alias are different models.
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
