"""The plan of one step: every setting the stages read, fixed before the first stage runs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .. import (breakpoints, conversation as m, encodings, model_ids, prefix, provider_management, tokenizer_family,
               window)
from ..config import Config
from ..lowering.registry import FORMATS
from ..lowering.wire_format import WireFormat
from . import many_images


# The tool a request that defines none is sent with when its history holds tool calls (a step
# without tools: a title, plan mode, every MCP server gone): every provider refuses calls in the
# history of a request without a tool definition (Anthropic: "requests which include tool_use or
# tool_result blocks must define tools"; Bedrock's toolConfig; the OpenAI formats and Gemini
# alike). It defines this one, and the provider's "no tool use" choice says none is called.
HISTORY_TOOL = m.ToolDefinition(
    "_noop", "Stands for the tools of earlier calls; the request has no tool to call. Never call it.",
    {"type": "object", "properties": {}})


# The most pixels a model reads an image at, where that is more than one media item's worth: an
# image is about pixels / 750 tokens (Anthropic's vision docs). Claude from Opus 4.7 reads up to
# 3.75 MP (about 5,000 tokens; 12 retina screenshots put a request 11,000 tokens over a 64K
# window at 2,048 each); earlier ones resize to 1.15 MP (about 1,600 tokens: one item).
IMAGE_PIXELS = {tokenizer_family.CLAUDE_47: 3_750_000}
PIXELS_PER_TOKEN = 750


def image_pixels(model: m.Model, item_tokens: int, proxy: str) -> tuple | None:
    """(the most pixels the model reads an image at, pixels per media item of item_tokens) where
    that is more than one item's worth (lowering.media: the image counts as several), else None.
    proxy: the encoding that counts for a model without its own (tokenizer_family.for_model)."""
    most = IMAGE_PIXELS.get(tokenizer_family.for_model(model.id, model.provider, proxy).name)
    return (most, PIXELS_PER_TOKEN * item_tokens) if most and item_tokens else None


def media_refused(model: m.Model) -> str:
    """Why the model takes no media, which the attachment notes then say; "" when it takes
    them (model_ids.takes_text_alone)."""
    return f"{model.id} takes text alone" if model_ids.takes_text_alone(model.id) else ""


@dataclass(frozen=True, slots=True)
class Plan:
    """What a step is decided with besides the conversation: the model and its wire format, the
    window, the request's policies and the service's config. Frozen: no stage changes a setting
    for a later one."""
    model: m.Model
    fmt: WireFormat
    tools: list
    system: m.SystemPrompt
    compaction: m.CompactionSettings
    cfg: Config
    policy: breakpoints.Policy
    exact: bool = False  # also the exact token count
    configured_output_tokens: int = 0
    tools_disabled: bool = False  # the body carries the provider's "no tool use" choice (tools stay defined)
    hashes: bool = False  # the prefix digests (a serialization pass over the elements)
    previous: Optional[prefix.State] = None  # the previous request's digests, when passed back
    now_ms: int = 0  # the time the payload guard's prune marks parts compacted at (0 = now)
    placeholders: bool = False  # media and opaque state as their placeholders (the estimate's text)
    # the most pixels an image may have on a side, where the request holds so many images that its
    # provider takes only smaller ones (step.many_images); 0: the format's own limits
    image_side: int = 0
    # the messages whose images are left out for it instead, the oldest holding any (their ids)
    images_left_out: frozenset = frozenset()
    # the messages whose media (images and documents) are left out where the request holds more
    # than its provider takes (WireFormat.media_cap), the oldest holding any (their ids)
    media_left_out: frozenset = frozenset()

    @property
    def lowering_settings(self) -> tuple:
        """What the lowering of a run of messages depends on besides the messages (the memo's
        keys): the messages left out are the oldest holding images, so their count tells them
        apart in one history; a message's own lowering, also whether it is one (left_out)."""
        return (self.model.provider, self.model.id, self.placeholders, self.image_side, len(self.images_left_out),
                len(self.media_left_out))

    @property
    def image_pixels(self) -> tuple | None:
        """image_pixels of the plan's model."""
        return image_pixels(self.model, self.cfg.measure.media_decision_tokens, self.cfg.measure.exact_encoding)

    @property
    def closes_with_user(self) -> bool:
        """Whether a body ending with the model's turn gets the closing user message: the model
        refuses to go on from its own turn (lowered.close_with_user)."""
        return model_ids.refuses_prefill(self.model.id)

    @property
    def media_refused(self) -> str:
        """media_refused of the plan's model."""
        return media_refused(self.model)

    def left_out(self, msg) -> int:
        """What of msg's media is left out: 2 all of it (media_left_out), 1 its images
        (images_left_out), 0 none."""
        if self.media_left_out and msg.id in self.media_left_out:
            return 2
        return 1 if self.images_left_out and msg.id in self.images_left_out else 0

    @property
    def auto(self) -> bool:
        """Whether the request is compacted automatically (the overflow checks run): the
        request's compaction.auto, else the config's."""
        auto = self.compaction.auto
        return self.cfg.measure.auto if auto is None else auto

    @property
    def usable(self) -> int:
        return window.usable(self.model, self.compaction, self.cfg)

    @property
    def limit(self) -> int:
        return window.limit(self.model, self.compaction, self.cfg)

    @property
    def guard_bytes(self) -> int:
        """The payload guard's threshold: the request's, else the config's."""
        own = self.compaction.request_prune_bytes
        return own if own is not None else self.cfg.assemble.request_prune_bytes

    @property
    def management(self) -> Optional[provider_management.Management]:
        """The provider's own context management the request asks for (None: ours alone)."""
        return provider_management.of(self.model, self.fmt, self.compaction, self.cfg, self.tools, self.limit)

    def for_history(self, holds_calls: bool) -> "Plan":
        """The plan for a history that holds tool calls or not: HISTORY_TOOL defined, none to be
        called, when it does and the request defines no tool."""
        if self.tools or not holds_calls:
            return self
        return dataclasses.replace(self, tools=[HISTORY_TOOL], tools_disabled=True)

    def media_rules_apply(self, messages: list) -> bool:
        """Whether the format's rules of a request's media (step.many_images) may leave any of
        messages' out: it has them, and one of messages carries media."""
        return bool(self.fmt.many_images) and any(map(m.HAS_MEDIA, messages))

    def for_images(self, sent: list, memo=None) -> "Plan":
        """The plan for a history as sent (projection.project) holding these images: every image
        within the smaller side its provider takes in a request of that many (many_images)."""
        side, images_out, media_out = many_images.image_rule(sent, self.fmt, memo, self.fmt.media_cap(self.model))
        if (side, images_out, media_out) == (self.image_side, self.images_left_out, self.media_left_out):
            return self
        return dataclasses.replace(self, image_side=side, images_left_out=images_out, media_left_out=media_out)

    @classmethod
    def of(cls, model: m.Model, tools: list, system: m.SystemPrompt, compaction: m.CompactionSettings,
           cfg: Config, policy: Optional[breakpoints.Policy] = None, *, last_step: bool = False,
           **settings) -> "Plan":
        """last_step: the last allowed step, whose tools are disabled: by the provider's "no tool
        use" choice too, unless changing the choice invalidates its cache (design.md §6); there the
        step's message alone says so. The caller's own tools_disabled always sets the choice."""
        fmt = FORMATS[model.provider]
        if cfg.measure.compaction_figure == "exact-where-known" and encodings.own_offline(model.id):
            settings["exact"] = True  # the decision figure is this model's own exact count
        if last_step and not fmt.tool_choice_breaks_cache:
            settings["tools_disabled"] = True
        return cls(model, fmt, tools, system, compaction, cfg, policy or breakpoints.Policy(), **settings)
