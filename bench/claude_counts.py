"""Claude's own token counts against cl100k, o200k and our decision figure for a Claude model, on
the calibration material (bench/real_corpus.py, bench/held_out_corpus.py).

Claude's tokenizer is not public. The ctok package (PyPI, unofficial) reconstructs its counts
offline per model generation: v3 (Claude 3 through Opus 4.6), v4.7 (Opus 4.7) and v4.8 (Opus 4.8
and later), each as count_tokens counts one user message (its frame included). ctok needs Python
>= 3.12 and the project runs on 3.11, so this script runs twice: under 3.12 it counts with ctok,
and it runs itself under the project's Python (--project-python) to build the material and our
figures there, with the project's own tokenizers and Measure.

Per ctok generation and kind of text, the ratio of ctok's count to:
  cl100k    cl100k's exact count of the text (ctok's count without its frame)
  o200k     o200k's exact count of the text (the same)
  decision  the decision figure Measure reports for the text as the one user message of a request
            to a Claude model before any reported usage (calibrated estimate of the body, per-class
            margins, the Claude prior of tokenizer_family): ctok's whole count, frame included
with the median, 90th and 99th percentiles and the max, and the share of texts whose decision
figure is under ctok's count (compaction too late). Then ctok's speed, whether its counts repeat
in a process with another hash seed, and, with --npm-tokenizer, the @anthropic-ai/tokenizer
package's counts (Claude 2's tokenizer) against the oldest generation's.

Setup (any Python 3.12; the project's Python needs its usual environment):
  python3.12 -m venv /tmp/ctok-venv && /tmp/ctok-venv/bin/pip install ctok
  mkdir -p /tmp/anth-tok && npm install --prefix /tmp/anth-tok @anthropic-ai/tokenizer   # optional
Usage: /tmp/ctok-venv/bin/python bench/claude_counts.py [--quick] [--project-python python3.11]
                                                         [--npm-tokenizer /tmp/anth-tok]
--quick uses only the tests' held-back sample (tests/data/held_back_sample.json.gz); the whole
material takes about 4 minutes to build and 1 to count.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.0", "4.7", "4.8")  # one requested version per ctok generation
# a model of each ctok generation: the decision figure takes that generation's prior
MODELS = {"3.0": "claude-sonnet-4-5", "4.7": "claude-opus-4-7", "4.8": "claude-opus-4-8"}
TARGETS = ("cl100k", "o200k", "decision")
HELD_OUT = "ho:"  # kind prefix of bench/held_out_corpus.py's material (its kinds overlap the other's)


# ---- the project's side (Python 3.11) -------------------------------------------------------

def material(quick: bool) -> list[tuple[str, str]]:
    """(kind, text) of every sample: the tests' held-back sample, or the whole material."""
    if quick:
        data = json.loads(gzip.decompress((ROOT / "tests/data/held_back_sample.json.gz").read_bytes()))
        return [(s["cls"], s["text"]) for s in data["samples"]]
    import held_out_corpus
    import real_corpus
    return ([(s.cls, s.text) for s in real_corpus.corpus()]
            + [(HELD_OUT + s.cls, s.text) for s in held_out_corpus.corpus()])


def our_figures(quick: bool, out: str) -> None:
    """Writes, per sample, its kind, text, cl100k and o200k counts and the decision figure for a
    model of each generation (MODELS), with each one's method and prior."""
    from contextsvc import config, encodings, measure, conversation as m, tokenizer_family

    cfg = config.Config()
    models = {v: m.Model(mid, m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000)) for v, mid in MODELS.items()}
    cl100k, o200k = encodings.get(encodings.CL100K), encodings.get(encodings.O200K)
    rows, methods = [], {}
    for kind, text in material(quick):
        conv = m.Conversation([m.Message("msg_0001", m.USER, [m.Part("prt_0001", m.Text(text))])])
        row = {"kind": kind, "text": text, "cl100k": len(cl100k.encode_ordinary(text)),
               "o200k": len(o200k.encode_ordinary(text)), "decision": {}}
        for v, model in models.items():
            r = measure.measure(measure.MeasureInput(conv, model, [], m.SystemPrompt(), m.CompactionSettings()), cfg)
            methods[v] = r.decision[1]
            row["decision"][v] = r.decision[0]
        rows.append(row)
    priors = {v: float(tokenizer_family.for_model(model.id, model.provider, cfg.measure.exact_encoding).prior)
              for v, model in models.items()}
    Path(out).write_text(json.dumps({"methods": methods, "priors": priors, "rows": rows}, ensure_ascii=False))


# ---- ctok's side (Python >= 3.12) -----------------------------------------------------------

def run_project(python: str, quick: bool) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("server", "clients/python", "bench"))}
        argv = [python, __file__, "--ours-to", f.name] + (["--quick"] if quick else [])
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(Path(f.name).read_text())


def rank(values: list, q: float) -> float:
    """The q-th percentile (nearest rank) of values."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, -(-int(q * len(v)) // 100) - 1))]


def ratio_cells(ratios: list) -> str:
    return " ".join(f"{rank(ratios, q):5.2f}" for q in (50, 90, 99, 100))


def print_table(version: str, rows: list, counts: list, frame: int, prior: float) -> None:
    print(f"\nctok v{version} (frame {frame}), decision figure for {MODELS[version]} (prior x{prior:g}): "
          "ctok / figure, median p90 p99 max; under = decision < ctok")
    print(f"{'kind':12} {'n':>4} " + " ".join(f"{t:>23}" for t in TARGETS) + f" {'under':>6} {'prior for max':>13}")
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: (k.startswith(HELD_OUT), k))
    for kind in kinds + ["all"]:
        got = [(r, n) for r, n in zip(rows, counts) if kind in ("all", r["kind"])]
        cells = [ratio_cells([(n - frame) / max(1, r["cl100k"]) for r, n in got]),
                 ratio_cells([(n - frame) / max(1, r["o200k"]) for r, n in got]),
                 ratio_cells([n / r["decision"][version] for r, n in got])]
        under = sum(r["decision"][version] < n for r, n in got) / len(got)
        # the prior under which no text of the kind would be under-counted (the decision figure
        # is ceil(x * 1.35): dividing by the shipped prior gives back x within a token)
        needed = max(n / r["decision"][version] for r, n in got) * prior
        print(f"{kind:12} {len(got):4d} " + " ".join(f"{c:>23}" for c in cells) + f" {under:6.1%} {needed:13.2f}")


def count_all(texts: list, version: str) -> tuple:
    import ctok
    ctok.token_count("", version)  # loads the generation's vocabulary
    start = time.perf_counter()
    counts = [ctok.token_count(t, version) for t in texts]
    return counts, time.perf_counter() - start


REPEAT = """import ctok, json, sys
texts, versions = json.load(sys.stdin)
print(json.dumps({v: [ctok.token_count(t, v) for t in texts] for v in versions}))"""


def repeated_elsewhere(texts: list) -> dict:
    """The counts of texts in a fresh process with another hash seed (set and dict order)."""
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    run = subprocess.run([sys.executable, "-c", REPEAT], input=json.dumps([texts, VERSIONS]), env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


NPM_COUNT = """const {countTokens} = require(process.argv[1] + '/node_modules/@anthropic-ai/tokenizer');
const texts = JSON.parse(require('fs').readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(texts.map(countTokens)));"""


def npm_counts(prefix: str, texts: list) -> list:
    run = subprocess.run(["node", "-e", NPM_COUNT, prefix], input=json.dumps(texts), capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the tests' held-back sample only")
    ap.add_argument("--project-python", default=os.environ.get("CONTEXTSVC_PYTHON", "python3.11"))
    ap.add_argument("--npm-tokenizer", help="an npm prefix with @anthropic-ai/tokenizer installed")
    ap.add_argument("--ours-to", help=argparse.SUPPRESS)  # the project's side writes its figures here
    args = ap.parse_args()
    if args.ours_to:
        our_figures(args.quick, args.ours_to)
        return
    if sys.version_info < (3, 12):
        sys.exit("ctok needs Python >= 3.12: run this under the ctok venv (see the docstring)")
    import ctok
    from importlib.metadata import version

    ours = run_project(args.project_python, args.quick)
    rows = ours["rows"]
    texts = [r["text"] for r in rows]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    print(f"ctok {version('ctok')}: {len(rows)} texts, {megabytes:.2f} MB; decision figures: "
          + "; ".join(f"{MODELS[v]} {method}" for v, method in ours["methods"].items()))
    all_counts = {}
    for v in VERSIONS:
        counts, seconds = count_all(texts, v)
        all_counts[v] = counts
        print_table(v, rows, counts, ctok.token_count("", v), ours["priors"][v])
        print(f"speed: {megabytes / seconds:.2f} MB/s ({seconds:.1f} s)")

    again = repeated_elsewhere(texts[::10])
    same = all(again[v] == all_counts[v][::10] for v in VERSIONS)
    print(f"\ndeterminism: every 10th text recounted in a process with PYTHONHASHSEED=4242: "
          f"{'identical' if same else 'DIFFERENT'}")
    if args.npm_tokenizer:
        npm = npm_counts(args.npm_tokenizer, texts)
        frame = ctok.token_count("", VERSIONS[0])
        content = [n - frame for n in all_counts[VERSIONS[0]]]
        ratios = [c / max(1, n) for c, n in zip(content, npm)]
        equal = sum(c == n for c, n in zip(content, npm))
        print(f"@anthropic-ai/tokenizer (Claude 2's) vs ctok v{VERSIONS[0]} without its frame: equal on "
              f"{equal}/{len(npm)} texts; ctok / npm median p90 p99 max {ratio_cells(ratios)}, "
              f"min {min(ratios):.2f}")


if __name__ == "__main__":
    main()
