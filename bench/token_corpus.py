"""An offline corpus of texts by content class, for calibrating and checking token estimates.

Everything comes from this machine: Python's standard library (sources and docstrings), the
license files of installed packages, the Chinese, Japanese and Korean message catalogs of the
system's packages (/usr/share/locale/*/LC_MESSAGES/*.mo), and text built here (JSON, base64,
hex, logs; CJK text drawn by frequency from built-in lists of common characters only when no
catalog exists). The
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


# Common characters, most frequent first, for the fallback below: real text repeats a few hundred
# characters far more than the rest, so uniform draws over a code table would be unrealistic.
COMMON_HANZI = (
    "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事"
    "其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主"
    "没公从知使全已开样想实现理部东两问应情最新文件系统服务器数据用户设置安装程序运行错误信息查看检查配置"
    "路径名称类型格式输入输出选项参数命令模式状态网络连接地址密码权限目录创建删除修改保存打开关闭启动停止"
    "更新版本支持无法找到失败成功请确认是否正确重新需要可以使用当前默认指定必须允许显示内容列表记录时间日期")
COMMON_TRADITIONAL = (
    "的一是不了人我在有他這為之大來以個中上們到說國和地也子時道出而要於就下得可你年生自會那後能對著事"
    "其裡所去行過家十用發天如然作方成者多日都三小軍二無同麼經法當起與好看學進種將還分此心前面又定見只主"
    "檔案系統伺服器資料使用者設定安裝程式執行錯誤訊息檢查路徑名稱類型格式輸入輸出選項參數命令模式狀態網路"
    "連線位址密碼權限目錄建立刪除修改儲存開啟關閉啟動停止更新版本支援無法找到失敗成功請確認是否正確重新需要")
COMMON_KANA = ("のにはをたがでてとしれさいるかなもすこありまうくよっんだられつきけそろえせおわやめ"
               "ファイルサービスシステムデータユーザーインストールコマンドオプションエラーメッセージ")
COMMON_KANJI = "日本人時間方法場合設定確認実行起動使用表示指定入力出力変更作成削除保存接続名前情報状態必要正常"
COMMON_HANGUL = ("이다는의에가을를하고한지로서수있니습기사시도리자해게정보파일설치실행확인오류메시지사용자"
                 "데이터서비스시스템명령옵션경로이름설정입력출력변경생성삭제저장연결상태필요없음않으면다시")


def _zipf(rng, chars: str, n: int) -> str:
    """n characters drawn with weight 1/rank: frequent ones often, the tail now and then."""
    return "".join(rng.choices(chars, cum_weights=_cum_weights(len(chars)), k=n))


def _cum_weights(n: int) -> list[float]:
    total, out = 0.0, []
    for rank in range(1, n + 1):
        total += 1.0 / rank
        out.append(total)
    return out


def synthetic_cjk(rng) -> list[Sample]:
    """Fallback CJK text, only used when the system has no catalogs: sentences drawn by
    frequency from built-in lists of common characters, with the punctuation of each language."""
    out = []
    for k in range(PER_CLASS):
        lang = k % 4
        parts = []
        while sum(map(len, parts)) < SAMPLE_CHARS // 2:
            if lang == 0:
                parts.append(_zipf(rng, COMMON_HANZI, rng.randint(4, 20)) + rng.choice("，。，、；"))
            elif lang == 1:
                parts.append(_zipf(rng, COMMON_TRADITIONAL, rng.randint(4, 20)) + rng.choice("，。，、；"))
            elif lang == 2:
                parts.append("".join(_zipf(rng, COMMON_KANA, 1) if rng.random() < 0.6 else _zipf(rng, COMMON_KANJI, 1)
                                     for _ in range(rng.randint(5, 25))) + rng.choice("、。"))
            else:
                parts.append(" ".join(_zipf(rng, COMMON_HANGUL, rng.randint(1, 4))
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
