"""Media and opaque state inside a body: placed verbatim, accounted for twice (docs/design.md §3);
and which media each provider accepts, in what form (design.md §6).

The body carries the real bytes. The token estimate counts each such value as its placeholder
and adds what it really costs to `extra`, so the ledger records, per value, how many UTF-16 units
of the body JSON the placeholder saves and what the value costs.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from urllib.parse import unquote, unquote_to_bytes

from .. import native
from . import documents, images
from .neutral import attachment_note

MEDIA_PLACEHOLDER = "[encoded media]"
OPAQUE_PLACEHOLDER = "[opaque reasoning state]"
PDF = "application/pdf"

_MEDIA_UNITS = native.json_lengths(MEDIA_PLACEHOLDER)[1]
_OPAQUE_UNITS = native.json_lengths(OPAQUE_PLACEHOLDER)[1]

# The placeholder of a medium of several items (a PDF's pages): the figures count the items of
# each element by its placeholders (step.figures), so the text says how many. Read only as the
# value of a key a format puts media under, and at most MAX_ITEMS: a person's text that is the
# placeholder ("[encoded media (5000 items)]") asked for 10 million tokens, or crashed the call
ITEMS_PLACEHOLDER = re.compile(
    r'"(?:data|url|bytes|file_data|file_url|fileUri|image_url)":"\[encoded media(?: \((\d{1,5}) items\))?\]"')
MAX_ITEMS = 10_000  # a medium's items: documents.MAX_PAGES


def placeholder(items: int) -> str:
    return MEDIA_PLACEHOLDER if items == 1 else f"[encoded media ({items} items)]"


def items_in(texts) -> int:
    """The media items the placeholders in these JSON texts stand for."""
    return sum(min(int(found.group(1) or 1), MAX_ITEMS) for t in texts for found in ITEMS_PLACEHOLDER.finditer(t))


class MediaLedger:
    """Collects media and opaque values while a body is built."""

    __slots__ = ("media_count", "saved_units", "extra", "placeholders", "_pending", "saved_by", "image_side",
                 "left_out", "source_id", "image_pixels", "media_left_out", "refused")

    def __init__(self, placeholders: bool = False, image_side: int = 0, left_out: frozenset = frozenset(),
                 image_pixels: tuple | None = None, media_left_out: frozenset = frozenset(), refused: str = ""):
        self.placeholders = placeholders  # build the estimate's text instead of the real body
        # the most pixels an image may have on a side in this request, where the request's own
        # rule is stricter than the format's (WireFormat.many_images_side); 0: the format's
        self.image_side = image_side
        # the ids of the messages whose images are left out for that rule instead (step.many_images)
        self.left_out = left_out
        # the ids of the messages whose media are all left out: the request holds more than its
        # provider takes (WireFormat.media_cap, step.many_images)
        self.media_left_out = media_left_out
        # why the request's model takes no media at all ("" when it takes them): each is its note
        self.refused = refused
        self.source_id = ""  # the message being lowered (the format's body sets it)
        # (the most pixels the model reads an image at, pixels per media item): a model that reads
        # an image at more tokens than one item counts it as several (Plan.image_pixels); None: one
        self.image_pixels = image_pixels
        self.media_count = 0
        self.saved_units = 0  # over the whole body
        self.extra = 0
        self._pending = 0  # saved units not yet attributed to a body element
        self.saved_by = {}  # id(element) -> saved units inside it

    def leaves_out(self) -> bool:
        """The images of the message being lowered are left out (left_out)."""
        return bool(self.left_out) and self.source_id in self.left_out

    def leaves_out_media(self) -> bool:
        """Every medium of the message being lowered is left out (media_left_out)."""
        return bool(self.media_left_out) and self.source_id in self.media_left_out

    def _save(self, units: int) -> None:
        self.saved_units += units
        self._pending += units

    def claim(self, element) -> None:
        """Attributes the values placed since the last claim to this body element."""
        if self._pending:
            self.saved_by[id(element)] = self.saved_by.get(id(element), 0) + self._pending
            self._pending = 0

    def binary(self, data: bytes, items: int = 1) -> str:
        """Inline bytes as base64; they cost ceil(bytes / 4) tokens, and count as items media
        items (a PDF's pages) in the decision figure."""
        encoded = base64.b64encode(data).decode("ascii")
        return self._medium(encoded, len(encoded) + 2, len(data), items)

    def encoded(self, value: str, raw_bytes: int, items: int = 1) -> str:
        """An already-encoded media string (base64 from a data: URL) of raw_bytes bytes."""
        return self._medium(value, native.json_lengths(value)[1], raw_bytes, items)

    def _medium(self, value: str, units: int, raw_bytes: int, items: int) -> str:
        self.media_count += items
        text = placeholder(items)
        self._save(units - (_MEDIA_UNITS if items == 1 else native.json_lengths(text)[1]))
        self.extra += -(-raw_bytes // 4)
        return text if self.placeholders else value

    def url(self, value: str) -> str:
        """A media URL: costs its own estimate."""
        self.media_count += 1
        self._save(native.json_lengths(value)[1] - _MEDIA_UNITS)
        self.extra += native.estimate_tokens(value)
        return MEDIA_PLACEHOLDER if self.placeholders else value

    def opaque(self, value: str) -> str:
        """Encrypted reasoning state (signatures, redacted thinking): costs its estimate."""
        self._save(native.json_lengths(value)[1] - _OPAQUE_UNITS)
        self.extra += native.estimate_tokens(value)
        return OPAQUE_PLACEHOLDER if self.placeholders else value


# ---- what each provider accepts ---------------------------------------------------------------
# Each wire format's table of media types (design.md §6, "What the body must pass"). A media
# part whose type its provider does not take is lowered as the attachment note. The functions
# below take the provider's WireFormat (fmt) and read its accepted and fetched tables.

IMAGE = "image"
DOCUMENT = "document"
AUDIO = "audio"
VIDEO = "video"

# The web image types most providers take; each format's own table is its WireFormat's accepted
# and fetched (anthropic.py, bedrock.py, gemini.py, openai_chat.py).
WEB_IMAGES = {t: IMAGE for t in ("image/png", "image/jpeg", "image/gif", "image/webp")}


_ALIASES = {"image/jpg": "image/jpeg"}  # common, and refused under this name


def is_base64(value: str, url_safe: bool = False) -> bool:
    """value is canonical base64 of some bytes, as a bytes field on the wire takes it: the
    standard alphabet with its padding; with url_safe, the URL-safe alphabet too, padding
    optional. Another string there fails the whole request."""
    if url_safe:
        value = value.replace("-", "+").replace("_", "/").rstrip("=")
        value += "=" * (-len(value) % 4)
    try:
        return base64.b64encode(base64.b64decode(value, validate=True)).decode("ascii") == value
    except (binascii.Error, ValueError):
        return False


def decodes(payload: str) -> bool:
    """payload is base64 a provider decodes: the standard alphabet, whole 4-character groups,
    padding only at the end (no line breaks, no excess padding)."""
    if len(payload) % 4 or len(payload) - len(payload.rstrip("=")) > 2:
        return False
    try:
        binascii.a2b_base64(payload, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return True


def media_type(mime: str) -> str:
    """The bare, lower-case media type: parameters (`;name=a.png`) dropped, aliases resolved."""
    bare = mime.split(";", 1)[0].strip().lower()
    return _ALIASES.get(bare, bare)


def kind(fmt, mime: str):
    """IMAGE, DOCUMENT, AUDIO or VIDEO when fmt's provider takes this media type, else None."""
    return fmt.accepted.get(media_type(mime))


def accepts(fmt, mime: str) -> bool:
    return kind(fmt, mime) is not None


@dataclass(slots=True)
class DataUrl:
    mime: str  # the bare media type, "" when the URL names none
    is_base64: bool
    payload: str  # the text after the comma, as written


def parse_data_url(url: str):
    """A data: URL by RFC 2397 (`data:[<mediatype>][;base64],<data>`), else None."""
    if url[:5].lower() != "data:":
        return None
    head, sep, payload = url[5:].partition(",")
    if not sep:
        return None
    params = head.split(";")
    is_base64 = len(params) > 1 and params[-1].strip().lower() == "base64"
    return DataUrl(media_type(params[0]), is_base64, payload)


@dataclass(slots=True)
class Source:
    """A media part its provider accepts: its kind and type, and where its content comes from."""
    kind: str
    mime: str
    data: bytes | None = None  # raw bytes
    payload: str = ""  # base64 text from a data: URL
    url: str = ""  # an http(s) URL the provider fetches itself
    items: int = 1  # what it counts as in the decision figure: a PDF's pages (inline only)
    pixels: tuple | None = None  # an inline image's (width, height), where its header was read

    def base64(self, ledger: MediaLedger) -> str:
        if self.data is not None:
            return ledger.binary(self.data, self.items)
        return ledger.encoded(self.payload, base64_size(self.payload), self.items)

    def data_url(self, ledger: MediaLedger) -> str:
        """The content as a base64 data: URL, whatever form it came in."""
        if self.data is not None:
            encoded, size = base64.b64encode(self.data).decode("ascii"), len(self.data)
        else:
            encoded, size = self.payload, base64_size(self.payload)
        return ledger.encoded(f"data:{self.mime};base64,{encoded}", size, self.items)

    def web_url(self, ledger: MediaLedger) -> str:
        return ledger.url(self.url)


def source(fmt, x, ledger: MediaLedger | None = None):
    """How fmt's provider takes the media part x (neutral.MMedia), or the text that stands for it
    (the attachment note, with why when x's bytes were read).

    A base64 data: URL gives its payload (one that does not decode is the note: a corrupted
    copy a provider refuses, in every later request of the session too); any other data: URL
    is percent-encoded content, decoded to bytes (never sent on as a URL); an http(s) URL is
    kept only where the provider fetches that type itself. An image goes under the type its
    bytes' signature names, where that differs from the type it was declared with (a PNG saved
    as .jpg), and is the note when it is over fmt's limits (max_image_bytes, max_image_side, or
    the ledger's image_side where the request's rule is stricter: WireFormat.many_images_side, or
    any image of a message whose images the ledger leaves out for that rule); a document, when over
    max_document_bytes. Its items: a PDF's pages (WireFormat.pages_per_item), an image's pixels
    where the ledger's model reads it at more than one item (image_pixels).
    """
    image_side = ledger.image_side if ledger is not None else 0
    image_pixels = ledger.image_pixels if ledger is not None else None
    mime, data, payload, web = media_type(x.mime), x.data, "", ""
    if data is None:
        parsed = parse_data_url(x.url)
        if parsed is not None:
            mime = parsed.mime or mime
            if parsed.is_base64:
                payload = unquote(parsed.payload)  # a no-op unless percent-encoded
                if not decodes(payload):  # a corrupted copy: every request holding it would be refused
                    return attachment_note(x)
            else:
                data = unquote_to_bytes(parsed.payload)
        elif x.url[:8].lower() == "https://" or x.url[:7].lower() == "http://":
            if mime not in fmt.fetched:
                return attachment_note(x)
            web = x.url
        else:
            return attachment_note(x)
    found = kind(fmt, mime)
    if found is None or not (data or payload or web):
        return attachment_note(x)
    if ledger is not None and ledger.refused:
        return attachment_note(x, ledger.refused)
    if ledger is not None and ledger.leaves_out_media():
        what = "document pages" if fmt.media_cap_pages else "documents"
        return attachment_note(x, f"older media: the request holds more images and {what} than {fmt.name} "
                                  "takes in one, and the newest are sent")
    if found == IMAGE and ledger is not None and ledger.leaves_out():
        return attachment_note(x, f"an older image: a request of more than {fmt.many_images} images takes none "
                                  f"over {fmt.many_images_side} px on {fmt.name}, and the newest are sent whole")
    items, pixels = 1, None
    if found == IMAGE and not web:
        mime, why, pixels = _image(fmt, mime, data, payload, image_side, image_pixels is not None)
        if why:
            return attachment_note(x, why)
        if image_pixels is not None and pixels is not None:
            most, per_item = image_pixels
            items = max(1, -(-min(pixels[0] * pixels[1], most) // per_item))
    size = len(data) if data is not None else base64_size(payload)
    if found == DOCUMENT and not web and fmt.max_document_bytes and size > fmt.max_document_bytes:
        return attachment_note(x, f"{size / 1e6:.1f} MB, over the {fmt.max_document_bytes / 1e6:g} MB {fmt.name} "
                                  "takes per document")
    if mime == PDF and not web:
        items = documents.items(data if data is not None else binascii.a2b_base64(payload), fmt.pages_per_item)
    return Source(found, mime, data, payload, web, items, pixels)


def _image(fmt, mime: str, data: bytes | None, payload: str, image_side: int = 0,
           sized: bool = False) -> tuple[str, str, tuple | None]:
    """(the type an inline image goes under, why it is not sent: "" when it is, its pixels when
    read: where fmt limits them, or sized)."""
    head, size = image_head(data, payload)
    real = images.kind(head)
    if real is None and mime in WEB_IMAGES:
        # a PNG, JPEG, GIF or WebP starts with its signature: these bytes are something else saved
        # under an image's name (a Git LFS pointer, an HTML error page), which the provider
        # refuses ("Could not process image") at every request that holds it
        return mime, f"its bytes are not a {mime} image", None
    if real is not None and real != mime:
        if kind(fmt, real) != IMAGE:
            return mime, f"its bytes are {real}, which {fmt.name} does not take", None
        mime = real
    if fmt.max_image_bytes and size > fmt.max_image_bytes:
        return mime, (f"{size / 2**20:.1f} MB, over the {fmt.max_image_bytes / 2**20:g} MB {fmt.name} takes "
                      "per image"), None
    pixels = images.dimensions(head) if fmt.max_image_side or sized else None
    if pixels is not None and fmt.max_image_side and max(pixels) > fmt.max_image_side:
        return mime, f"{pixels[0]}x{pixels[1]} px, over the {fmt.max_image_side} px {fmt.name} takes per side", pixels
    if pixels is not None and image_side and max(pixels) > image_side:
        return mime, (f"{pixels[0]}x{pixels[1]} px, over the {image_side} px {fmt.name} takes per side in a "
                      f"request of more than {fmt.many_images} images"), pixels
    return mime, "", pixels


def image_head(data: bytes | None, payload: str) -> tuple[bytes, int]:
    """(the first images.HEAD_BYTES of an inline image, its size in bytes), from its bytes or its
    base64 payload."""
    if data is not None:
        return data[:images.HEAD_BYTES], len(data)
    return binascii.a2b_base64(payload[:images.HEAD_BYTES // 3 * 4]), base64_size(payload)


def base64_size(payload: str) -> int:
    """Decoded size of a base64 string without decoding it."""
    n = len(payload)
    pad = payload.endswith("==") + payload.endswith("=") if n else 0
    return max(0, n * 3 // 4 - pad)
