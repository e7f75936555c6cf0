"""Would the OpenAI Responses API (POST /v1/responses) accept this stateless body?

Shape: the `openai` SDK's own request type, `ResponseCreateParamsNonStreaming`, validated strictly
(unknown keys refused at every depth, JSON types not coerced, lazy iterables forced). One
departure from the type, for stateless requests: a reasoning item goes without its `id` (the type
requires one), because with `store: false` OpenAI looks any item id up in its store and refuses
the request when it is not there ("Item with id 'rs_...' not found. Items are not persisted when
`store` is set to false"); its `encrypted_content` carries the state instead (so does a
`compaction` item's, from server-side compaction). Then the documented rules beyond the shape.
"""
from __future__ import annotations

import copy

from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from ._common import (Problems, data_url_problem, is_http_url, openai_tool_problems, schema_root_problem,
                      strict_validator, tool_name_problem, validate)

# call_id: "string_above_max_length" past 64 characters, "empty_string" below 1
CALL_ID_MAX = 64
# max_output_tokens: "integer_below_min_value" below 16
MIN_OUTPUT_TOKENS = 16
# prompt_cache_key: refused over 64 characters, as on Chat Completions
PROMPT_CACHE_KEY_MAX = 64
# input_image.image_url takes png, jpeg, webp and non-animated gif; input_file.file_data a PDF
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
FILE_TYPES = frozenset({"application/pdf"})
# what an assistant message's content parts may be ("input_text" is refused there)
ASSISTANT_PARTS = frozenset({"output_text", "refusal"})
# context_management entry types ("Currently only 'compaction' is supported")
CONTEXT_MANAGEMENT_TYPES = frozenset({"compaction"})
# stands in for the reasoning item id the SDK type requires and a stateless body leaves out
_NO_ID = "rs_stateless"


def _media_parts(parts, where: str, p: Problems) -> None:
    for j, part in enumerate(parts if isinstance(parts, list) else []):
        if not isinstance(part, dict):
            continue
        at = f"{where}[{j}]"
        if part.get("type") == "input_image" and "image_url" in part:
            url = part["image_url"]
            if isinstance(url, str) and url.startswith("data:"):
                why = data_url_problem(url, IMAGE_TYPES)
                if why:
                    p.add("image-url", at, why)
            elif not is_http_url(url):
                p.add("image-url", at, f"image_url must be http(s) or a base64 data URL, got {str(url)[:40]!r}")
        elif part.get("type") == "input_file":
            if "file_data" in part:
                why = data_url_problem(part["file_data"], FILE_TYPES)
                if why:
                    p.add("file-data", at, f"file_data must be a base64 data URL of a PDF: {why}")
            if "file_url" in part and not is_http_url(part["file_url"]):
                p.add("file-url", at, f"file_url must be an http(s) URL, got {str(part['file_url'])[:40]!r}")


def _stateless_items(items: list, stateless: bool, p: Problems) -> None:
    """Reasoning items: encrypted_content, and (stateless) no id, which the validated copy then
    gets so the SDK type checks the rest of the item. Other items: no id when stateless."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if stateless and "id" in item:
            p.add("item-id", f"input[{i}]", f"id {str(item['id'])[:40]!r} with store false: OpenAI looks it up "
                                            "in its store, finds nothing and refuses the request")
        if item.get("type") == "reasoning":
            if not item.get("encrypted_content"):
                p.add("reasoning-state", f"input[{i}]", "a reasoning item without encrypted_content refers to "
                                                        "stored state a stateless request does not have")
            item.setdefault("id", _NO_ID)
        elif item.get("type") == "compaction" and item.get("encrypted_content") == "":
            p.add("compaction-state", f"input[{i}]", "a compaction item without encrypted_content carries nothing "
                                                     "of the history it replaced")


def _context_management(entries, p: Problems) -> None:
    """Server-side compaction: a known entry type, a positive threshold."""
    for k, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            continue
        if entry.get("type") not in CONTEXT_MANAGEMENT_TYPES:
            p.add("context-management", f"context_management[{k}].type",
                  f"{entry.get('type')!r}; only {', '.join(sorted(CONTEXT_MANAGEMENT_TYPES))} is supported")
        threshold = entry.get("compact_threshold")
        if isinstance(threshold, int) and threshold <= 0:
            p.add("context-management", f"context_management[{k}].compact_threshold", f"{threshold}; must be positive")


def judge(body: dict) -> list:
    p = Problems()
    if not isinstance(body, dict):
        p.add("schema", "body", "not a JSON object")
        return p
    body = copy.deepcopy(body)
    items = body.get("input") if isinstance(body.get("input"), list) else []
    _stateless_items(items, body.get("store") is False, p)
    validate(strict_validator(ResponseCreateParamsNonStreaming), body, p, "schema")

    openai_tool_problems([t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"],
                         lambda t: t.get("parameters"), p)
    cap = body.get("max_output_tokens")
    if isinstance(cap, int) and cap < MIN_OUTPUT_TOKENS:
        p.add("max-output", "max_output_tokens", f"{cap}; at least {MIN_OUTPUT_TOKENS} is accepted")
    _context_management(body.get("context_management"), p)
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and len(key) > PROMPT_CACHE_KEY_MAX:
        p.add("prompt-cache-key", "prompt_cache_key", f"{len(key)} characters; at most {PROMPT_CACHE_KEY_MAX}")

    calls, answered, tool_history = {}, set(), False
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if item.get("role") == "assistant" and isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict) and part.get("type") not in ASSISTANT_PARTS:
                        p.add("assistant-content", f"{where}.content[{j}]",
                              f"{part.get('type')!r} in an assistant message; it takes output_text or refusal")
            _media_parts(content, f"{where}.content", p)
        elif kind in ("function_call", "function_call_output"):
            tool_history = True
            cid = item.get("call_id")
            if isinstance(cid, str) and not 1 <= len(cid) <= CALL_ID_MAX:
                p.add("tool-id", where, f"call_id is {len(cid)} characters; 1 to {CALL_ID_MAX} are accepted")
            if kind == "function_call":
                tool_name_problem(item.get("name"), f"{where}.name", p)
                if cid in calls:
                    p.add("tool-id-unique", where, f"call_id {cid!r} is used twice")
                calls[cid] = where
            else:
                _media_parts(item.get("output"), f"{where}.output", p)
                if cid not in calls:
                    p.add("tool-pairing", where, f"function_call_output {cid!r} answers no earlier function_call")
                answered.add(cid)
    for cid, where in calls.items():
        if cid not in answered:
            p.add("tool-pairing", where, f"function_call {cid!r} has no function_call_output")
    if tool_history and not body.get("tools"):
        p.add("tools-defined", "tools", "history holds tool calls but no tools are defined (design.md §6: tools stay)")
    for k, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and tool.get("type") == "function":
            tool_name_problem(tool.get("name"), f"tools[{k}].name", p)
            if "parameters" in tool:
                schema_root_problem(tool["parameters"], f"tools[{k}].parameters", p)
    return p
