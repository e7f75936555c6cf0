"""What an image's own bytes say: its type by its signature and its size in pixels, read from the
header without decoding the image (docs/design.md §6, "What the body must pass").

A provider refuses a whole request over one image whose bytes are not of its declared type
("Image does not match the provided media type"), or one over its size limits; the image stays
in the history, so every later request is refused too. lowering.media reads these to send such
an image under its real type, or as a note saying why it is not sent.
"""
from __future__ import annotations

import struct

PNG, JPEG, GIF, WEBP = "image/png", "image/jpeg", "image/gif", "image/webp"

# How much of an image's start is read: its signature and, for JPEG, the segments before the
# frame header (EXIF and colour profiles come first, tens of KB at most in practice).
HEAD_BYTES = 256 * 1024


def kind(head: bytes) -> str | None:
    """The web image type whose signature head starts with, else None."""
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return PNG
    if head[:3] == b"\xff\xd8\xff":
        return JPEG
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    return None


def dimensions(head: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels from the header of a PNG, JPEG, GIF or WebP, else None (another
    type, or a header past head's end)."""
    found = kind(head)
    try:
        if found == PNG and head[12:16] == b"IHDR":
            return struct.unpack(">II", head[16:24])
        if found == GIF:
            return struct.unpack("<HH", head[6:10])
        if found == WEBP:
            return _webp(head)
        if found == JPEG:
            return _jpeg(head)
    except struct.error:  # the header ends before its fields
        return None
    return None


def _webp(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":  # extended: the canvas size, 24 bits each, less one
        w, h = head[24:27] + b"\0", head[27:30] + b"\0"
        return struct.unpack("<I", w)[0] + 1, struct.unpack("<I", h)[0] + 1
    if chunk == b"VP8L" and head[20:21] == b"\x2f":  # lossless: 14 bits each, less one
        bits = struct.unpack("<I", head[21:25])[0]
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy: after the frame's start code
        w, h = struct.unpack("<HH", head[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


# JPEG markers without a length: TEM and the restart markers (and SOI, read already)
_STANDALONE = {0x01, *range(0xD0, 0xD8)}
# frame headers (SOF0-SOF15 but DHT, JPG and DAC, which share the range)
_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(head: bytes) -> tuple[int, int] | None:
    """The frame header's size: segments are walked from the start, each skipped by its length."""
    i, n = 2, len(head)
    while i + 4 <= n:
        if head[i] != 0xFF:
            return None  # not a marker where one must be
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header before
            return None
        length = struct.unpack(">H", head[i + 2:i + 4])[0]
        if marker in _FRAMES:
            h, w = struct.unpack(">HH", head[i + 5:i + 9])
            return w, h
        i += 2 + length
    return None
