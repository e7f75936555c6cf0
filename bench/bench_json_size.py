"""Benchmark: measuring an Anthropic Messages request body's JSON size.

Times, side by side in one run, on the same generated bodies:
  - json_size from the compiled extension (contextsvc._native_c), when it is built,
  - json_size from the pure-Python twin (contextsvc._native_py),
  - len(json_text(body).encode()): the body Assemble emits (contextsvc.native.json_text, numbers
    as Node writes them; the bodies' tool inputs hold floats such as 45.0, which it writes 45),
  - len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()),
  - len(orjson.dumps(body)), when orjson is installed.
json_size must agree with json_text before anything is timed; json.dumps and orjson are speed
baselines only (they write 45.0 for a float Node writes 45, so their sizes differ slightly).

Bodies (deterministic, seeded): one large conversation (about 1.3 MB of JSON, 900 messages:
prose and code with newlines and quotes, some CJK and emoji, tool_use blocks with nested
inputs, tool_result blocks) and 10,000 small 3-message requests, timed as one body called
repeatedly (cache-hot) and as one pass over all of them (cache-cold). Contenders are
interleaved round by round, so a change of machine load hits them alike. Prints the median
time per call, throughput and ratios.

Usage: python bench/bench_json_size.py [--quick] [--kernel avx2|sse2|portable]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from contextsvc import _native_py, native

try:
    from contextsvc import _native_c
except ImportError:
    _native_c = None

try:
    import orjson
except ImportError:
    orjson = None

WORDS = (
    "the context window holds every message of the conversation so far and the model reads "
    "all of it again on each turn which is why a long session gets slow and expensive unless "
    "older tool output is pruned or summarised before it is sent request response token budget "
    "cache prefix compaction marker assistant user system tool result error retry stream delta "
    "function argument schema property required optional default value string number array"
).split()
CJK = "上下文窗口包含对话中的每一条消息模型在每一轮都会重新读取所有内容因此长时间的会话会变慢"
EMOJI = "😀🚀✨🔥👍🎉💡📦🧪✅"
IDENTS = ["ctx", "budget", "tokens", "messages", "turn", "result", "payload", "stream", "cache"]
PATHS = ["server/app.py", "lib/context/window.ts", "src/main.rs", "tests/test_prune.py", "README.md"]


def _sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 18))
    if rng.random() < 0.25:
        i = rng.randrange(len(words))
        words[i] = f'"{words[i]}"'
    return " ".join(words).capitalize() + rng.choice([".", ".", "?", ":"])


def _prose(rng: random.Random, chars: int) -> str:
    parts, size = [], 0
    while size < chars:
        para = " ".join(_sentence(rng) for _ in range(rng.randint(2, 5)))
        parts.append(para)
        size += len(para) + 2
    return "\n\n".join(parts)


def _code(rng: random.Random, chars: int) -> str:
    lines, size = [], 0
    depth = 0
    while size < chars:
        a, b = rng.choice(IDENTS), rng.choice(IDENTS)
        kind = rng.random()
        if kind < 0.2:
            line = f"def {a}_{b}({a}, {b}=None):"
            depth = 1
        elif kind < 0.45:
            line = f'{a} = {b}.get("{rng.choice(WORDS)}", {rng.randint(0, 999)})'
        elif kind < 0.6:
            line = f'if not re.match(r"^\\w+\\s*=\\s*\\d+$", {a}):'
        elif kind < 0.8:
            line = f'raise ValueError(f"bad {{{a}!r}} for \\"{b}\\"")'
        else:
            line = f"return [{a} for {a} in {b} if {a}]  # {rng.choice(WORDS)}"
        line = "    " * depth + line
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _text(rng: random.Random, chars: int) -> str:
    if rng.random() < 0.35:
        text = _prose(rng, chars // 2) + "\n\n```python\n" + _code(rng, chars // 2) + "\n```\n"
    else:
        text = _prose(rng, chars)
    r = rng.random()
    if r < 0.10:
        start = rng.randrange(len(CJK) - 12)
        text += "\n\n" + CJK[start : start + rng.randint(6, 12)] + "。"
    elif r < 0.15:
        text += " " + "".join(rng.choices(EMOJI, k=rng.randint(1, 3)))
    return text


def _tool_use(rng: random.Random, n: int) -> dict:
    name = rng.choice(["read_file", "run_command", "search", "edit_file"])
    return {
        "type": "tool_use",
        "id": f"toolu_{rng.getrandbits(64):016x}{n:06d}",
        "name": name,
        "input": {
            "path": rng.choice(PATHS),
            "command": f"grep -rn \"{rng.choice(WORDS)}\" {rng.choice(PATHS)} | head -{rng.randint(5, 50)}",
            "options": {
                "recursive": rng.random() < 0.5,
                "max_results": rng.randint(1, 500),
                "timeout": round(rng.uniform(1, 120), 2),
                "patterns": [f"*.{ext}" for ext in rng.sample(["py", "ts", "rs", "md", "json"], 3)],
                "context": None,
            },
        },
    }


def _tool_result(rng: random.Random, tool_id: str, chars: int) -> dict:
    body = _code(rng, chars) if rng.random() < 0.5 else _prose(rng, chars)
    if rng.random() < 0.05:
        body += "\n\x1b[31mFAILED\x1b[0m\t(exit status 1)"
    block = {"type": "tool_result", "tool_use_id": tool_id}
    if rng.random() < 0.5:
        block["content"] = body
    else:
        block["content"] = [{"type": "text", "text": body}]
    if rng.random() < 0.1:
        block["is_error"] = True
    return block


TOOLS = [
    {
        "name": name,
        "description": f"{name.replace('_', ' ').capitalize()} in the workspace. " + " ".join(WORDS[:20]),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace root."},
                "command": {"type": "string"},
                "options": {
                    "type": "object",
                    "properties": {
                        "recursive": {"type": "boolean", "default": False},
                        "max_results": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                },
            },
            "required": ["path"],
        },
    }
    for name in ("read_file", "run_command", "search", "edit_file")
]


def large_body(seed: int = 1234, messages: int = 900) -> dict:
    rng = random.Random(seed)
    msgs = []
    pending_tool = None
    for i in range(messages):
        if i % 2 == 0:  # user
            if pending_tool is not None:
                content = [_tool_result(rng, pending_tool, rng.randint(600, 3200))]
                if rng.random() < 0.2:
                    content.append({"type": "text", "text": _text(rng, rng.randint(40, 300))})
            else:
                content = [{"type": "text", "text": _text(rng, rng.randint(100, 1600))}]
            msgs.append({"role": "user", "content": content})
            pending_tool = None
        else:  # assistant
            content = [{"type": "text", "text": _text(rng, rng.randint(80, 1200))}]
            if rng.random() < 0.7:
                use = _tool_use(rng, i)
                content.append(use)
                pending_tool = use["id"]
            msgs.append({"role": "assistant", "content": content})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "system": [
            {"type": "text", "text": _prose(rng, 4000), "cache_control": {"type": "ephemeral"}}
        ],
        "tools": TOOLS,
        "messages": msgs,
        "stream": True,
    }


def small_bodies(count: int = 10_000, seed: int = 99) -> list:
    rng = random.Random(seed)
    bodies = []
    for n in range(count):
        use = _tool_use(rng, n)
        bodies.append(
            {
                "model": "claude-haiku-4-5",
                "max_tokens": 1024,
                "system": _prose(rng, rng.randint(200, 600)),
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": _text(rng, rng.randint(60, 400))}]},
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": _text(rng, rng.randint(40, 300))}, use],
                    },
                    {"role": "user", "content": [_tool_result(rng, use["id"], rng.randint(100, 900))]},
                ],
            }
        )
    return bodies


def _dumps_len(body) -> int:
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())


def _json_text_len(body) -> int:
    return len(native.json_text(body).encode())


def _orjson_len(body) -> int:
    return len(orjson.dumps(body))


class Contender:
    """One way of measuring; `kernel` pins the compiled module's string kernel set."""

    def __init__(self, name, fn, kernel=None, weight=1.0):
        self.name, self.fn, self.kernel, self.weight = name, fn, kernel, weight

    def __enter__(self):
        self._previous = _native_c._use_kernel(self.kernel) if self.kernel else None
        return self.fn

    def __exit__(self, *exc):
        if self._previous:
            _native_c._use_kernel(self._previous)


def _contenders(kernel_override=None) -> list:
    found = []
    if _native_c is not None:
        best = kernel_override or _native_c._kernel()
        found.append(Contender(f"compiled [{best}]", _native_c.json_size, best))
        if "sse2" in _native_c._kernels() and best != "sse2":
            found.append(Contender("compiled [sse2]", _native_c.json_size, "sse2"))
    found.append(Contender("python twin", _native_py.json_size, weight=0.02))
    found.append(Contender("json_text+encode", _json_text_len, weight=0.1))
    found.append(Contender("json.dumps+encode", _dumps_len, weight=0.1))
    if orjson is not None:
        found.append(Contender("orjson.dumps", _orjson_len))
    return found


def _rounds(contenders, rounds: int, sample) -> dict:
    """Interleaves the contenders round by round (so load changes hit all of them alike);
    sample(fn, weight) returns a list of ns-per-call samples. Returns name -> median."""
    samples = {c.name: [] for c in contenders}
    for _ in range(rounds):
        for c in contenders:
            with c as fn:
                samples[c.name].extend(sample(fn, c.weight))
    return {name: statistics.median(values) for name, values in samples.items()}


def _single_calls(body, calls: int):
    def sample(fn, weight):
        out = []
        for _ in range(max(1, round(calls * weight))):
            t0 = time.perf_counter_ns()
            fn(body)
            out.append(time.perf_counter_ns() - t0)
        return out

    return sample


def _batch(bodies, calls: int):
    """One sample = mean ns per call over `calls` calls cycling through bodies."""
    def sample(fn, weight):
        n = max(1, round(calls * weight))
        todo = [bodies[i % len(bodies)] for i in range(n)]
        t0 = time.perf_counter_ns()
        for body in todo:
            fn(body)
        return [(time.perf_counter_ns() - t0) / n]

    return sample


def _fmt_time(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:9.3f} ms"
    return f"{ns / 1e3:9.2f} us"


def _report(title: str, size_bytes: float, medians: dict) -> None:
    ref_json = medians.get("json.dumps+encode")
    ref_orjson = medians.get("orjson.dumps")
    print(f"\n{title}  ({size_bytes / 1e3:.1f} kB of JSON per call)")
    print(f"  {'':22}{'median/call':>13}{'MB/s':>9}{'vs json.dumps':>15}{'vs orjson':>11}")
    for name, ns in medians.items():
        mbps = size_bytes / (ns / 1e9) / 1e6
        vs_json = f"{ref_json / ns:12.1f}x" if ref_json else f"{'-':>13}"
        vs_orjson = f"{ref_orjson / ns:9.2f}x" if ref_orjson else f"{'-':>10}"
        print(f"  {name:22}{_fmt_time(ns):>13}{mbps:9.0f}{vs_json:>15}{vs_orjson:>11}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and bodies")
    parser.add_argument("--kernel", help="string kernel set of the compiled module "
                        "(default: the best this CPU runs)")
    args = parser.parse_args(argv)
    quick = 4 if args.quick else 1

    big = large_body()
    smalls = small_bodies(10_000 // quick)
    contenders = _contenders(args.kernel)

    # Every counter must agree with the body's text before any of them is timed.
    expected_big = _json_text_len(big)
    expected_small = [_json_text_len(b) for b in smalls]
    for c in contenders:
        if c.fn in (_dumps_len, _orjson_len):
            continue  # baselines: Python's float text, not Node's
        with c as fn:
            if fn(big) != expected_big or [fn(b) for b in smalls] != expected_small:
                print(f"{c.name} disagrees with json_text", file=sys.stderr)
                return 1

    print(f"python {sys.version.split()[0]}; compiled extension: "
          + (f"present, kernels {_native_c._kernels()}" if _native_c is not None else "ABSENT")
          + f"; orjson {orjson.__version__ if orjson is not None else 'absent'}")
    print(f"large body: {len(big['messages'])} messages, {expected_big} bytes; "
          f"small bodies: {len(smalls)} of 3 messages, mean {statistics.mean(expected_small):.0f} bytes")
    print("times: medians over interleaved rounds (time.perf_counter_ns)")

    medians = _rounds(contenders, 40 // quick, _single_calls(big, 10))
    _report("large body, single calls", expected_big, medians)

    hot = smalls[0]
    medians = _rounds(contenders, 40 // quick, _batch([hot], 400))
    _report("one small body, called repeatedly (cache-hot)", expected_small[0], medians)

    medians = _rounds(contenders, 8 // quick, _batch(smalls, len(smalls)))
    _report(f"{len(smalls)} distinct small bodies, one pass (cache-cold), per body",
            statistics.mean(expected_small), medians)
    return 0


if __name__ == "__main__":
    sys.exit(main())
