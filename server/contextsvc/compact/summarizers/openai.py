"""The summarizer backed by the OpenAI Chat Completions API, through the official SDK.

Any server speaking Chat Completions answers it too (a gateway, vLLM, Ollama, llama.cpp's
server): `summarizer.base_url` points the SDK at it. The template rules go as the system message
(OpenAI caches a stable prefix by itself), the transcript as the user message. OpenAI's own API
gets the output cap as `max_completion_tokens` (its reasoning models refuse `max_tokens`); other
servers get `max_tokens`, the name every one of them reads. Deadline, retries, reply cap and the
mapping of SDK failures to Unavailable are model.ModelSummarizer's.
"""
from __future__ import annotations

from ...errors import Unavailable
from .. import template
from .model import ModelSummarizer, checked_text, field

NAME = "openai"


class OpenAISummarizer(ModelSummarizer):
    name = NAME
    sdk = "openai"
    sdk_error = "OpenAIError"

    def make_client(self, key: str, http_client):
        import openai

        return openai.OpenAI(api_key=key, base_url=self.cfg.base_url or None,
                             timeout=self.cfg.timeout_seconds, max_retries=0, http_client=http_client)

    def send(self, client, timeout: float, user_text: str, max_tokens: int):
        cap_name = "max_tokens" if self.cfg.base_url else "max_completion_tokens"
        return client.with_options(timeout=timeout).chat.completions.create(
            model=self.cfg.model,
            messages=[{"role": "system", "content": template.TEMPLATE_RULES},
                      {"role": "user", "content": user_text}],
            **{cap_name: max_tokens},
        )

    def reply_text(self, response) -> str:
        """The SDK builds its models without validation, so a gateway can hand back null, a
        list, an error object, no choices, or content that is not a string: each is Unavailable
        naming what is wrong; so is a refusal (the `refusal` field, or finish_reason
        content_filter with no text)."""
        who = f"{NAME} summarizer"
        if response is None or isinstance(response, (list, str, int, float, bool)):
            raise Unavailable(f"{who}: the response was not a chat completion (a JSON {type(response).__name__})")
        err = field(response, "error")
        if err is not None:
            raise Unavailable(f"{who}: the response was an error: {field(err, 'message') or err}")
        choices = field(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise Unavailable(f"{who}: the response held no choices")
        message = field(choices[0], "message")
        refusal = field(message, "refusal") if message is not None else None
        if refusal:
            raise Unavailable(f"{who}: the model refused to summarize: {refusal}")
        content = field(message, "content") if message is not None else None
        if content is None and field(choices[0], "finish_reason") == "content_filter":
            raise Unavailable(f"{who}: the model refused to summarize (finish_reason content_filter)")
        if content is not None and not isinstance(content, str):
            raise Unavailable(f"{who}: the message's content is not a string ({type(content).__name__})")
        return checked_text(content or "", who)
