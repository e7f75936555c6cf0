"""How many pages a PDF's own bytes say it has, read from its page tree without rendering it
(docs/design.md §3, "Two numbers for media").

Providers bill a PDF by the page (Anthropic and Bedrock: each page's text and an image of it;
Gemini: 258 tokens a page), so the decision figure counts each page as one media item: a 30-page
specification at one item's 2,048 tokens sent a request thousands of tokens over the window.

Read: the page tree's `/Count` (its root's is the largest), in the file's own bytes and in its
compressed object streams (where PDF 1.5 writers put them); the leaf pages (`/Type /Page`) only
where no count is read: an incremental update keeps the older copies of every page it touches, and
qpdf's 30 pages read 120 after three saves. The work is bounded: a few MiB inflated, a few
thousand tree nodes looked at, whatever a file holds (a 33 KB file inflating to 16 MiB of tree
nodes took 6 s).
"""
from __future__ import annotations

import itertools
import re
import zlib

SIGNATURE = b"%PDF-"
SIGNATURE_WITHIN = 1024  # the header may follow other bytes, up to here (PDF readers allow it)

# No provider takes more than 1,000 pages in a request; a count past this is no page count, and a
# hostile /Count must not reach a response's 32-bit field
MAX_PAGES = 10_000
# The object streams inflated per PDF: page dictionaries are a few hundred bytes each
MAX_INFLATED = 4 * 2**20
# The page tree nodes whose /Count is looked for: a tree of 10,000 pages has a few hundred
MAX_TREE_NODES = 2_000

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
    regions = [data]
    budget = MAX_INFLATED
    for start in _object_streams(data):
        if budget <= 0:
            break
        regions.append(_inflate(data, start, budget))
        budget -= len(regions[-1])
    counted, nodes, whole = 0, MAX_TREE_NODES, True
    for text in regions:
        found, nodes, read_all = _counted(text, nodes)
        counted, whole = max(counted, found), whole and read_all
    if counted and whole:
        return min(counted, MAX_PAGES)
    leaves = 0
    for text in regions:
        leaves += sum(1 for _ in itertools.islice(_LEAF.finditer(text), MAX_PAGES - leaves))
    # a tree node not read (its dictionary too long to delimit: a root of 200 kids) may hold the
    # largest count: the leaves then stand, where larger (a count of 5 read 205 pages as 5)
    return min(max(1, leaves, counted), MAX_PAGES)


def items(data: bytes, pages_per_item: int) -> int:
    """The media items of the PDF in data, pages_per_item of its pages an item (WireFormat)."""
    return -(-pages(data) // pages_per_item)


def _counted(text: bytes, nodes: int) -> tuple[int, int, bool]:
    """(the largest /Count of a page tree node written in text, of at most nodes of them; the
    nodes left to look at; whether every node looked at was read)."""
    counted, whole = 0, True
    for found in _TREE.finditer(text):
        if nodes <= 0:
            return counted, nodes, False
        nodes -= 1
        # the node's dictionary, as far as no other dictionary opens or closes within it
        opened = text.rfind(b"<<", max(0, found.start() - _DICT_REACH), found.start())
        closed = text.find(b">>", found.end(), found.end() + _DICT_REACH)
        if opened < 0 or closed < 0:
            whole = False
            continue
        for count in _COUNT.finditer(text, opened, closed):
            counted = max(counted, int(count.group(1)))
    return counted, nodes, whole


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
