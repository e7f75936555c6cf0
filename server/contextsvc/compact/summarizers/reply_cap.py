"""A byte cap on the summarizer's reply, counted as it arrives, compressed and inflated.

A summary asked for at most N output tokens cannot honestly need more than a few bytes per token
of JSON; anything past that is a broken or hostile endpoint (a gzip bomb, a body that never ends,
a 40 MB "summary"). The cap is counted on the wire bytes and on the bytes they inflate to, and
inflation is done here in bounded steps (zlib's max_length), so a 200 KB body that would inflate
to 200 MB costs one cap's worth of memory before it is refused. Only gzip and deflate are asked
for (and inflated here); any other content-encoding is refused as malformed.
"""
from __future__ import annotations

import zlib

ACCEPT_ENCODING = "gzip, deflate"
_WBITS_AUTO = 32 + zlib.MAX_WBITS  # a gzip or a zlib header, whichever the body carries
_STEP = 64 * 1024  # inflated bytes per zlib call: what one step can cost


def cap_bytes(max_tokens: int, bytes_per_token: int, min_bytes: int) -> int:
    """The largest reply a request for max_tokens output tokens may get."""
    return max(min_bytes, max_tokens * bytes_per_token)


class Oversize(Exception):
    """The reply broke its cap or its encoding; str() says how."""


def refusal(headers, cap: int) -> str:
    """Why the response's headers alone rule it out ("" when they do not): a declared length over
    the cap, or an encoding that was not asked for."""
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        return f"the response is {int(length)} bytes, over the {cap}-byte cap for the output asked for"
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        return f"the response's content-encoding {encoding!r} was not asked for"
    return ""


def capped(raw, encoding: str, cap: int):
    """The decoded bytes of the wire chunks in raw, raising Oversize once the wire bytes or the
    decoded ones pass cap, or when the compressed body is corrupt."""
    encoding = encoding.strip().lower()
    inflater = None if encoding in ("identity", "") else zlib.decompressobj(_WBITS_AUTO)
    wire = decoded = 0
    for chunk in raw:
        wire += len(chunk)
        if wire > cap:
            raise Oversize(f"the response passed the {cap}-byte cap for the output asked for "
                           f"({wire} bytes read, more coming)")
        for piece in _inflate(inflater, chunk):
            decoded += len(piece)
            if decoded > cap:
                raise Oversize(f"the response inflates past the {cap}-byte cap for the output asked "
                               f"for ({wire} bytes read inflate to more than {decoded})")
            yield piece
    if inflater is not None:
        tail = _flush(inflater)
        if decoded + len(tail) > cap:
            raise Oversize(f"the response inflates past the {cap}-byte cap for the output asked for")
        if tail:
            yield tail


def _inflate(inflater, chunk: bytes):
    if inflater is None:
        if chunk:
            yield chunk
        return
    data = chunk
    while True:  # until the chunk is used up and nothing is pending: each call bounded by _STEP
        try:
            piece = inflater.decompress(data, _STEP)
        except zlib.error as exc:
            raise Oversize(f"the response's compressed body is corrupt ({exc})") from None
        if piece:
            yield piece
        data = inflater.unconsumed_tail
        if inflater.eof or (not data and len(piece) < _STEP):
            return  # bytes after the end of the compressed stream are ignored, as httpx does


def _flush(inflater) -> bytes:
    try:
        return inflater.flush()
    except zlib.error as exc:
        raise Oversize(f"the response's compressed body is corrupt ({exc})") from None
