"""What a format module returns: the body and where its measured elements sit."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Lowered:
    body: dict
    system: list  # system elements, in order (the estimate's "leading system messages")
    messages: list  # non-system message elements, in order
    roles: list  # "user" | "assistant" | "tool" per element of messages
    sources: list  # per element of messages: the ids of the stored messages lowered into it
    lists: list = field(default_factory=list)  # (dict, key) of the body lists holding elements
    max_output_at: tuple = ()  # (dict, key) where the output-token cap goes
    closed: bool = False  # the last message element is the closing user message (close_with_user)
    # the figures' lowering alone: per message element index, the reasoning it left out, as the
    # provider leaves it out of the request (step.request._strip_earlier_reasoning)
    stripped: dict = field(default_factory=dict)
    # ... and per message element, (text profile, UTF-8 less UTF-16 length) of its JSON where the
    # memo kept them (None where not, or where a marker or a strip changed it): the figures
    # profile only the others (step.request.estimate_lowered)
    known: list | None = None

    def set_max_output(self, tokens: int) -> None:
        parent, key = self.max_output_at
        parent[key] = tokens


def open_with_user(wire: list, roles: list, sources: list, lead: dict) -> None:
    """Every format's conversation must start with a user message (after any system messages):
    when the first lowered message is not one (a first user message with nothing to send, a
    projection starting at a summary), the constant lead message, in the format's shape, opens
    it. Constant, so the cached prefix stays put; it stands for no stored message."""
    if roles and roles[0] != "user":
        wire.insert(0, lead)
        roles.insert(0, "user")
        sources.insert(0, [])


def close_with_user(wire: list, roles: list, sources: list, closing: dict) -> bool:
    """A model that refuses to go on from its own turn (model_ids.refuses_prefill) is sent a
    conversation that ends with a user message: after a last element of the model's, the closing
    user message (neutral.CLOSING_USER_TEXT in the format's shape), standing for no stored
    message. Position decides it, as for trim_final_text: done on the whole request
    (step.pieces). True when it was added."""
    if not roles or roles[-1] != "assistant":
        return False
    wire.append(closing)
    roles.append("user")
    sources.append([])
    return True


def trim_final_text(wire: list, roles: list, key: str) -> bool:
    """A conversation may end with the model's message (a prefill, or a Measure taken right after
    a reply): Anthropic, and Claude on Bedrock, refuse it when its last text ends with whitespace
    ("final assistant content cannot end with trailing whitespace"). That whitespace is cut (a
    text left empty goes). Position decides it, so it is done on the whole request
    (step.pieces), for the formats that set trims_final_text; the element's block list is
    replaced, not changed in place. key: the element's list of blocks. True when something
    was cut."""
    if not roles or roles[-1] != "assistant":
        return False
    blocks = wire[-1][key]
    last = next((i for i in range(len(blocks) - 1, -1, -1) if isinstance(blocks[i].get("text"), str)), -1)
    if last < 0:
        return False
    text = blocks[last]["text"].rstrip()
    if text == blocks[last]["text"]:
        return False
    wire[-1][key] = blocks[:last] + ([{**blocks[last], "text": text}] if text else []) + blocks[last + 1:]
    return True


def copied(value):
    """A copy of a JSON value whose dicts and lists are all its own (a marker goes in one of
    them); the rest is immutable and shared. copy.deepcopy's memo of what it copied costs
    several times more, for trees that share nothing."""
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (list if isinstance(value, list) else tuple)(map(copied, value))
    return value
