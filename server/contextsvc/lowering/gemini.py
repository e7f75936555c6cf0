"""Google Gemini generateContent body (POST /v1beta/models/{model}:generateContent)."""
from __future__ import annotations

from .. import conversation as m, model_ids
from . import media
from .tool_schema import as_taken, object_root
from ..deadline import NO_DEADLINE, Deadline
from .lowered import Lowered, open_with_user
from .media import MediaLedger
from .tool_ids import WORD, id_rule, wire_name
from .wire_format import Run, WireFormat
from .neutral import (
    LEAD_USER_TEXT, MMedia, MReasoning, MSpacer, MText, MToolCall, MToolResult, attachment_note,
)


_ACCEPTED = {
    **{t: media.IMAGE for t in ("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif")},
    "application/pdf": media.DOCUMENT,
    **{t: media.AUDIO for t in ("audio/wav", "audio/mp3", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac")},
    **{t: media.VIDEO for t in ("video/mp4", "video/mpeg", "video/mov", "video/avi", "video/x-flv", "video/mpg",
                                "video/webm", "video/wmv", "video/3gpp")},
}


def _media(x: MMedia, ledger: MediaLedger, fetches_web: bool = True) -> dict:
    """Through the shared media table: a type Gemini does not take (gif, svg, ...) becomes the
    attachment note; an https URL goes as fileData (fetches_web: the model fetches one from any
    site), anything else inline."""
    src = media.source(FORMAT, x, ledger)
    if isinstance(src, str):  # the attachment note
        return {"text": src}
    if src.url:
        why = _unfetched(src.url, fetches_web)
        if why:
            return {"text": attachment_note(x, why)}
        return {"fileData": {"mimeType": src.mime, "fileUri": src.web_url(ledger)}}
    return {"inlineData": {"mimeType": src.mime, "data": src.base64(ledger)}}


# Gemini fetches a file by URL from any site from 2.5 on, over https alone; earlier models read
# only its own Files API's and YouTube's ("Unsupported file uri")
FETCHES_WEB_FROM = (2, 5)
_GOOGLE_URIS = ("https://generativelanguage.googleapis.com/", "https://www.youtube.com/", "https://youtu.be/")


def fetches_web(model_id: str) -> bool:
    """Whether the model fetches a file from any https URL (an id naming no version: a later model)."""
    return model_ids.gemini_from(model_id, FETCHES_WEB_FROM)


def _unfetched(url: str, any_site: bool) -> str:
    """Why Gemini would not fetch url ("" where it does)."""
    if not url[:8].lower().startswith("https://"):
        return "Gemini fetches files over https only"
    if not any_site and not url.lower().startswith(_GOOGLE_URIS):
        return "models before Gemini 2.5 fetch no file from a web URL"
    return ""


# What Gemini's documentation gives for a function call it did not sign (history another model
# wrote, or one whose signature was lost): the validator skips it. Valid base64 (URL-safe), as
# the bytes field takes it.
UNSIGNED_CALL = "skip_thought_signature_validator"


def checks_signatures(model_id: str) -> bool:
    """Gemini 3 and later refuse a step's first function call without a thought signature (a
    400 for every request of the turn); an id naming no version is taken as a later model."""
    return model_ids.gemini_from(model_id, (3, 0))


def _sign_first_call(parts: list, unsigned: str = "") -> list:
    """Gemini 3 refuses a step whose first functionCall part lacks the step's thought signature
    (it returns the signature there, and wants it back there). A signature that landed on another
    part of the step (after a thought followed by text, say) moves to that call: the nearest one,
    before it first. A step with none (another model's calls, after a switch mid-turn) gets
    `unsigned` there when given (UNSIGNED_CALL for a model that checks_signatures). The parts
    changed are copies (a message's parts are kept by the memo); the list is changed in place
    and returned."""
    first = next((i for i, p in enumerate(parts) if "functionCall" in p), None)
    had = parts[first].get("thoughtSignature") if first is not None else None
    if first is None or had not in (None, UNSIGNED_CALL):
        return parts
    # a real signature replaces the stand-in (two messages joined into one turn)
    signed = [i for i, p in enumerate(parts) if _signed(p)]
    if signed:
        _move_signature(parts, first, signed)
    elif unsigned and had is None:
        parts[first] = {**parts[first], "thoughtSignature": unsigned}
    return parts


def _signed(part: dict) -> bool:
    """Whether a part carries a signature Gemini gave (not none, nor the stand-in)."""
    return part.get("thoughtSignature") not in (None, UNSIGNED_CALL)


def closeness_to(first: int):
    """The key that orders the parts by how near they are to the part at first, before it first."""
    return lambda i: (abs(i - first), i > first)


def _move_signature(parts: list, first: int, signed: list) -> None:
    """Moves the signature of the signed part nearest the first call (parts at indices signed)
    to that call, on copies of both parts."""
    nearest = min(signed, key=closeness_to(first))
    donor = dict(parts[nearest])
    parts[first] = {**parts[first], "thoughtSignature": donor.pop("thoughtSignature")}
    parts[nearest] = donor


class _SignedRun(Run):
    """A model turn joined from consecutive messages, its first functionCall signed as
    _sign_first_call signs the parts so far at each message (without the stand-in). What that
    reads of the parts so far is kept (where the first call is, the signed part nearest it,
    whether it is signed), so a message costs its own parts."""

    __slots__ = ("first", "nearest", "settled", "text_first", "response")

    def __init__(self, fmt: WireFormat, blocks: list, text_first: bool = False):
        super().__init__(fmt, blocks)
        self.first = next((i for i, p in enumerate(blocks) if "functionCall" in p), None)
        # what joins a user turn goes before its function responses (model_ids.text_before_responses):
        # where the first one is
        self.text_first = text_first
        self.response = next((i for i, p in enumerate(blocks) if "functionResponse" in p), None) \
            if text_first else None
        # a signed first call is never moved again, nor is any other part
        self.settled = self.first is not None and _signed(blocks[self.first])
        signed = [i for i, p in enumerate(blocks) if _signed(p)]
        # of the signed parts so far, the one nearest the first call, wherever it comes: the last
        # one while there is none
        self.nearest = None
        if signed:
            self.nearest = signed[-1] if self.first is None else min(signed, key=closeness_to(self.first))

    def add(self, later: list) -> None:
        parts, start = self.blocks, len(self.blocks)
        if self.response is not None and self.first is None and not any("functionResponse" in p for p in later):
            # what the person (or a reminder) says after tool results goes before the function
            # responses: Gemini 3 refuses a user turn whose text follows them ("Requests ending
            # with a model turn are not supported"), and takes it before them on every model
            parts[self.response:self.response] = later
            self.response += len(later)
            return
        parts += later
        if self.first is None and self.response is None and self.text_first:
            self.response = next((start + i for i, p in enumerate(later) if "functionResponse" in p), None)
        if self.settled:
            return
        signed = [start + i for i, p in enumerate(later) if _signed(p)]
        if self.first is None:
            call = next((i for i, p in enumerate(later) if "functionCall" in p), None)
            if call is None:
                if signed:
                    self.nearest = signed[-1]
                return
            self.first = start + call
            if _signed(parts[self.first]):
                self.settled = True
                return
        if self.nearest is not None:
            signed.append(self.nearest)
        if signed:
            _move_signature(parts, self.first, signed)
            self.settled = True


def _declaration(t) -> dict:
    # Tool schemas are JSON Schema ($schema, $ref, additionalProperties, anyOf, ...);
    # `parameters` takes only an OpenAPI subset and refuses the rest, so the schema goes as is
    # in `parametersJsonSchema`, which takes JSON Schema: nothing the tool says is lost.
    return {"name": wire_name(FORMAT, t.name), "description": t.description,
            "parametersJsonSchema": as_taken(t, ("gemini",), _gemini_schema)}


def _gemini_schema(schema):
    """parametersJsonSchema takes a root of alternatives: only the missing type is added."""
    return object_root(schema, fold_choices=False)


def body(*, provider, model_id, system, messages, tools, max_output, ledger, session_id="",
         tools_disabled=False, deadline: Deadline = NO_DEADLINE) -> Lowered:
    wire, roles, sources = [], [], []
    run = None  # joins the messages that follow into wire[-1], of their role
    unsigned = UNSIGNED_CALL if checks_signatures(model_id) else ""
    text_first = model_ids.text_before_responses(model_id)
    web = fetches_web(model_id)
    for msg in messages:
        role = "model" if msg.role == "assistant" else "user"
        parts, moved, signature = [], [], ""
        for c in msg.content:
            deadline.count("lowering")
            if isinstance(c, MSpacer):
                continue  # reasoning is not replayed here, so neither is its spacer
            if isinstance(c, MReasoning):
                # Gemini returns a thought's signature on the part after it (a function call
                # above all) and wants it back there; the thought text itself is not replayed.
                # thoughtSignature is bytes on the wire: a string that is not base64 (either
                # alphabet) is no signature Gemini gave, and is not replayed
                if c.signature and media.is_base64(c.signature, url_safe=True):
                    signature = c.signature
                continue
            if isinstance(c, MText):
                parts.append({"text": c.text})
            elif isinstance(c, MMedia):
                parts.append(_media(c, ledger, web))
            elif isinstance(c, MToolCall):
                parts.append({"functionCall": {"name": wire_name(FORMAT, c.name), "args": c.input}})
            elif isinstance(c, MToolResult):
                name = wire_name(FORMAT, c.name)
                # Gemini reads the key "error" as the call's failure (Anthropic's is_error, Bedrock's
                # status); any other response is the call's output
                key = "error" if c.is_error else "content"
                parts.append({"functionResponse": {"name": name, "response": {"name": name, key: c.text}}})
                moved.extend(c.media)  # function responses carry text: media follows as parts
            if signature and parts:
                parts[-1]["thoughtSignature"] = ledger.opaque(signature)
                signature = ""
        _sign_first_call(parts, unsigned)
        if moved:
            # media follow the function responses; one sent as its note is text, which goes before
            # them where the model refuses text after them (_SignedRun.add)
            after = [_media(x, ledger, web) for x in moved]
            if text_first:
                parts[:0] = [x for x in after if "text" in x]
                after = [x for x in after if "text" not in x]
            parts.extend(after)
        if not parts:
            continue  # reasoning alone is not replayed to Gemini
        if wire and wire[-1]["role"] == role:  # Gemini wants alternating roles
            if run is None:
                run = FORMAT.run(wire[-1]["parts"], model_id)
            run.add(parts)
            ledger.claim(wire[-1])
            sources[-1].append(msg.source_id)
            continue
        run = None
        wire.append({"role": role, "parts": parts})
        ledger.claim(wire[-1])
        roles.append("assistant" if role == "model" else "user")
        sources.append([msg.source_id])
    # Gemini wants a user turn first (a call must follow one)
    open_with_user(wire, roles, sources, {"role": "user", "parts": [{"text": LEAD_USER_TEXT}]})
    out = {"contents": wire}
    lists = [(out, "contents")]
    system_parts = [{"text": s} for s in system]
    if system_parts:
        out["systemInstruction"] = {"parts": system_parts}
        lists.append((out["systemInstruction"], "parts"))
    if tools:
        out["tools"] = [{"functionDeclarations": [_declaration(t) for t in tools]}]
        if tools_disabled:  # the definitions stay (history may hold calls); none is called
            out[FORMAT.tool_choice_key] = {"functionCallingConfig": {"mode": "NONE"}}
    out["generationConfig"] = {"maxOutputTokens": max_output}
    return Lowered(out, system_parts, wire, roles, sources, lists, (out["generationConfig"], "maxOutputTokens"))


class Gemini(WireFormat):
    name = m.GEMINI
    body = staticmethod(body)
    merged_key = "parts"
    ids = WORD
    # Function names start with a letter or underscore, then letters, digits and _ . : -, 64 at
    # most (the bound the google-genai docs give).
    names = id_rule("a-zA-Z0-9_.:-", 64, lead="a-zA-Z_")
    tool_choice_key = "toolConfig"
    max_tools = 512
    accepted = _ACCEPTED
    fetched = frozenset(_ACCEPTED)  # fileData.fileUri
    # "each document page is equivalent to 258 tokens": 8 pages make about one 2,048-token item
    # (one item a page read a 120-page PDF at 246K tokens where Gemini counted 31K, and the
    # person's document was compacted away)
    pages_per_item = 8
    max_request_bytes = 20_000_000  # a request with inline data: 20 MB in all
    implicit_cache = True

    def carries_reasoning(self, element: dict) -> bool:
        """A part with the step's thought signature (the thoughts themselves do not go back: their
        tokens are figured all the same, as before any answer that left them out)."""
        return any("thoughtSignature" in part for part in element.get("parts") or ())

    def run(self, blocks: list, model_id: str = "") -> Run:
        """Consecutive messages of one role as one content: one model turn, whose first
        functionCall must carry a thought signature. A signature one message's text carries
        moves to a call the other message makes, as within one message (_sign_first_call): two
        steps in one answer, or two answers once a blank user message between them is dropped,
        left the turn's first call unsigned."""
        return _SignedRun(self, blocks, model_ids.text_before_responses(model_id))


FORMAT = Gemini()
