"""The head as the transcript a summarizer reads (docs/design.md §5, "Serialize the head").

Media are stripped to a note, each tool output is cut to the configured number of characters,
and finished compaction pairs are hidden: a previous summary is handed over separately, never
summarized as if it were conversation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .. import conversation as m
from ..deadline import NO_DEADLINE, Deadline
from ..lowering.neutral import COMPACTED_OUTPUT, INTERRUPTED_OUTPUT, attachment_note

TRUNCATED = "[Tool output truncated for compaction: omitted {n} chars]"


@dataclass(slots=True)
class Transcript:
    text: str
    previous_summary: str  # "" when there is none
    messages: list  # the head messages that went into the text (compaction pairs hidden)
    blocks: list  # the text of each of those messages, in order (text is their join)


def clip(output: str, max_chars: int) -> str:
    """output cut to max_chars characters (never inside a character): its head and its tail,
    where a traceback's exception line and a test run's result are, with a note of the rest
    between them."""
    if len(output) <= max_chars:
        return output
    tail = max_chars // 2
    note = TRUNCATED.format(n=len(output) - max_chars)
    return output[:max_chars - tail] + "\n" + note + "\n" + output[len(output) - tail:]


def media_note(f: m.File) -> str:
    """What any file becomes in the transcript: `[Attached image/png: foo.png]`."""
    return attachment_note(f)


def summary_text(msg: m.Message) -> str:
    return "\n".join(p.content.text for p in msg.parts
                     if isinstance(p.content, m.Text) and not p.content.ignored).strip()


def is_compaction_marker(msg: m.Message) -> bool:
    return msg.role == m.USER and msg.compaction() is not None


def split_previous(messages: list) -> tuple[list, str]:
    """(messages without compaction markers and summaries, text of the last finished summary)."""
    kept, previous = [], ""
    for msg in messages:
        if is_compaction_marker(msg):
            continue
        if msg.role == m.ASSISTANT and msg.summary:
            if msg.finished and msg.error is None:
                text = summary_text(msg)
                if text:
                    previous = text
            continue
        kept.append(msg)
    return kept, previous


def _input_text(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _tool(t: m.Tool, max_chars: int) -> str:
    head = f"[Tool {t.tool} call {_input_text(t.input)}]"
    if t.status in (m.PENDING, m.RUNNING):
        result = INTERRUPTED_OUTPUT
    elif t.status == m.ERROR:
        result = "Error: " + clip(t.error or "error", max_chars)
    elif t.compacted:
        result = COMPACTED_OUTPUT
    else:
        result = clip(t.output, max_chars)
        notes = [media_note(a) for a in t.attachments]
        if notes:
            result = "\n".join([result, *notes]) if result else "\n".join(notes)
    return f"{head}\n[Tool {t.tool} result]\n{result}"


def message(msg: m.Message, max_chars: int, deadline: Deadline = NO_DEADLINE) -> str:
    """One message as transcript text ("" when nothing of it reaches the model)."""
    lines = []
    for part in msg.parts:
        deadline.count("compact")  # one message may hold hundreds of thousands of parts
        c = part.content
        if isinstance(c, m.Text):
            if not c.ignored and c.text:
                lines.append(c.text)
        elif isinstance(c, m.Reasoning):
            if c.text:
                lines.append(f"(thinking) {c.text}")
        elif isinstance(c, m.File):
            lines.append(media_note(c))
        elif isinstance(c, m.Tool):
            lines.append(_tool(c, max_chars))
        elif isinstance(c, m.Subtask) and c.prompt:
            lines.append(f"[Subtask for {c.agent or 'agent'}] {c.prompt}")
    if not lines:
        return ""
    who = "User" if msg.role == m.USER else "Assistant"
    return f"{who}:\n" + "\n".join(lines)


def serialize(head: list, max_chars: int, deadline: Deadline = NO_DEADLINE) -> Transcript:
    messages, previous = split_previous(head)
    kept, blocks = [], []
    for msg in messages:
        if msg.role == m.ASSISTANT and msg.error is not None and not msg.parts:
            continue
        text = message(msg, max_chars, deadline)
        if text:
            kept.append(msg)
            blocks.append(text)
    return Transcript("\n\n".join(blocks), previous, kept, blocks)
