"""Whether a stored message came from the request's model, when the two ids are written apart.

A provider answers a request for an alias with the snapshot that served it: Anthropic's
`claude-sonnet-4-5` comes back as `claude-sonnet-4-5-20250929`, OpenAI's `gpt-4o` as
`gpt-4o-2024-08-06`, and Gemini's ids may carry `models/`. An agent that stores the id its
provider answered with must not lose what follows from the same model: its usage anchoring the
self-calibration (step.figures), its reasoning keeping its signature (lowering.neutral). Two
dated snapshots of one alias are different models.

Provider ids are written apart too: agents store the id of their own provider layer (`google`
for Gemini, `amazon-bedrock`, `github-copilot`), and `openai` for a Responses answer; the
service's names are the wire formats' (`gemini`, `bedrock`, `openai-responses`).
"""
from __future__ import annotations

import functools
import re

_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")  # -20250929, -2024-08-06
_LATEST = "-latest"


@functools.lru_cache(maxsize=256)
def _split(model_id: str) -> tuple[str, bool]:
    """(the id without `models/`, a `-latest` or a date suffix; whether it named a dated snapshot)."""
    base = model_id.removeprefix("models/")
    if base.endswith(_LATEST):
        return base[:-len(_LATEST)], False
    dated = _DATED.search(base)
    return (base[:dated.start()], True) if dated else (base, False)


def same_model(stored: str, requested: str) -> bool:
    """stored (a message's model_id) is requested's model: the same id, or one is an alias of the
    other's snapshot."""
    if stored == requested:
        return True
    (a, a_dated), (b, b_dated) = _split(stored), _split(requested)
    return a == b and not (a_dated and b_dated)


# Provider ids agents store (the AI SDK's and models.dev's, LiteLLM's) -> the service's provider
# name whose signatures and reasoning items they wrote. OpenAI's Chat API returns no reasoning to
# sign, so an `openai` answer holding signed reasoning came from the Responses API.
_PROVIDER_ALIASES = {
    "google": "gemini", "google-vertex": "gemini", "vertex": "gemini", "vertex_ai": "gemini",
    "vertexai": "gemini", "google-generative-ai": "gemini",
    "amazon-bedrock": "bedrock", "aws-bedrock": "bedrock", "aws": "bedrock",
    "github-copilot": "copilot",
    "openai": "openai-responses", "openai_responses": "openai-responses",
    "openai_compatible": "openai-compatible",
}


def provider_name(stored: str) -> str:
    """The service's provider name a message's provider_id stands for (itself when it names none)."""
    return _PROVIDER_ALIASES.get(stored.lower(), stored.lower())


def same_provider(stored: str, requested: str) -> bool:
    """stored (a message's provider_id) names requested (a provider name of the service): the
    same name, or an id agents store for it."""
    return stored == requested or provider_name(stored) == requested


# a Claude model's generation in its id: "claude-3-5-sonnet-20241022", "claude-sonnet-4-5",
# "anthropic.claude-opus-4-1-20250805-v1:0", "claude-sonnet-4-20250514" (a date is no minor version),
# "anthropic/claude-sonnet-4.6" (a gateway's)
_CLAUDE_VERSION = re.compile(r"claude-(?:(?:opus|sonnet|haiku)-)?(\d+)(?:[-.](\d)(?!\d))?")
# Claude 1 and 2 as Bedrock names them and Claude Instant: anthropic.claude-v2:1,
# anthropic.claude-instant-v1, claude-instant-1.2
_LEGACY_CLAUDE = re.compile(r"claude-(?:instant-v?(\d)|v(\d))")


@functools.lru_cache(maxsize=256)
def claude_generation(model_id: str) -> tuple[int, int] | None:
    """(major, minor) of the Claude generation a model id names, None where it names none that
    can be read (a Claude id of that kind is taken to be of the newest generation)."""
    model_id = model_id.lower()
    found = _CLAUDE_VERSION.search(model_id)
    if found is not None:
        return int(found.group(1)), int(found.group(2) or 0)
    legacy = _LEGACY_CLAUDE.search(model_id)
    return (int(legacy.group(1) or legacy.group(2)), 0) if legacy else None


# The first Claude generation that refuses a request ending with its own turn: "This model does not
# support assistant message prefill. The conversation must end with a user message." (Opus 4.6 and
# Sonnet 4.6 on, through Anthropic, Bedrock, Vertex and the gateways alike)
NO_PREFILL_FROM = (4, 6)


# Gemini's first such generation: "Requests ending with a model turn are not supported unless the
# last part is a function response." (3.5 Flash-Lite and 3.6 Flash on, and Google's notes say every
# later release; 3.5 Flash took it in July 2026, and is closed too: a user turn is taken by all)
NO_PREFILL_GEMINI_FROM = (3, 5)
_GEMINI_VERSION = re.compile(r"gemini-(?:live-)?(\d+)(?:\.(\d+))?")


def gemini_generation(model_id: str) -> tuple[int, int] | None:
    """(major, minor) of the Gemini generation a model id names, None where none can be read
    (an alias of the newest: gemini-flash-latest)."""
    found = _GEMINI_VERSION.search(model_id.lower())
    return (int(found.group(1)), int(found.group(2) or 0)) if found else None


def is_claude(model_id: str) -> bool:
    """Whether the id names a Claude model (behind a gateway too: anthropic/claude-sonnet-4.5)."""
    return "claude" in model_id.lower()


# Claude from Opus 4.5 on keeps the thinking of its earlier turns in its context; the models
# before it (Sonnet and Haiku 4.5 too) have the API strip it: "previous thinking blocks are
# automatically stripped from the context window calculation ... context_window = (input_tokens -
# previous_thinking_tokens) + current_turn_tokens" (Anthropic, context windows)
KEEPS_EARLIER_THINKING_FROM = (4, 5)


def strips_earlier_thinking(model_id: str) -> bool:
    """Whether the provider leaves a Claude model's thinking of turns before the last user turn
    out of the request (and its count): Claude before 4.5, and Sonnet and Haiku 4.5; an id whose
    generation cannot be read (an alias of the newest) keeps it."""
    if not is_claude(model_id):
        return False
    generation = claude_generation(model_id)
    if generation is None:
        return False
    return generation < KEEPS_EARLIER_THINKING_FROM or (
        generation == KEEPS_EARLIER_THINKING_FROM and "opus" not in model_id.lower())


def is_gemini(model_id: str) -> bool:
    """Whether the id names a Gemini model (behind a gateway too: google/gemini-3-pro-preview)."""
    return "gemini" in model_id.lower()


def gemini_from(model_id: str, generation: tuple[int, int]) -> bool:
    """Whether the id names a Gemini of this generation or later, or none that can be read (an
    alias of the newest is taken to be of the newest)."""
    found = gemini_generation(model_id)
    return found is None or found >= generation


# Gemini from 3 refuses a user turn whose text follows its function responses ("Requests ending
# with a model turn are not supported": Gemini 3 Flash, 3.8 Flash on Vertex); every model takes it
# before them
TEXT_BEFORE_RESPONSES_FROM = (3, 0)


def text_before_responses(model_id: str) -> bool:
    """Whether a Gemini model's user turn must hold its text before its function responses."""
    return gemini_from(model_id, TEXT_BEFORE_RESPONSES_FROM)


def refuses_prefill(model_id: str) -> bool:
    """Whether the model refuses a request whose last message is its own: a Claude id of
    generation NO_PREFILL_FROM or later, a Gemini one of NO_PREFILL_GEMINI_FROM or later, or of
    either whose generation cannot be read (an alias of the newest: gemini-flash-latest); every
    Mistral model ("Expected last role User or Tool (or Assistant with prefix) for serving but got
    assistant": the prefix flag is its own, which the body does not set)."""
    if is_mistral(model_id):
        return True
    if is_gemini(model_id):
        return gemini_from(model_id, NO_PREFILL_GEMINI_FROM)
    if not is_claude(model_id):
        return False
    generation = claude_generation(model_id)
    return generation is None or generation >= NO_PREFILL_FROM


# OpenAI's reasoning models (o1, o3, o4-mini, the gpt-5 family, codex) take the output cap as
# max_completion_tokens alone, wherever they are served: "Unsupported parameter: 'max_tokens' is
# not supported with this model. Use 'max_completion_tokens' instead." (GitHub Copilot's gpt-5.x and
# o-series, Azure's gpt-5.1 behind an OpenAI-compatible endpoint)
_OPENAI_REASONING = re.compile(r"(?:^|[/:.])(?:o[1-9](?:-|$)|gpt-5|(?:gpt-[\d.]+-)?codex)")


def takes_completion_tokens(model_id: str) -> bool:
    """Whether the model refuses max_tokens for max_completion_tokens: an OpenAI reasoning model."""
    return _OPENAI_REASONING.search(model_id.lower()) is not None


def drops_earlier_turns_reasoning(model_id: str) -> bool:
    """Whether the provider leaves the model's reasoning items of earlier turns out of what it
    counts (lowering.WireFormat.drops_earlier_turns_reasoning): OpenAI's reasoning models ("in turn
    2, any reasoning items from turn 1 are ignored and removed"). Another server speaking the
    format (xAI's Grok asks for every item back) is not known to."""
    return _OPENAI_REASONING.search(model_id.lower()) is not None


# Kimi's own endpoint (Moonshot's, directly or a gateway's upstream) validates tool schemas its way:
# "references must start with #/$defs/" (lowering.tool_schema.with_refs_under_defs)
_MOONSHOT = re.compile(r"kimi|moonshot|(?:^|/)k2p[0-9]")


def wants_refs_under_defs(model_id: str) -> bool:
    """Whether the model's endpoint refuses a schema reference not under #/$defs/: Kimi's."""
    return _MOONSHOT.search(model_id.lower()) is not None


# Models that want their reasoning back on each of their turns, as reasoning_content beside the
# content, once a request carries tools: DeepSeek's thinking mode ("Missing `reasoning_content`
# field in the assistant message at message index 2", "The `reasoning_content` in the thinking mode
# must be passed back to the API"; V4.1's ids deepseek-flash and deepseek-pro too) and Kimi's
# thinking models ("thinking is enabled but reasoning_content is missing in assistant tool call
# message": K2.5 on, Fireworks' kimi-k2p5, Kimi Code's kimi-for-coding and k2p5: Kilo Code #10986,
# opencode #10996); "" stands for none, and without tools it is ignored. By their makers' ids: a
# distilled or instruct model served elsewhere (Groq, Cerebras) has no thinking to give back, and
# those endpoints refuse the unknown field
_REASONING_BACK = re.compile(r"deepseek-(?:reasoner|chat|v3[.-][12]|v4|flash(?![a-z])|pro(?![a-z]))|"
                             r"kimi-k2(?:[.-]?thinking|[.p-][5-9])|(?:^|/)k2p[5-9]|kimi-(?:latest|thinking|for-coding)")


def wants_reasoning_content(model_id: str) -> bool:
    """Whether the model's own turns carry reasoning_content (an OpenAI-compatible endpoint)."""
    mid = model_id.lower()
    return "distill" not in mid and _REASONING_BACK.search(mid) is not None


# Models that take text alone, wherever served: DeepSeek's chat and reasoning models refuse an
# image ("Failed to deserialize the JSON body into the target type: messages[3]: unknown variant
# `image_url`, expected `text`": V3, R1 and V4, at every request once a screenshot is in the
# history); its vision and OCR models (deepseek-vl2, deepseek-ocr, Janus) and V4.1's
# deepseek-flash take them. OpenAI's open-weight gpt-oss reads text alone (Bedrock: "This model
# doesn't support the image field"). So do, by their makers' model cards, and refused wherever
# they are served (OpenRouter: "No endpoints found that support image input"; vLLM: "is not a
# multimodal model"; Ollama: "this model does not support image input"):
# - Kimi K2 before K2.5 (k2, -0905, -thinking, -turbo) and moonshot-v1 but its vision previews;
# - GLM 4.5 to 5.2 but the V models (Z.ai: "Invalid API parameter", code 1210; opencode #2944);
# - MiniMax M1, M2.x and Text-01; Qwen3's coder, max, next and open-weight sizes (DashScope:
#   "Unexpected item type in content"), not Qwen3-VL, Omni or 3.5 on;
# - Codestral and Mistral NeMo; xAI's grok-code (Copilot: "image media type not supported");
# - Llama 3.x but 3.2's 11B and 90B vision models
_TEXT_ALONE = re.compile(r"deepseek|gpt-oss|grok-code|codestral|mistral-nemo"
                         r"|kimi-k2(?![.p_][0-9]|-[1-9](?![0-9]))|moonshot-v1-(?:8k|32k|128k|auto)(?!-vision)"
                         r"|glm-(?:4[.p][5-7]|5(?:[.p][0-2])?)(?![0-9v]|[.p][0-9])"
                         r"|minimax-(?:m[12]|text-01)"
                         r"|qwen3-(?:coder|max|next|[0-9.]+b)|qwen3[.p][67]-max"
                         r"|(?:^|[/.])(?:meta-)?llama-?v?3(?:[.p-]?[0-9])?(?:[-:_.]|$)")
_SEES = re.compile(r"deepseek-(?:vl|ocr|flash)|janus|vision|-vl\b|llava|minicpm|llama-?v?3[.p-]?2-(?:11|90)b")


def takes_text_alone(model_id: str) -> bool:
    mid = model_id.lower()
    return _TEXT_ALONE.search(mid) is not None and _SEES.search(mid) is None


# Mistral's models, wherever served (its API, NIM, vLLM, OpenRouter): a user turn right after a
# tool result is refused ("Unexpected role 'user' after role 'tool'"), and a call id must be 9
# letters and digits ("Tool call id was call_abc but must be a-z, A-Z, 0-9, with a length of 9")
_MISTRAL = re.compile(r"mistral|devstral|codestral|magistral|ministral|pixtral|mixtral|voxtral")


def is_mistral(model_id: str) -> bool:
    return _MISTRAL.search(model_id.lower()) is not None
