"""The environment block (docs/design.md §6 "Per-turn injections"): the volatile editor facts as
an `<environment_details>` block at the end of the last user message, computed once per user
message and kept by it for the rest of the session (the client stores the part), so the history
prefix changes only where something really changed."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from .. import conversation as m


@dataclass(slots=True)
class Editor:
    current_time: str = ""
    working_directory: str = ""
    workspace_root: str = ""
    active_file: str = ""
    visible_files: list = field(default_factory=list)
    open_tabs: list = field(default_factory=list)
    environment_details: str = ""  # the block this user message got before, passed back


def environment_details(editor: Editor, now: Optional[dt.datetime] = None) -> str:
    """The volatile editor facts, as a block for the end of the last user message."""
    if editor.current_time:
        stamp = editor.current_time
    else:
        stamp = (now or dt.datetime.now().astimezone()).isoformat(timespec="seconds")
    lines = ["<environment_details>", "# Current Time", stamp]
    for title, value in (("Working Directory", editor.working_directory),
                         ("Workspace Root", editor.workspace_root), ("Active File", editor.active_file)):
        if value:
            lines += [f"# {title}", value]
    for title, items in (("Visible Files", editor.visible_files), ("Open Tabs", editor.open_tabs)):
        if items:
            lines.append(f"# {title}")
            lines += [f"  {x}" for x in items]
    lines.append("</environment_details>")
    return "\n".join(lines)


# The id of the environment part Assemble creates: <user message id> + this suffix.
ENVIRONMENT_SUFFIX = "~environment"
_ENV_OPEN, _ENV_CLOSE = "<environment_details>", "</environment_details>"


def _environment_part(part: m.Part) -> bool:
    """Whether a part is a stored `<environment_details>` block: ours by its id, or a synthetic
    text that is the block alone (a client that names its own part ids stores it so)."""
    c = part.content
    if not isinstance(c, m.Text) or c.ignored:
        return False
    if part.id.endswith(ENVIRONMENT_SUFFIX):
        return True
    text = c.text.strip()
    return c.synthetic and text.startswith(_ENV_OPEN) and text.endswith(_ENV_CLOSE)


def stored_environment(msg: m.Message) -> str:
    """The `<environment_details>` block the message already holds, or ""."""
    part = next((p for p in msg.parts if _environment_part(p)), None)
    return part.content.text.strip() if part is not None else ""
