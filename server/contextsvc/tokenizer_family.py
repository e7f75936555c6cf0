"""Whose tokenizer counts a model's tokens, and the factor the decision figure takes for it until
the provider has reported a count (docs/design.md §3 "One decision figure": before and after the
first usage).

The calibrated estimate and its margins are fitted on cl100k. A model whose own tokenizer is
offline (encodings.for_model: cl100k or o200k) takes factor 1: o200k counts within a few percent
of cl100k, which the per-class margins cover. For the others, the factor is an upper bound of
their count over cl100k's, applied to the text of the whole request (media keep their own cost):
- claude: 1.35, the bound the newer Claude tokenizers are documented at (not public; the ctok
  reconstruction needs Python 3.12 and could not be measured here);
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

from . import encodings

CLAUDE, GEMINI, OPENAI = "claude", "gemini", "openai"
PRIORS = {CLAUDE: Fraction("1.35"), GEMINI: Fraction("1.35"), OPENAI: Fraction("1.05")}
# providers whose API serves only their own family's models, whatever the model id
_PROVIDER_FAMILY = {"anthropic": CLAUDE, "gemini": GEMINI, "openai": OPENAI, "openai-responses": OPENAI}
_ID_FAMILY = (("claude", CLAUDE), ("gemini", GEMINI))


@dataclass(frozen=True)
class Family:
    name: str  # a family of PRIORS, or the offline encoding that counts for the model
    prior: Fraction  # the decision figure's factor before any reported usage

    def method(self, anchored: float = 0.0, anchor_id: str = "") -> str:
        """The decision method's tokenizer term: "+tokenizer:claude(prior x1.35)", or anchored
        on the provider's count of an earlier prefix."""
        if anchored:
            return f"+tokenizer:{self.name}(anchored x{anchored:.4f} on {anchor_id})"
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
    return Family(name, PRIORS[name])
