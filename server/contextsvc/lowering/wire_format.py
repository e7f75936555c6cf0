"""What a wire format decides (docs/design.md §6): one object per provider, kept in its format
module and listed in registry.py. Everything provider-specific is here or in a subclass:
- its lowering (`body`, the format module's function);
- its cache: implicit or marked, which auto policy, its marker's shape and where the marker goes;
- which media it takes, and which it fetches itself from a URL;
- the alphabet and length of its tool call ids and tool names;
- its tool choice, and whether changing it costs the cache.

breakpoints.py chooses the breakpoints without naming a provider; the format places them.
"""
from __future__ import annotations

from .tool_ids import IdRule

TTL_1H = "1h"


# every place a cache marker can go
MARKER_KINDS = frozenset({"tools", "system", "message"})


class WireFormat:
    """A provider's wire format. Subclasses set the class attributes and, when the cache takes
    markers, implement marker, markable and place."""

    name: str = ""  # the provider's name (model.Model.provider); proto enum PROVIDER_<NAME>
    body = None  # staticmethod: the format module's body(**kwargs) -> Lowered

    # -- lowering: the key of a message element's list of blocks when consecutive messages of one
    # role are joined into one element (the API wants alternating roles); "" when they never are
    merged_key: str = ""
    # the last text of a conversation's final assistant message may not end with whitespace
    # (lowered.trim_final_text)
    trims_final_text: bool = False

    # -- tool ids and names (tool_ids.py)
    ids: IdRule = None  # the rule call ids are written by
    names: IdRule | None = None  # the rule tool names are written by; None: unchanged

    # -- the tool choice: the body's key of the provider's "no tool use" choice ("" where the
    # format has none), and whether changing the choice invalidates the provider's cached messages
    # (the tools and system stay cached). Where it does, the last step keeps the choice (its
    # message alone says tools are disabled: step.Plan.of) and the cache state records it, so a
    # change is reported (prefix.TOOL_CHOICE).
    tool_choice_key: str = ""
    tool_choice_breaks_cache: bool = False
    # the most tool definitions a request may hold (0: none known): OpenAI's "Invalid 'tools':
    # array too long. Expected an array with maximum length 128", Gemini's "At most 512 function
    # declarations can be specified"
    max_tools: int = 0

    # -- media (media.py): media type -> media.IMAGE/DOCUMENT/AUDIO/VIDEO, and the types the
    # provider fetches itself from an http(s) URL (the others need the bytes)
    accepted: dict = {}
    fetched: frozenset = frozenset()
    # what the provider refuses a request over: an inline image of more bytes, or more pixels on
    # a side (0: no limit checked here)
    max_image_bytes: int = 0
    max_image_side: int = 0
    max_document_bytes: int = 0  # an inline document of more bytes (0: no limit checked here)
    # a request body of more bytes, refused whatever its tokens (0: none known): the step asks to
    # compact a body over it (step.run.finish), whose summary lets the payload guard strip the
    # history's media
    max_request_bytes: int = 0
    # how many of an inline PDF's pages make one media item of the decision figure (design.md §3)
    pages_per_item: int = 1
    # a request of more than many_images images takes none over many_images_side pixels on a side
    # (0: no such rule): a rule of the whole request, decided before the lowering (step.many_images)
    many_images: int = 0
    many_images_side: int = 0
    # the most images and documents one request may hold together (0: no such limit), and that of
    # a model whose context window is over max_media_window (whole request, step.many_images); a
    # document counts its pages (media_cap_pages) or one
    max_media: int = 0
    max_media_long: int = 0
    max_media_window: int = 0
    media_cap_pages: bool = True

    def media_cap(self, model) -> int:
        """The most images and documents (media_cap_pages: PDF pages) a request to this model
        (conversation.Model) may hold (0: no such limit)."""
        if self.max_media_long and model.limits.context > self.max_media_window:
            return self.max_media_long
        return self.max_media

    # -- the provider's own compaction: its opaque items (conversation.ProviderCompaction) go back
    # in the body (lowering/neutral.py drops them for every other provider)
    compaction_items: bool = False
    # -- reasoning that goes back as opaque items the provider counts within the turn they were
    # made in (step.figures.held_reasoning), and leaves out once a new user turn begins where the
    # model's provider does (model_ids.drops_earlier_turns_reasoning)
    drops_earlier_turns_reasoning: bool = False
    # -- the provider's own context management (provider_management.py): its strategy's name, ""
    # where it has none this service configures
    context_strategy: str = ""

    # -- prompt cache (breakpoints.py)
    implicit_cache: bool = False  # the cache needs no markers (and gets none)
    native_auto: bool = False  # auto policy: last tool, last system block, latest user message
    # a gateway in front of many model families: its markers reach only the models that honor
    # them (config assemble.marker_models)
    gateway: bool = False
    tool_marker: bool = True  # a tool definition can carry a marker
    system_marker_closes_list: bool = False  # one marker after the last system block stands for all
    longer_ttls_first: bool = False  # a 1h entry after a 5m one is refused

    def lowers_whole(self, model_id: str) -> bool:
        """Whether a request to this model is lowered whole, never from per-message pieces: where
        what a message lowers to depends on its neighbours beyond merging."""
        return False

    def tool_limit(self, model_id: str) -> int:
        """The most tool definitions a request to this model may hold (0: none known)."""
        return self.max_tools

    def markable_for(self, element: dict, model_id: str) -> bool:
        """markable, for this model: where a model takes no marker that the format's others do."""
        return self.markable(element)

    def marker_kinds(self, model_id: str) -> frozenset:
        """The places ("tools", "system", "message") a marker may go in a request to this model:
        all of them, unless the provider refuses a marker to some of its models."""
        return MARKER_KINDS

    def opens_turn(self, block: dict) -> bool:
        """Whether a block is reasoning that must open its message (Run)."""
        return False

    def opens_user_turn(self, messages: list, roles: list, i: int) -> bool:
        """Whether message element i opens a turn of the person's: a user message holding no tool
        result (one that holds both may go on the model's turn: its reasoning is then figured).
        Here, where tool results are messages of their own: a user message not right after them
        (a tool's media, a message typed mid-run, which a gateway joins to the results)."""
        if roles[i] != "user":
            return False
        j = i - 1
        while j >= 0 and roles[j] == "user":
            j -= 1
        return j < 0 or roles[j] != "tool"

    def turn_start(self, messages: list, roles: list, end: int) -> int:
        """The first message element of the turn element end is in: after the last one up to it
        that opens a turn of the person's (opens_user_turn), 0 where none does."""
        return next((i + 1 for i in range(end, -1, -1) if self.opens_user_turn(messages, roles, i)), 0)

    def reasoning_items(self, messages: list, start: int, end: int) -> list:
        """The indices of the message elements from start to end that carry reasoning
        (carries_reasoning), from after the last provider's compaction item among them on."""
        out = []
        for i in range(start, end + 1):
            if self.carries_reasoning(messages[i]):
                out.append(i)
            elif self.is_compaction_item(messages[i]):
                out.clear()
        return out

    def is_compaction_item(self, element: dict) -> bool:
        """Whether a message element is the provider's own compaction item (compaction_items),
        which stands for what came before it."""
        return False

    def carries_reasoning(self, element: dict) -> bool:
        """Whether a model's message element goes back with its reasoning (text or opaque state),
        which the provider's next count may hold."""
        return self.holds_reasoning(element)

    def without_reasoning(self, element: dict) -> tuple | None:
        """(a copy of a model's message element without its reasoning, the reasoning taken out),
        None when it holds none."""
        if not self.holds_reasoning(element):
            return None
        key = self.merged_key
        return ({**element, key: [b for b in element[key] if not self.opens_turn(b)]},
                [b for b in element[key] if self.opens_turn(b)])

    def holds_reasoning(self, element: dict) -> bool:
        """Whether a message element of the model's holds reasoning, which a body must not end
        with (a block that opens its turn: opens_turn)."""
        key = self.merged_key
        return bool(key) and any(map(self.opens_turn, element[key]))

    def run(self, blocks: list, model_id: str = "") -> "Run":
        """Joins the blocks of the messages of one role that follow into blocks (merged_key), a
        list the caller owns; model_id: the request's model, where its rules order them."""
        return Run(self, blocks)

    def tool_list(self, body: dict) -> list:
        """The body's tool definitions, in prefix order (what the prefix digests cover)."""
        return body.get("tools", [])

    def context_management(self, mg, wire_names: dict) -> tuple:
        """(body fields, HTTP headers) configuring the provider's context management `mg`
        (provider_management.Management); wire_names: the request's tool name -> the body's."""
        raise NotImplementedError(f"{self.name} has no context management this service configures")

    def marker(self, ttl: str) -> tuple:
        """(key, value) of the marker."""
        raise NotImplementedError(f"{self.name} takes no cache markers")

    def markable(self, element: dict) -> bool:
        """Whether a message element has a part a marker can go on; changes nothing."""
        raise NotImplementedError(f"{self.name} takes no cache markers")

    def place(self, lowered, kind: str, index: int, key: str, value: dict):
        """Puts one marker into the body; returns the system or message element it changed,
        None for a tool definition."""
        raise NotImplementedError(f"{self.name} takes no cache markers")


class Run:
    """Consecutive messages of one role joined into one element's blocks (merged_key): the API
    wants alternating roles. The final assistant message of a tool loop must open with its
    reasoning where the provider checks it (Anthropic and Bedrock, with extended thinking on): a
    message's leading reasoning goes first unless the blocks open with their own. A summary
    joined to the kept assistant message after it otherwise opened that message with text, and
    Anthropic refused the body ("a final `assistant` message must start with a thinking block").

    blocks is changed in place, a message costing its own blocks: a copy of the blocks so far at
    each message made a run of 40,000 messages take seconds."""

    __slots__ = ("fmt", "blocks")

    def __init__(self, fmt: WireFormat, blocks: list):
        self.fmt = fmt
        self.blocks = blocks

    def add(self, later: list) -> None:
        """Joins the blocks of the run's next message."""
        opens_turn, blocks = self.fmt.opens_turn, self.blocks
        n = 0
        while n < len(later) and opens_turn(later[n]):
            n += 1
        if n == 0 or (blocks and opens_turn(blocks[0])):
            blocks += later
        else:  # once a run at most: the blocks open with reasoning from then on
            blocks[:0] = later[:n]
            blocks += later[n:]
