"""Whether a request holds so many images that its provider takes only smaller ones (Anthropic:
over 20 images, none over 2000 px a side; docs/design.md §6). The rule is one of the whole
request, where the lowering is per message: it is decided first, from what each message holds,
and the plan carries it (Plan.image_side, Plan.images_left_out), so every message lowers under
it and its memo entries are keyed by it.

Claude Code users met it as a session that could not go on: "At least one of the image
dimensions exceed max allowed size for many-image requests: 2000 pixels", once a 21st screenshot
joined a history holding a larger one, the same refusal at every later request.
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


def image_rule(messages: list, fmt, memo: Memo | None = None) -> tuple[int, frozenset]:
    """(side, left_out) for messages (the history as sent): when they hold more than
    fmt.many_images images fmt takes and one of them is over fmt.many_images_side, either every
    image over that side is the note (side), or the images of the oldest messages holding any
    are (left_out: their ids) until at most fmt.many_images are sent, CHUNK at a time; whichever
    leaves out fewer. (0, NONE_LEFT_OUT) when the format's own limits do. A computer-use agent's
    screenshots of a large display are all over the side: the first way left it blind from the
    21st, the second keeps the newest at full size."""
    if not fmt.many_images:
        return 0, NONE_LEFT_OUT
    held = [(msg, _sides(msg, fmt, memo)) for msg in itertools.compress(messages, map(m.HAS_MEDIA, messages))]
    count = sum(len(sides) for _, sides in held)
    over = sum(side > fmt.many_images_side for _, sides in held for side in sides)
    if count <= fmt.many_images or not over:
        return 0, NONE_LEFT_OUT
    keep = count - -(-(count - fmt.many_images) // CHUNK) * CHUNK
    kept, at = 0, len(held)
    while at > 0 and kept + len(held[at - 1][1]) <= keep:
        at -= 1
        kept += len(held[at][1])
    if count - kept < over:
        return 0, frozenset(msg.id for msg, sides in held[:at] if sides)
    return fmt.many_images_side, NONE_LEFT_OUT


def _sides(msg: m.Message, fmt, memo: Memo | None) -> tuple:
    """The longer side in pixels of each image in msg that fmt takes (0 where its header does not
    say, or it is sent as a URL): its media files and the media its tools' outputs still carry
    (a compacted output drops them). Kept per message: reading a header decodes its base64."""
    key = (IMAGE_SIDES, fmt.name, msg.digest) if memo is not None and msg.digest else None
    found = memo.get(key) if key is not None else None
    if found is not None:
        return found
    sides = []
    for part in msg.parts:
        c = part.content
        files = (c,) if isinstance(c, m.File) else c.attachments if isinstance(c, m.Tool) and not c.compacted else ()
        for f in files:
            # images only: a PDF's pages are not read for this
            src = media.source(fmt, f) if f.is_media and media.media_type(f.mime) != media.PDF else None
            if src is None or isinstance(src, str) or src.kind != media.IMAGE:
                continue
            sides.append(max(src.pixels) if src.pixels else 0)
    found = tuple(sides)
    if key is not None:
        memo.put(key, found)
    return found
