"""A fake OpenAI Chat Completions API on loopback, for the openai summarizer's real SDK path.

The same modes as fake_anthropic's Messages API (MODES there), in Chat Completions' envelope:
a chat.completion, an `{"error": {...}}` body, a refusal in the message's `refusal` field."""
from __future__ import annotations

from helpers.fake_anthropic import FakeMessagesAPI, response


class FakeChatCompletionsAPI(FakeMessagesAPI):
    BACKEND = "openai"
    TOO_LONG = ("This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 250000 tokens. Please reduce the length of the messages.")

    @staticmethod
    def reply(request_body, text: str) -> dict:
        return _completion(request_body, {"role": "assistant", "content": text, "refusal": None}, "stop")

    @staticmethod
    def refusal(request_body) -> dict:
        return _completion(request_body, {"role": "assistant", "content": None,
                                          "refusal": "I'm sorry, I can't help with that."}, "stop")

    @staticmethod
    def error(status: int, kind: str, message: str, headers: str = "") -> bytes:
        code = "context_length_exceeded" if "context length" in message else None
        return response(status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, headers)


def _completion(request_body, message: dict, finish_reason: str) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 1767225600,
            "model": request_body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}
