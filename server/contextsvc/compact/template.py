"""The summary template and the prompts that ask for it (docs/design.md §5, "Template").

The system text (TEMPLATE_RULES) never changes, so it is the cacheable prefix of every summary
request; the transcript and the previous summary go in the user turn.
"""
from __future__ import annotations

import re

# (heading line, key) in the order the template requires.
SECTIONS = (
    ("## Goal", "goal"),
    ("## Constraints & Preferences", "constraints"),
    ("## Progress", None),
    ("### Done", "done"),
    ("### In Progress", "in_progress"),
    ("### Blocked", "blocked"),
    ("## Key Decisions", "decisions"),
    ("## Next Steps", "next_steps"),
    ("## Critical Context", "critical"),
    ("## Relevant Files", "files"),
)
HEADINGS = tuple(h for h, _ in SECTIONS)
KEYS = tuple(k for _, k in SECTIONS if k)
EMPTY = "(none)"

TEMPLATE = """## Goal
- [one line: what the person is trying to get done]

## Constraints & Preferences
- [constraints, preferences and specifications the person stated]

## Progress
### Done
- [finished work]

### In Progress
- [work under way]

### Blocked
- [what is stuck, and on what]

## Key Decisions
- [decision: why]

## Next Steps
1. [ordered next actions]

## Critical Context
- [technical facts, error strings, open questions]

## Relevant Files
- [path: why it matters]"""

RULES = (
    "Keep every section of the template, in its order; write (none) under a section that is empty.",
    "Write terse bullets, not prose.",
    "Copy file paths, commands, error strings and identifiers exactly, character for character.",
    "Never mention the summary, the summarization or this instruction in the summary itself.",
)

TEMPLATE_RULES = (
    "You write the working memory of a coding agent: a summary of the conversation so far that "
    "replaces it, so the agent can carry on without the original messages.\n\n"
    "Answer with exactly this Markdown template and nothing else:\n\n"
    + TEMPLATE
    + "\n\nRules:\n"
    + "\n".join(f"- {r}" for r in RULES)
    + "\n- When a <previous-summary> is given, update it into one document: keep what still "
    "holds, drop what a later fact superseded, merge in the new facts from the conversation. Do "
    "not summarize the previous summary; rewrite it."
)

# What "superseded" means, said wherever an earlier summary meets later facts: the item leaves
# every section that states what is current; Done may record the change.
SUPERSESSION = (
    "A later fact supersedes an earlier item; remove the earlier item from Goal, Constraints & "
    "Preferences, In Progress, Blocked, Key Decisions, Next Steps and Relevant Files (Done may "
    "record the change): a reversed decision (keep only the new one), a replaced constraint, a "
    "blocker since resolved (a command that failed and later succeeded), a renamed or deleted "
    "file (list it under its new name, or not at all), a next step since done (move it to Done). "
    "Never state a superseded item as current."
)
INCREMENTAL = ("Update the previous summary with the conversation below: keep what still holds, "
               "drop what the conversation superseded, merge the new facts. " + SUPERSESSION
               + " Answer with the full template.")
FRESH = ("Summarize the conversation below with the template. " + SUPERSESSION
         + " Answer with the full template.")
MERGE = ("Merge these partial summaries of consecutive parts of one conversation, oldest first, into "
         "one summary with the template: keep what still holds, drop what later parts superseded. "
         + SUPERSESSION)


def prompt(transcript: str, previous: str = "") -> str:
    """The user turn of a summary request."""
    if previous:
        return (f"{INCREMENTAL}\n\n<previous-summary>\n{previous}\n</previous-summary>\n\n"
                f"<conversation>\n{transcript}\n</conversation>")
    return f"{FRESH}\n\n<conversation>\n{transcript}\n</conversation>"


def merge_prompt(partials: list, previous: str = "") -> str:
    body = "\n\n".join(f"<partial-summary index=\"{i + 1}\">\n{s}\n</partial-summary>"
                       for i, s in enumerate(partials))
    if previous:
        body = f"<previous-summary>\n{previous}\n</previous-summary>\n\n" + body
    return f"{MERGE}\n\n{body}"


def render(sections: dict) -> str:
    """The template filled from {key: [bullet, ...]}; an empty section reads (none)."""
    out = []
    for heading, key in SECTIONS:
        if out:
            out.append("")
        out.append(heading)
        if key is None:
            continue
        items = sections.get(key) or []
        if not items:
            out.append(f"- {EMPTY}")
        elif key == "next_steps":
            out.extend(f"{i + 1}. {x}" for i, x in enumerate(items))
        else:
            out.extend(f"- {x}" for x in items)
    return "\n".join(out)


_BULLET = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+(.*)$")


def parse(text: str) -> dict:
    """{key: [bullet, ...]} of a summary in the template; unknown headings are ignored."""
    by_heading = {h: k for h, k in SECTIONS}
    out = {k: [] for k in KEYS}
    key = None
    lines = text.splitlines()
    headings = set(_heading_lines(lines))
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i in headings:
            key = by_heading.get(stripped)
            continue
        if key is None or not stripped:
            continue
        mt = _BULLET.match(line)
        item = (mt.group(1) if mt else stripped).strip()
        if item and item != EMPTY:
            out[key].append(item)
    return out


def _heading_lines(lines: list):
    """The indices of the lines that may be headings: starting with "#", outside ``` blocks (a
    "# comment" there is the block's)."""
    fenced = False
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif stripped.startswith("#") and not fenced:
            yield i


def _heading_name(line: str) -> str:
    """A heading line's words, as conformed compares them: "# Key decisions:" -> "key decisions"."""
    return " ".join(re.sub(r"[^a-z ]+", " ", line.strip().lstrip("#").replace("&", " and ").lower()).split())


_BY_NAME = {_heading_name(h): h for h in HEADINGS}
# a model's summary naming fewer of the template's sections than this is not in the template
MIN_SECTIONS = len(HEADINGS) // 2


def conformed(text: str) -> str:
    """A model's summary in the template: each heading that names a template section (any level,
    any case, "and" for "&", a trailing colon) written as the template writes it, and the
    sections it leaves out added empty at the end. ValueError when it names fewer than
    MIN_SECTIONS of them: stored as it was, the next compaction's merge read it as empty and lost
    every fact in it."""
    lines = text.splitlines()
    found = set()
    for i in list(_heading_lines(lines)):
        heading = _BY_NAME.get(_heading_name(lines[i]))
        if heading is not None:
            lines[i] = heading
            found.add(heading)
    if len(found) < MIN_SECTIONS:
        raise ValueError(f"the summary is not in the template: it has {len(found)} of its {len(HEADINGS)} "
                         f"headings ({', '.join(HEADINGS)})")
    for heading, key in SECTIONS:
        if heading not in found:
            lines += ["", heading] + ([f"- {EMPTY}"] if key else [])
    return "\n".join(lines)


def missing_sections(text: str) -> list:
    """Template headings absent from text, in template order."""
    lines = {x.strip() for x in text.splitlines()}
    return [h for h in HEADINGS if h not in lines]
