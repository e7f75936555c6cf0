"""Amazon Bedrock Converse body (POST /model/{modelId}/converse; the model id is in the path).

What Converse refuses, and what this module does about it (botocore's bedrock-runtime service
model and the Converse documentation):
- a text block that is empty or whitespace only ("The text field in the ContentBlock object is
  blank"): such blocks are left out, the " " spacer between signed reasoning blocks included
  (consecutive reasoningContent blocks need no separator);
- two documents of one name anywhere in the request: later ones get " (2)", " (3)", ...;
- a message with a document and no text block: the document's name is added as text;
- a conversation whose first message is the assistant's: a constant user message opens it;
- a final assistant text ending in whitespace (Claude): cut where the pieces of the request are
  put together (trims_final_text, lowered.trim_final_text);
- an image or document format outside its enums (svg+xml, heic, ...): media go through the shared
  table (media.source, MEDIA_FORMATS), anything else is the attachment note.
"""
from __future__ import annotations

import functools
import re

from .. import conversation as m, model_ids
from . import media
from .tool_schema import as_taken, claude_schema, object_root
from ..deadline import NO_DEADLINE, Deadline
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .neutral import BRIDGE_ASSISTANT_TEXT, LEAD_USER_TEXT, MMedia, MReasoning, MText, MToolCall, MToolResult
from .tool_ids import WORD, wire_id, wire_name
from .wire_format import MARKER_KINDS, WireFormat

# where Nova takes a cachePoint; what a model Bedrock caches nothing for takes
NOVA_MARKER_KINDS = frozenset({"system", "message"})
NO_MARKERS = frozenset()
# a Bedrock model id of a model provider's own ("meta.llama...", "us.deepseek.r1-v1:0", "global.qwen..."),
# after an optional cross-region prefix, alone or in an ARN (".../foundation-model/meta.llama...")
_MODEL_PROVIDER = re.compile(r"(?:^|/)(?:[a-z]{2,6}(?:-gov)?\.)?(?:amazon|meta|mistral|deepseek|qwen|cohere|ai21|"
                             r"writer|openai|google|minimax|moonshot|moonshotai|nvidia|stability|twelvelabs|luma)\.")

# what the Bedrock rules tell a model id apart by (model_family)
CLAUDE, NOVA, LLAMA_4, VENDOR, UNNAMED = "claude", "nova", "llama4", "vendor", "unnamed"


@functools.lru_cache(maxsize=256)
def model_family(model_id: str) -> tuple:
    """(family, Claude's generation or None) of a Bedrock model id, what its rules (cache points,
    turns apart, media in tool results, Nova's markers) read: CLAUDE, NOVA, LLAMA_4, VENDOR
    (another model provider's id: "qwen.qwen3-coder-...", "us.deepseek.r1-v1:0") or UNNAMED (an
    id naming no model, an application inference profile's ARN, taken for Claude's)."""
    mid = model_id.lower()
    if "claude" in mid:
        return CLAUDE, model_ids.claude_generation(mid)
    if "nova-" in mid:
        return NOVA, None
    if _MODEL_PROVIDER.search(mid):
        return (LLAMA_4 if "llama4" in mid else VENDOR), None
    return UNNAMED, None


# Converse accepts document names of letters, digits, single spaces, hyphens, parentheses and
# square brackets; anything else fails the whole request.
_NAME_DISALLOWED = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")
_NAME_MAX = 200  # DocumentBlock.name is 1..200 characters
# A tool result's content may not be a blank text either; an empty output says so instead.
NO_OUTPUT = "[No output]"

# Converse names each media type by a format word of its own.
MEDIA_FORMATS = {
    "image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp",
    "application/pdf": "pdf", "text/csv": "csv", "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html", "text/plain": "txt", "text/markdown": "md",
}


def document_name(filename: str) -> str:
    stem = (filename or "").rsplit(".", 1)[0]
    name = " ".join(_NAME_DISALLOWED.sub("-", stem).split())[:_NAME_MAX].rstrip()
    return name if any(ch.isalnum() for ch in name) else "document"


class _DocumentNames:
    """Gives each document of one request a distinct name, in body order: a document's name
    depends only on the documents before it, so adding one never renames an earlier one (and
    the cached prefix stays valid)."""

    __slots__ = ("_taken",)

    def __init__(self):
        self._taken = set()

    def __call__(self, filename: str) -> str:
        base = name = document_name(filename)
        n = 1
        while name.casefold() in self._taken:  # compared without case, to be safe
            n += 1
            suffix = f" ({n})"
            name = base[: _NAME_MAX - len(suffix)].rstrip() + suffix
        self._taken.add(name.casefold())
        return name


def _media(x: MMedia, ledger: MediaLedger, names: _DocumentNames) -> dict:
    """Through the shared media table: a type Converse does not take, or a web URL (Converse takes
    bytes or S3 only), becomes the attachment note."""
    src = media.source(FORMAT, x, ledger)
    if isinstance(src, str):  # the attachment note
        return {"text": src}
    fmt, data = MEDIA_FORMATS[src.mime], src.base64(ledger)
    if src.kind == media.DOCUMENT:
        return {"document": {"format": fmt, "name": names(x.filename), "source": {"bytes": data}}}
    return {"image": {"format": fmt, "source": {"bytes": data}}}


def _text(text: str):
    return {"text": text} if text.strip() else None


def _block(c, ledger: MediaLedger, names: _DocumentNames, deadline: Deadline, in_results: bool = True):
    """c's Converse block; in_results: a tool result's media go inside it (else the caller moves
    them: _moved_media)."""
    deadline.count("lowering")
    if isinstance(c, MText):  # the reasoning spacer too: it is blank
        return _text(c.text)
    if isinstance(c, MMedia):
        return _media(c, ledger, names)
    if isinstance(c, MReasoning):
        if c.redacted:
            # redactedContent is a blob (standard base64, as Converse returns it): another
            # provider's state (an OpenAI encrypted_content, URL-safe) failed the whole request
            if not media.is_base64(c.redacted):
                return None
            return {"reasoningContent": {"redactedContent": ledger.opaque(c.redacted)}}
        if not c.signature:
            return None  # Converse rejects unsigned reasoning, as the Messages API does
        return {"reasoningContent": {"reasoningText": {"text": c.text, "signature": ledger.opaque(c.signature)}}}
    if isinstance(c, MToolCall):
        return {"toolUse": {"toolUseId": wire_id(FORMAT, c.call_id), "name": wire_name(FORMAT, c.name),
                            "input": c.input}}
    if isinstance(c, MToolResult):
        content = [b for b in [_text(c.text)] if b is not None]
        if in_results:
            content.extend(_media(x, ledger, names) for x in c.media)
        return {"toolResult": {"toolUseId": wire_id(FORMAT, c.call_id), "content": content or [{"text": NO_OUTPUT}],
                               "status": "error" if c.is_error else "success"}}
    raise TypeError(type(c).__name__)


def _with_text(blocks: list) -> list:
    """Converse wants a text block beside a document: the document's name, if none is there."""
    if any("text" in b for b in blocks):
        return blocks
    docs = [b["document"]["name"] for b in blocks if "document" in b]
    return blocks + [{"text": docs[0]}] if docs else blocks


def _moved_media(msg, wire_ids: list, ledger: MediaLedger, names: _DocumentNames) -> list:
    """The blocks of a user turn holding the media of msg's tool results (wire_ids: their
    toolUseIds), for a model that takes none inside a toolResult; each call's named where two
    or more have media (two parallel screenshots, window A and B)."""
    found = [(call_id, r.media) for call_id, r in zip(wire_ids, msg.content) if r.media]
    blocks = []
    for call_id, media_of in found:
        if len(found) > 1:
            blocks.append({"text": f"Media of tool call {call_id}:"})
        blocks.extend(_media(x, ledger, names) for x in media_of)
    return _with_text(blocks) if blocks else []


def _results(blocks: list) -> bool:
    """Whether a turn's blocks are tool results."""
    return any("toolResult" in b for b in blocks)


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False, deadline: Deadline = NO_DEADLINE) -> Lowered:
    # Converse's toolChoice has no "none": with tools disabled the tool definitions stay (history
    # may hold tool blocks) and the last-step message is what keeps the model from calling them.
    wire, roles, sources = [], [], []
    run = None  # joins the messages that follow into wire[-1], of their role
    names = _DocumentNames()
    apart = FORMAT.lowers_whole(model_id)  # tool results and other blocks in turns of their own
    in_results = FORMAT.media_in_tool_results(model_id)

    def add(role: str, blocks: list, source_id: str) -> None:
        nonlocal run
        if apart and wire and wire[-1]["role"] == role == "user" and _results(wire[-1]["content"]) != _results(blocks):
            # "Conversation blocks and tool result blocks cannot be provided in the same turn"
            wire.append({"role": "assistant", "content": [{"text": BRIDGE_ASSISTANT_TEXT}]})
            roles.append("assistant")
            sources.append([])  # stands for no stored message, as the lead does
            run = None
        if wire and wire[-1]["role"] == role:  # Converse wants alternating roles
            if run is None:
                run = FORMAT.run(wire[-1]["content"])
            run.add(blocks)
            ledger.claim(wire[-1])
            sources[-1].append(source_id)
            return
        run = None
        wire.append({"role": role, "content": blocks})
        ledger.claim(wire[-1])
        roles.append(role)
        sources.append([source_id])

    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        ledger.source_id = msg.source_id  # whose media the blocks below lower (MediaLedger.leaves_out)
        blocks = _with_text([b for b in (_block(c, ledger, names, deadline, in_results) for c in msg.content)
                             if b is not None])
        if blocks:
            add(role, blocks, msg.source_id)
        if not in_results and msg.role == "tool":
            moved = _moved_media(msg, [b["toolResult"]["toolUseId"] for b in blocks], ledger, names)
            if moved:
                add("user", moved, msg.source_id)
    open_with_user(wire, roles, sources, {"role": "user", "content": [{"text": LEAD_USER_TEXT}]})
    system_blocks = [{"text": s} for s in system if s.strip()]
    out = {"messages": wire}
    lists = [(out, "messages")]
    if system_blocks:
        out["system"] = system_blocks
        lists.append((out, "system"))
    out["inferenceConfig"] = {"maxTokens": max_output}
    if tools:
        claude = model_ids.is_claude(model_id)  # Anthropic validates Claude's schemas (2020-12)
        out["toolConfig"] = {"tools": [
            {"toolSpec": {"name": wire_name(FORMAT, t.name), "description": t.description if (t.description or "").strip() else t.name,
                          "inputSchema": {"json": as_taken(t, ("bedrock", claude), claude_schema if claude else object_root)}}}
            for t in tools
        ]}
    return Lowered(out, system_blocks, wire, roles, sources, lists, (out["inferenceConfig"], "maxTokens"))


class Bedrock(WireFormat):
    name = m.BEDROCK
    body = staticmethod(body)
    merged_key = "content"
    trims_final_text = True
    ids = WORD
    names = WORD  # toolSpec.name and toolUse.name are [a-zA-Z0-9_-]+ of 1..64
    accepted = {t: media.IMAGE if t in media.WEB_IMAGES else media.DOCUMENT for t in MEDIA_FORMATS}
    fetched = frozenset()  # bytes or S3 only
    # an ImageBlock's bytes: 3.75 MB, 8000 px per side (the Converse API docs)
    max_image_bytes = 3 * 2**20 * 5 // 4
    max_image_side = 8000
    # "Each document's size must be no more than 4.5 MB" (the Message type's docs): the smaller
    # reading of MB, so no document between the two is refused
    max_document_bytes = 4_500_000
    # Claude on Bedrock refuses as on Anthropic's API: "image exceed max allowed size for
    # many-image requests: 2000 pixels"
    many_images = 20
    many_images_side = 2000
    native_auto = True
    system_marker_closes_list = True  # one cachePoint closes the system list
    # Claude up to Sonnet 4 on Bedrock: "too many images and documents: 21 + 0 > 20" (cline #1844,
    # Sonnet 3.5 and 3.7), "19 + 5 > 20" (boto3 #4632, Sonnet 4); a document counts one. Sonnet 5
    # was measured taking 29 images (aws-solutions-library-samples #994); the generations between
    # are not known to have it
    media_cap_pages = False

    def media_cap(self, model) -> int:
        generation = model_ids.claude_generation(model.id)
        return 20 if generation is not None and generation <= (4, 0) else 0

    def media_in_tool_results(self, model_id: str) -> bool:
        """Whether the model takes images and documents inside a toolResult: Claude, Nova and
        Llama 4 (measured); the others refuse them there ("This model doesn't support the image
        field for user messages": Pixtral, gpt-oss, Qwen3-VL) and get them in a user turn after
        the tool results, which lowers_whole puts apart. An id naming no model (an application
        inference profile's ARN) is taken for Claude's, as for its cache points."""
        return model_family(model_id)[0] != VENDOR

    def lowers_whole(self, model_id: str) -> bool:
        """A model other than Claude from 3.5 refuses a turn holding tool results and other blocks
        ("Conversation blocks and tool result blocks cannot be provided in the same turn": Llama 4,
        Claude 3 Opus), which a message sent mid-run made by joining the tool results' turn: an
        assistant turn goes between (BRIDGE_ASSISTANT_TEXT). That depends on the neighbours, so
        such a request is lowered whole. An id naming no model (an ARN of an application inference
        profile) is taken for Claude's, as for its cache points."""
        family, generation = model_family(model_id)
        if family == CLAUDE:
            return generation is not None and generation < (3, 5)
        return family != UNNAMED

    def marker_kinds(self, model_id: str) -> frozenset:
        """Bedrock caches for Claude from 3.7 Sonnet and 3.5 Haiku on, and for Nova (system and
        messages: no checkpoint in its tools); any other model refuses a cachePoint: "You invoked
        an unsupported model or your request did not allow prompt caching" (Claude 3, 3.5 Sonnet,
        Llama, DeepSeek, Qwen, Mistral), "extraneous key [cachePoint] is not permitted" (Nova's tools)."""
        family, generation = model_family(model_id)
        if family == CLAUDE:
            if generation is None or generation >= (3, 7) or (generation == (3, 5) and "haiku" in model_id.lower()):
                return MARKER_KINDS
            return NO_MARKERS
        if family == NOVA:
            return NOVA_MARKER_KINDS
        # another model provider's id ("qwen.qwen3-coder-...", "us.deepseek.r1-v1:0"); an id
        # that names none (an application inference profile's ARN) keeps the markers
        return MARKER_KINDS if family == UNNAMED else NO_MARKERS

    def opens_turn(self, block: dict) -> bool:
        return "reasoningContent" in block

    def opens_user_turn(self, messages: list, roles: list, i: int) -> bool:
        return roles[i] == "user" and all("toolResult" not in b for b in messages[i]["content"])

    def tool_list(self, body: dict) -> list:
        return (body.get("toolConfig") or {}).get("tools", [])

    def marker(self, ttl: str) -> tuple:
        return "cachePoint", {"type": "default"}

    def markable(self, element: dict) -> bool:
        return True  # the cachePoint is a block of its own

    def markable_for(self, element: dict, model_id: str) -> bool:
        """Nova takes no cachePoint right after a tool result (it takes one elsewhere in a turn of
        tool results, and in the system list): that turn is left unmarked for it."""
        return not (model_family(model_id)[0] == NOVA and "toolResult" in element["content"][-1])

    def place(self, lowered, kind: str, index: int, key: str, value: dict):
        if kind == "tools":
            lowered.body["toolConfig"]["tools"].append({key: value})  # a cachePoint block after the tool specs
            return None
        element = (lowered.system if kind == "system" else lowered.messages)[index]
        if kind == "system":
            lowered.system.append({key: value})  # the block after the last system text
        else:
            element["content"].append({key: value})
        return element


FORMAT = Bedrock()
