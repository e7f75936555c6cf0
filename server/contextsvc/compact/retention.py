"""How much of what must survive verbatim did survive: items of the head found in the summary.

Items are file paths, shell commands, error strings and identifiers (CamelCase names, names with
underscores, dotted names) from what the person and the assistant wrote and from tool inputs
and errors. Tool outputs are not mined: they are bulk the summary is meant to drop.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import conversation as m
from ..memo import each
from .summarizers import offline


@dataclass(slots=True)
class Retention:
    items: int = 0
    retained: int = 0
    ratio: float = 1.0  # retained / items, 1 when there are none
    missing: tuple = ()  # the items not found (for logs and tests)


def _items(msg: m.Message) -> tuple:
    """(tool input items, tool error items, prose items) of one message, in order, unstripped."""
    tools, errors, prose = [], [], []
    for p in msg.parts:
        c = p.content
        if isinstance(c, m.Text) and not c.ignored and not c.synthetic and c.text:
            for line in c.text.splitlines():
                if offline.ERROR_LINE.search(line):
                    prose.append(line)
            prose.extend(offline.identifiers(c.text))
        elif isinstance(c, m.Tool):
            tools.extend(offline._paths(c.input))
            if offline._kind(c.tool) == "shell":
                tools.append(offline._command(c.input))
            if c.status == m.ERROR and c.error:
                errors.append(offline._first_error_line(c.error))
    return tuple(tools), tuple(errors), tuple(prose)


def extract(messages: list, memo=None) -> list:
    """The verbatim items of these messages, each once, in first-seen order: every tool input's,
    then every tool error's, then the prose's. memo (memo.Memo) keeps each message's items."""
    found = {}
    per_message = each(memo, "retention", messages, (), _items)
    for group in range(3):
        for items in per_message:
            for item in items[group]:
                item = item.strip()
                if len(item) >= 3:
                    found.setdefault(item, None)
    return list(found)


def measure(items: list, summary: str) -> Retention:
    missing = tuple(x for x in items if x not in summary)
    n = len(items)
    kept = n - len(missing)
    return Retention(n, kept, kept / n if n else 1.0, missing)
