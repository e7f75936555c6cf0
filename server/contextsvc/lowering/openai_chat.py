"""OpenAI Chat Completions body (POST /v1/chat/completions), and gateways speaking it."""
from __future__ import annotations

import hashlib
import itertools

from .. import conversation as m, model_ids, native
from . import gemini, media
from ..deadline import NO_DEADLINE, Deadline
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .neutral import BRIDGE_ASSISTANT_TEXT, LEAD_USER_TEXT, MMedia, MReasoning, MSpacer, MText, MToolCall, MToolResult
from .tool_ids import WORD, id_rule, wire_id, wire_name
from .tool_schema import (as_2020_12, as_taken, moonshot_flavoured, object_root, with_array_items, with_refs_under_defs,
                          without_schema_ids)
from .wire_format import WireFormat


# the formats OpenRouter names its reasoning_details items with, by the model that wrote them
CLAUDE_DETAILS = "anthropic-claude-v1"
GEMINI_DETAILS = "google-gemini-v1"
# where a Gemini 3 step's thought signature goes on its first tool call (ChatCompletions.sign_first_call)
ON_THE_CALL = "extra_content"  # Google's OpenAI-compatible endpoint
IN_REASONING_DETAILS = "reasoning_details"  # OpenRouter


def _media(fmt: ChatCompletions, x: MMedia, ledger: MediaLedger) -> dict:
    src = media.source(fmt, x, ledger)
    if isinstance(src, str):  # the attachment note; a PDF by web URL too: file_data takes a data: URL only
        return {"type": "text", "text": src}
    if src.kind == media.DOCUMENT:
        return {"type": "file", "file": {"filename": x.filename or "file.pdf", "file_data": src.data_url(ledger)}}
    url = src.web_url(ledger) if src.url else src.data_url(ledger)
    return {"type": "image_url", "image_url": {"url": url}}


def _user_content(fmt: ChatCompletions, parts: list, ledger: MediaLedger, deadline: Deadline):
    blocks = []
    for c in parts:
        deadline.count("lowering")
        blocks.append({"type": "text", "text": c.text} if isinstance(c, MText) else _media(fmt, c, ledger))
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return blocks[0]["text"]  # a lone text goes as a plain string
    return blocks



def _chat_schema(properties: bool, under_defs: bool, draft_2020_12: bool, mistral: bool):
    """A schema as Chat Completions takes it: arrays with items, an OpenAI model's object root with
    properties, for Kimi's endpoint every reference under $defs and Moonshot's flavour of 2020-12,
    JSON Schema 2020-12 for the providers that validate it so (OpenAI's, Anthropic's behind a
    gateway, Mistral's), and for Mistral's no $id or $schema (tool_schema's doc)."""
    def made(schema):
        out = with_array_items(object_root(schema, properties=properties))
        out = with_refs_under_defs(out) if under_defs else out
        out = as_2020_12(out) if draft_2020_12 else out
        out = moonshot_flavoured(out) if under_defs else out
        return without_schema_ids(out) if mistral else out
    return made


_SCHEMAS = {flags: _chat_schema(*flags) for flags in itertools.product((False, True), repeat=4)}


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False, deadline: Deadline = NO_DEADLINE) -> Lowered:
    fmt = _FORMATS[provider]
    reasoning_back = fmt.reasoning_content and model_ids.wants_reasoning_content(model_id)
    signs = bool(fmt.thought_signatures) and model_ids.is_gemini(model_id) and gemini.checks_signatures(model_id)
    thinking_back = fmt.reasoning_details and model_ids.is_claude(model_id)
    mistral = fmt.lowers_whole(model_id)
    ids = MISTRAL_IDS if mistral else None
    system_msgs = [{"role": "system", "content": s} for s in system]
    wire, roles, sources = [], [], []
    for msg in messages:
        if msg.role == "user":
            wire.append({"role": "user", "content": _user_content(fmt, msg.content, ledger, deadline)})
            ledger.claim(wire[-1])
            roles.append("user")
            sources.append([msg.source_id])
        elif msg.role == "assistant":
            text = "".join(c.text for c in msg.content if isinstance(c, MText) and not isinstance(c, MSpacer))
            calls = []
            for c in msg.content:
                deadline.count("lowering")
                if isinstance(c, MToolCall):  # arguments as JSON.stringify writes them
                    calls.append({"id": wire_id(fmt, c.call_id, ids), "type": "function",
                                  "function": {"name": wire_name(fmt, c.name), "arguments": native.json_text(c.input)}})
            if not text and not calls:
                continue  # reasoning alone has no place in this format
            out_msg = {"role": "assistant", "content": text or None}
            if reasoning_back:  # the turn's reasoning, "" where none was kept
                out_msg["reasoning_content"] = "".join(c.text for c in msg.content if isinstance(c, MReasoning))
            thinking = _claude_thinking(msg.content, ledger) if thinking_back else []
            if thinking:
                out_msg["reasoning_details"] = thinking
            if calls:
                out_msg["tool_calls"] = calls
                if signs:
                    fmt.sign_first_call(out_msg, ledger.opaque(_thought_signature(msg.content)))
            wire.append(out_msg)
            ledger.claim(wire[-1])  # the opaque reasoning state placed in it
            roles.append("assistant")
            sources.append([msg.source_id])
        else:
            moved = []  # (the call's id on the wire, its media)
            for r in msg.content:
                deadline.count("lowering")
                assert isinstance(r, MToolResult)
                wire.append({"role": "tool", "tool_call_id": wire_id(fmt, r.call_id, ids), "content": r.text})
                roles.append("tool")
                sources.append([msg.source_id])
                if r.media:
                    moved.append((wire[-1]["tool_call_id"], r.media))
            if moved:  # tool messages carry text only: media follows as a user message
                content = []
                for call_id, found in moved:
                    if len(moved) > 1:  # whose is which: two parallel screenshots, window A and B
                        content.append({"type": "text", "text": f"Media of tool call {call_id}:"})
                    content.extend(_media(fmt, x, ledger) for x in found)
                wire.append({"role": "user", "content": content})
                ledger.claim(wire[-1])
                roles.append("user")
                sources.append([msg.source_id])
    if mistral:
        _mistral_turns(wire, roles, sources, ledger)
    open_with_user(wire, roles, sources, {"role": "user", "content": LEAD_USER_TEXT})  # after the system messages
    all_msgs = system_msgs + wire
    token_field = fmt.token_field_for(model_id)
    out = {"model": model_id, "messages": all_msgs, token_field: max_output}
    if tools:
        openai_model, under_defs = fmt.serves_openai_model(model_id), model_ids.wants_refs_under_defs(model_id)
        # behind a gateway, Anthropic validates its schemas as 2020-12; so do OpenAI, Mistral and
        # Moonshot (its flavour of it) theirs
        draft_2020_12 = openai_model or mistral or under_defs or model_ids.is_claude(model_id)
        out["tools"] = [
            {"type": "function", "function": {"name": wire_name(fmt, t.name),
                                              "description": fmt.tool_description(t.description, model_id),
                                              "parameters": as_taken(
                                                  t, ("chat", openai_model, under_defs, draft_2020_12, mistral),
                                                  _SCHEMAS[openai_model, under_defs, draft_2020_12, mistral])}}
            for t in tools
        ]
        if tools_disabled:
            out[fmt.tool_choice_key] = "none"  # tools stay defined (history may hold tool calls), none is called
    if session_id and fmt.prompt_cache_key:
        out["prompt_cache_key"] = cache_key(session_id)  # routes the session to a warm cache
    return Lowered(out, system_msgs, wire, roles, sources, [(out, "messages")], (out, token_field))


def _claude_thinking(content: list, ledger: MediaLedger) -> list:
    """Claude's signed thinking (and redacted thinking) of a turn, as OpenRouter's reasoning_details
    take it back: with thinking on, Claude refuses a tool loop's last turn that does not open with
    its thinking ("When `thinking` is enabled, a final `assistant` message must start with a
    thinking block": OpenRouter's ai-sdk-provider #162), and OpenRouter rebuilds those blocks from
    these items alone."""
    items = []
    for c in content:
        if not isinstance(c, MReasoning) or not (c.signature or c.redacted):
            continue  # unsigned reasoning (cut off, another model's) is no thinking block Claude signed
        if c.redacted:
            item = {"type": "reasoning.encrypted", "data": ledger.opaque(c.redacted)}
        else:
            item = {"type": "reasoning.text", "text": c.text, "signature": ledger.opaque(c.signature)}
        items.append({**item, "format": CLAUDE_DETAILS, "index": len(items)})
    return items


def _thought_signature(content: list) -> str:
    """The thought signature Gemini wants on a step's first function call (gemini._sign_first_call):
    that of the signed reasoning nearest the call, before it first; the stand-in where the step
    kept none (another model's calls, a signature lost)."""
    first = next(i for i, c in enumerate(content) if isinstance(c, MToolCall))
    signed = [i for i, c in enumerate(content) if isinstance(c, MReasoning) and c.signature
              and media.is_base64(c.signature, url_safe=True)]
    return content[min(signed, key=gemini.closeness_to(first))].signature if signed else gemini.UNSIGNED_CALL


def _mistral_turns(wire: list, roles: list, sources: list, ledger: MediaLedger) -> None:
    """Mistral's order of turns: consecutive user turns joined into one (its chat templates refuse
    two: "roles must alternate user and assistant"), and a constant assistant turn
    (BRIDGE_ASSISTANT_TEXT) between a tool result and a user turn that follows it (a person who
    wrote mid-run, a tool output's media), which Mistral refuses there ("Unexpected role 'user'
    after role 'tool'"). The assistant turn stands for no stored message, as the lead does."""
    for i in range(len(roles) - 1, 0, -1):
        if roles[i] == "user" and roles[i - 1] == "user":
            wire[i - 1]["content"] = _as_parts(wire[i - 1]["content"]) + _as_parts(wire[i]["content"])
            sources[i - 1] = sources[i - 1] + sources[i]
            units = ledger.saved_by.pop(id(wire[i]), 0)  # what its media placeholders save, now the joined turn's
            if units:
                ledger.saved_by[id(wire[i - 1])] = ledger.saved_by.get(id(wire[i - 1]), 0) + units
            del wire[i], roles[i], sources[i]
    for i in range(len(roles) - 1, 0, -1):
        if roles[i] == "user" and roles[i - 1] == "tool":
            wire.insert(i, {"role": "assistant", "content": BRIDGE_ASSISTANT_TEXT})
            roles.insert(i, "assistant")
            sources.insert(i, [])


def _as_parts(content) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


# OpenAI refuses a prompt_cache_key over 64 characters (400 string_above_max_length).
PROMPT_CACHE_KEY_MAX = 64


def cache_key(session_id: str) -> str:
    """The session id, or for one over PROMPT_CACHE_KEY_MAX characters a digest of it: the key
    only routes the session to a warm cache, so any stable value per session does."""
    if len(session_id) <= PROMPT_CACHE_KEY_MAX:
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return "sid-" + digest[:PROMPT_CACHE_KEY_MAX - 4]


# OpenAI refuses ids over 40 characters; any visible ASCII is taken (Kimi's `functions.read:1`
# goes back to it unchanged).
_CHAT_IDS = id_rule("!-~", 40)
# The gateways forward one body to whichever upstream serves the model, Claude and Bedrock
# among them: their ids keep to the alphabet those take, within OpenAI's 40 characters.
_GATEWAY_IDS = id_rule("a-zA-Z0-9_-", 40)
# Mistral's: exactly 9 letters and digits (an id of another kind goes as 9 hex digits of its digest)
MISTRAL_IDS = id_rule("a-zA-Z0-9", 9, min_len=9)
_ACCEPTED = {**media.WEB_IMAGES, "application/pdf": media.DOCUMENT}  # PDF as file.file_data, a base64 data URL


# OpenAI's most tools in a request: "Invalid 'tools': array too long. Expected an array with maximum length 128"
OPENAI_MAX_TOOLS = 128
# OpenAI's longest function description: "Invalid 'tools[1].function.description': string too long.
# Expected a string with maximum length 1024" (an MCP server's tool documented at length)
OPENAI_MAX_DESCRIPTION = 1024
# the providers whose output-cap field follows the model (ChatCompletions.token_field_for)
_COMPLETION_TOKENS_BY_MODEL = (m.OPENAI_COMPATIBLE, m.COPILOT)


class ChatCompletions(WireFormat):
    """Chat Completions and the gateways speaking it: one class, an instance per provider.
    Markers go on message content parts only (the gateways' tool schema refuses one on a tool
    definition), as cache_control unless the provider names it otherwise."""

    body = staticmethod(body)
    ids = _GATEWAY_IDS
    names = WORD  # function names: ^[a-zA-Z0-9_-]{1,64}$, at OpenAI and at every gateway's upstreams
    tool_choice_key = "tool_choice"
    accepted = _ACCEPTED
    fetched = frozenset(media.WEB_IMAGES)
    tool_marker = False

    def __init__(self, name: str, *, ids=_GATEWAY_IDS, implicit_cache=False, gateway=False,
                 marker_key="cache_control", token_field="max_tokens", prompt_cache_key=False,
                 reasoning_content=False, max_tools=0, thought_signatures="", reasoning_details=False):
        self.name, self.ids, self.implicit_cache, self.gateway = name, ids, implicit_cache, gateway
        # the model's turns carry their reasoning as reasoning_content where it wants them back
        # (model_ids.wants_reasoning_content): an endpoint that serves such a model as it is
        self.reasoning_content = reasoning_content
        # where a Gemini 3 step's thought signature goes on its first tool call (sign_first_call):
        # ON_THE_CALL, IN_REASONING_DETAILS, or "" where the endpoint takes none
        self.thought_signatures = thought_signatures
        # Claude's signed thinking goes back as the turn's reasoning_details (_claude_thinking)
        self.reasoning_details = reasoning_details
        self.max_tools = max_tools
        self.marker_key = marker_key
        self.token_field = token_field  # where the output-token cap goes
        self.prompt_cache_key = prompt_cache_key  # session_id as prompt_cache_key: routes the session to a warm cache

    def lowers_whole(self, model_id: str) -> bool:
        """Mistral's models: a tool result and a user turn after it, which may be two messages'
        lowerings, get an assistant turn between them (_mistral_turns), and call ids are
        Mistral's (MISTRAL_IDS): the request is lowered whole, never from per-message pieces."""
        return model_ids.is_mistral(model_id)

    def serves_openai_model(self, model_id: str) -> bool:
        """Whether the model is OpenAI's, whose limits apply wherever it is served: every model
        of OpenAI's own API, and an OpenAI model behind a gateway (Copilot's gpt-5.1 refused 130
        tools; Azure's and OpenRouter's are OpenAI's)."""
        return self.name == m.OPENAI or (self.gateway and ("gpt-" in model_id.lower()
                                                           or model_ids.takes_completion_tokens(model_id)))

    def tool_limit(self, model_id: str) -> int:
        """OpenAI's 128 for an OpenAI model; a gateway's other models: none known."""
        return OPENAI_MAX_TOOLS if self.serves_openai_model(model_id) else self.max_tools

    def tool_description(self, description: str, model_id: str) -> str:
        """A tool's description as the model takes it: cut to OPENAI_MAX_DESCRIPTION characters,
        the last an ellipsis, for an OpenAI model (refused whole at every request of the session).
        Counted in UTF-16 units, which are never fewer than the code points: within the limit
        however it is counted."""
        if native.utf16_len(description) <= OPENAI_MAX_DESCRIPTION or not self.serves_openai_model(model_id):
            return description
        units = end = 0
        for ch in description:
            units += 2 if ord(ch) > 0xFFFF else 1
            if units > OPENAI_MAX_DESCRIPTION - 1:
                break
            end += 1
        return description[:end] + "\u2026"

    def sign_first_call(self, message: dict, signature: str) -> None:
        """Gemini from 3 refuses a step whose first function call comes back without its thought
        signature ("Function call is missing a thought_signature in functionCall parts"), at every
        request of the session. Google's OpenAI-compatible endpoint takes it on the call, as
        extra_content.google.thought_signature; OpenRouter as an encrypted item of the message's
        reasoning_details, named by the call's id ("Gemini models require OpenRouter reasoning
        details to be preserved in each request")."""
        call = message["tool_calls"][0]
        if self.thought_signatures == ON_THE_CALL:
            call["extra_content"] = {"google": {"thought_signature": signature}}
        elif self.thought_signatures == IN_REASONING_DETAILS:
            message["reasoning_details"] = [{"type": "reasoning.encrypted", "data": signature, "id": call["id"],
                                             "format": GEMINI_DETAILS, "index": 0}]

    def holds_reasoning(self, element: dict) -> bool:
        """A turn that carries reasoning back in its reasoning_details (Claude's thinking)."""
        return bool(element.get("reasoning_details"))

    def carries_reasoning(self, element: dict) -> bool:
        """Claude's thinking in reasoning_details, DeepSeek's and Kimi's reasoning_content, a Gemini
        step's thought signature on its call."""
        return self.holds_reasoning(element) or bool(element.get("reasoning_content")) \
            or any("extra_content" in c for c in element.get("tool_calls") or ())

    def without_reasoning(self, element: dict) -> tuple | None:
        if "reasoning_details" not in element:
            return None
        return {k: v for k, v in element.items() if k != "reasoning_details"}, element["reasoning_details"]

    def token_field_for(self, model_id: str) -> str:
        """Where the output-token cap goes for this model: an OpenAI reasoning model served by
        Copilot or an OpenAI-compatible endpoint (Azure) refuses max_tokens, as OpenAI does.
        OpenRouter and DashScope take max_tokens for every model they route."""
        if self.name in _COMPLETION_TOKENS_BY_MODEL and model_ids.takes_completion_tokens(model_id):
            return "max_completion_tokens"
        return self.token_field

    def marker(self, ttl: str) -> tuple:
        return self.marker_key, {"type": "ephemeral"}

    def markable(self, element: dict) -> bool:
        return bool(element.get("content"))

    def place(self, lowered, kind: str, index: int, key: str, value: dict):
        """On the last content part, where the gateways document the marker; a plain-string
        content becomes one text part for it (placed after the prefix hashes are taken, so that
        form never counts as a change)."""
        if kind == "tools":
            lowered.body["tools"][index][key] = value
            return None
        element = (lowered.system if kind == "system" else lowered.messages)[index]
        content = element["content"]
        if isinstance(content, str):
            element["content"] = content = [{"type": "text", "text": content}]
        content[-1][key] = value
        return element


OPENAI = ChatCompletions(m.OPENAI, ids=_CHAT_IDS, implicit_cache=True, token_field="max_completion_tokens",
                         prompt_cache_key=True, max_tools=OPENAI_MAX_TOOLS)
OPENAI_COMPATIBLE = ChatCompletions(m.OPENAI_COMPATIBLE, gateway=True, reasoning_content=True,
                                     thought_signatures=ON_THE_CALL)
# OpenRouter passes reasoning_content on to DeepSeek's and Kimi's thinking models, which refuse a
# tool turn without it there too ("Provider returned error ... The `reasoning_content` in the
# thinking mode must be passed back to the API": LibreChat #13366, inspect_ai #4079)
OPENROUTER = ChatCompletions(m.OPENROUTER, gateway=True, prompt_cache_key=True, reasoning_content=True,
                             thought_signatures=IN_REASONING_DETAILS, reasoning_details=True)
# Alibaba is not a gateway here: it marks every model, as upstream does.
ALIBABA = ChatCompletions(m.ALIBABA)
COPILOT = ChatCompletions(m.COPILOT, gateway=True, marker_key="copilot_cache_control")
_FORMATS = {f.name: f for f in (OPENAI, OPENAI_COMPATIBLE, OPENROUTER, ALIBABA, COPILOT)}
