"""The summarizer backed by the Anthropic Messages API, through the official SDK.

The system block (template and rules) is the same for every request and carries the cache
marker; the transcript goes in the user turn. Deadline, retries, reply cap and the mapping of
SDK failures to Unavailable are model.ModelSummarizer's.
"""
from __future__ import annotations

from ...errors import Unavailable
from .. import template
from .model import ModelSummarizer, checked_text, field

NAME = "anthropic"


class AnthropicSummarizer(ModelSummarizer):
    name = NAME
    sdk = "anthropic"
    sdk_error = "AnthropicError"

    def make_client(self, key: str, http_client):
        import anthropic

        return anthropic.Anthropic(api_key=key, base_url=self.cfg.base_url or None,
                                   timeout=self.cfg.timeout_seconds, max_retries=0, http_client=http_client)

    def send(self, client, timeout: float, user_text: str, max_tokens: int):
        return client.with_options(timeout=timeout).messages.create(
            model=self.cfg.model,
            max_tokens=max_tokens,
            system=[{"type": "text", "text": template.TEMPLATE_RULES,
                     "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": [{"type": "text", "text": user_text}]}],
        )

    def reply_text(self, response) -> str:
        """The SDK builds its models without validation, so a proxy or a broken gateway can hand
        back null, a list, an error object, content that is not a list, or text that is not a
        string: each is Unavailable naming what is wrong."""
        who = f"{NAME} summarizer"
        if response is None or isinstance(response, (list, str, int, float, bool)):
            raise Unavailable(f"{who}: the response was not a Messages API message "
                              f"(a JSON {type(response).__name__})")
        if field(response, "type") == "error":
            err = field(response, "error")
            kind, message = (field(err, "type"), field(err, "message")) if err is not None else (None, None)
            raise Unavailable(f"{who}: the response was an error: {kind or 'unknown'}: "
                              f"{message or 'no message'}")
        content = field(response, "content")
        if field(response, "stop_reason") == "refusal":
            raise Unavailable(f"{who}: the model refused to summarize (stop_reason refusal)")
        if not isinstance(content, list):
            raise Unavailable(f"{who}: the response held no content list "
                              f"(content is {type(content).__name__})")
        texts = []
        for block in content:
            if field(block, "type") != "text":
                continue
            text = field(block, "text")
            if not isinstance(text, str):
                raise Unavailable(f"{who}: a text block's text is not a string ({type(text).__name__})")
            texts.append(text)
        return checked_text("".join(texts), who)
