"""The conversation data model as plain Python types (docs/design.md §2).

The core works on these; the RPC layer converts protobuf to them and back. Enum-like fields are
short strings so the core reads like the design doc.
"""
from __future__ import annotations

import bisect
import itertools
import operator
from dataclasses import dataclass, field
from typing import Optional, Union

from .memo import MESSAGE_DIGEST_BYTES, joined_digests

USER = "user"
ASSISTANT = "assistant"

PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
ERROR = "error"

# The providers' names (Model.provider); lowering/registry.py lists them with their wire formats
# (PROVIDERS).
ANTHROPIC = "anthropic"
OPENAI = "openai"
OPENAI_COMPATIBLE = "openai-compatible"
BEDROCK = "bedrock"
OPENROUTER = "openrouter"
ALIBABA = "alibaba"
COPILOT = "copilot"
GEMINI = "gemini"
OPENAI_RESPONSES = "openai-responses"


@dataclass(slots=True)
class Usage:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0
    cleared: int = 0  # input the provider's own context management cleared before counting

    def count(self) -> int:
        """Everything the request occupied; the provider's total when the parts are all 0."""
        parts = self.input + self.output + self.reasoning + self.cache_read + self.cache_write
        return parts or self.total

    def input_side(self) -> int:
        return self.input + self.cache_read + self.cache_write

    def count_as_sent(self) -> int:
        """count() of the request as it was sent, before the provider's own clearing: what our
        figures of that request stand for (count() is what the window held)."""
        return self.count() + self.cleared

    def input_as_sent(self) -> int:
        return self.input_side() + self.cleared


@dataclass(slots=True)
class Text:
    text: str
    synthetic: bool = False
    ignored: bool = False


@dataclass(slots=True)
class Reasoning:
    text: str
    signature: str = ""
    redacted_data: str = ""


@dataclass(slots=True)
class File:
    mime: str
    filename: str = ""
    url: str = ""
    data: Optional[bytes] = None

    @property
    def is_media(self) -> bool:
        if self.mime.startswith("image/") or self.mime == "application/pdf":
            return True
        bare = self.mime.split(";", 1)[0].strip().lower()  # a media type is read without case
        return bare.startswith("image/") or bare == "application/pdf"


@dataclass(slots=True)
class Tool:
    call_id: str
    tool: str
    status: str
    input: object = field(default_factory=dict)  # parsed JSON arguments
    output: str = ""
    error: str = ""
    title: str = ""
    attachments: list = field(default_factory=list)  # list[File]
    time_start_ms: int = 0
    time_end_ms: int = 0
    time_compacted_ms: int = 0

    @property
    def compacted(self) -> bool:
        return self.time_compacted_ms > 0


@dataclass(slots=True)
class StepStart:
    snapshot: str = ""


@dataclass(slots=True)
class StepFinish:
    reason: str = ""
    tokens: Usage = field(default_factory=Usage)
    cost: float = 0.0


@dataclass(slots=True)
class Compaction:
    auto: bool = False
    overflow: bool = False
    tail_start_id: str = ""


@dataclass(slots=True)
class Subtask:
    prompt: str = ""
    description: str = ""
    agent: str = ""


@dataclass(slots=True)
class Agent:
    name: str = ""


@dataclass(slots=True)
class Retry:
    attempt: int = 0
    error: str = ""


@dataclass(slots=True)
class Snapshot:
    snapshot: str = ""


@dataclass(slots=True)
class Patch:
    hash: str = ""
    files: list = field(default_factory=list)


@dataclass(slots=True)
class ProviderCompaction:
    """An opaque compaction item a provider returned: sent back verbatim only to provider_id."""
    provider_id: str
    encrypted_content: str


Content = Union[Text, Reasoning, File, Tool, StepStart, StepFinish, Compaction, Subtask, Agent,
                Retry, Snapshot, Patch, ProviderCompaction]


@dataclass(slots=True)
class Part:
    id: str
    content: Content


@dataclass(slots=True)
class MessageError:
    name: str
    message: str = ""


@dataclass(slots=True)
class Message:
    id: str
    role: str
    parts: list  # list[Part]
    time_created_ms: int = 0
    time_completed_ms: int = 0
    usage: Usage = field(default_factory=Usage)
    model_id: str = ""
    provider_id: str = ""
    error: Optional[MessageError] = None
    summary: bool = False
    parent_id: str = ""
    agent: str = ""
    # The digest of the message's wire bytes as they came off the wire (rpc.message_keys), b"" for
    # a message built in the core. Not an init field, so a dataclasses.replace copy (a changed
    # message) starts with b"": the memo's per-message entries (memo.py) are keyed by it and
    # never see a stale one. The exceptions, set on purpose, name a copy by a function of its
    # original's digest and the change: the payload guard's prune (memo.pruned_digest), call ids
    # of its own (memo.renamed_digest), injections made again at every step (memo.injected_digest,
    # step.inject). Either way MESSAGE_DIGEST_BYTES long: the memo's prefix keys read a
    # conversation's digests joined, at that stride.
    digest: bytes = field(default=b"", init=False, repr=False, compare=False)
    # what every step's scans read of its parts, worked out when it is made: parts are never
    # changed in place (a changed message is a dataclasses.replace copy, made again)
    _compaction: Optional[Compaction] = field(default=None, init=False, repr=False, compare=False)
    _last_compacted: int = field(default=0, init=False, repr=False, compare=False)
    # how many of its tool outputs are compacted (the cache state's pruned counts: prefix.digests)
    compacted_outputs: int = field(default=0, init=False, repr=False, compare=False)
    # whether it may be a compaction point (a marker, or a summary): projection's scans look at
    # no other message
    may_cut: bool = field(default=False, init=False, repr=False, compare=False)
    # whether it carries media (a media file, or a tool output's media attachment): what decides
    # whether it lowers alone as in the whole request (step.pieces.memoizable)
    has_media: bool = field(default=False, init=False, repr=False, compare=False)
    # the call ids of its tool parts, in order: what Scanned reads for the ids used again
    call_ids: tuple = field(default=(), init=False, repr=False, compare=False)
    # the reported reasoning tokens of its steps whose reasoning holds encrypted state (each step's
    # StepFinish; without them it is one step, its usage), and of its last step alone (0 where that
    # holds none): step.figures.held_reasoning
    encrypted_reasoning: int = field(default=0, init=False, repr=False, compare=False)
    last_step_encrypted_reasoning: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compaction, compacted, outputs, media, calls = None, 0, 0, False, []
        steps, encrypted, finished = [], False, False
        for part in self.parts:
            c = part.content
            if isinstance(c, Reasoning):
                encrypted = encrypted or bool(c.redacted_data)
            elif isinstance(c, StepFinish):
                steps.append((c.tokens.reasoning, encrypted))
                encrypted, finished = False, True
            elif isinstance(c, Compaction):
                compaction = compaction or c
            elif isinstance(c, Tool):
                if c.time_compacted_ms > 0:
                    compacted = max(compacted, c.time_compacted_ms)
                    outputs += 1
                media = media or any(a.is_media for a in c.attachments)
                calls.append(c.call_id)
            elif isinstance(c, File):
                media = media or c.is_media
        self._compaction, self._last_compacted, self.compacted_outputs = compaction, compacted, outputs
        self.has_media = media
        self.call_ids = tuple(calls)
        steps = steps if finished else [(self.usage.reasoning, encrypted)]
        self.encrypted_reasoning = sum(n for n, went_back in steps if went_back)
        self.last_step_encrypted_reasoning = steps[-1][0] if steps[-1][1] else 0
        self.may_cut = (compaction is not None and self.role == USER) or (self.summary and self.role == ASSISTANT)

    @property
    def finished(self) -> bool:
        return self.time_completed_ms > 0

    def compaction(self) -> Optional[Compaction]:
        """Its first compaction part's content, or None."""
        return self._compaction

    def last_compacted_ms(self) -> int:
        """The latest time_compacted_ms of its tool parts, 0 when none is compacted."""
        return self._last_compacted


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a conversation off the wire continues its session (rpc.earlier_step): its first
    `kept` messages are, byte for byte, the first messages of an earlier step's conversation (0:
    none is known), whose later messages (`dropped`: the client edited or dropped them since) it
    does not hold. The digests name conversations' bytes (equal digests, equal bytes) and key what
    a stage keeps of a whole conversation for the step that continues it (memo.VALIDATED)."""
    kept: int
    kept_digest: bytes  # names the earlier step's conversation (b"" when kept is 0)
    digest: bytes  # names this one
    dropped: tuple = ()  # the earlier step's messages past kept, as converted then


@dataclass(frozen=True, slots=True)
class Scanned:
    """What a step's scans read of every message of a conversation, worked out with its
    conversion (rpc.conversion), where a session's next step reads only the messages it adds:
    a step then makes no pass over a thousand messages for them (step.run)."""
    cuts: tuple  # the indices of the messages that may cut history (Message.may_cut), ascending
    # per message: the latest time_compacted_ms of a tool output of it or of a message before it
    compacted: tuple
    digests: bytes  # memo.joined_digests of the messages: what the memo's prefix keys are made of
    # call id -> the index of the first message with a tool part of that id, and the indices
    # (ascending) of the messages with a tool part whose id an earlier part used (step.call_ids)
    first_calls: dict
    repeats: tuple

    @property
    def points(self) -> list:
        """projection.compaction_points of the messages: the cuts, last first."""
        return list(reversed(self.cuts))

    @property
    def last_compacted_ms(self) -> int:
        """The latest time_compacted_ms of any tool output, 0 when none is compacted."""
        return self.compacted[-1] if self.compacted else 0

    def extended(self, kept: int, messages: list) -> "Scanned":
        """The scans of messages whose first `kept` are these (read here: the others only)."""
        if kept == len(messages) == len(self.compacted):  # the very messages (no injection): these
            return self
        cuts = self.cuts[:bisect.bisect_left(self.cuts, kept)] + tuple(
            itertools.compress(range(kept, len(messages)), map(_MAY_CUT, messages[kept:])))
        latest = self.compacted[kept - 1] if kept else 0
        compacted = self.compacted[:kept] + tuple(
            itertools.accumulate(map(LAST_COMPACTED_MS, messages[kept:]), max, initial=latest))[1:]
        digests = self.digests
        if len(digests) >= MESSAGE_DIGEST_BYTES * kept:  # the kept all have one: so may the others
            digests = digests[:MESSAGE_DIGEST_BYTES * kept] + joined_digests(messages[kept:])
        first, repeats = self.first_calls, self.repeats
        if kept < len(self.compacted):  # some scanned messages are gone: their ids with them
            # the ids are in the order first used: theirs are the last (an inject changes the last)
            gone = sum(1 for _ in itertools.takewhile(kept.__le__, reversed(first.values())))
            if gone:
                first = dict(itertools.islice(first.items(), len(first) - gone))
            repeats = repeats[:bisect.bisect_left(repeats, kept)]
        first, repeats = repeated_calls(messages, kept, first, repeats)
        return Scanned(cuts, compacted, digests, first, repeats)

    def renamed(self, at: tuple, messages: list) -> "Scanned":
        """The scans of messages, which are this one's but for copies at `at` whose tool parts
        carry call ids of their own (step.call_ids): the copies' digests, and no id used again
        (first_calls stay the ids as the client wrote them)."""
        size, digests = MESSAGE_DIGEST_BYTES, bytearray(self.digests)
        for i in at:
            if (i + 1) * size > len(digests):
                break
            if not messages[i].digest:  # the joined digests go as far as every message has one
                del digests[i * size:]
                break
            digests[i * size:(i + 1) * size] = messages[i].digest
        return Scanned(self.cuts, self.compacted, bytes(digests), self.first_calls, ())


def repeated_calls(messages: list, start: int = 0, first: dict | None = None, repeats: tuple = ()) -> tuple:
    """(Scanned.first_calls, Scanned.repeats) of messages, those of messages[:start] being first
    and repeats (not changed: a new dict when messages[start:] add an id)."""
    first = {} if first is None else first
    added, more = None, []
    for i in itertools.compress(range(start, len(messages)), map(_CALL_IDS, messages[start:])):
        seen = first if added is None else added
        ids = messages[i].call_ids
        if len(set(ids)) < len(ids) or not seen.keys().isdisjoint(ids):
            more.append(i)
        if added is None:
            added = dict(first)
        for call in ids:
            added.setdefault(call, i)
    return (first if added is None else added), (repeats + tuple(more) if more else repeats)


_MAY_CUT = operator.attrgetter("may_cut")
_CALL_IDS = operator.attrgetter("call_ids")
# each message's last_compacted_ms(), read in C (a history is a thousand messages): the one reader
# of the field outside its class, for Scanned and the baseline (step.baseline)
LAST_COMPACTED_MS = operator.attrgetter("_last_compacted")
# whether a message carries media (Message.has_media), read in C over a history of a thousand
HAS_MEDIA = operator.attrgetter("has_media")
NOTHING_SCANNED = Scanned((), (), b"", {}, ())


@dataclass(slots=True)
class Conversation:
    messages: list  # list[Message], in send order; ids unique
    session_id: str = ""
    # set by conversion, for the messages as they came off the wire; not init fields, so a
    # copy with other messages (dataclasses.replace) has none
    lineage: Optional[Lineage] = field(default=None, init=False, repr=False, compare=False)
    scanned: Optional[Scanned] = field(default=None, init=False, repr=False, compare=False)


@dataclass(slots=True)
class ModelLimits:
    context: int = 0
    input: int = 0
    output: int = 0


@dataclass(slots=True)
class Model:
    id: str
    provider: str
    limits: ModelLimits = field(default_factory=ModelLimits)
    prompt: str = ""
    media_in_tool_results: bool = False


@dataclass(slots=True)
class ToolDefinition:
    name: str
    description: str = ""
    input_schema: object = field(default_factory=dict)
    # its input schema as each wire format takes it (lowering.tool_schema.as_taken), made once for
    # the object: a session's definitions are the same objects at every step (memo TOOLS), and 40
    # MCP tools' schemas walked again at every step cost 5 ms of it
    taken: dict = field(default_factory=dict, init=False, compare=False, repr=False)


@dataclass(slots=True)
class EnvInfo:
    working_directory: str = ""
    is_git_repo: bool = False
    platform: str = ""
    date: str = ""
    config_dir: str = ""
    shell: str = ""
    facts_only: bool = False  # the <env> block without the two lines naming the model before it


@dataclass(slots=True)
class Instruction:
    path: str
    content: str


@dataclass(slots=True)
class Skill:
    name: str
    description: str = ""


@dataclass(slots=True)
class SystemPrompt:
    soul: str = ""
    agent_prompt: str = ""
    env: Optional[EnvInfo] = None
    instructions: list = field(default_factory=list)  # list[Instruction]
    skills: list = field(default_factory=list)  # list[Skill]


@dataclass(slots=True)
class PruneSettings:
    """Per-request prune thresholds; None means "use the service config" (design.md §4)."""
    protect: Optional[str] = None  # "tool_results" or "turns"
    protected_results: Optional[int] = None
    protected_turns: Optional[int] = None
    protect_tokens: Optional[int] = None
    minimum_tokens: Optional[int] = None
    protected_tools: Optional[tuple] = None


@dataclass(slots=True)
class CompactionSettings:
    """Per-request overrides; None means "use the service config"."""
    auto: Optional[bool] = None
    threshold_percent: Optional[float] = None
    reserved: Optional[int] = None
    prune: Optional[bool] = None
    tail_turns: Optional[int] = None
    preserve_recent_tokens: Optional[int] = None
    max_attempts: Optional[int] = None
    prune_settings: PruneSettings = field(default_factory=PruneSettings)
    provider_managed: Optional[bool] = None  # the provider's own context management too (off by default)
    request_prune_bytes: Optional[int] = None  # the payload guard's threshold (config assemble.request_prune_bytes)
