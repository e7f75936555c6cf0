"""Assemble (docs/design.md §6): the provider-ready body and everything done to it.

Per-turn injections touch only the tail; the body, its size, figures and breakpoints come from
one function, `step`, that both Measure and Assemble call (Measure only skips serializing the
body and, unless asked, the prefix digests), payload guard included (body.payload_guard
prunes and strips historical media when the body is too big): the two agree on every figure for
the same request.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from . import breakpoints, projection, measure, conversation as m, prefix
from .config import Config
from .errors import BadInput
from .deadline import NO_DEADLINE, Deadline

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


@dataclass(slots=True)
class Editor:
    current_time: str = ""
    working_directory: str = ""
    workspace_root: str = ""
    active_file: str = ""
    visible_files: list = field(default_factory=list)
    open_tabs: list = field(default_factory=list)
    environment_details: str = ""  # the block this user message got before, passed back


@dataclass(slots=True)
class AssembleInput:
    conversation: m.Conversation
    model: m.Model
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    editor: Optional[Editor] = None
    step: int = 1
    max_steps: int = 0
    plan_reminder: str = ""
    policy: breakpoints.Policy = field(default_factory=breakpoints.Policy)
    configured_output_tokens: int = 0
    tools_disabled: bool = False
    exact: bool = False  # also the exact token count (MeasureInput.exact)
    previous_cache_state: bytes = b""  # the session's previous response's cache_state


@dataclass(slots=True)
class Report:
    """What changed in the cached prefix since the previous request (prefix.compare), priced."""
    prefix_kept: bool
    segment: str = ""  # "" = the same elements
    index: int = 0
    cause: str = ""
    rewrite: tuple = (0, "")  # (tokens, method): the decision figure of what is written again
    reused_elements: int = 0
    resolution: int = 1

    @property
    def broken(self) -> bool:
        """Something the previous request had is gone or changed: its cache is not read."""
        return not self.prefix_kept


@dataclass(slots=True)
class Assembled:
    body: bytes  # b"" when not serialized (Measure)
    measurement: measure.Measurement
    breakpoints: list
    pruned_part_ids: list
    media_stripped: int
    injected: list
    guard_tripped: bool
    over_payload_limit: bool
    environment_details: str
    cache_state: bytes = b""  # the digests to pass back with the next request; b"" when not hashed
    report: Optional[Report] = None  # when previous_cache_state was given
    persist: list = field(default_factory=list)  # list[Persist]: parts the client stores


# ---- per-turn injections (tail only) ---------------------------------------------------------

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


def _synthetic(pid: str, text: str) -> m.Part:
    return m.Part(pid, m.Text(text, synthetic=True))


@dataclass(slots=True)
class Persist:
    """A part the client stores into message message_id of its conversation: it replaces the
    part with the same id, or is appended when the message has none."""
    message_id: str
    part: m.Part


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


# A mid-run user message's wrapping; a text already in it is stored wrapped and left alone.
_MID_RUN_OPEN = "<system-reminder>\nThe user sent the following message:\n"
_MID_RUN_CLOSE = "\n\nPlease address this message and continue with your tasks.\n</system-reminder>"


def _wrapped(text: str) -> bool:
    return text.startswith(_MID_RUN_OPEN) and text.endswith(_MID_RUN_CLOSE)


def _wrap_mid_run(msg: m.Message) -> tuple:
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


def inject(inp: AssembleInput, now: Optional[dt.datetime] = None) -> tuple:
    """(messages to send, what was injected, the environment block used, parts to store)."""
    messages = list(inp.conversation.messages)
    injected, block, persist = [], "", []
    # Injections go to the last user message in *send* order: after a compaction that kept a
    # tail, the compaction marker moves to the head, so the original order would pick it.
    sent = projection.project(messages)
    last_user = projection.last_index(sent, lambda x: x.role == m.USER and x.compaction() is None)
    u = next(i for i, x in enumerate(messages) if x is sent[last_user]) if last_user >= 0 else -1
    if u >= 0:
        user = messages[u]
        extra = []
        # A user message keeps its block for the rest of the session (the client stores the
        # part returned in persist): dropping it when a newer message arrives would rewrite the
        # history prefix at every new turn. A message that already holds one gets no other.
        block = stored_environment(user)
        if inp.editor is not None and not block:
            block = inp.editor.environment_details or environment_details(inp.editor, now)
            part = _synthetic(f"{user.id}{ENVIRONMENT_SUFFIX}", "\n\n" + block)
            extra.append(part)
            persist.append(Persist(user.id, part))
            injected.append("environment_details")
        if inp.plan_reminder:
            extra.append(_synthetic(f"{user.id}~reminder",
                                    f"<system-reminder>\n{inp.plan_reminder}\n</system-reminder>"))
            injected.append("plan_reminder")
        finished = projection.last_index(sent, lambda x: x.role == m.ASSISTANT and x.finished)
        if inp.step > 1 and finished >= 0 and last_user > finished:
            user, changed = _wrap_mid_run(user)
            if changed:
                persist[:0] = [Persist(user.id, p) for p in changed]
                injected.append("mid_run_reminder")
        if extra:
            user = dataclasses.replace(user, parts=[*user.parts, *extra])
        messages[u] = user
    if inp.max_steps and inp.step >= inp.max_steps:
        last_id = messages[-1].id
        messages.append(m.Message(f"{last_id}~max-steps", m.USER, [_synthetic(f"{last_id}~max-steps-text",
                                                                                 MAX_STEPS_PROMPT)]))
        injected.append("max_steps")
    return messages, injected, block, persist


def assemble(inp: AssembleInput, cfg: Config, now: Optional[dt.datetime] = None,
             exact_counter=None, deadline: Deadline = NO_DEADLINE, memo=None) -> Assembled:
    """The body to send, with every figure Measure gives for it and its cache state."""
    return step(inp, cfg, now, serialize=True, hashes=True, exact_counter=exact_counter, deadline=deadline,
                memo=memo)


def step(inp: AssembleInput, cfg: Config, now: Optional[dt.datetime] = None, *, serialize: bool,
         hashes: bool, exact_counter=None, deadline: Deadline = NO_DEADLINE, memo=None) -> Assembled:
    """One step of an agent loop, as Assemble and Measure both see it: injections, then the
    evaluation of the body that would be sent (payload guard included), then, when hashed, the
    cache state and what changed since the previous one.

    serialize: also the body's JSON (Assemble). hashes: the prefix digests (a serialization pass
    over the elements); implied by a previous_cache_state. deadline: the caller's
    (errors.DeadlineExceeded when it passes or the caller cancels). memo (memo.StepMemo): what
    validation and the payload guard's prune computed for messages of earlier steps is not
    redone.
    """
    measure.check(measure.MeasureInput(inp.conversation, inp.model, inp.tools, inp.system, inp.compaction,
                                       configured_output_tokens=inp.configured_output_tokens), deadline, memo)
    if inp.step < 0 or inp.max_steps < 0:
        raise BadInput("step" if inp.step < 0 else "max_steps", "must not be negative")
    previous = prefix.decode(inp.previous_cache_state) if inp.previous_cache_state else None
    hashes = hashes or previous is not None
    messages, injected, block, persist = inject(inp, now)
    # Disabled tools stay defined: providers refuse tool blocks in history without them, and they
    # head the cached prefix. The provider's own "no tool use" choice disables them.
    tools_disabled = inp.tools_disabled or "max_steps" in injected
    conv = dataclasses.replace(inp.conversation, messages=messages)

    now_ms = int((now or dt.datetime.now()).timestamp() * 1000)
    result, built = measure.evaluate(
        measure.MeasureInput(conv, inp.model, inp.tools, inp.system, inp.compaction, exact=inp.exact,
                             configured_output_tokens=inp.configured_output_tokens,
                             tools_disabled=tools_disabled),
        cfg, exact_counter, policy=inp.policy, hashes=hashes, checked=True, now_ms=now_ms,
        previous=previous, deadline=deadline, memo=memo)
    deadline.check("assemble")
    guard = built.guard
    body = built.body_json() if serialize else b""  # tests hold len(body) == result.body_bytes
    state = prefix.encode(built.digests, cfg.assemble.cache_state_groups) if hashes else b""
    return Assembled(
        body=body,
        measurement=result,
        breakpoints=built.breakpoints,
        pruned_part_ids=guard.pruned_part_ids,
        media_stripped=guard.media_stripped,
        injected=injected,
        guard_tripped=guard.tripped,
        over_payload_limit=result.body_bytes > cfg.assemble.request_prune_bytes,
        environment_details=block,
        cache_state=state,
        report=_report(previous, built, result) if previous is not None else None,
        persist=persist,
    )


def _report(previous: prefix.State, built, result: measure.Measurement) -> Report:
    c = built.change
    if c is None:
        return Report(prefix_kept=True, reused_elements=previous.elements, resolution=previous.group)
    return Report(prefix_kept=c.prefix_kept, segment=c.segment, index=c.index, cause=c.cause,
                  rewrite=(result.rewrite, result.decision[1]), reused_elements=c.flat,
                  resolution=c.resolution)
