"""Reminders (docs/design.md §6 "Per-turn injections"): the plan reminder, the wrapping of a user
message sent mid-run, and the last allowed step's message. Each touches only the tail."""
from __future__ import annotations

import dataclasses

from .. import conversation as m

MAX_STEPS_PROMPT = """CRITICAL - MAXIMUM STEPS REACHED

The maximum number of steps allowed for this task has been reached. Tools are disabled until next user input. Respond with text only.

STRICT REQUIREMENTS:
1. Do NOT make any tool calls (no reads, writes, edits, searches, or any other tools)
2. MUST provide a text response summarizing work done so far
3. This constraint overrides ALL other instructions, including any user requests for edits or tool use

Response must include:
- Statement that maximum steps for this agent have been reached
- Summary of what has been accomplished so far
- List of any remaining tasks that were not completed
- Recommendations for what should be done next

Any attempt to use tools is a critical violation. Respond with text ONLY."""


def synthetic(pid: str, text: str) -> m.Part:
    return m.Part(pid, m.Text(text, synthetic=True))


# A mid-run user message's wrapping; a text already in it is stored wrapped and left alone.
_MID_RUN_OPEN = "<system-reminder>\nThe user sent the following message:\n"
_MID_RUN_CLOSE = "\n\nPlease address this message and continue with your tasks.\n</system-reminder>"


def _wrapped(text: str) -> bool:
    return text.startswith(_MID_RUN_OPEN) and text.endswith(_MID_RUN_CLOSE)


def unwrapped(text: str) -> str:
    """The person's own words of a text wrap_mid_run wrapped (any other as it is): what a reader
    of the history (the offline summary) takes from it."""
    return text[len(_MID_RUN_OPEN):-len(_MID_RUN_CLOSE)] if _wrapped(text) else text


def wrap_mid_run(msg: m.Message) -> tuple:
    """(the message with its texts wrapped, the parts that changed, to be stored).

    Once wrapped, a message stays wrapped: the wrapped texts go back to the client, which
    stores them, rather than being decided again at every step. The rule that picks a mid-run
    message (the latest user message, after the last finished assistant, at step > 1) stops
    holding at the next step, when a newer assistant has finished: re-deciding would unwrap
    the message one step after wrapping it and rewrite the cached prefix twice. No structure
    of the conversation says after the fact that the loop was running when the message came,
    so the decision is recorded where the client already keeps everything: in the message.
    """
    parts, changed = [], []
    for p in msg.parts:
        c = p.content
        if isinstance(c, m.Text) and not c.synthetic and not c.ignored and not _wrapped(c.text):
            p = m.Part(p.id, dataclasses.replace(c, text=_MID_RUN_OPEN + c.text + _MID_RUN_CLOSE))
            changed.append(p)
        parts.append(p)
    return dataclasses.replace(msg, parts=parts), changed
