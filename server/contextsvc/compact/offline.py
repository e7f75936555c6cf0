"""The embedded summarizer: deterministic and extractive, no key and no network (docs/design.md §5).

It fills every section of the template from the head: the person's goals and constraints from
user messages, files from tool inputs, commands from shell tool inputs, error strings from tool
errors and error-looking lines, decisions and next steps stated by the assistant. Everything it
copies is copied verbatim. Given a previous summary it updates that document (rolling update):
previous bullets and new ones are merged, duplicates dropped, each section bounded, oldest first
out.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .. import model as m
from ..config import SummarizerConfig
from . import template

NAME = "offline"


@dataclass(frozen=True)
class OfflineLimits:
    """The bounds of an offline summary; their values live in config (summarizer.offline_*)."""
    max_items: int
    max_goals: int
    max_item_chars: int

    @classmethod
    def of(cls, summarizer: SummarizerConfig) -> "OfflineLimits":
        return cls(summarizer.offline_max_items, summarizer.offline_max_goals,
                   summarizer.offline_max_item_chars)


DEFAULT_LIMITS = OfflineLimits.of(SummarizerConfig())


READ_TOOLS = ("read", "view", "cat", "grep", "glob", "list", "ls", "search", "codesearch", "find")
EDIT_TOOLS = ("edit", "write", "patch", "apply_patch", "multiedit", "create", "str_replace", "replace",
              "insert", "delete", "move", "rename")
SHELL_TOOLS = ("bash", "shell", "sh", "run", "exec", "execute", "terminal", "command", "run_command")
PATH_KEYS = ("path", "file_path", "filePath", "filename", "file", "paths", "files", "target_file",
             "source", "destination", "directory", "dir", "cwd")
COMMAND_KEYS = ("command", "cmd", "script", "commands")

ERROR_LINE = re.compile(r"(?:Error|Exception|Traceback|\bfailed\b|\bFAILED\b|\bfatal\b)")
CONSTRAINT = re.compile(
    r"\b(?:must|never|always|don'?t|do not|should(?:n'?t)?|prefer|avoid|only|without|keep|make sure|"
    r"required?|no more than|at most|at least)\b", re.IGNORECASE)
DECISION = re.compile(
    r"\b(?:I'll|I will|we'll|we will|decided|decide to|instead|going to|let's|chose|choose|"
    r"switch(?:ed)? to|use [^ ]+ (?:because|since)|because|the fix is|the cause is|root cause)\b",
    re.IGNORECASE)
NEXT = re.compile(r"\b(?:next|then I|TODO|remaining|still need|left to|afterwards|after that|"
                  r"follow[- ]up|later)\b", re.IGNORECASE)
_EXT = r"(?:py|pyi|pyx|js|jsx|ts|tsx|mjs|cjs|go|rs|java|kt|c|cc|cpp|h|hpp|cs|rb|php|swift|md|rst|txt|" \
       r"json|jsonl|yaml|yml|toml|ini|cfg|lock|sql|sh|bash|zsh|html|css|scss|proto|xml|csv|env|" \
       r"gradle|mk|cmake|tf|vue|svelte|ipynb)"
PATH = re.compile(  # a whole token that is a path: has a slash, or ends in a known extension
    r"(?:\.{1,2}/|/|~/)?(?:[\w.-]+/)+[\w.-]*\w|[\w-]+(?:\.[\w-]+)*\." + _EXT)
TOKEN_SPLIT = re.compile(r"[\s`'\"(),;<>\[\]{}|=]+")
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+[a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")
SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")

SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])")


def identifiers(text: str) -> list:
    """Paths and identifiers in prose, in order of appearance (with repeats)."""
    out = []
    for tok in TOKEN_SPLIT.split(text):
        tok = tok.strip(".,:!?*")
        if len(tok) < 3:
            continue
        if PATH.fullmatch(tok):
            out.append(tok)
            continue
        if "_" in tok:
            out.extend(SNAKE.findall(tok))
        if "." in tok:
            out.extend(DOTTED.findall(tok))
        if not tok.islower():
            out.extend(CAMEL.findall(tok))
    return out


def _sentences(text: str) -> list:
    out = []
    for line in text.splitlines():
        line = line.strip().lstrip("-*> ").strip()
        if line:
            out.extend(s.strip() for s in SENTENCE.split(line) if s.strip())
    return out


def _clip(text: str, limits: OfflineLimits) -> str:
    text = " ".join(text.split()) if "\n" in text else text.strip()
    if len(text) <= limits.max_item_chars:
        return text
    return text[:limits.max_item_chars] + " ..."


def _strings(value) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _strings(v)]
    return []


def _paths(inp) -> list:
    if not isinstance(inp, dict):
        return []
    out = []
    for key in PATH_KEYS:
        if key in inp:
            out.extend(s for s in _strings(inp[key]) if s and "\n" not in s)
    return out


def _command(inp) -> str:
    if isinstance(inp, dict):
        for key in COMMAND_KEYS:
            if key in inp:
                parts = _strings(inp[key])
                if parts:
                    return " && ".join(parts) if key == "commands" else " ".join(parts)
    return ""


def _kind(tool: str) -> str:
    name = tool.lower()
    base = name.rsplit(".", 1)[-1].rsplit("__", 1)[-1]
    if base in SHELL_TOOLS:
        return "shell"
    if base in EDIT_TOOLS or any(base.startswith(x) for x in ("edit", "write", "patch")):
        return "edit"
    if base in READ_TOOLS or base.startswith("read"):
        return "read"
    return "other"


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if ERROR_LINE.search(line):
            return line.strip()
    first = text.strip().splitlines()
    return first[0].strip() if first else ""


class _Acc:
    """Ordered, de-duplicated bullets per section."""

    def __init__(self):
        self.items = {k: {} for k in template.KEYS}

    def add(self, key: str, item: str) -> None:
        item = item.strip()
        if item:
            bucket = self.items[key]
            bucket.pop(item, None)  # a repeated fact moves to the newest position
            bucket[item] = None

    def get(self, key: str) -> list:
        return list(self.items[key])


def _text_of(msg: m.Message, *, synthetic: bool) -> str:
    return "\n".join(p.content.text for p in msg.parts
                     if isinstance(p.content, m.Text) and not p.content.ignored
                     and (synthetic or not p.content.synthetic) and p.content.text)


def extract(messages: list, limits: OfflineLimits = DEFAULT_LIMITS) -> dict:
    """{section key: [bullet, ...]} extracted from these messages."""
    acc = _Acc()
    goals = []
    files = {}  # path -> set of roles ("read", "edited", ...) in first-seen order
    failed = {}  # (tool, input text) -> bullet, removed when the same call later succeeds
    last_user_answered = True
    mentioned, names = [], []  # paths and identifiers in prose
    for msg in messages:
        if msg.role in (m.USER, m.ASSISTANT) and not msg.summary:
            for item in identifiers(_text_of(msg, synthetic=False)):
                (mentioned if PATH.fullmatch(item) else names).append(item)
        if msg.role == m.USER:
            text = _text_of(msg, synthetic=False)
            if text.strip():
                first = next(line.strip() for line in text.splitlines() if line.strip())
                goals.append(_clip(first, limits))
                last_user_answered = False
                for s in _sentences(text):
                    if CONSTRAINT.search(s):
                        acc.add("constraints", _clip(s, limits))
                for line in text.splitlines():
                    if ERROR_LINE.search(line):
                        acc.add("critical", _clip(line, limits))
            for p in msg.parts:
                if isinstance(p.content, m.File) and p.content.filename:
                    files.setdefault(p.content.filename, {})["attached"] = None
            continue
        if msg.role != m.ASSISTANT or msg.summary:
            continue
        text = _text_of(msg, synthetic=True)
        if text.strip():
            last_user_answered = True
        for s in _sentences(text):
            if NEXT.search(s):
                acc.add("next_steps", _clip(s, limits))
            elif DECISION.search(s):
                acc.add("decisions", _clip(s, limits))
        for line in text.splitlines():
            if ERROR_LINE.search(line):
                acc.add("critical", _clip(line, limits))
        if msg.error is not None:
            acc.add("critical", _clip(f"{msg.error.name}: {msg.error.message}".rstrip(": "), limits))
        for p in msg.parts:
            t = p.content
            if not isinstance(t, m.Tool):
                continue
            last_user_answered = True
            kind = _kind(t.tool)
            key = (t.tool, json.dumps(t.input, sort_keys=True, default=str))
            for path in _paths(t.input):
                role = {"edit": "edited", "read": "read"}.get(kind, t.tool)
                files.setdefault(path, {})[role] = None
            cmd = _command(t.input) if kind == "shell" else ""
            if t.status == m.COMPLETED:
                failed.pop(key, None)
                if cmd:
                    acc.add("done", _clip(f"Ran `{cmd}`", limits))
                    err = [ln for ln in t.output.splitlines() if ERROR_LINE.search(ln)]
                    for ln in err[:2]:
                        acc.add("critical", _clip(ln, limits))
                elif kind == "edit":
                    for path in _paths(t.input):
                        acc.add("done", _clip(f"Edited `{path}`", limits))
            elif t.status == m.ERROR:
                line = _first_error_line(t.error or "error")
                subject = f"`{cmd}`" if cmd else (f"`{t.tool}` on `{_paths(t.input)[0]}`"
                                                  if _paths(t.input) else f"`{t.tool}`")
                failed[key] = _clip(f"{subject} failed: {line}", limits)
                acc.add("critical", _clip(line, limits))
            else:
                subject = f"`{cmd}`" if cmd else f"`{t.tool}`"
                acc.add("in_progress", _clip(f"{subject} was interrupted", limits))
    for bullet in failed.values():
        acc.add("blocked", bullet)
    if goals and not last_user_answered:
        acc.add("in_progress", f"Answer the latest request: {goals[-1]}")
    for goal in goals[-limits.max_goals:]:
        acc.add("goal", goal)
    for path in mentioned:
        files.setdefault(path, {})["mentioned"] = None
    for path, roles in files.items():
        acc.add("files", f"`{path}`: {', '.join(roles)}")
    names = [x for x in names if x not in files]
    for bullet in _packed("Identifiers: ", names[-limits.max_items * 4:], limits):
        acc.add("critical", bullet)
    out = {}
    for key in template.KEYS:
        items = acc.get(key)
        out[key] = items[-(limits.max_goals if key == "goal" else limits.max_items):]
    return out


def _packed(prefix: str, names: list, limits: OfflineLimits) -> list:
    """names as `code` spans in as few bullets as fit max_item_chars each (never cut a name)."""
    out, line = [], ""
    for name in dict.fromkeys(names):
        piece = f"`{name}`"
        if line and len(prefix) + len(line) + 2 + len(piece) > limits.max_item_chars:
            out.append(prefix + line)
            line = ""
        line = f"{line}, {piece}" if line else piece
    if line:
        out.append(prefix + line)
    return out


def merge(previous: dict, new: dict, limits: OfflineLimits = DEFAULT_LIMITS) -> dict:
    """One rolling document: previous facts, then new ones; duplicates once; sections bounded."""
    out = {}
    for key in template.KEYS:
        old = previous.get(key, [])
        fresh = new.get(key, [])
        if key == "in_progress" and fresh:
            old = []  # what was under way then is done or blocked now
        bucket = {}
        for item in [*old, *fresh]:
            bucket.pop(item, None)
            bucket[item] = None
        items = list(bucket)
        cap = limits.max_goals if key == "goal" else limits.max_items
        out[key] = items[-cap:]
    return out


def summarize(messages: list, previous: str = "", limits: OfflineLimits = DEFAULT_LIMITS) -> str:
    sections = extract(messages, limits)
    if previous:
        sections = merge(template.parse(previous), sections, limits)
    return template.render(sections)


class OfflineSummarizer:
    """The summarizer interface over the extractive summarizer."""

    name = NAME

    def __init__(self, limits: OfflineLimits = DEFAULT_LIMITS):
        self.limits = limits

    def summarize(self, job) -> str:
        return summarize(job.messages, job.previous, self.limits)

    def merge(self, partials: list, previous: str = "", max_tokens: int = 0, deadline=None) -> str:
        merged = template.parse(previous) if previous else {k: [] for k in template.KEYS}
        for text in partials:
            merged = self.merge_sections(merged, template.parse(text))
        return template.render(merged)

    def merge_sections(self, a: dict, b: dict) -> dict:
        return merge(a, b, self.limits)
