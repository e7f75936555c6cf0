"""How many pages a PDF's own bytes say it has, read from its page tree without rendering it
(docs/design.md §3, "Two numbers for media").

Providers bill a PDF by the page (Anthropic and Bedrock: each page's text and an image of it;
Gemini: 258 tokens a page), so the decision figure counts each page as one media item: a 30-page
specification at one item's 2,048 tokens sent a request thousands of tokens over the window.

Read: the leaf pages (`/Type /Page`) and the page tree's `/Count`, in the file's own bytes and in
its compressed object streams (where PDF 1.5 writers put them). The larger figure stands: an
incremental update keeps a page's older copies, so the leaves can read high, never low.
"""
from __future__ import annotations

import re
import zlib

SIGNATURE = b"%PDF-"
SIGNATURE_WITHIN = 1024  # the header may follow other bytes, up to here (PDF readers allow it)

# No provider takes more than 1,000 pages in a request; a count past this is no page count, and a
# hostile /Count must not reach a response's 32-bit field
MAX_PAGES = 10_000
# The object streams inflated per PDF: page dictionaries are a few hundred bytes each
MAX_INFLATED = 16 * 2**20

_LEAF = re.compile(rb"/Type\s*/Page(?![A-Za-z0-9#])")
_TREE = re.compile(rb"/Type\s*/Pages(?![A-Za-z0-9#])")
_COUNT = re.compile(rb"/Count\s+(\d{1,9})")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm(?![A-Za-z0-9#])")
_STREAM = re.compile(rb"stream\r?\n")
_DICT_REACH = 4096  # how far from /Type /Pages its dictionary's /Count is looked for


def is_pdf(data: bytes) -> bool:
    return data.find(SIGNATURE, 0, SIGNATURE_WITHIN + len(SIGNATURE)) >= 0


def pages(data: bytes) -> int:
    """The pages of the PDF in data, at least 1 (also when data is no PDF, or its page tree
    cannot be read: encrypted object streams, a filter other than Flate); at most MAX_PAGES."""
    if not is_pdf(data):
        return 1
    leaves, counted = _read(data)
    budget = MAX_INFLATED
    for start in _object_streams(data):
        inflated = _inflate(data, start, budget)
        budget -= len(inflated)
        more_leaves, more_counted = _read(inflated)
        leaves, counted = leaves + more_leaves, max(counted, more_counted)
        if budget <= 0:
            break
    return min(max(1, leaves, counted), MAX_PAGES)


def _read(text: bytes) -> tuple[int, int]:
    """(leaf pages, the largest /Count of a page tree node) written in text."""
    leaves = sum(1 for _ in _LEAF.finditer(text))
    counted = 0
    for found in _TREE.finditer(text):
        # the node's dictionary, as far as no other dictionary opens or closes within it
        opened = text.rfind(b"<<", max(0, found.start() - _DICT_REACH), found.start())
        closed = text.find(b">>", found.end(), found.end() + _DICT_REACH)
        if opened < 0 or closed < 0:
            continue
        for count in _COUNT.finditer(text, opened, closed):
            counted = max(counted, int(count.group(1)))
    return leaves, counted


def _object_streams(data: bytes):
    """Where each Flate-compressed object stream's data starts."""
    for found in _OBJECT_STREAM.finditer(data):
        stream = _STREAM.search(data, found.end(), found.end() + _DICT_REACH)
        if stream is not None and b"/FlateDecode" in data[max(0, found.start() - _DICT_REACH):stream.start()]:
            yield stream.end()


_CHUNK = 64 * 1024


def _inflate(data: bytes, start: int, budget: int) -> bytes:
    """The zlib stream at start inflated, at most budget bytes (what inflated before an error when
    it is corrupt). Fed a chunk at a time: its end is where zlib's is, and the bytes after it are
    never copied."""
    inflater, out, size, view = zlib.decompressobj(), [], 0, memoryview(data)
    try:
        while not inflater.eof and start < len(data) and size < budget:
            out.append(inflater.decompress(view[start:start + _CHUNK], budget - size))
            size += len(out[-1])
            start += _CHUNK
            if inflater.unconsumed_tail:  # the budget is spent
                break
    except zlib.error:
        pass
    return b"".join(out)
