"""How right a summary is: the head's verbatim items found in it (and apart, the previous
summary's), the items the history superseded that it still states as current, and the sections
it leaves empty although the history had material for them (docs/design.md §5, "Retention").

Verbatim items are file paths, shell commands, error lines (a failure's exception line, first
frame, linter and test lines), identifiers (CamelCase names, names with underscores, dotted
names) from what the person and the assistant wrote, from tool inputs (an edit's new names too)
and from tool errors. Tool outputs are not mined: they are bulk the summary is meant to drop.
What is superseded and what is material is what the offline summarizer recognizes
(summarizers/supersede.py), so the figures are as good as those rules.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import conversation as m
from ..deadline import NO_DEADLINE, Deadline
from ..memo import each
from . import template
from .summarizers import offline, supersede

# Sections a rolling summary keeps once they have material: what the history told stays true.
LASTING = ("goal", "constraints", "done", "decisions", "critical", "files")


@dataclass(slots=True)
class Retention:
    items: int = 0
    retained: int = 0
    ratio: float = 1.0  # retained / items, 1 when there are none
    missing: tuple = ()  # the items not found (for logs and tests)
    # the previous summary's verbatim items the head does not hold, and of those how many the
    # summary keeps (carried_missing: the others): what a rolling summary let go
    carried: int = 0
    carried_kept: int = 0
    carried_missing: tuple = ()
    superseded_current: tuple = ()  # superseded items the summary still states as current
    empty_sections: tuple = ()  # section keys left empty while the history had material for them


def _items(msg: m.Message, deadline: Deadline = NO_DEADLINE) -> tuple:
    """(tool input items, tool error items, prose items) of one message, in order, unstripped."""
    tools, errors, prose = [], [], []
    for p in msg.parts:
        deadline.count("compact")
        c = p.content
        if isinstance(c, m.Text) and not c.ignored and not c.synthetic and c.text:
            for line in c.text.splitlines():
                if offline.ERROR_LINE.search(line):
                    prose.append(line)
            prose.extend(offline.identifiers(c.text))
        elif isinstance(c, m.Tool):
            tools.extend(offline._paths(c.input))
            kind = offline._kind(c.tool)
            if kind == "shell":
                tools.append(offline._command(c.input))
            elif kind == "edit":
                tools.extend(offline.edit_identifiers(c.input))
            if c.status == m.ERROR and c.error:
                errors.extend(supersede.error_lines(c.error) or [supersede.headline(c.error)])
    return tuple(tools), tuple(errors), tuple(prose)


def extract(messages: list, memo=None, deadline: Deadline = NO_DEADLINE) -> list:
    """The verbatim items of these messages, each once, in first-seen order: every tool input's,
    then every tool error's, then the prose's. memo (memo.Memo) keeps each message's items."""
    found = {}
    per_message = each(memo, "retention", messages, (), lambda x: _items(x, deadline))
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


def judge(messages: list, previous: str, summary: str, memo=None, deadline: Deadline = NO_DEADLINE) -> tuple:
    """(superseded items stated as current, empty sections with material) of a summary of these
    messages rolled on from previous (the previous summary's text, "" when none). memo
    (memo.Memo): each message's facts, as the offline summarizer keeps them."""
    before = template.parse(previous) if previous else {}
    material, stale = offline.extract_with_stale(messages, offline.DEFAULT_LIMITS, before, memo, deadline)
    sections = template.parse(summary)
    current = tuple(dict.fromkeys(s.probe for s in stale for k in s.sections
                                  if any(offline._stale_in(x, [s], k) for x in sections[k])))
    material = offline.drop_stale(material, stale)
    had = {k for k in LASTING if material[k] or before.get(k)}
    if material["blocked"]:
        had.add("blocked")
    if offline._under_way(messages):
        had.add("in_progress")
    empty = tuple(k for k in template.KEYS if k in had and not sections[k])
    return current, empty


def carried(previous: str) -> list:
    """The verbatim items a previous summary carries: its code spans (paths, commands,
    identifiers, as the template asks them written), each once."""
    return list(dict.fromkeys(offline.code_spans(previous)))


def report(messages: list, previous: str, summary: str, memo=None, deadline: Deadline = NO_DEADLINE) -> Retention:
    """The retention of a summary: the head's verbatim items kept, and apart those the previous
    summary carried (a rolling summary that lets one go loses it, which the head's alone never
    showed; its bounds let the oldest go by design, so the two are not one ratio), superseded
    items still current, empty sections with material."""
    head = extract(messages, memo, deadline)
    out = measure(head, summary)
    held = set(head)
    before = measure([x for x in carried(previous) if x not in held], summary)
    out.carried, out.carried_kept, out.carried_missing = before.items, before.retained, before.missing
    out.superseded_current, out.empty_sections = judge(messages, previous, summary, memo, deadline)
    return out
