"""A PDF's pages, read from its own bytes, are its media items in the decision figure.

Providers bill a PDF by the page. Counted as one item of 2,048 tokens, a 30-page specification
sent gpt-4o 30,377 tokens into a 32,000 window with should_compact false. The page counts are
held to pikepdf's (qpdf's page tree walk) on PDFs it writes, with and without compressed object
streams.
"""
from __future__ import annotations

import base64
import io
import json
import time
import zlib

import PIL.Image
import pikepdf
import pytest
from hypothesis import given, settings, strategies as st

from contextsvc import assemble, config, conversation as m, measure
from contextsvc.lowering import documents, media
from contextsvc.step import request
from helpers.steps import plan
from judges import judge_for

CFG = config.Config()
PER_ITEM = CFG.measure.media_decision_tokens
MODES = [pikepdf.ObjectStreamMode.disable, pikepdf.ObjectStreamMode.generate]


def written(n: int, mode=pikepdf.ObjectStreamMode.generate, linearize: bool = False, sizes=None,
            text: bool = False) -> bytes:
    pdf = pikepdf.new()
    for i in range(n):
        pdf.add_blank_page(page_size=sizes[i % len(sizes)] if sizes else (612, 792))
        if text:
            pdf.pages[i].Contents = pdf.make_stream(
                b"BT /F1 11 Tf 72 720 Td (" + f"Section {i}: the protocol's frames".encode() * 20 + b") Tj ET")
    out = io.BytesIO()
    pdf.save(out, object_stream_mode=mode, linearize=linearize)
    return out.getvalue()


def library_pages(data: bytes) -> int:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        return len(pdf.pages)


@pytest.mark.parametrize("mode", MODES, ids=["plain", "object-streams"])
@pytest.mark.parametrize("n", [1, 2, 30, 120])
@pytest.mark.parametrize("linearize", [False, True], ids=["", "linearized"])
def test_pages_are_the_pdf_library_s(n, mode, linearize):
    data = written(n, mode, linearize)
    assert documents.pages(data) == library_pages(data) == n


def test_pages_kept_in_compressed_object_streams_are_read_there():
    data = written(12, pikepdf.ObjectStreamMode.generate)
    counted = documents._counted(data, documents.MAX_TREE_NODES)[0]  # the file's own bytes alone
    assert counted < 12 and data.count(b"/Type /Page") + data.count(b"/Type/Page") < 12
    assert documents.pages(data) == 12


def test_an_incremental_update_s_copies_of_pages_are_not_counted_again():
    """An incremental save appends new copies of the objects it changed: qpdf's 30 pages read
    60, 90, 120 after 1, 2, 3 saves, where the tree's /Count stays the count."""
    data = written(30, pikepdf.ObjectStreamMode.disable)
    copies = b"".join(f"{k + 3} 0 obj\n<< /Type /Page /Parent 2 0 R /Annots [] >>\nendobj\n".encode()
                      for k in range(30))
    updated = data + copies + b"trailer\n<< /Root 1 0 R /Prev 9 >>\n%%EOF\n"
    assert library_pages(updated) == 30 and documents.pages(updated) == 30


def test_a_root_node_too_long_to_read_leaves_its_count_to_the_leaves():
    """A root of 800 pages and one node of 5, its /Kids too long to read: the 5 stood for all."""
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               3: b"<< /Type /Pages /Parent 2 0 R /Count 5 /Kids [" + b" ".join(b"%d 0 R" % k for k in range(4, 9))
               + b"] >>"}
    objects.update({k: b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] >>" for k in range(4, 9)})
    objects.update({k: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>" for k in range(9, 809)})
    kids = b" ".join(b"%d 0 R" % k for k in range(9, 809))
    objects[2] = b"<< /Type /Pages /Count 805 /Kids [3 0 R " + kids + b"] >>"
    body, offsets = b"%PDF-1.4\n", {}
    for k in sorted(objects):
        offsets[k] = len(body)
        body += b"%d 0 obj\n" % k + objects[k] + b"\nendobj\n"
    xref = b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(
        b"%010d 00000 n \n" % offsets[k] for k in sorted(objects))
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, len(body))
    data = body + xref + trailer
    assert library_pages(data) == documents.pages(data) == 805


def test_a_small_file_of_tree_nodes_is_read_in_bounded_time():
    """33 KB inflating to 16 MiB of /Type/Pages took 6 s of CPU per read."""
    bomb = zlib.compress(b"/Type/Pages " * (16 * 2**20 // 12), 9)
    data = (b"%PDF-1.5\n1 0 obj << /Type /ObjStm /Filter /FlateDecode /N 1 /First 4 >>\nstream\n" + bomb
            + b"\nendstream\nendobj\n")
    began = time.process_time()
    assert documents.pages(data) >= 1
    assert time.process_time() - began < 1.0


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), mode=st.sampled_from(MODES), text=st.booleans(),
       sizes=st.lists(st.tuples(st.integers(72, 2000), st.integers(72, 2000)), min_size=1, max_size=3))
def test_generated_pdfs_have_the_library_s_page_count(n, mode, text, sizes):
    data = written(n, mode, sizes=sizes, text=text)
    assert documents.pages(data) == library_pages(data)


@pytest.mark.parametrize("data", [
    b"", b"hello", b"%PDF-1.7\n", b"\x89PNG\r\n\x1a\n" + b"/Type /Page " * 5,
    b"%PDF-1.5\n1 0 obj << /Type /ObjStm /Filter /FlateDecode /N 1 /First 4 >>\nstream\nnot zlib\nendstream",
], ids=["empty", "text", "header-only", "not-a-pdf", "corrupt-stream"])
def test_what_cannot_be_read_is_one_page(data):
    assert documents.pages(data) == 1


@pytest.mark.parametrize("cut", [200, 400, 700, 1000])
def test_a_cut_pdf_reads_what_its_bytes_say_and_never_more(cut):
    data = written(9)
    assert 1 <= documents.pages(data[:cut]) <= 9


def test_a_hostile_count_stops_at_the_bound():
    data = b"%PDF-1.4\n2 0 obj << /Type /Pages /Kids [] /Count 999999999 >> endobj\n"
    assert documents.pages(data) == documents.MAX_PAGES


def test_an_object_stream_that_inflates_without_end_is_read_within_the_budget():
    bomb = zlib.compress(b"/Type /Page " * (64 * 2**20 // 12), 9)  # 64 MB of page leaves
    data = (b"%PDF-1.5\n1 0 obj << /Type /ObjStm /Filter /FlateDecode /N 1 /First 4 /Length "
            + str(len(bomb)).encode() + b" >>\nstream\n" + bomb + b"\nendstream\nendobj\n")
    began = time.perf_counter()
    assert documents.pages(data) == documents.MAX_PAGES  # leaves past the bound: a bound, not a count
    assert time.perf_counter() - began < 10  # generous: the point is that it ends, having read 16 MiB


def _run(conv, model):
    return measure.measure(measure.MeasureInput(conv, model, [], m.SystemPrompt(), m.CompactionSettings()), CFG)


def _ask(file: m.File) -> m.Conversation:
    return m.Conversation([m.Message("u1", m.USER, [m.Part("t", m.Text("Implement the protocol in the spec.")),
                                                    m.Part("f", file)])])


MODELS = {
    "anthropic": m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000)),
    "bedrock": m.Model("anthropic.claude-sonnet-4-5-v1:0", m.BEDROCK, m.ModelLimits(200_000, 0, 64_000)),
    "gemini": m.Model("gemini-2.5-flash", m.GEMINI, m.ModelLimits(1_048_576, 0, 65_536)),
    "openai": m.Model("gpt-4o", m.OPENAI, m.ModelLimits(128_000, 0, 16_384)),
    "openai-responses": m.Model("gpt-5", m.OPENAI_RESPONSES, m.ModelLimits(400_000, 0, 128_000)),
}


# items of a 30-page PDF: a page each, on Gemini (258 tokens a page) 8 pages each
ITEMS = {"anthropic": 30, "bedrock": 30, "gemini": 4, "openai": 30, "openai-responses": 30}


@pytest.mark.parametrize("provider", sorted(MODELS))
def test_a_pdf_counts_its_pages_in_the_decision_figure(provider):
    data = written(30, text=True)
    model, items = MODELS[provider], ITEMS[provider]
    one = _run(_ask(m.File("application/pdf", "spec.pdf", data=written(1, text=True))), model)
    r = _run(_ask(m.File("application/pdf", "spec.pdf", data=data)), model)
    assert one.media_count == 1 and r.media_count == items
    assert r.decision[0] - one.decision[0] >= (items - 1) * PER_ITEM
    # the same document as a base64 data: URL counts the same
    url = "data:application/pdf;base64," + base64.b64encode(data).decode()
    assert _run(_ask(m.File("application/pdf", "spec.pdf", url=url)), model).media_count == items
    # the body carries the document itself; the estimate's text says what stands for it
    asked = _ask(m.File("application/pdf", "spec.pdf", data=data))
    text = request.estimate_text(asked, plan(model, [], m.SystemPrompt()))
    assert f'"[encoded media ({items} items)]"' in text and base64.b64encode(data[:300]).decode()[:40] not in text


def test_the_trial_s_30_page_pdf_on_gpt_4o_no_longer_fits_the_figure():
    """gpt-4o counted 30,377 tokens for this request in a 32,000 window with 4,096 to answer;
    the figure read it as one item and said it fit."""
    model = m.Model("gpt-4o", m.OPENAI, m.ModelLimits(32_000, 0, 4_096))
    r = _run(_ask(m.File("application/pdf", "spec.pdf", data=written(30))), model)
    assert r.should_compact and r.projected >= 30 * PER_ITEM


def test_pdf_items_of_each_element_are_read_back_from_its_placeholders():
    texts = ['{"type":"document","source":{"data":"[encoded media (30 items)]"}}', '{"url":"[encoded media]"}',
             '{"fileUri":"[encoded media (2 items)]","bytes":"[encoded media]"}']
    assert media.items_in(texts) == 34
    assert media.placeholder(1) == media.MEDIA_PLACEHOLDER


@pytest.mark.parametrize("text", ["[encoded media (5000 items)]", "[encoded media (99999999999999999999 items)]",
                                  "[encoded media]"])
def test_a_person_s_text_that_reads_as_a_placeholder_counts_no_media(text):
    """The placeholder is read only where a format puts media: as a person's text beside an image
    after an answer it asked for 10 million tokens (should_compact true), or crashed the call."""
    image = m.File("image/png", "a.png", data=_png())
    for provider in sorted(MODELS):
        conv = m.Conversation([
            m.Message("u0", m.USER, [m.Part("t0", m.Text("look at this"))]),
            m.Message("a0", m.ASSISTANT, [m.Part("x0", m.Text("ok"))], time_completed_ms=1,
                      usage=m.Usage(input=1000, output=20), model_id=MODELS[provider].id),
            m.Message("u1", m.USER, [m.Part("f", image), m.Part("t", m.Text(text))])])
        r = _run(conv, MODELS[provider])
        assert r.media_count == 1 and not r.should_compact and r.projected < 20_000, (provider, r.projected)


def _png() -> bytes:
    out = io.BytesIO()
    PIL.Image.new("RGB", (64, 64), (9, 9, 9)).save(out, "PNG")
    return out.getvalue()


def _body(provider: str, data: bytes) -> dict:
    model = m.Model("model-x", provider, m.ModelLimits(1_000_000, 0, 8_000))
    inp = assemble.AssembleInput(_ask(m.File("application/pdf", "big spec.pdf", data=data)), model, [],
                                 m.SystemPrompt(), m.CompactionSettings())
    return json.loads(assemble.assemble(inp, CFG).body)


def test_a_document_over_bedrock_s_bytes_is_a_note_saying_so():
    """Converse refuses a document over 4.5 MB, and it stays in the history: every later request
    of the session was refused too."""
    small = written(3)
    big = small + b"%" + b"padding " * (4_600_000 // 8)  # readers ignore what follows %%EOF
    kept, noted = _body(m.BEDROCK, small), _body(m.BEDROCK, big)
    assert '"document"' in json.dumps(kept) and judge_for(m.BEDROCK)(kept) == []
    assert '"document"' not in json.dumps(noted) and judge_for(m.BEDROCK)(noted) == []
    assert "[Attached application/pdf: big spec.pdf (not sent: 4.6 MB, over the 4.5 MB bedrock takes per document)]" \
        in json.dumps(noted)
    # the judge refuses what Converse refuses; Anthropic takes the same document
    noted["messages"][0]["content"].append(
        {"document": {"format": "pdf", "name": "x", "source": {"bytes": base64.b64encode(big).decode()}}})
    assert [p.split(":")[0] for p in judge_for(m.BEDROCK)(noted)] == ["document"]
    assert '"document"' in json.dumps(_body(m.ANTHROPIC, big))

