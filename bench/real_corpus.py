"""Real material for fitting and checking the calibrated estimate: text nobody here wrote.

Everything is read or produced at run time from what is installed on this machine; nothing of it
is committed. Each sample is a chunk of one source file (or of one tool run over one file), and
the calibration / held-back split is made by source, never by chunk, so the held-back errors are
on files the fit never saw a byte of.

Material classes (what the text is; the estimator's own content classes are
contextsvc.native.TEXT_CLASSES, found per block) and where each comes from:

  prose     README/METADATA descriptions of the installed Python distributions (PyPI) and the
            plain-text READMEs under /usr/share/doc (Debian)
  code      Python sources of the installed distributions (site-packages)
  json      JSON files shipped in site-packages and /usr/share
  logs      system logs: /var/log/dpkg.log, apt's history.log and term.log, alternatives.log,
            fontconfig.log, the PostgreSQL server log, apt's eipp.log.xz
  pytest    `python -m pytest` runs over test modules that installed packages ship (numpy,
            networkx, mpmath, jsonschema, IPython, libcst, colorama), verbose and quiet,
            failures and all
  hexdump   `xxd` over binaries and data files of the system (ELF programs, shared libraries,
            message catalogs, images)
  hex       md5sums files of the installed Debian packages (/var/lib/dpkg/info/*.md5sums) and
            plain hex of the system's binaries (`xxd -p`)
  base64    base64 of compressed files (gzip changelogs and manual pages of Debian packages, PNG
            images shipped in site-packages), wrapped at 76 columns as MIME does or unwrapped
  cjk       Chinese and Japanese manual pages (Debian manpages-zh, manpages-ja) rendered with
            man, and the zh_CN, zh_TW, ja and ko message catalogs in /usr/share/locale
  mixed     a CJK manual page's paragraphs with Python source blocks between them, as an
            agent's message explaining code in Chinese or Japanese looks (both halves real)

Missing material (no manpages-zh, say) shrinks a class; main() prints the counts.

--sample writes a small held-back sample for the tests (tests/data/held_back_sample.json.gz):
per material class, whole held-back samples of SAMPLE_PER_CLASS distinct held-back sources
(chosen by a hash of the source name, not by their errors), and nothing from a calibration
source. Logs produced here that can carry this machine's details or configuration (dmesg, pip's
verbose logs) are left out of it.
Usage: python bench/real_corpus.py   (prints the sources per class and split)
       python bench/real_corpus.py --sample tests/data/held_back_sample.json.gz
"""
from __future__ import annotations

import gzip
import json
import lzma
import os
import random
import re
import subprocess
import sys
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

CLASSES = ("prose", "code", "json", "logs", "pytest", "hexdump", "hex", "base64", "cjk", "mixed")
SAMPLE_CHARS = 4000  # about one tool output or long message
CHUNKS_PER_SOURCE = 4  # so that no single file dominates a class
HELD_BACK_TENTHS = 4  # share of sources (by a hash of the name) kept out of the fit

SITE = Path(sysconfig.get_paths()["purelib"])
CACHE = Path(os.environ.get("CONTEXTSVC_MATERIAL_CACHE", Path.home() / ".cache" / "contextsvc-material"))


@dataclass(frozen=True)
class Sample:
    cls: str  # material class (CLASSES)
    source: str  # the file or tool run it came from: the unit of the split
    text: str

    @property
    def held_back(self) -> bool:
        return held_back(self.source)


def held_back(source: str) -> bool:
    return zlib.crc32(source.encode()) % 10 < HELD_BACK_TENTHS


def chunks(text: str, size: int = SAMPLE_CHARS, limit: int = CHUNKS_PER_SOURCE) -> list[str]:
    """Up to limit pieces of about size chars, cut at line ends, spread over the text."""
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if n >= size // 2:
        out.append("".join(cur))
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out


def _read(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    elif path.suffix == ".xz":
        raw = lzma.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _samples(cls: str, source: str, text: str, limit: int = CHUNKS_PER_SOURCE) -> list[Sample]:
    return [Sample(cls, source, c) for c in chunks(text, SAMPLE_CHARS, limit)]


def _distributions() -> list[Path]:
    return sorted(SITE.glob("*.dist-info"))


# ---- prose ------------------------------------------------------------------------------------

def prose() -> list[Sample]:
    out = []
    for dist in _distributions():
        meta = dist / "METADATA"
        if not meta.is_file():
            continue
        head, _, body = _read(meta).partition("\n\n")  # the description follows the headers
        # prose paragraphs only: no code blocks, tables or link lists
        paras = [p for p in body.split("\n\n") if len(p) > 200
                 and not re.search(r"^(\s{4}|```|>>>|\||\.\. |\s*[-*] \[)", p, re.M)]
        text = "\n\n".join(paras)
        if len(text) >= SAMPLE_CHARS:
            out += _samples("prose", f"metadata:{dist.name.split('-')[0]}", text, 2)
    for readme in sorted(Path("/usr/share/doc").glob("*/README*")):
        if readme.is_file() and readme.suffix in ("", ".gz", ".md", ".txt") and "Debian" not in readme.name:
            text = _read(readme)
            if sum(c.isalpha() for c in text) * 10 >= len(text) * 6:  # mostly words
                out += _samples("prose", f"doc:{readme.parent.name}/{readme.name}", text, 2)
    return out


# ---- code and JSON ----------------------------------------------------------------------------

def code() -> list[Sample]:
    out = []
    for dist in sorted({p.parent for p in SITE.glob("*/*.py")}):
        if dist.name.endswith(("dist-info", "__pycache__")) or "tests" in dist.parts:
            continue
        files = sorted((p for p in dist.glob("*.py") if 8_000 < p.stat().st_size < 400_000),
                       key=lambda p: zlib.crc32(str(p).encode()))[:2]
        for f in files:
            out += _samples("code", f"py:{f.relative_to(SITE)}", _read(f), 2)
    return out


JSON_FILES = 240  # of about 1,000 on a typical machine: enough for the class


def json_files() -> list[Sample]:
    out = []
    paths = [p for p in SITE.rglob("*.json") if 4_000 < p.stat().st_size < 5_000_000]
    paths += [p for p in Path("/usr/share").rglob("*.json") if p.is_file() and 4_000 < p.stat().st_size < 5_000_000]
    seen = set()
    for p in sorted(paths, key=lambda p: zlib.crc32(str(p).encode()))[:JSON_FILES]:
        text = _read(p)
        key = zlib.crc32(text[:2000].encode())  # the same schema shipped by two packages
        if key in seen or "\ufffd" in text:
            continue
        seen.add(key)
        if "\n" not in text[:SAMPLE_CHARS * 2]:  # one-line JSON: cut anywhere
            text = "\n".join(text[i:i + 200] for i in range(0, len(text), 200))
            pieces = [t.replace("\n", "") for t in chunks(text, SAMPLE_CHARS, 2)]
            out += [Sample("json", f"json:{p}", t) for t in pieces]
        else:
            out += _samples("json", f"json:{p}", text, 2)
    return out


# ---- logs ---------------------------------------------------------------------------------------

LOG_FILES = ("/var/log/dpkg.log", "/var/log/apt/history.log", "/var/log/apt/term.log",
             "/var/log/alternatives.log", "/var/log/fontconfig.log",
             "/var/log/postgresql/postgresql-15-main.log", "/var/log/apt/eipp.log.xz")


# Logs produced here by real tools, each its own source: the kernel's ring buffer, pip's verbose
# log of downloading a few of the project's own dependencies, apt's simulated reinstalls.
LOG_COMMANDS = (
    ("dmesg", ["dmesg"]),
    ("pip-download-tiktoken", [sys.executable, "-m", "pip", "download", "-vv", "--no-deps", "-d", "{tmp}", "tiktoken"]),
    ("pip-download-grpcio-tools", [sys.executable, "-m", "pip", "download", "-vv", "--no-deps", "-d", "{tmp}", "grpcio-tools"]),
    ("pip-install-dry-run-hypothesis", [sys.executable, "-m", "pip", "install", "-vv", "--dry-run", "--ignore-installed", "hypothesis"]),
    ("apt-simulate-python3", ["apt-get", "install", "-s", "--reinstall", "-o", "Debug::pkgDepCache::AutoInstall=1", "python3", "python3-dev", "build-essential"]),
    ("apt-simulate-postgresql", ["apt-get", "install", "-s", "--reinstall", "-o", "Debug::pkgDepCache::AutoInstall=1", "postgresql", "man-db", "groff-base"]),
)


def _command_log(name: str, argv: list) -> str:
    cached = CACHE / "logs" / f"{name}.log"
    if cached.is_file():
        return cached.read_text(encoding="utf-8", errors="replace")
    tmp = CACHE / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        run = subprocess.run([a.format(tmp=tmp) for a in argv], capture_output=True, timeout=300)
        text = (run.stdout + run.stderr).decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text, encoding="utf-8")
    return text


def logs() -> list[Sample]:
    out = []
    for name in LOG_FILES:
        p = Path(name)
        if p.is_file():
            out += _samples("logs", f"log:{name}", _read(p), 6)
    for name, argv in LOG_COMMANDS:
        out += _samples("logs", f"log:{name}", _command_log(name, argv), 4)
    return out


# Test modules that installed packages ship, each run once verbose with long tracebacks and once
# quiet with short ones: (package-relative path, pytest -k filter or "").
PYTEST_RUNS = (
    ("numpy/lib/tests/test_function_base.py", ""),
    ("numpy/lib/tests/test_io.py", ""),
    ("numpy/_core/tests/test_numeric.py", ""),
    ("networkx/algorithms/tests/test_cycles.py", ""),
    ("networkx/algorithms/tests/test_dag.py", ""),
    ("mpmath/tests/test_functions2.py", ""),
    ("mpmath/tests/test_calculus.py", ""),
    ("jsonschema/tests/test_validators.py", ""),
    ("jsonschema/tests/test_cli.py", ""),
    ("IPython/core/tests/test_completer.py", ""),
    ("libcst/_nodes/tests/test_funcdef.py", ""),
    ("colorama/tests/ansitowin32_test.py", ""),
)


def _pytest_log(module: str, verbose: bool) -> str:
    """The output of pytest over an installed package's test module, cached. Run as an agent's
    shell tool runs it: from the project's root (node ids relative to it) and with no terminal
    (80 columns), so that verbose lines are padded into pytest's progress column."""
    mode = "v" if verbose else "q"
    cached = CACHE / "pytest" / f"{module.replace('/', '_')}.{mode}.root80.log"
    if cached.is_file():
        return cached.read_text(encoding="utf-8", errors="replace")
    package, relative = module.split("/", 1)
    args = [sys.executable, "-m", "pytest", relative, "-p", "no:cacheprovider", "-o", "addopts=",
            "-rA", "--color=no"] + (["-v", "--tb=long"] if verbose else ["-q", "--tb=short", "-W", "error"])
    try:
        run = subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=SITE / package,
                             env={**os.environ, "COLUMNS": "80"})
        text = run.stdout + run.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text, encoding="utf-8")
    return text


def pytest_logs() -> list[Sample]:
    out = []
    for module, _ in PYTEST_RUNS:
        if not (SITE / module).is_file():
            continue
        for verbose in (True, False):
            text = _pytest_log(module, verbose)
            out += _samples("pytest", f"pytest:{module}:{'v' if verbose else 'q'}", text, 3)
    return out


# ---- hex dumps, digests, base64 -----------------------------------------------------------------

def _binaries() -> list[Path]:
    """ELF programs and libraries, message catalogs and images of the system, a few of each."""
    picks = []
    for pattern, n in (("/usr/bin/*", 14), ("/usr/lib/x86_64-linux-gnu/*.so*", 8),
                       ("/usr/share/locale/de/LC_MESSAGES/*.mo", 4), ("/usr/share/pixmaps/*.png", 2),
                       (str(SITE / "*/*.png"), 2), ("/usr/share/zoneinfo/Europe/*", 2)):
        import glob
        found = sorted(p for p in map(Path, glob.glob(pattern))
                       if p.is_file() and not p.is_symlink() and p.stat().st_size > 6_000)
        found.sort(key=lambda p: zlib.crc32(str(p).encode()))
        picks += found[:n]
    return picks


def hexdumps() -> list[Sample]:
    out = []
    for p in _binaries():
        # a part from the middle as well as the head: headers are mostly zero bytes
        size = p.stat().st_size
        for skip in (0, size // 2):
            run = subprocess.run(["xxd", "-s", str(skip), "-l", "4096", str(p)], capture_output=True, text=True)
            if run.returncode == 0 and run.stdout:
                out.append(Sample("hexdump", f"xxd:{p}", run.stdout))
    return out


def hex_digests() -> list[Sample]:
    out = []
    for p in _binaries()[::2]:  # plain hex of binaries (xxd -p): one long digit run per line
        size = p.stat().st_size
        run = subprocess.run(["xxd", "-p", "-s", str(size // 3), "-l", str(SAMPLE_CHARS // 2), str(p)],
                             capture_output=True, text=True)
        if run.returncode == 0 and run.stdout:
            out.append(Sample("hex", f"xxd-p:{p}", run.stdout))
    files = sorted(Path("/var/lib/dpkg/info").glob("*.md5sums"), key=lambda p: zlib.crc32(str(p).encode()))
    for p in files:
        text = _read(p)
        if len(text) >= SAMPLE_CHARS:
            out += _samples("hex", f"md5sums:{p.name}", text, 1)
        if len(out) >= 75:
            break
    return out


def _compressed() -> list[Path]:
    """Compressed files (images, gzip and xz archives): what base64 carries in agent sessions
    is media and archives, whose bytes look random (not an executable's zero padding)."""
    import glob
    picks = []
    for pattern, n in (("/usr/share/doc/*/changelog*.gz", 14), (str(SITE / "**/*.png"), 8),
                       ("/usr/share/pixmaps/*.png", 2), ("/usr/share/doc/*/*.xz", 2), ("/usr/share/man/man1/*.gz", 6)):
        found = sorted(p for p in map(Path, glob.glob(pattern, recursive=True))
                       if p.is_file() and not p.is_symlink() and p.stat().st_size > 3_200)
        found.sort(key=lambda p: zlib.crc32(str(p).encode()))
        picks += found[:n]
    return picks


def base64_texts() -> list[Sample]:
    import base64
    out = []
    for k, p in enumerate(_compressed()):
        raw = p.read_bytes()[:3 * SAMPLE_CHARS // 4]
        text = base64.b64encode(raw).decode()
        if k % 2 == 0:
            text = "\n".join(text[i:i + 76] for i in range(0, len(text), 76))
        out.append(Sample("base64", f"b64:{p}", text))
    return out


# ---- CJK ----------------------------------------------------------------------------------------

MAN_LANGS = ("zh_CN", "zh_TW", "ja")


def _man_text(page: Path) -> str:
    """A manual page rendered as man shows it (no formatting characters)."""
    cached = CACHE / "man" / (str(page).strip("/").replace("/", "_") + ".txt")
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    env = {**os.environ, "MANWIDTH": "100", "LANG": "C.UTF-8", "MAN_KEEP_FORMATTING": "0"}
    run = subprocess.run(["man", "-l", "-E", "UTF-8", "--nh", "--nj", str(page)], capture_output=True,
                         env=env, timeout=30)
    text = re.sub(r".\x08", "", run.stdout.decode("utf-8", "replace"))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text, encoding="utf-8")
    return text


def _cjk_share(text: str) -> float:
    return sum(0x3000 <= ord(c) <= 0x9FFF or 0xAC00 <= ord(c) <= 0xD7AF for c in text) / max(1, len(text))


def man_pages() -> list[tuple[str, str]]:
    """(source, text) of the CJK manual pages that are mostly CJK, largest first per language."""
    out = []
    for lang in MAN_LANGS:
        pages = sorted(Path(f"/usr/share/man/{lang}").glob("man[1-8]/*.gz"), key=lambda p: -p.stat().st_size)
        for page in pages[:40]:
            text = _man_text(page)
            if len(text) >= SAMPLE_CHARS and _cjk_share(text) >= 0.2:
                out.append((f"man:{lang}:{page.name}", text))
    return out


def cjk() -> list[Sample]:
    import gettext
    out = []
    for source, text in man_pages():
        out += _samples("cjk", source, text, 2)
    for lang in ("zh_CN", "zh_TW", "ja", "ko"):
        for mo in sorted(Path(f"/usr/share/locale/{lang}/LC_MESSAGES").glob("*.mo")):
            try:
                with open(mo, "rb") as f:
                    catalog = gettext.GNUTranslations(f)._catalog
            except (OSError, gettext.error):
                continue
            texts = [v for v in catalog.values() if isinstance(v, str) and len(v) > 8 and _cjk_share(v) >= 0.3]
            out += _samples("cjk", f"mo:{lang}:{mo.name}", "\n".join(texts), 1)
    return out


def mixed(code_samples: list[Sample]) -> list[Sample]:
    """CJK manual-page paragraphs with Python blocks between them; the code comes from a code
    source of the same split, so a held-back mixed sample holds no calibration text."""
    out = []
    by_split = {False: [s for s in code_samples if not s.held_back],
                True: [s for s in code_samples if s.held_back]}
    for source, text in man_pages():
        rng = random.Random(zlib.crc32(source.encode()))
        split = held_back("mixed:" + source)
        pool = by_split[split]
        if not pool:
            continue
        paras = [p.strip() for p in text.split("\n\n") if _cjk_share(p) >= 0.15]
        pieces, n = [], 0
        for para in paras:
            if n >= SAMPLE_CHARS:
                break
            pieces.append(para)
            block = rng.choice(pool).text.splitlines()
            start = rng.randrange(max(1, len(block) - 12))
            snippet = "\n".join(block[start:start + rng.randint(4, 12)])
            pieces.append("```python\n" + snippet + "\n```")
            n += len(para) + len(snippet)
        if n >= SAMPLE_CHARS // 2:
            out.append(Sample("mixed", "mixed:" + source, "\n\n".join(pieces)))
    return out


def corpus() -> list[Sample]:
    code_samples = code()
    samples = (prose() + code_samples + json_files() + logs() + pytest_logs() + hexdumps()
               + hex_digests() + base64_texts() + cjk() + mixed(code_samples))
    return [s for s in samples if s.text.strip()]


def as_measured(text: str) -> str:
    """A sample as Measure sees it: a JSON string inside a message element."""
    return json.dumps({"role": "user", "content": text}, ensure_ascii=False, separators=(",", ":"))


SAMPLE_PER_CLASS = 3
SAMPLE_SKIP = ("log:dmesg", "log:pip-")  # machine details, pip's index configuration


def held_back_sample(samples: list[Sample], per_class: int = SAMPLE_PER_CLASS) -> list[Sample]:
    """The tests' sample: per class, per_class held-back samples, one from each of the first
    held-back sources in the order of a hash of their names (further chunks of them when there
    are fewer sources), each cut to its first SAMPLE_CHARS at a line end."""
    out = []
    for cls in CLASSES:
        by_source = {}
        for s in samples:
            if s.cls == cls and s.held_back and not s.source.startswith(SAMPLE_SKIP):
                by_source.setdefault(s.source, []).append(s)
        order = sorted(by_source, key=lambda src: zlib.crc32(("sample:" + src).encode()))
        picked = [by_source[src][k] for k in range(CHUNKS_PER_SOURCE * 2) for src in order
                  if k < len(by_source[src])][:per_class]
        out += [Sample(s.cls, s.source, (chunks(s.text, SAMPLE_CHARS, 1) or [s.text])[0]) for s in picked]
    return out


def write_sample(path: str) -> None:
    picked = held_back_sample(corpus())
    data = {"comment": "Held-back real material (bench/real_corpus.py: held-back sources only) for "
                       "tests/test_calibration.py. Regenerate with: python bench/real_corpus.py "
                       "--sample tests/data/held_back_sample.json.gz",
            "per_class": SAMPLE_PER_CLASS,
            "samples": [{"cls": s.cls, "source": s.source, "text": s.text} for s in picked]}
    raw = json.dumps(data, ensure_ascii=False, indent=0).encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(gzip.compress(raw, mtime=0))
    print(f"wrote {path}: {len(picked)} samples, {sum(len(s.text) for s in picked) / 1024:.0f} K chars")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--sample":
        write_sample(sys.argv[2])
        return
    samples = corpus()
    for cls in CLASSES:
        got = [s for s in samples if s.cls == cls]
        for split in (False, True):
            part = [s for s in got if s.held_back == split]
            sources = sorted({s.source for s in part})
            print(f"{cls:8} {'held-back' if split else 'calibration':11} {len(part):4d} samples "
                  f"from {len(sources):3d} sources, {sum(len(s.text) for s in part) / 1024:7.0f} K chars")


if __name__ == "__main__":
    main()
