"""Historical media stripping (docs/design.md §6 "Payload guard"): once a summary exists, the
media before the last user message with a real part become attachment notes; media at and after
it stay (the model is still working on them)."""
from __future__ import annotations

import dataclasses

from .. import conversation as m, projection
from ..lowering.neutral import attachment_note


def _real(part: m.Part) -> bool:
    """A part the person wrote or sent: not text the agent made up (synthetic), nor a compaction
    marker (stored after the kept tail: read as the person's, it made the tail's media history)."""
    c = part.content
    return not ((isinstance(c, m.Text) and c.synthetic) or isinstance(c, m.Compaction))


def strip(messages: list, points: list | None = None) -> tuple:
    """Media before the last user message with a real part become notes, once a summary exists.
    points: projection.compaction_points(messages), when the caller has them."""
    if points is None:
        points = projection.compaction_points(messages)
    # a summary is a compaction point: only those are looked at
    if not any(messages[i].role == m.ASSISTANT and messages[i].summary and messages[i].finished for i in points):
        return messages, 0
    cut = projection.last_index(messages, lambda x: x.role == m.USER and any(map(_real, x.parts)))
    sent = {x.id for x in projection.project(messages, points)}  # what is not sent needs no stripping
    stripped, out = 0, []
    for i, msg in enumerate(messages):
        if i >= cut or msg.id not in sent:
            out.append(msg)
            continue
        parts, changed = [], False
        for p in msg.parts:
            c = p.content
            if isinstance(c, m.File) and c.is_media:
                parts.append(m.Part(p.id, m.Text(attachment_note(c), synthetic=True)))
                stripped += 1
                changed = True
            elif isinstance(c, m.Tool) and any(a.is_media for a in c.attachments):
                stripped += sum(a.is_media for a in c.attachments)
                parts.append(m.Part(p.id, dataclasses.replace(
                    c, attachments=[a for a in c.attachments if not a.is_media])))
                changed = True
            else:
                parts.append(p)
        out.append(dataclasses.replace(msg, parts=parts) if changed else msg)
    return out, stripped


