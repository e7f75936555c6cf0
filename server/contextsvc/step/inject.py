"""Inject (docs/design.md §6 "Per-turn injections, at the tail only"): the first stage of a step.
The environment block, the plan reminder and the mid-run wrapping go to the last user message;
on the last allowed step a trailing user message says tools are disabled. What the client must
store to keep later requests byte-identical comes back as Persist parts."""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from .. import conversation as m, projection
from ..errors import BadInput
from ..memo import injected_digest
from . import environment, reminders
from .environment import Editor


@dataclass(slots=True)
class Turn:
    """What the agent says of the turn the step belongs to."""
    editor: Optional[Editor] = None
    step: int = 1
    max_steps: int = 0
    plan_reminder: str = ""

    def check(self) -> None:
        if self.step < 0 or self.max_steps < 0:
            raise BadInput("step" if self.step < 0 else "max_steps", "must not be negative")

    @property
    def last_step(self) -> bool:
        """The last allowed step: tools are disabled and a message says so."""
        return bool(self.max_steps and self.step >= self.max_steps)


@dataclass(slots=True)
class Persist:
    """A part the client stores into message message_id of its conversation: it replaces the
    part with the same id, or is appended when the message has none."""
    message_id: str
    part: m.Part


@dataclass(slots=True)
class Injected:
    messages: list  # the conversation's messages as sent
    injected: list  # the names of what was injected, in order
    environment_details: str  # the environment block used ("" without one)
    persist: list = field(default_factory=list)  # list[Persist]: parts the client stores


def _written_by_person(msg: m.Message) -> bool:
    return any(not (isinstance(p.content, m.Text) and (p.content.synthetic or p.content.ignored)) for p in msg.parts)


def inject(messages: list, turn: Turn, now: Optional[dt.datetime] = None, points: list | None = None) -> Injected:
    """The messages to send with this turn's injections, what was injected, the environment block
    used and the parts the client stores. points: projection.compaction_points(messages), when
    the caller has them (the injected messages have the same: no injection is one)."""
    messages = list(messages)
    injected, block, persist = [], "", []
    # Injections go to the last user message in *send* order: after a compaction that kept a
    # tail, the compaction marker moves to the head, so the original order would pick it.
    sent = projection.project(messages, points)
    last_user = projection.last_index(sent, lambda x: x.role == m.USER and x.compaction() is None)
    # looked for from the end, where it almost always is
    u = next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is sent[last_user]) if last_user >= 0 else -1
    if u >= 0:
        user = messages[u]
        extra = []
        # Injections a later step makes again as they are, into a user message answers follow (a
        # tool loop): the copy is named by a digest (memo.injected_digest), so what a step puts
        # together past it is kept for the next (step.pieces). A block made here or a wrapping
        # comes back stored in the message (persist), and the injections into a last message
        # go to a newer one once the session moves on: the next step sends that message
        # otherwise, so its copy is named by none, and a step keeps what it built before it.
        repeated = last_user < len(sent) - 1
        # A user message keeps its block for the rest of the session (the client stores the
        # part returned in persist): dropping it when a newer message arrives would rewrite the
        # history prefix at every new turn. A message that already holds one gets no other.
        block = environment.stored_environment(user)
        # Only a message the person wrote gets one: the continue prompt a compaction adds is
        # the service's own, and a block there would make the next request bigger than the
        # compaction's tokens_after
        if turn.editor is not None and not block and _written_by_person(user):
            block = turn.editor.environment_details or environment.environment_details(turn.editor, now)
            repeated = repeated and bool(turn.editor.environment_details)
            part = reminders.synthetic(f"{user.id}{environment.ENVIRONMENT_SUFFIX}", "\n\n" + block)
            extra.append(part)
            persist.append(Persist(user.id, part))
            injected.append("environment_details")
        if turn.plan_reminder:
            extra.append(reminders.synthetic(f"{user.id}~reminder",
                                    f"<system-reminder>\n{turn.plan_reminder}\n</system-reminder>"))
            injected.append("plan_reminder")
        finished = projection.last_index(sent, lambda x: x.role == m.ASSISTANT and x.finished) \
            if turn.step > 1 else -1  # (a first step is never mid-run)
        if finished >= 0 and last_user > finished:
            wrapped, changed = reminders.wrap_mid_run(user)
            if changed:  # (one stored wrapped stays the message off the wire, with its digest)
                user = wrapped
                persist[:0] = [Persist(user.id, p) for p in changed]
                injected.append("mid_run_reminder")
                repeated = False
        if extra:
            user = dataclasses.replace(user, parts=[*user.parts, *extra])
            if repeated and messages[u].digest:
                user.digest = injected_digest(messages[u].digest, extra)
        messages[u] = user
    if turn.max_steps and turn.step >= turn.max_steps:
        last_id = messages[-1].id
        messages.append(m.Message(f"{last_id}~max-steps", m.USER, [reminders.synthetic(f"{last_id}~max-steps-text",
                                                                                 reminders.MAX_STEPS_PROMPT)]))
        injected.append("max_steps")
    return Injected(messages, injected, block, persist)
