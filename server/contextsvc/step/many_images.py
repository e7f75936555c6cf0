"""Whether a request holds more media than its provider takes (Anthropic: 100 images and PDF
pages, 600 for a model of a longer window), or so many images that it takes only smaller ones
(Anthropic: over 20 images, none over 2000 px a side; docs/design.md §6). These rules are of the
whole request, where the lowering is per message: they are decided first, from what each
message holds, and the plan carries them (Plan.image_side, Plan.images_left_out,
Plan.media_left_out), so every message lowers under them and its memo entries are keyed by them.

Claude Code users met both as a session that could not go on, nor compact: "At least one of the
image dimensions exceed max allowed size for many-image requests: 2000 pixels", once a 21st
screenshot joined a history holding a larger one, and "Too much media: 0 document pages + 102
images > 100", the same refusal at every later request.
"""
from __future__ import annotations

import itertools

from .. import conversation as m
from ..lowering import media
from ..memo import IMAGE_SIDES, Memo

# Where older images are left out, they go in chunks of this many: the prefix is rewritten once
# every CHUNK screenshots, not at each (the newest 11 to 20 images are sent)
CHUNK = 10
NONE_LEFT_OUT = frozenset()


def image_rule(messages: list, fmt, memo: Memo | None = None, media_cap: int = 0) -> tuple:
    """(side, images_left_out, media_left_out) for messages (the history as sent).

    side, images_left_out: where they hold more than fmt.many_images images fmt takes and one of
    them is over fmt.many_images_side, either every image over that side is the note (side), or
    the images of the oldest messages holding any are (images_left_out: their ids) until at most
    fmt.many_images are sent, CHUNK at a time; whichever leaves out fewer. A computer-use agent's
    screenshots of a large display are all over the side: the first way left it blind from the
    21st, the second keeps the newest at full size.
    media_left_out: then, where the images still sent and the PDF pages are more than media_cap
    (fmt.media_cap of the model's window; 0: no cap), every medium of the oldest messages holding
    any is the note, CHUNK items at a time, until at most media_cap are sent.
    (0, NONE_LEFT_OUT, NONE_LEFT_OUT) when the format's own limits do."""
    if not (fmt.many_images or media_cap):
        return 0, NONE_LEFT_OUT, NONE_LEFT_OUT
    held = [(msg, *_media_held(msg, fmt, memo))
            for msg in itertools.compress(messages, map(m.HAS_MEDIA, messages))]
    side, images_out = _side_rule(held, fmt)
    if not media_cap:
        return side, images_out, NONE_LEFT_OUT

    def sent(msg, sides, pages) -> int:  # the items msg sends under the side rule
        images = 0 if msg.id in images_out else sum(1 for s in sides if not side or s <= side)
        return images + pages

    total = sum(sent(*h) for h in held)
    if total <= media_cap:
        return side, images_out, NONE_LEFT_OUT
    at = _oldest_out(held, total, media_cap, sent)
    return side, images_out, frozenset(h[0].id for h in held[:at] if sent(*h))


def _side_rule(held: list, fmt) -> tuple:
    """(side, images_left_out) of image_rule."""
    if not fmt.many_images:
        return 0, NONE_LEFT_OUT
    count = sum(len(sides) for _, sides, _ in held)
    over = sum(side > fmt.many_images_side for _, sides, _ in held for side in sides)
    if count <= fmt.many_images or not over:
        return 0, NONE_LEFT_OUT
    at = _oldest_out(held, count, fmt.many_images, lambda msg, sides, pages: len(sides))
    kept = sum(len(sides) for _, sides, _ in held[at:])
    if count - kept < over:
        return 0, frozenset(msg.id for msg, sides, _ in held[:at] if sides)
    return fmt.many_images_side, NONE_LEFT_OUT


def _oldest_out(held: list, count: int, most: int, items) -> int:
    """How many of held's oldest messages leave out what they hold so that at most `most` of
    count items are sent: whole messages, oldest first, up to the next multiple of CHUNK past
    what must go (the cut moves once every CHUNK items, and the prefix is rewritten then, not at
    each step), but a message of more than CHUNK items is not left out for that rounding alone: 5
    screenshots and then the person's 96-page PDF send the PDF, at this step and the next."""
    least = count - most
    chunked = -(-least // CHUNK) * CHUNK
    out = at = 0
    while at < len(held) and out < chunked:
        n = items(*held[at])
        if out >= least and n > CHUNK:
            break
        out += n
        at += 1
    return at


def _media_held(msg: m.Message, fmt, memo: Memo | None) -> tuple:
    """(the longer side in pixels of each image in msg that fmt takes, 0 where its header does not
    say or it is sent as a URL; what its PDFs count toward fmt's media cap: their pages, or one
    each where fmt counts documents (media_cap_pages)): its media files and the media its tools'
    outputs still carry (a compacted output drops them). Kept per message: reading a header
    decodes its base64, a PDF's pages its page tree."""
    key = (IMAGE_SIDES, fmt.name, msg.digest) if memo is not None and msg.digest else None
    found = memo.get(key) if key is not None else None
    if found is not None:
        return found
    sides, documents = [], 0
    for part in msg.parts:
        c = part.content
        files = (c,) if isinstance(c, m.File) else c.attachments if isinstance(c, m.Tool) and not c.compacted else ()
        for f in files:
            src = media.source(fmt, f) if f.is_media else None  # images and PDFs
            if src is None or isinstance(src, str):
                continue
            if src.kind == media.IMAGE:
                sides.append(max(src.pixels) if src.pixels else 0)
            elif not fmt.media_cap_pages:
                documents += 1
            elif src.mime == media.PDF:
                # its pages, its items where a format counts them (pages_per_item 1, as Anthropic);
                # one by URL has at least one page, which the provider reads itself
                documents += src.items if not src.url else 1
    found = (tuple(sides), documents)
    if key is not None:
        memo.put(key, found)
    return found
