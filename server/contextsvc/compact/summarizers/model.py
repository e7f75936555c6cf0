"""What every model-backed summarizer shares: one request per summary through the provider's
official SDK, bounded and retried the same way whatever the provider.

Every SDK failure surfaces as errors.Unavailable with a message saying what failed, so the caller
can fall back to the offline summarizer. Retries are made here rather than inside the SDK, so
that every attempt's timeout is cut to what the caller's deadline still allows and no attempt
outlives it. The cut is a total one (http_exchange): an endpoint trickling its answer a byte at
a time is stopped too; so is a reply larger than the output asked for can need (reply_cap). With
fallback_to_offline, a slice of the caller's time is kept for the offline summary.

A backend names its SDK (`sdk`, `sdk_error`: both SDKs share their error classes' names) and
says how to build its client, send one request and read the summary out of the reply.
"""
from __future__ import annotations

import importlib
import os
import time

from ...config import Config
from ...deadline import NO_DEADLINE
from ...errors import DeadlineExceeded, Unavailable
from ...gate import Gate
from .. import template
from . import http_exchange, reply_cap
from .job import ContextTooLong


class ModelSummarizer:
    name = ""  # the backend's name, also the prefix of its error messages
    sdk = ""  # the SDK's module
    sdk_error = ""  # the SDK's base error class

    def __init__(self, cfg: Config, client=None):
        self.cfg = cfg.summarizer
        self._client = client
        sc = self.cfg
        # one per service (servicer.ContextService keeps its summarizer): the slots and the
        # breaker are every call's
        self.gate = Gate(f"{self.name} summarizer", sc.max_concurrent, sc.breaker_failures, sc.breaker_open_seconds,
                         setting="summarizer.max_concurrent")

    def client(self):
        if self._client is None:
            sc = self.cfg
            key = os.environ.get(sc.api_key_env, "")
            if not key:
                raise Unavailable(f"{self.name} summarizer: no API key in ${sc.api_key_env}")
            self._client = self.make_client(key, http_exchange.http_client(sc.timeout_seconds))
        return self._client

    # ---- what a backend provides ----

    def make_client(self, key: str, http_client):
        """The SDK's client: no retries of its own (they are made here, within the deadline)."""
        raise NotImplementedError

    def send(self, client, timeout: float, user_text: str, max_tokens: int):
        """One request: the template rules as the system text, user_text as the user turn."""
        raise NotImplementedError

    def reply_text(self, response) -> str:
        """The summary in a 200 reply, or Unavailable naming what is wrong with it."""
        raise NotImplementedError

    # ---- shared ----

    def summarize(self, job) -> str:
        return self._create(template.prompt(job.transcript, job.previous), job.max_tokens, job.deadline)

    def merge(self, partials: list, previous: str = "", max_tokens: int = 0, deadline=NO_DEADLINE) -> str:
        return self._create(template.merge_prompt(partials, previous), max_tokens, deadline)

    def _create(self, user_text: str, max_tokens: int, deadline=NO_DEADLINE) -> str:
        """One summary through the gate: a slot of summarizer.max_concurrent and a closed breaker,
        or Unavailable at once; a request that ended with no answer counts towards opening it."""
        trial = self.gate.admit("")
        try:
            text = self._attempts(user_text, max_tokens, deadline)
        except _Unanswered as exc:
            if exc.cut_short:  # the caller's deadline ended the wait: no evidence either way
                self.gate.undecided(trial)
            else:
                self.gate.failed(trial, str(exc.error))
            raise exc.error from exc.__cause__
        except DeadlineExceeded:
            self.gate.undecided(trial)
            raise
        except BaseException:
            self.gate.answered()  # the backend answered, with an error
            raise
        finally:
            self.gate.release()
        self.gate.answered()
        return text

    def _attempts(self, user_text: str, max_tokens: int, deadline) -> str:
        attempt = 0
        while True:
            try:
                return self._attempt(user_text, max_tokens, deadline)
            except _Retryable as exc:
                attempt += 1
                pause = self.cfg.retry_pause_seconds * 2 ** (attempt - 1)
                if exc.after is not None:  # the backend's own retry-after: never sooner
                    if exc.after > self.cfg.timeout_seconds:  # longer than an attempt may take
                        raise Unavailable(f"{exc.error} (it asks to retry after {exc.after:g} s)") from exc.__cause__
                    pause = max(pause, exc.after)
                left = self._left(deadline)
                if attempt > self.cfg.max_retries or (left is not None and left <= pause):
                    if exc.no_answer or exc.cut_short:
                        raise _Unanswered(exc.error, exc.cut_short) from exc.__cause__
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
        sdk = importlib.import_module(self.sdk)
        sc, who = self.cfg, f"{self.name} summarizer"
        deadline.check(f"compact: {who}")
        left = self._left(deadline)
        timeout = sc.timeout_seconds if left is None else min(sc.timeout_seconds, left)
        if timeout <= 0:
            raise _Unanswered(Unavailable(f"{who}: no time left before the caller's deadline"), cut_short=True)
        cap = reply_cap.cap_bytes(max_tokens, sc.reply_bytes_per_token, sc.reply_min_bytes)
        # the whole exchange, not each read; ended too when the caller goes
        exchange = http_exchange.Exchange(timeout, cap, abandoned=deadline.expired)
        try:
            with exchange:
                response = self.send(self.client(), timeout, user_text, max_tokens)
        except (sdk.APITimeoutError, sdk.APIConnectionError) as exc:
            if exchange.refused:  # oversize, corrupt or of an encoding not asked for: not retried
                raise Unavailable(f"{who}: {exchange.refused}") from exc
            if http_exchange.redirect_loop(exc):  # an answer, the same every time: not retried
                raise Unavailable(f"{who}: redirected more than {http_exchange.MAX_REDIRECTS} times "
                                  f"(a redirect loop at summarizer.base_url?)") from exc
            if not exchange.expired and not isinstance(exc, sdk.APITimeoutError):
                raise _Retryable(Unavailable(f"{who}: connection failed: {exc}"), no_answer=True) from exc
            if deadline.expired():
                raise DeadlineExceeded(f"compact: the caller's deadline passed while the {who} "
                                       "was answering") from exc
            own = left is None or left >= sc.timeout_seconds  # its own timeout, not the caller's cut
            raise _Retryable(Unavailable(f"{who}: timed out, no complete answer within {timeout:g}s"
                                         + ("" if own else " (what the caller's deadline leaves)")),
                             no_answer=own, cut_short=not own) from exc
        except sdk.AuthenticationError as exc:
            raise Unavailable(f"{who}: authentication failed (401): {_detail(exc)}") from exc
        except sdk.APIStatusError as exc:
            detail = _detail(exc)
            if exc.status_code in (400, 413) and _too_long(detail):
                raise ContextTooLong(f"{who}: request too long: {detail}") from exc
            error = Unavailable(f"{who}: HTTP {exc.status_code}: {detail}")
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                raise _Retryable(error, _retry_after(exc.response.headers)) from exc
            raise error from exc
        except getattr(sdk, self.sdk_error) as exc:
            raise Unavailable(f"{who}: {exc}") from exc
        except ValueError as exc:  # a 200 whose body is not JSON (a proxy's error page)
            raise Unavailable(f"{who}: the response was not valid JSON ({exc})") from exc
        try:
            return template.conformed(self.reply_text(response))
        except ValueError as exc:
            raise Unavailable(f"{who}: {exc}") from exc


class _Retryable(Exception):
    """A failure worth another attempt (timeout, connection, 408/409/429/5xx): wraps the error
    raised once the attempts or the deadline run out. no_answer: the backend gave none (a
    connection failed, or its own timeout passed); cut_short: the caller's deadline ended the
    wait first."""

    def __init__(self, error: Unavailable, after: float | None = None, no_answer: bool = False,
                 cut_short: bool = False):
        super().__init__(str(error))
        self.error = error
        self.after = after  # seconds the backend asked to wait (retry-after), None when it did not
        self.no_answer = no_answer
        self.cut_short = cut_short  # the wait the caller's deadline left ended first


class _Unanswered(Exception):
    """The attempts ran out with no answer from the backend, what the gate's breaker counts; or
    cut_short: the caller's deadline ended the wait (or left none), no evidence either way."""

    def __init__(self, error: Unavailable, cut_short: bool = False):
        super().__init__(str(error))
        self.error = error
        self.cut_short = cut_short


def _retry_after(headers) -> float | None:
    """The wait a 429 or 5xx asks for: retry-after-ms, else retry-after in seconds (an HTTP date
    is not read); None when neither is there or readable."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                seconds = float(value) * scale
            except ValueError:
                continue
            if seconds >= 0:
                return seconds
    return None


def field(x, name: str):
    """An attribute of an SDK model, or a key of a dict the SDK left unparsed."""
    return x.get(name) if isinstance(x, dict) else getattr(x, name, None)


def checked_text(text: str, who: str) -> str:
    """The summary text, stripped; Unavailable when it is empty or not valid Unicode."""
    text = text.strip()
    if not text:
        raise Unavailable(f"{who}: the response held no text (no content)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Unavailable(f"{who}: the response's text is not valid Unicode (a lone surrogate)") from None
    return text


def _too_long(detail: str) -> bool:
    low = detail.lower()
    return ("too long" in low or "too large" in low or "context" in low and "exceed" in low
            or "maximum context length" in low)


def _detail(exc) -> str:
    """The provider's error message: {"error": {"message"}} (Anthropic), or the error object
    itself, which the OpenAI SDK unwraps into body."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return getattr(exc, "message", "") or str(exc)
