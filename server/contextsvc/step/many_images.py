"""Whether a request holds so many images that its provider takes only smaller ones (Anthropic:
over 20 images, none over 2000 px a side; docs/design.md §6). The rule is one of the whole
request, where the lowering is per message: it is decided first, from what each message holds,
and the plan carries it (Plan.image_side), so every message lowers under it and its memo entries
are keyed by it.

Claude Code users met it as a session that could not go on: "At least one of the image
dimensions exceed max allowed size for many-image requests: 2000 pixels", once a 21st screenshot
joined a history holding a larger one, the same refusal at every later request.
"""
from __future__ import annotations

import itertools
import operator

from .. import conversation as m
from ..lowering import images, media
from ..memo import IMAGE_SIDES, Memo

_HAS_MEDIA = operator.attrgetter("has_media")


def image_side(messages: list, fmt, memo: Memo | None = None) -> int:
    """fmt.many_images_side when messages (the history as sent) hold more than fmt.many_images
    images fmt takes and one of them is over that side; else 0 (the format's own limits do)."""
    if not fmt.many_images:
        return 0
    count = over = 0
    for msg in itertools.compress(messages, map(_HAS_MEDIA, messages)):
        sides = _sides(msg, fmt, memo)
        count += len(sides)
        over += sum(side > fmt.many_images_side for side in sides)
    return fmt.many_images_side if count > fmt.many_images and over else 0


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
            src = media.source(fmt, f) if f.is_media else None
            if src is None or isinstance(src, str) or src.kind != media.IMAGE:
                continue
            pixels = None if src.url else images.dimensions(media.image_head(src.data, src.payload)[0])
            sides.append(max(pixels) if pixels else 0)
    found = tuple(sides)
    if key is not None:
        memo.put(key, found)
    return found
