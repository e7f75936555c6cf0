"""How much of what must survive verbatim did survive: items of the head found in the summary.

Items are file paths, shell commands, error strings and identifiers (CamelCase names, names with
underscores, dotted names) from what the person and the assistant wrote and from tool inputs
and errors. Tool outputs are not mined: they are bulk the summary is meant to drop.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import model as m
from . import offline


@dataclass(slots=True)
class Retention:
    items: int = 0
    retained: int = 0
    ratio: float = 1.0  # retained / items, 1 when there are none
    missing: tuple = ()  # the items not found (for logs and tests)


def _texts(messages: list) -> tuple[list, list, list]:
    """(prose texts, tool inputs, tool error texts) of the messages."""
    prose, inputs, errors = [], [], []
    for msg in messages:
        for p in msg.parts:
            c = p.content
            if isinstance(c, m.Text) and not c.ignored and not c.synthetic and c.text:
                prose.append(c.text)
            elif isinstance(c, m.Tool):
                inputs.append(c)
                if c.status == m.ERROR and c.error:
                    errors.append(c.error)
    return prose, inputs, errors


def extract(messages: list) -> list:
    """The verbatim items of these messages, each once, in first-seen order."""
    found = {}

    def add(item: str) -> None:
        item = item.strip()
        if len(item) >= 3:
            found.setdefault(item, None)

    prose, tools, errors = _texts(messages)
    for t in tools:
        for path in offline._paths(t.input):
            add(path)
        if offline._kind(t.tool) == "shell":
            add(offline._command(t.input))
    for err in errors:
        add(offline._first_error_line(err))
    for text in prose:
        for line in text.splitlines():
            if offline.ERROR_LINE.search(line):
                add(line)
        for item in offline.identifiers(text):
            add(item)
    return list(found)


def measure(items: list, summary: str) -> Retention:
    missing = tuple(x for x in items if x not in summary)
    n = len(items)
    kept = n - len(missing)
    return Retention(n, kept, kept / n if n else 1.0, missing)
