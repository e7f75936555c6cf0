"""The summarizer's reply is bounded (issue 28, item 4), for every model backend through its real
SDK against a fake API on loopback: a gzip bomb (200 KB inflating to 200 MB, with or without its
length), a body that never ends, a well-formed 40 MB summary and a 5 MB one for a 2,048-token request are each refused as
an upstream failure (UNAVAILABLE, or the offline summary with fallback_to_offline) within the
deadline, holding at most about one cap of memory (summarizer.reply_bytes_per_token per output
token asked for, at least summarizer.reply_min_bytes).

Each test prints its figures (time, traced peak or the server's peak RSS) with `pytest -s`."""
from __future__ import annotations

import dataclasses
import importlib
import os
import time
import tracemalloc

import grpc
import pytest

from contextsvc import config
from contextsvc.compact import template
from contextsvc.compact.summarizers import make_summarizer, offline
from contextsvc.compact.summarizers.job import SummaryJob
from contextsvc.deadline import Deadline
from contextsvc.errors import Unavailable
from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc
from helpers.fake_anthropic import SUMMARY, gzip_bomb, summarizer_server
from helpers.processes import launch, stop
from helpers.rpc import compact_request
from server_process import peak_rss_mb

CFG = config.Config()
# mode: what the refusal says
OVERSIZE = {
    "gzip-bomb": "the response is 2038",  # its length alone is over the cap
    "gzip-bomb-unsized": "inflates past the 65536-byte cap",
    "endless": "passed the 65536-byte cap",
    "40MB": "the response is 41943",
    "5MB": "the response is 5243",
}


def model_cfg(api, fallback=False, retries=2):
    return dataclasses.replace(CFG, summarizer=dataclasses.replace(
        CFG.summarizer, backend=api.BACKEND, base_url=api.url, api_key_env="CONTEXTSVC_TEST_KEY",
        timeout_seconds=30.0, max_retries=retries, fallback_to_offline=fallback))


def summarize(api, max_tokens=2048):
    """The summary of a short transcript, asking for max_tokens: (seconds, traced peak MB, the
    summary or the Unavailable raised)."""
    gzip_bomb()  # the fake's bomb is built once, before anything is measured
    importlib.import_module(api.BACKEND)  # and the SDK imported (as the server does at start)
    summarizer = make_summarizer(model_cfg(api))
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result = summarizer.summarize(SummaryJob([], "User:\nfix it", "", max_tokens, Deadline.after(20)))
    except Unavailable as exc:
        result = exc
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, result


@pytest.mark.parametrize("mode", OVERSIZE)
def test_an_oversize_reply_is_refused_at_once_in_bounded_memory(model_api, mode):
    model_api.mode = mode
    seconds, peak, result = summarize(model_api)
    print(f"\n{model_api.BACKEND} {mode}, max_tokens 2048: {seconds:.2f} s, traced peak {peak:.1f} MB: {str(result)[:160]}")
    assert isinstance(result, Unavailable), result
    assert str(result).startswith(f"{model_api.BACKEND} summarizer: ") and OVERSIZE[mode] in str(result)
    assert len(model_api.requests) == 1  # refused, not retried: the same endpoint would do it again
    assert seconds < 5 and peak < 16


@pytest.mark.parametrize("mode", ["br", "die"])
def test_a_reply_in_an_encoding_not_asked_for_or_cut_short_is_unavailable(model_api, mode):
    model_api.mode = mode
    _, _, result = summarize(model_api)
    assert isinstance(result, Unavailable), result
    assert (mode != "br") or "content-encoding 'br' was not asked for" in str(result)


def test_a_summary_within_the_cap_passes_plain_or_gzipped(model_api):
    for mode in ("ok", "gzip"):
        model_api.mode = mode
        _, _, result = summarize(model_api, max_tokens=100)  # the floor: 64 KiB
        assert result == SUMMARY, result
    headers = {k.lower(): v for k, v in model_api.requests[-1][1].items()}
    assert headers["accept-encoding"] == "gzip, deflate"  # the encodings the cap inflates itself


def test_the_cap_follows_the_output_asked_for(model_api):
    """A 5 MB summary is refused for 2,048 output tokens, accepted for 400,000 (6.4 MB cap)."""
    model_api.mode = "5MB"
    _, _, refused = summarize(model_api, max_tokens=2048)
    _, _, accepted = summarize(model_api, max_tokens=400_000)
    assert isinstance(refused, Unavailable) and accepted == SUMMARY + "\n" + "a" * ((5 << 20) - len(SUMMARY) - 1)


@pytest.mark.parametrize("mode", OVERSIZE)
def test_an_oversize_reply_falls_back_to_offline_within_the_deadline(model_api, mode):
    model_api.mode = mode
    gzip_bomb()
    s = summarizer_server(model_api, fallback=True, timeout=30.0, retries=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            start = time.perf_counter()
            r = pb_grpc.ContextServiceStub(ch).Compact(compact_request(), timeout=10)
            seconds = time.perf_counter() - start
        print(f"\n{model_api.BACKEND} {mode}, fallback, deadline 10 s: answered in {seconds:.2f} s: {r.fallback_reason}")
        assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED and "## Goal" in r.summary.parts[0].text.text
        assert r.fell_back and r.backend == "offline" and r.fallback_reason.startswith(f"{model_api.BACKEND} summarizer: ")
        assert "cap for the output asked for" in r.fallback_reason
        assert seconds < 5
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("mode", ["gzip-bomb-unsized", "endless"])
def test_a_serving_process_stays_small_under_a_hostile_summarizer(model_api, mode, tmp_path):
    """A real `contextsvc serve`: its peak RSS after a warm-up Compact, then after the hostile
    one (before: 2.3 GB for the bomb, +190-240 MB for the endless body)."""
    gzip_bomb()
    env = dict(os.environ, CONTEXTSVC_TEST_KEY="sk-test-123")
    summarizer = (f'[summarizer]\nbackend = "{model_api.BACKEND}"\nbase_url = "{model_api.url}"\n'
                  'api_key_env = "CONTEXTSVC_TEST_KEY"\ntimeout_seconds = 30.0\nfallback_to_offline = true\n')
    proc, port, _, _ = launch(config_text=summarizer, tmp_path=tmp_path, env=env)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert not stub.Compact(compact_request(), timeout=30).fell_back  # warm: the same work, answered
            warm = peak_rss_mb(proc.pid)
            model_api.mode = mode
            start = time.perf_counter()
            r = stub.Compact(compact_request(), timeout=10)
            seconds = time.perf_counter() - start
        peak = peak_rss_mb(proc.pid)
        print(f"\n{model_api.BACKEND} {mode}, serving process: peak RSS {warm:.0f} MB warm, {peak:.0f} MB "
              f"after the hostile Compact (+{peak - warm:.1f}); answered in {seconds:.2f} s, fell_back={r.fell_back}")
        assert r.fell_back and "cap for the output asked for" in r.fallback_reason
        assert peak - warm < 32 and seconds < 5
    finally:
        model_api.release.set()
        stop(proc)


def test_a_summary_is_taken_in_the_template_or_refused(model_api):
    """A model's summary with the template's facts under headings of its own level and case
    ("# Goal", "# Key decisions:") is stored with the template's headings, the sections it left
    out empty, so the next compaction's offline merge reads its facts; stored as it was, the merge
    read it as empty and lost them. One that ignores the template is refused (UNAVAILABLE, or the
    offline summary with fallback_to_offline)."""
    model_api.summary_text = ("# Goal\n- Migrate billing to Postgres 16 (BILL-4242)\n\n# Constraints and preferences:\n"
                              "- Use pgloader\n\n# Key decisions\n- Keep db/migrate/0042_billing.sql\n\n"
                              "# Next steps\n1. Run the migration\n\n# Critical context\n- (none)\n")
    _, _, taken = summarize(model_api)
    assert isinstance(taken, str), taken
    assert template.missing_sections(taken) == []
    sections = template.parse(taken)
    assert sections["goal"] == ["Migrate billing to Postgres 16 (BILL-4242)"]
    assert sections["constraints"] == ["Use pgloader"] and sections["decisions"] == ["Keep db/migrate/0042_billing.sql"]
    rolled = template.parse(offline.summarize([], taken))  # the next compaction, offline, keeps them
    assert rolled["goal"] == sections["goal"] and rolled["decisions"] == sections["decisions"]

    # a "# comment" in a fenced block is the block's: not rewritten, its lines kept in their section
    block = "- Rewrote deploy.sh:\n```bash\n# Blocked until the lock is gone\nwhile [ -e /tmp/l ]; do sleep 1; done\n```"
    model_api.summary_text = SUMMARY.replace("### Done\n- (none)", "### Done\n" + block)
    _, _, taken = summarize(model_api)
    assert block in taken and "### Blocked until" not in taken, taken
    assert "while [ -e /tmp/l ]; do sleep 1; done" in template.parse(taken)["done"]

    model_api.summary_text = "The user wants to migrate billing to Postgres. We chose pgloader."
    _, _, refused = summarize(model_api)
    assert isinstance(refused, Unavailable) and "not in the template" in str(refused), refused


def test_a_rate_limit_s_retry_after_is_waited_or_given_up_on(model_api):
    """A 429's retry-after is honoured: the retries wait at least that long (they came 0.5 s
    apart whatever the backend asked), and one asking for longer than an attempt may take
    (summarizer.timeout_seconds, 30 s here) is given up at once, saying so."""
    model_api.mode, model_api.retry_after = "429", "0.8"
    seconds, _, result = summarize(model_api)
    assert isinstance(result, Unavailable) and "HTTP 429" in str(result), result
    assert len(model_api.requests) == 3 and seconds >= 1.6  # two retries, each 0.8 s after the last

    model_api.requests.clear()
    model_api.retry_after = "45"
    seconds, _, result = summarize(model_api)
    assert isinstance(result, Unavailable) and "asks to retry after 45 s" in str(result), result
    assert len(model_api.requests) == 1 and seconds < 5


def test_a_redirect_loop_is_refused_after_a_few_redirects_and_not_retried(model_api):
    """An endpoint redirecting to itself: followed 20 times, retried twice (63 requests), and read
    as "connection failed". The client follows 5 redirects, then the summarizer is unavailable
    saying why, not retried: the endpoint answers the same way every time."""
    from contextsvc.compact.summarizers import http_exchange
    model_api.mode = "redirect-loop"
    _, _, result = summarize(model_api)
    assert isinstance(result, Unavailable) and "redirected more than 5 times" in str(result), result
    assert len(model_api.requests) == http_exchange.MAX_REDIRECTS + 1


def test_a_wait_the_callers_deadline_cut_short_neither_opens_nor_closes_the_breaker(model_api):
    """Against a backend that never answers, a request ended by its own timeout counts towards
    opening the breaker; one the caller's deadline ended first is no evidence either way. It was
    read as an answer: it reset the count (and closed an open breaker), so a hung backend was
    asked again and again by callers whose deadline is shorter than timeout_seconds."""
    model_api.mode = "hang"
    cfg = dataclasses.replace(CFG, summarizer=dataclasses.replace(
        model_cfg(model_api, fallback=True, retries=0).summarizer, timeout_seconds=0.5, breaker_failures=2,
        breaker_open_seconds=60.0))
    summarizer = make_summarizer(cfg)

    def ask(seconds):
        try:
            summarizer.summarize(SummaryJob([], "User:\nfix it", "", 100, Deadline.after(seconds)))
        except Unavailable as exc:
            return str(exc)
        raise AssertionError("a backend that never answers gave a summary")

    first = ask(20)
    assert "timed out" in first and "caller's deadline" not in first  # its own timeout: one failure
    assert "what the caller's deadline leaves" in ask(0.4)  # cut short: counts neither way
    assert len(model_api.requests) == 2
    assert "caller's deadline" not in ask(20)  # the second with no answer: the breaker opens
    assert "not tried, 2 calls in a row got no answer" in ask(20) and len(model_api.requests) == 3
