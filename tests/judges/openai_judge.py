"""Would OpenAI Chat Completions, or a gateway speaking its format, accept this body?

Shape: the `openai` SDK's own request type, `CompletionCreateParamsNonStreaming`, validated
strictly (unknown keys refused at every depth, JSON types not coerced, lazy iterables forced),
after the gateway's documented extensions are taken off and checked by their own rules:
- the cache marker of the gateway (`cache_control`; Copilot `copilot_cache_control`), documented
  on a message's content part (OpenAI itself takes none: its caching is implicit);
- top-level request fields the gateway documents beside the OpenAI ones (OpenRouter's
  provider routing and reasoning, DashScope's enable_thinking ...).
Then the documented rules beyond the shape.
"""
from __future__ import annotations

import copy
import re

from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from ._common import (ANTHROPIC_ID, MAX_MARKERS, MAX_TOKENS_REFUSED, OPENAI_ID_MAX, PREFILL_REFUSED, Problems,
                      data_url_problem, is_http_url, mistral_tool_problems, moonshot_schema_problems,
                      openai_tool_problems, refuses_max_tokens, refuses_prefill, schema_draft_problem,
                      schema_ref_problems, schema_root_problem, strict_validator, tool_name_problem, validate)

# Kimi's own endpoint (directly, or a gateway's Moonshot upstream) validates tool schemas its way
_MOONSHOT = re.compile(r"kimi|moonshot|(?:^|/)k2p[0-9]")

PROVIDERS = ("openai", "openai-compatible", "openrouter", "alibaba", "copilot")

# The marker key each provider documents on a content part; None: no markers at all.
MARKER_KEY = {"openai": None, "openai-compatible": "cache_control", "openrouter": "cache_control",
              "alibaba": "cache_control", "copilot": "copilot_cache_control"}
# Marker values each gateway documents (OpenRouter passes Anthropic's ttl through).
MARKER_VALUES = {"openrouter": ({"type": "ephemeral"}, {"type": "ephemeral", "ttl": "5m"},
                                {"type": "ephemeral", "ttl": "1h"})}
DEFAULT_MARKER_VALUES = ({"type": "ephemeral"},)

# Top-level fields a gateway documents beyond OpenAI's, with the JSON type each takes.
EXTRAS = {
    "openrouter": {"provider": dict, "transforms": list, "models": list, "route": str, "reasoning": dict,
                   "usage": dict, "plugins": list},
    "alibaba": {"enable_thinking": bool, "thinking_budget": int, "enable_search": bool, "search_options": dict,
                "vl_high_resolution_images": bool},
}

# Providers that pass max_tokens to an OpenAI reasoning model as it is, which refuses it (OpenRouter
# and DashScope take max_tokens for every model they route)
MAX_TOKENS_PASSED = frozenset({"openai", "openai-compatible", "copilot"})

# Images the Chat Completions image_url part takes (OpenAI: png, jpeg, webp, non-animated gif).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Files the `file` part takes as file_data: a base64 data URL of a PDF.
FILE_TYPES = frozenset({"application/pdf"})


def _take_markers(body: dict, provider: str, p: Problems) -> int:
    """Removes the markers from content parts (where they are documented) after checking them;
    a marker anywhere else stays and the schema refuses it. Returns how many were found."""
    key = MARKER_KEY[provider]
    allowed = MARKER_VALUES.get(provider, DEFAULT_MARKER_VALUES)
    count = 0
    for i, msg in enumerate(body.get("messages") or []):
        if not isinstance(msg, dict):
            continue
        for k in [k for k in msg if k in ("cache_control", "copilot_cache_control")]:
            count += 1
            if k == key:
                p.add("marker-place", f"messages[{i}]",
                      f"{k} on the message object; the gateway documents it on a content part")
                del msg[k]
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            for k in [k for k in part if k in ("cache_control", "copilot_cache_control")]:
                count += 1
                if key is not None and k == key:
                    if part[k] not in allowed:
                        p.add("marker-value", f"messages[{i}].content[{j}]", f"{k} {part[k]!r} is not one of {allowed}")
                    del part[k]
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict):
            count += sum(k in tool for k in ("cache_control", "copilot_cache_control"))
    return count


def _take_extras(body: dict, provider: str, p: Problems) -> None:
    for name, kind in EXTRAS.get(provider, {}).items():
        if name in body:
            value = body.pop(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                p.add("extension", name, f"must be a JSON {kind.__name__}, got {type(value).__name__}")


# Message fields an endpoint documents beyond OpenAI's: DeepSeek's and Moonshot's reasoning_content
# on the model's turns, behind an OpenAI-compatible endpoint
MESSAGE_EXTRAS = {"openai-compatible": {"reasoning_content": str}, "openrouter": {"reasoning_content": str}}
MAX_DESCRIPTION = 1024  # OpenAI's function descriptions ("string_above_max_length")
# models that refuse a turn of theirs with tool calls and no reasoning_content, once tools are sent:
# DeepSeek's thinking models (V4.1: deepseek-flash, deepseek-pro) and Kimi's (K2 thinking, K2.5
# on, Kimi Code's kimi-for-coding and k2p5), by their makers' ids (not a distilled or instruct model)
_REASONING_BACK = re.compile(r"deepseek-(?:reasoner|chat|v3[.-][12]|v4|flash(?![a-z])|pro(?![a-z]))"
                             r"|kimi-k2(?:[.-]?thinking|[.p-][5-9])|(?:^|/)k2p[5-9]|kimi-(?:latest|thinking|for-coding)")


# Gemini from 3 behind an OpenAI-shaped endpoint wants each step's thought signature back on its
# first function call: Google's endpoint as the call's extra_content.google.thought_signature,
# OpenRouter as an encrypted reasoning_details item naming the call ("Gemini models require
# OpenRouter reasoning details to be preserved in each request"); other reasoning_details items
# (reasoning.text, reasoning.summary) OpenRouter documents for every model
SIGNATURE_AT = {"openai-compatible": "extra_content", "openrouter": "reasoning_details"}
MISSING_SIGNATURE = "Function call is missing a thought_signature in functionCall parts."
_GEMINI = re.compile(r"gemini(?:-(?:live-)?(\d+))?")
REASONING_DETAILS = {"reasoning.encrypted": {"type", "data", "id", "format", "index"},
                     "reasoning.text": {"type", "text", "signature", "id", "format", "index"},
                     "reasoning.summary": {"type", "summary", "id", "format", "index"}}


def _checks_signatures(model: str) -> bool:
    found = _GEMINI.search(model)
    return bool(found) and (found.group(1) is None or int(found.group(1)) >= 3)


def _take_thought_signatures(body: dict, provider: str, p: Problems) -> None:
    at = SIGNATURE_AT.get(provider)
    if at is None:
        return
    wants = _checks_signatures(str(body.get("model", "")).lower())
    for i, msg in enumerate(body.get("messages") or []):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
        signature = None
        if at == "extra_content":
            for k, call in enumerate(calls):
                if "extra_content" in call:
                    extra = call.pop("extra_content")
                    value = (extra.get("google") or {}).get("thought_signature") if isinstance(extra, dict) else None
                    if not isinstance(value, str) or not value or set(extra) != {"google"} \
                            or set(extra["google"]) != {"thought_signature"}:
                        p.add("extension", f"messages[{i}].tool_calls[{k}].extra_content", "not a thought signature")
                    elif k == 0:
                        signature = value
        elif "reasoning_details" in msg:
            details = msg.pop("reasoning_details")
            for k, item in enumerate(details if isinstance(details, list) else [None]):
                keys = REASONING_DETAILS.get(item.get("type")) if isinstance(item, dict) else None
                if keys is None or not set(item) <= keys:
                    p.add("extension", f"messages[{i}].reasoning_details[{k}]", "not a reasoning detail OpenRouter documents")
                elif item["type"] == "reasoning.encrypted" and calls and item.get("id") == calls[0].get("id") \
                        and isinstance(item.get("data"), str) and item["data"]:
                    signature = item["data"]
        if wants and calls and signature is None:
            p.add("thought-signature", f"messages[{i}].tool_calls[0]", MISSING_SIGNATURE)


def _final_thinking(body: dict, provider: str, p: Problems) -> None:
    """Claude's thinking, which OpenRouter sends back from a turn's reasoning_details, refused in
    the final position (the anthropic judge's rule, through OpenRouter)."""
    messages = [x for x in body.get("messages") or [] if isinstance(x, dict)]
    if provider == "openrouter" and messages and messages[-1].get("role") == "assistant" \
            and "claude" in str(body.get("model", "")).lower() and messages[-1].get("reasoning_details"):
        p.add("final-thinking", f"messages[{len(messages) - 1}]",
              "When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`")


def _take_message_extras(body: dict, provider: str, p: Problems) -> None:
    _final_thinking(body, provider, p)
    _take_thought_signatures(body, provider, p)
    extras = MESSAGE_EXTRAS.get(provider, {})
    model = str(body.get("model", "")).lower()
    wants = bool(extras) and bool(body.get("tools")) and "distill" not in model and bool(_REASONING_BACK.search(model))
    for i, msg in enumerate(body.get("messages") or []):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        if wants and msg.get("tool_calls") and "reasoning_content" not in msg:
            p.add("reasoning-content", f"messages[{i}]",
                  f"Missing `reasoning_content` field in the assistant message at message index {i}")
        for name, kind in extras.items():
            if name in msg:
                value = msg.pop(name)
                if not isinstance(value, kind):
                    p.add("extension", f"messages[{i}].{name}", f"must be a JSON {kind.__name__}")


# Mistral's models, wherever served: no user turn right after a tool result, call ids of exactly
# 9 letters and digits
# Models that take text alone, by their makers' model cards: DeepSeek's chat and reasoning models
# (not its vision and OCR ones, nor V4.1's deepseek-flash), Kimi K2 before K2.5, GLM 4.5 to 5.2
# (not the V ones), MiniMax M1 and M2, Qwen3's coder, max and open-weight sizes, xAI's grok-code
_TEXT_ALONE = re.compile(r"deepseek|grok-code|kimi-k2(?:$|[-:/](?![1-9](?![0-9])))|glm-(?:4\.[5-7]|5(?:\.[0-2])?)(?![0-9v.])"
                         r"|minimax-m[12]|qwen3-(?:coder|max|next|[0-9]+b)")
_SEES = re.compile(r"deepseek-(?:vl|ocr|flash)|janus|vision|-vl\b")
_MISTRAL = re.compile(r"mistral|devstral|codestral|magistral|ministral|pixtral|mixtral|voxtral")
_MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


def _mistral_rules(messages: list, p: Problems) -> None:
    roles = [x.get("role") if isinstance(x, dict) else None for x in messages]
    if roles and roles[-1] == "assistant":
        p.add("mistral-last", f"messages[{len(roles) - 1}]",
              "Expected last role User or Tool (or Assistant with prefix True) for serving but got assistant")
    for i, msg in enumerate(messages):
        if isinstance(msg, dict) and msg.get("role") == "assistant" and not msg.get("content") \
                and not msg.get("tool_calls"):  # mistral_common's validator of its v1 to v3 models
            p.add("mistral-empty", f"messages[{i}]", "Assistant message must have either content or tool_calls")
    for i in range(1, len(roles)):
        if roles[i] == "user" and roles[i - 1] == "tool":
            p.add("mistral-order", f"messages[{i}]", "Unexpected role 'user' after role 'tool'")
        if roles[i] == roles[i - 1] == "user":
            p.add("mistral-order", f"messages[{i}]", "Conversation roles must alternate user/assistant/user/assistant")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            continue
        ids = [c.get("id") for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
        if msg.get("role") == "tool":
            ids.append(msg.get("tool_call_id"))
        for x in ids:
            if not _MISTRAL_ID.fullmatch(str(x)):
                p.add("mistral-id", f"messages[{i}]", f"Tool call id was {x} but must be a-z, A-Z, 0-9, with a length of 9.")


def _parts(msg: dict, i: int, p: Problems) -> None:
    content = msg.get("content")
    if not isinstance(content, list):
        return
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            continue
        where = f"messages[{i}].content[{j}]"
        if part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if isinstance(url, str) and url.startswith("data:"):
                why = data_url_problem(url, IMAGE_TYPES)
                if why:
                    p.add("image-url", where, why)
            elif not is_http_url(url):
                p.add("image-url", where, f"image_url.url must be http(s) or a base64 data URL, got {str(url)[:40]!r}")
        elif part.get("type") == "file":
            f = part.get("file") or {}
            if "file_data" in f:
                why = data_url_problem(f["file_data"], FILE_TYPES)
                if why:
                    p.add("file-data", where, f"file.file_data must be a base64 data URL of a PDF: {why}")


def judge(body: dict, provider: str = "openai") -> list:
    p = Problems()
    if provider not in PROVIDERS:
        raise KeyError(provider)
    if not isinstance(body, dict):
        p.add("schema", "body", "not a JSON object")
        return p
    body = copy.deepcopy(body)
    markers = _take_markers(body, provider, p)
    if MARKER_KEY[provider] is not None and markers > MAX_MARKERS:
        p.add("marker-count", "body", f"{markers} cache markers; at most {MAX_MARKERS} are accepted")
    _take_extras(body, provider, p)
    _take_message_extras(body, provider, p)
    validate(strict_validator(CompletionCreateParamsNonStreaming), body, p, "schema")

    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    talk = [(i, m) for i, m in enumerate(messages) if m.get("role") not in ("system", "developer")]
    if not talk:
        p.add("messages-empty", "messages", "no user message")
        return p
    if talk[0][1].get("role") != "user":
        p.add("first-user", f"messages[{talk[0][0]}]",
              f"the first non-system message must be a user message, not {talk[0][1].get('role')!r}")

    if provider == "openai" or (provider == "copilot" and ("gpt" in str(body.get("model", "")).lower()
                                                           or refuses_max_tokens(body.get("model")))):
        openai_tool_problems(body.get("tools") or [], lambda t: (t.get("function") or {}).get("parameters"), p)
        for k, tool in enumerate(body.get("tools") or []):
            text = ((tool.get("function") or {}) if isinstance(tool, dict) else {}).get("description")
            if isinstance(text, str) and len(text) > MAX_DESCRIPTION:
                p.add("tool-description", f"tools[{k}].function.description",
                      f"string too long. Expected a string with maximum length {MAX_DESCRIPTION}, "
                      f"but got a string with length {len(text)} instead.")
    if _MISTRAL.search(str(body.get("model", "")).lower()):
        _mistral_rules(body.get("messages") or [], p)
        mistral_tool_problems(body.get("tools") or [], lambda t: (t.get("function") or {}).get("parameters"), p)
    if _TEXT_ALONE.search(str(body.get("model", "")).lower()) and not _SEES.search(str(body.get("model", "")).lower()):
        for i, msg in enumerate(body.get("messages") or []):
            for j, part in enumerate(msg.get("content") if isinstance(msg, dict) and isinstance(msg.get("content"), list)
                                     else []):
                if isinstance(part, dict) and part.get("type") not in ("text", None):
                    p.add("text-alone", f"messages[{i}].content[{j}]",
                          "Failed to deserialize the JSON body into the target type: "
                          f"messages[{i}]: unknown variant `{part.get('type')}`, expected `text`")
    if provider in MAX_TOKENS_PASSED and "max_tokens" in body and refuses_max_tokens(body.get("model")):
        p.add("max-tokens", "max_tokens", MAX_TOKENS_REFUSED)
    if talk[-1][1].get("role") == "assistant" and refuses_prefill(body.get("model")):
        p.add("prefill", f"messages[{talk[-1][0]}]", PREFILL_REFUSED)  # Claude behind a gateway
    gateway = provider != "openai"
    open_calls, seen_ids, tool_history = {}, set(), False
    for i, msg in enumerate(messages):
        role = msg.get("role")
        _parts(msg, i, p)
        if role == "tool":
            tool_history = True
            cid = msg.get("tool_call_id")
            if cid not in open_calls:
                p.add("tool-pairing", f"messages[{i}]",
                      f"tool message {cid!r} does not answer a tool call of the preceding assistant message")
            open_calls.pop(cid, None)
            continue
        for cid, where in open_calls.items():
            p.add("tool-pairing", where, f"tool call {cid!r} has no tool message before messages[{i}]")
        open_calls = {}
        for k, call in enumerate(msg.get("tool_calls") or [] if role == "assistant" else []):
            if not isinstance(call, dict):
                continue
            tool_history = True
            where = f"messages[{i}].tool_calls[{k}]"
            tool_name_problem((call.get("function") or {}).get("name"), f"{where}.function.name", p)
            cid = call.get("id")
            if not isinstance(cid, str):
                continue
            if len(cid) > OPENAI_ID_MAX:
                p.add("tool-id", where, f"id is {len(cid)} characters; at most {OPENAI_ID_MAX} are accepted")
            if gateway and not ANTHROPIC_ID.fullmatch(cid):
                p.add("tool-id", where, f"id {cid!r} is outside ^[a-zA-Z0-9_-]+$ (refused by the Claude "
                                        "and Bedrock upstreams the gateway forwards to)")
            if cid in seen_ids:
                p.add("tool-id-unique", where, f"tool call id {cid!r} is used twice")
            seen_ids.add(cid)
            open_calls[cid] = where
    for cid, where in open_calls.items():
        p.add("tool-pairing", where, f"tool call {cid!r} is never answered by a tool message")
    if tool_history and not body.get("tools"):
        p.add("tools-defined", "tools", "history holds tool calls but no tools are defined (design.md §6: tools stay)")
    for k, tool in enumerate(body.get("tools") or []):
        name = ((tool or {}).get("function") or {}).get("name") if isinstance(tool, dict) else None
        tool_name_problem(name, f"tools[{k}].function.name", p)
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict) and "parameters" in tool["function"]:
            schema_root_problem(tool["function"]["parameters"], f"tools[{k}].function.parameters", p)
            moonshot = bool(_MOONSHOT.search(str(body.get("model", "")).lower()))
            schema_ref_problems(tool["function"]["parameters"], f"tools[{k}].function.parameters", p,
                                defs_only=moonshot)
            if moonshot:
                moonshot_schema_problems(tool["function"]["parameters"], f"tools[{k}].function.parameters", p)
            if "claude" in str(body.get("model", "")).lower():  # the gateway's Anthropic upstream validates it
                schema_draft_problem(tool["function"]["parameters"], f"tools[{k}].function.parameters", p)
    return p
