"""The summarizer backed by the Anthropic Messages API, through the official SDK.

The system block (template and rules) is the same for every request and carries the cache
marker; the transcript goes in the user turn. Every SDK failure surfaces as errors.Unavailable
with a message saying what failed, so the caller can fall back to the offline summarizer.
Retries are made here rather than inside the SDK, so that every attempt's timeout is cut to
what the caller's deadline still allows and no attempt outlives it. The cut is a total one
(http_deadline): an endpoint trickling its answer a byte at a time is stopped too. With
fallback_to_offline, a slice of the caller's time is kept for the offline summary.
"""
from __future__ import annotations

import os
import time

from ...config import Config
from ...errors import DeadlineExceeded, Unavailable
from ...deadline import NO_DEADLINE
from . import http_deadline
from .. import template
from .job import ContextTooLong

NAME = "anthropic"


class AnthropicSummarizer:
    name = NAME

    def __init__(self, cfg: Config, client=None):
        self.cfg = cfg.summarizer
        self._client = client

    def client(self):
        if self._client is None:
            import anthropic

            sc = self.cfg
            key = os.environ.get(sc.api_key_env, "")
            if not key:
                raise Unavailable(f"anthropic summarizer: no API key in ${sc.api_key_env}")
            self._client = anthropic.Anthropic(
                api_key=key,
                base_url=sc.base_url or None,
                timeout=sc.timeout_seconds,
                max_retries=0,  # retried in _create, within the caller's deadline
                http_client=http_deadline.http_client(sc.timeout_seconds),
            )
        return self._client

    def _create(self, user_text: str, max_tokens: int, deadline=NO_DEADLINE) -> str:
        attempt = 0
        while True:
            try:
                return self._attempt(user_text, max_tokens, deadline)
            except _Retryable as exc:
                attempt += 1
                pause = self.cfg.retry_pause_seconds * 2 ** (attempt - 1)
                left = self._left(deadline)
                if attempt > self.cfg.max_retries or (left is not None and left <= pause):
                    raise exc.error from exc.__cause__
                time.sleep(pause)

    def _left(self, deadline):
        """Seconds the summarizer may still use (None = no caller deadline): the caller's time,
        less the slice kept for the offline fallback (at most half of what is left)."""
        left = deadline.remaining()
        if left is None or not self.cfg.fallback_to_offline:
            return left
        return left - min(self.cfg.fallback_reserve_seconds, left / 2)

    def _attempt(self, user_text: str, max_tokens: int, deadline) -> str:
        import anthropic

        sc = self.cfg
        deadline.check("compact: anthropic summarizer")
        left = self._left(deadline)
        timeout = sc.timeout_seconds if left is None else min(sc.timeout_seconds, left)
        if timeout <= 0:
            raise Unavailable("anthropic summarizer: no time left before the caller's deadline")
        exchange = http_deadline.Exchange(timeout)  # the whole exchange, not each read
        try:
            with exchange:
                response = self.client().with_options(timeout=timeout).messages.create(
                    model=sc.model,
                    max_tokens=max_tokens,
                    system=[{"type": "text", "text": template.TEMPLATE_RULES,
                             "cache_control": {"type": "ephemeral"}}],
                    messages=[{"role": "user", "content": [{"type": "text", "text": user_text}]}],
                )
        except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
            if not exchange.expired and not isinstance(exc, anthropic.APITimeoutError):
                raise _Retryable(Unavailable(f"anthropic summarizer: connection failed: {exc}")) from exc
            if deadline.expired():
                raise DeadlineExceeded("compact: the caller's deadline passed while the anthropic "
                                       "summarizer was answering") from exc
            raise _Retryable(Unavailable(f"anthropic summarizer: timed out, no complete answer within {timeout:g}s"
                                         + ("" if left is None or left >= sc.timeout_seconds else
                                            " (what the caller's deadline leaves)"))) from exc
        except anthropic.AuthenticationError as exc:
            raise Unavailable(f"anthropic summarizer: authentication failed (401): {_detail(exc)}") from exc
        except anthropic.APIStatusError as exc:
            detail = _detail(exc)
            if exc.status_code in (400, 413) and _too_long(detail):
                raise ContextTooLong(f"anthropic summarizer: request too long: {detail}") from exc
            error = Unavailable(f"anthropic summarizer: HTTP {exc.status_code}: {_detail(exc)}")
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                raise _Retryable(error) from exc
            raise error from exc
        except anthropic.AnthropicError as exc:
            raise Unavailable(f"anthropic summarizer: {exc}") from exc
        except ValueError as exc:  # a 200 whose body is not JSON (a proxy's error page)
            raise Unavailable(f"anthropic summarizer: the response was not valid JSON ({exc})") from exc
        return _reply_text(response)

    def summarize(self, job) -> str:
        return self._create(template.prompt(job.transcript, job.previous), job.max_tokens, job.deadline)

    def merge(self, partials: list, previous: str = "", max_tokens: int = 0, deadline=NO_DEADLINE) -> str:
        return self._create(template.merge_prompt(partials, previous), max_tokens, deadline)


class _Retryable(Exception):
    """A failure worth another attempt (timeout, connection, 408/409/429/5xx): wraps the error
    raised once the attempts or the deadline run out."""

    def __init__(self, error: Unavailable):
        super().__init__(str(error))
        self.error = error


def _field(x, name: str):
    """An attribute of an SDK model, or a key of a dict the SDK left unparsed."""
    return x.get(name) if isinstance(x, dict) else getattr(x, name, None)


def _reply_text(response) -> str:
    """The summary text of a 200 reply, or Unavailable naming what is wrong with it. The SDK
    builds its models without validation, so a proxy or a broken gateway can hand back null, a
    list, an error object, content that is not a list, or text that is not a string."""
    if response is None or isinstance(response, (list, str, int, float, bool)):
        raise Unavailable(f"anthropic summarizer: the response was not a Messages API message "
                          f"(a JSON {type(response).__name__})")
    if _field(response, "type") == "error":
        err = _field(response, "error")
        kind, message = (_field(err, "type"), _field(err, "message")) if err is not None else (None, None)
        raise Unavailable(f"anthropic summarizer: the response was an error: {kind or 'unknown'}: "
                          f"{message or 'no message'}")
    content = _field(response, "content")
    if not isinstance(content, list):
        raise Unavailable(f"anthropic summarizer: the response held no content list "
                          f"(content is {type(content).__name__})")
    texts = []
    for block in content:
        if _field(block, "type") != "text":
            continue
        text = _field(block, "text")
        if not isinstance(text, str):
            raise Unavailable(f"anthropic summarizer: a text block's text is not a string "
                              f"({type(text).__name__})")
        texts.append(text)
    text = "".join(texts).strip()
    if not text:
        raise Unavailable("anthropic summarizer: the response held no text (no content)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Unavailable("anthropic summarizer: the response's text is not valid Unicode "
                          "(a lone surrogate)") from None
    return text


def _too_long(detail: str) -> bool:
    low = detail.lower()
    return "too long" in low or "too large" in low or "context" in low and "exceed" in low


def _detail(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return getattr(exc, "message", "") or str(exc)
