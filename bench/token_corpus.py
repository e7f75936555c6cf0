"""An offline corpus of texts by content class, for calibrating and checking token estimates.

Everything comes from this machine: Python's standard library (sources and docstrings), the
license files of installed packages, the Chinese, Japanese and Korean message catalogs of the
system's packages (/usr/share/locale/*/LC_MESSAGES/*.mo), and text built here (JSON, base64,
hex, logs; CJK text drawn from the GB2312 and EUC-KR tables only when no catalog exists). The
corpus therefore depends a little on the machine (Python version, installed packages, locales).
Each sample has a source name; held_out() keeps about 30% of the sources (chosen by a hash of
the name) away from fitting, so the errors reported are on text the ratios never saw.
"""
from __future__ import annotations

import ast
import base64
import gettext
import json
import random
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

SAMPLE_CHARS = 3000  # about the size of one message or tool output
PER_CLASS = 120  # samples per class


@dataclass(frozen=True)
class Sample:
    cls: str
    source: str
    text: str


def held_out(sample: Sample) -> bool:
    return zlib.crc32(sample.source.encode()) % 10 < 3


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 20_000)
    return files


def _chunks(text: str, size: int):
    """Pieces of about size chars, cut at line ends."""
    out, cur = [], []
    n = 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    return out


def prose(rng) -> list[Sample]:
    out = []
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        docs = [ast.get_docstring(n) for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef))]
        # prose paragraphs only: no doctest or indented code lines
        paras = []
        for d in docs:
            if not d:
                continue
            for para in d.split("\n\n"):
                lines = para.splitlines()
                if len(para) > 200 and not any(l.startswith((">>>", "    ", "..", "-")) for l in lines):
                    paras.append(" ".join(l.strip() for l in lines))
        text = "\n\n".join(paras)
        for i, chunk in enumerate(_chunks(text.replace("\n\n", "\n\n\n"), SAMPLE_CHARS)):
            out.append(Sample("prose", f"doc:{path.name}", chunk))
    site = Path(sysconfig.get_paths()["purelib"])
    for lic in sorted(site.glob("*.dist-info/LICENSE*")) + sorted(site.glob("*.dist-info/licenses/*")):
        if not lic.is_file():
            continue
        text = lic.read_text(encoding="utf-8", errors="replace")
        if "licen" not in text[:2000].lower():
            continue  # an authors list or notice file, not license prose
        for chunk in _chunks(text, SAMPLE_CHARS):
            out.append(Sample("prose", f"license:{lic.parent.name.split('-')[0]}", chunk))
    return out


def code(rng) -> list[Sample]:
    out = []
    for path in _stdlib_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for chunk in _chunks(text, SAMPLE_CHARS)[:6]:
            out.append(Sample("code", f"src:{path.name}", chunk))
    return out


def _records(path: Path, rng) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    recs = []
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef):
            doc = (ast.get_docstring(n) or "").split("\n")[0]
            recs.append({"name": n.name, "line": n.lineno, "args": [a.arg for a in n.args.args],
                         "doc": doc, "public": not n.name.startswith("_"),
                         "size": rng.randint(10, 99999), "score": round(rng.random(), 4)})
    return recs


def json_texts(rng) -> list[Sample]:
    out = []
    for path in _stdlib_files():
        try:
            recs = _records(path, rng)
        except SyntaxError:
            continue
        if len(recs) < 8:
            continue
        rng.shuffle(recs)
        indent = rng.choice([None, 2])
        text = json.dumps({"module": path.stem, "functions": recs}, indent=indent, ensure_ascii=False)
        for chunk in ([text[i:i + SAMPLE_CHARS] for i in range(0, min(len(text), 4 * SAMPLE_CHARS), SAMPLE_CHARS)]):
            out.append(Sample("json", f"json:{path.name}", chunk))
    return out


def base64_texts(rng) -> list[Sample]:
    out = []
    for k, path in enumerate(_stdlib_files()[:PER_CLASS]):
        raw = zlib.compress(path.read_bytes()) if k % 2 else rng.randbytes(2400)
        text = base64.b64encode(raw).decode()[:SAMPLE_CHARS]
        if k % 3 == 0:  # wrapped at 76 columns, as MIME does
            text = "\n".join(text[i:i + 76] for i in range(0, len(text), 76))
        out.append(Sample("base64", f"b64:{path.name}", text))
    return out


def hex_texts(rng) -> list[Sample]:
    out = []
    for k in range(PER_CLASS):
        raw = rng.randbytes(SAMPLE_CHARS // 2)
        text = raw.hex()
        if k % 3 == 0:  # digests one per line
            text = "\n".join(text[i:i + 64] for i in range(0, len(text), 64))
        elif k % 3 == 1:
            text = text.upper()
        out.append(Sample("hex", f"hex:{k}", text))
    return out


def logs(rng) -> list[Sample]:
    names = [p.stem for p in _stdlib_files()]
    words = "request completed failed retry connect timeout cache miss hit loaded user session closed".split()
    out = []
    for k in range(PER_CLASS):
        lines = []
        t = rng.randint(1_700_000_000, 1_800_000_000)
        while sum(map(len, lines)) < SAMPLE_CHARS:
            t += rng.randint(0, 5)
            level = rng.choice(["INFO", "DEBUG", "WARN", "ERROR"])
            msg = " ".join(rng.choice(words) for _ in range(rng.randint(2, 7)))
            style = k % 3
            if style == 0:
                lines.append(f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{t % 86400 // 3600:02d}:"
                             f"{t % 3600 // 60:02d}:{t % 60:02d}.{rng.randint(0, 999):03d}Z {level} "
                             f"[{rng.choice(names)}] {msg} id={rng.getrandbits(48):012x} "
                             f"took={rng.randint(1, 5000)}ms\n")
            elif style == 1:
                lines.append(f"{rng.randint(1, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}."
                             f"{rng.randint(1, 254)} - - [{rng.randint(1, 28):02d}/Mar/2025:"
                             f"{t % 86400 // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d} +0000] "
                             f"\"GET /api/v1/{rng.choice(names)}/{rng.randint(1, 99999)} HTTP/1.1\" "
                             f"{rng.choice([200, 200, 304, 404, 500])} {rng.randint(100, 99999)}\n")
            else:
                lines.append(f"{level:5} {t}.{rng.randint(0, 999999):06d} pid={rng.randint(100, 65000)} "
                             f"{rng.choice(names)}.py:{rng.randint(1, 3000)} {msg}\n")
        out.append(Sample("logs", f"log:{k}", "".join(lines)[:SAMPLE_CHARS]))
    return out


def _table(codec: str, lead: range, trail: range) -> list[str]:
    chars = []
    for a in lead:
        for b in trail:
            try:
                chars.append(bytes([a, b]).decode(codec))
            except UnicodeDecodeError:
                pass
    return chars


LOCALES = Path("/usr/share/locale")
CJK_LOCALES = ("zh_CN", "zh_TW", "ja", "ko")


def _has_cjk(text: str) -> bool:
    return sum(0x3000 <= ord(c) <= 0x9FFF or 0xAC00 <= ord(c) <= 0xD7AF for c in text) * 3 >= len(text)


def cjk(rng) -> list[Sample]:
    """Translated messages of the system's packages: real Chinese, Japanese and Korean text."""
    out = []
    for lang in CJK_LOCALES:
        for mo in sorted((LOCALES / lang / "LC_MESSAGES").glob("*.mo")):
            try:
                with open(mo, "rb") as f:
                    catalog = gettext.GNUTranslations(f)._catalog
            except (OSError, gettext.error):
                continue
            texts = [v for v in catalog.values() if isinstance(v, str) and len(v) > 8 and _has_cjk(v)]
            text = "\n".join(texts)
            for chunk in _chunks(text, SAMPLE_CHARS // 2)[:3]:
                out.append(Sample("cjk", f"mo:{lang}:{mo.name}", chunk))
    return out if len(out) >= PER_CLASS // 2 else out + synthetic_cjk(rng)


def synthetic_cjk(rng) -> list[Sample]:
    hanzi = _table("gb2312", range(0xB0, 0xD8), range(0xA1, 0xFF))  # GB2312 level 1: common hanzi
    hangul = _table("euc_kr", range(0xB0, 0xC9), range(0xA1, 0xFF))  # KS X 1001 syllables
    kana = [chr(c) for c in range(0x3041, 0x3094)]
    out = []
    for k in range(PER_CLASS):
        lang = k % 3
        parts = []
        while sum(map(len, parts)) < SAMPLE_CHARS // 2:
            if lang == 0:
                parts.append("".join(rng.choice(hanzi[:1500]) for _ in range(rng.randint(4, 20)))
                             + rng.choice("，。，、；"))
            elif lang == 1:
                parts.append("".join(rng.choice(kana) if rng.random() < 0.6 else rng.choice(hanzi[:800])
                                     for _ in range(rng.randint(5, 25))) + rng.choice("、。"))
            else:
                parts.append(" ".join("".join(rng.choice(hangul[:800]) for _ in range(rng.randint(1, 4)))
                                      for _ in range(rng.randint(2, 8))) + ". ")
        out.append(Sample("cjk", f"cjk:{k}", "".join(parts)))
    return out


def corpus(seed: int = 1) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for make in (prose, code, json_texts, base64_texts, hex_texts, logs, cjk):
        got = make(rng)
        rng.shuffle(got)
        samples.extend(got[:PER_CLASS])
    return samples


def as_measured(text: str) -> str:
    """A sample as Measure sees it: a JSON string inside a message element."""
    return json.dumps({"role": "user", "content": text}, ensure_ascii=False, separators=(",", ":"))
