"""Whose tokenizer counts a model's tokens, and the factor the decision figure takes for it until
the provider has reported a count (docs/design.md §3 "One decision figure": before and after the
first usage).

The calibrated estimate and its margins are fitted on cl100k. A model whose own tokenizer is
offline (encodings.for_model: cl100k or o200k) takes factor 1: o200k counts within a few percent
of cl100k, which the per-class margins cover. For the others, the factor is an upper bound of
their count over cl100k's, applied to the text of the whole request (media keep their own cost):
- claude (Claude 3 through Opus 4.6): 1.35. Measured with bench/claude_counts.py against ctok's
  offline reconstruction of Claude's counts on 1,722 texts: the decision figure with this prior
  is under Claude's count on 2.4% of them (within the margins' 5%), 30% over at the median;
- claude-4.7 (the tokenizer Opus 4.7 brought, kept by later models, and any Claude id whose
  generation cannot be read, taken to be newer): 1.85. That tokenizer counts 1.53x cl100k at the
  median, 2.05x at the p99; with 1.35 the decision figure was under its count on 17.5% of the
  texts, with 1.85 on about 1% (2.05 covers all of them);
- gemini: not measured here (no offline tokenizer); Claude's bound stands in until it is;
- openai (a model tiktoken does not map, such as one newer than the pinned tiktoken): 1.05, the
  largest o200k / cl100k ratio measured, 1.044 on the agent-loop corpus (430 tool outputs of
  tests/agent_loop/session.py, seeds 1-7) and 1.029 on tests/data/held_back_sample.json.gz.
Any other model keeps the calibrated figure as it is (factor 1, the proxy encoding named).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from . import encodings, model_ids

CLAUDE, CLAUDE_47, GEMINI, OPENAI = "claude", "claude-4.7", "gemini", "openai"
PRIORS = {CLAUDE: Fraction("1.35"), CLAUDE_47: Fraction("1.85"), GEMINI: Fraction("1.35"), OPENAI: Fraction("1.05")}
# providers whose API serves only their own family's models, whatever the model id
_PROVIDER_FAMILY = {"anthropic": CLAUDE, "gemini": GEMINI, "openai": OPENAI, "openai-responses": OPENAI}
_ID_FAMILY = (("claude", CLAUDE), ("gemini", GEMINI))


@dataclass(frozen=True)
class Family:
    name: str  # a family of PRIORS, or the offline encoding that counts for the model
    prior: Fraction  # the decision figure's factor before any reported usage

    def method(self, anchored: float = 0.0, anchor_id: str = "", media: int = 0) -> str:
        """The decision method's tokenizer term: "+tokenizer:claude(prior x1.35)", or anchored
        on the provider's count of an earlier prefix (media: items that count held, which bound
        the factor by the prior)."""
        if anchored:
            held = f", {media} media counted: at most x{float(self.prior):g}" if media else ""
            return f"+tokenizer:{self.name}(anchored x{anchored:.4f} on {anchor_id}{held})"
        return self._prior_method

    @functools.cached_property
    def _prior_method(self) -> str:  # for_model keeps one Family per model: formatted once
        return f"+tokenizer:{self.name}" + (f"(prior x{float(self.prior):g})" if self.prior != 1 else "")


@functools.lru_cache(maxsize=1024)
def for_model(model_id: str, provider: str, proxy: str) -> Family:
    """The family of a model: its own offline tokenizer, else by its id, else by its provider."""
    tok = encodings.for_model(model_id, proxy)
    if tok.native:
        return Family(tok.encoding, Fraction(1))
    mid = model_id.lower()
    name = next((fam for word, fam in _ID_FAMILY if word in mid), None) or _PROVIDER_FAMILY.get(provider)
    if name is None:
        return Family(tok.encoding, Fraction(1))
    if name == CLAUDE and not _older_claude(mid):
        name = CLAUDE_47
    return Family(name, PRIORS[name])


def _older_claude(model_id: str) -> bool:
    """A Claude of the tokenizer before Opus 4.7's: Claude 2 and 3, and 4 up to 4.6."""
    generation = model_ids.claude_generation(model_id)
    return generation is not None and generation <= (4, 6)  # none to read: taken to be newer
