"""Stored messages -> provider-neutral model messages (docs/design.md §6, "Lowering")."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import conversation as m
from ..deadline import NO_DEADLINE, Deadline
from ..model_ids import same_model, same_provider

COMPACTED_OUTPUT = "[Old tool result content cleared]"
INTERRUPTED_OUTPUT = "[Tool execution was interrupted]"
COMPACTION_PROMPT = "What did we do so far?"
ABORTED_ERROR = "MessageAbortedError"  # an interrupted message keeps what it produced
# Opens a body whose history starts with the model's turn (a first user message with nothing to
# send, a projection starting at a summary): Bedrock and Gemini refuse a conversation that
# does not start with a user message. A constant, so the cached prefix stays put.
LEAD_USER_TEXT = "[Conversation start]"
# Closes a body that ends with the model's turn (a reply cut off, a last user step of whitespace
# alone) for a model that refuses to go on from its own turn (model_ids.refuses_prefill). It
# asks for what such a body asked of the models that take it: the model's turn, continued.
CLOSING_USER_TEXT = "Continue."
# The model's turn between a tool result and a user turn after it, for a model that refuses the one
# right after the other (Mistral's: lowering/openai_chat._mistral_turns), or the two in one turn
# (Bedrock's models but Claude from 3.5: lowering/bedrock.Bedrock.lowers_whole). Not empty:
# Mistral's older models refuse an assistant message "must have either content or tool_calls"
BRIDGE_ASSISTANT_TEXT = "[Tool results received]"


@dataclass(slots=True)
class MText:
    text: str


class MSpacer(MText):
    """The " " kept between two signed reasoning blocks; formats that drop reasoning drop it."""

    __slots__ = ()


@dataclass(slots=True)
class MReasoning:
    text: str
    signature: str = ""
    redacted: str = ""


@dataclass(slots=True)
class MProviderCompaction:
    """A provider's opaque compaction item, going back to the provider that wrote it."""
    encrypted_content: str


@dataclass(slots=True)
class MMedia:
    mime: str
    filename: str
    data: bytes | None = None
    url: str = ""


@dataclass(slots=True)
class MToolCall:
    call_id: str
    name: str
    input: object


@dataclass(slots=True)
class MToolResult:
    call_id: str
    name: str
    text: str
    is_error: bool = False
    media: list = field(default_factory=list)


@dataclass(slots=True)
class MMessage:
    role: str  # "user", "assistant" or "tool"
    content: list
    source_id: str = ""


def attachment_note(f: m.File, why: str = "") -> str:
    """The text a non-media file, or stripped media, becomes; why: why media was not sent."""
    return f"[Attached {f.mime}: {f.filename or 'file'}" + (f" (not sent: {why})]" if why else "]")


def _file(f: m.File):
    if f.is_media:
        return MMedia(f.mime, f.filename, f.data, f.url)
    return MText(attachment_note(f))


def _user(msg: m.Message, deadline: Deadline) -> MMessage:
    content = []
    for part in msg.parts:
        deadline.count("lowering")
        c = part.content
        if isinstance(c, m.Text):
            if not c.ignored and not _blank(c.text):
                content.append(MText(c.text))
        elif isinstance(c, m.File):
            content.append(_file(c))
        elif isinstance(c, m.Compaction):
            content.append(MText(COMPACTION_PROMPT))
        elif isinstance(c, m.Subtask) and c.prompt:
            content.append(MText(c.prompt))
    return MMessage("user", content, msg.id)


def _tool_result(t: m.Tool) -> MToolResult:
    if t.status in (m.PENDING, m.RUNNING):
        return MToolResult(t.call_id, t.tool, INTERRUPTED_OUTPUT, is_error=True)
    if t.status == m.ERROR:
        # an error of whitespace alone says nothing, and Anthropic refuses the empty result it
        # lowers to: "content cannot be empty if `is_error` is true"
        return MToolResult(t.call_id, t.tool, "error" if _blank(t.error) else t.error, is_error=True)
    if t.compacted:
        return MToolResult(t.call_id, t.tool, COMPACTED_OUTPUT)
    media = [MMedia(a.mime, a.filename, a.data, a.url) for a in t.attachments if a.is_media]
    return MToolResult(t.call_id, t.tool, t.output, media=media)


def _signed_elsewhere(msg: m.Message, model) -> bool:
    """The message came from another model or provider than the request's: its reasoning
    signatures would not verify there."""
    if model is None:
        return False
    return bool((msg.model_id and not same_model(msg.model_id, model.id))
                or (msg.provider_id and not same_provider(msg.provider_id, model.provider)))


def _reasoning(c: m.Reasoning, foreign: bool):
    """Reasoning another model signed goes as plain text without its signature, as the reference
    does; redacted reasoning has no text to give."""
    if foreign and (c.signature or c.redacted_data):
        return MText(c.text) if c.text else None
    return MReasoning(c.text, c.signature, c.redacted_data)


def _assistant(msg: m.Message, model=None, deadline: Deadline = NO_DEADLINE) -> list:
    """One assistant message per step, each followed by the tool results of its calls."""
    foreign = _signed_elsewhere(msg, model)
    out = []
    steps = [[]]
    for part in msg.parts:
        deadline.count("lowering")
        if isinstance(part.content, m.StepStart) and steps[-1]:
            steps.append([])
        steps[-1].append(part.content)
    for step in steps:
        content, results = [], []
        for c in step:
            deadline.count("lowering")
            if isinstance(c, m.Text):
                if not c.ignored:
                    content.append(MText(c.text))
            elif isinstance(c, m.Reasoning):
                lowered = _reasoning(c, foreign)
                if lowered is not None:
                    content.append(lowered)
            elif isinstance(c, m.Tool):
                content.append(MToolCall(c.call_id, c.tool, c.input))
                results.append(_tool_result(c))
            elif isinstance(c, m.ProviderCompaction):
                # readable only by the provider that wrote it; any other gets the history it
                # stands for, which the conversation still holds
                if model is not None and c.provider_id == model.provider:
                    content.append(MProviderCompaction(c.encrypted_content))
        content = _drop_blank_text(content)
        if content:
            out.append(MMessage("assistant", content, msg.id))
        if results:
            out.append(MMessage("tool", results, msg.id))
    return out


def closing_between_replies(messages: list, is_summary, sent, closes) -> list:
    """messages with the closing user message (CLOSING_USER_TEXT, standing for no stored message:
    source_id "") between two replies of the model stored one right after the other: a reply
    cut off, then the one the model gave to the closing message that followed it. The body that
    ended with the first had that message after it; keeping it keeps that body's prefix, where
    the two turns would otherwise join (a change at the first, for the cache and its report).
    closes(reply) tells whether a body ending with a turn holding the reply was closed: for a
    model that refuses to go on from its own turn (model_ids.refuses_prefill) always; for one
    that takes it, where the reply holds reasoning, which such a turn must not end with (a model
    that went on from a turn without it continued the first reply, and the joined turn is what
    it wrote). A summary followed by the kept tail's first reply never ended a body: is_summary(
    message id) tells it apart. A reply the format sends as nothing (reasoning cut off before its
    signature) is no turn: sent(message) tells, asked only of replies next to another's. Each
    question is asked of a reply once at most."""
    out = []
    last = None  # the last message sent as something
    closed, unread = False, []  # the turn `last` ends: closed by a reply read so far, replies not yet read
    for i, msg in enumerate(messages):
        if msg.role != "assistant":
            out.append(msg)
            last, closed, unread = msg, False, []
            continue
        beside = any(0 <= j < len(messages) and messages[j].role == "assistant"
                     and messages[j].source_id != msg.source_id for j in (i - 1, i + 1))
        if beside and not sent(msg):
            out.append(msg)
            continue
        if last is not None and last.role == "assistant" and last.source_id != msg.source_id \
                and not is_summary(last.source_id):
            closed = closed or any(map(closes, unread))
            unread = []
            if closed:
                out.append(MMessage("user", [MText(CLOSING_USER_TEXT)]))
                closed = False
        out.append(msg)
        last = msg
        unread.append(msg)
    return out


def _blank(text: str) -> bool:
    """Empty or whitespace only: such text carries nothing, and Anthropic refuses a message whose
    text is all blank ("text content blocks must contain non-whitespace text"), Bedrock any blank
    block."""
    return not text or text.isspace()


def _drop_blank_text(content: list) -> list:
    """Blank text goes (a step of blank text alone then has no message), except between two
    signed reasoning blocks, where it stays as " "."""
    kept = []
    for i, c in enumerate(content):
        if isinstance(c, MText) and _blank(c.text):
            before = content[i - 1] if i > 0 else None
            after = content[i + 1] if i + 1 < len(content) else None
            if _signed(before) and _signed(after):
                kept.append(MSpacer(" "))
            continue
        kept.append(c)
    return kept


def _signed(c) -> bool:
    return isinstance(c, MReasoning) and bool(c.signature or c.redacted)


def _has_content(msg: m.Message) -> bool:
    return any(isinstance(p.content, (m.Text, m.Reasoning, m.Tool)) for p in msg.parts)


def to_model_messages(messages: list, model: m.Model | None = None, deadline: Deadline = NO_DEADLINE) -> list:
    """model: the request's model, to tell reasoning signed by another one (None: never).
    deadline: counted per part (Deadline.count)."""
    out = []
    for msg in messages:
        deadline.count("lowering")
        if msg.role == m.USER:
            lowered = _user(msg, deadline)
            if lowered.content:
                out.append(lowered)
        else:
            if msg.error is not None and not (msg.error.name == ABORTED_ERROR and _has_content(msg)):
                continue
            out.extend(_assistant(msg, model, deadline))
    return out
