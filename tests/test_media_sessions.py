"""A computer-use session's screenshots weigh on Prune and Compact as they weigh on the decision.

The decision figure counts each medium at measure.media_decision_tokens. Prune used to cost a tool
output by its text alone ("Clicked."), so it freed nothing in a session over its window because
of screenshots, and the loop compacted. Compact sized the turns it keeps with media as their
placeholders, so a tail of screenshots "fit" from the first message, the whole history was
summarized, and with it the screenshot and question the person had just sent.
"""
from __future__ import annotations

import io
import os

import PIL.Image
import pikepdf

from contextsvc import compact, config, conversation as m, measure, prune, window
from contextsvc.compact import edits as ed

CFG = config.Config()
ON = m.CompactionSettings(prune=True)
MODEL = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(32_000, 0, 8_192))


def png(w: int, h: int, shade: int) -> bytes:
    out = io.BytesIO()
    PIL.Image.new("RGB", (w, h), (shade, 90, 160)).save(out, "PNG")
    return out.getvalue()


def session(steps: int) -> list:
    """The person's ask, then steps clicks, each answered with the screenshot it took."""
    out = [m.Message("u0", m.USER, [m.Part("t0", m.Text("Open the admin console and go to the Users page."))])]
    for k in range(steps):
        shot = m.File("image/png", f"screen{k}.png", data=png(1280, 800, k))
        click = m.Tool(f"call{k}", "computer", m.COMPLETED, {"action": "left_click", "x": 100 + k, "y": 200},
                       output="Clicked.", attachments=[shot])
        out.append(m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"c{k}", click)], time_completed_ms=k + 1))
    return out


def figures(messages: list, settings: m.CompactionSettings = ON, model: m.Model = MODEL):
    return measure.measure(measure.MeasureInput(m.Conversation(messages, "shots"), model, [], m.SystemPrompt(),
                                                settings), CFG)


def test_prune_frees_old_screenshots_and_the_request_then_fits():
    messages = session(12)
    before = figures(messages)
    assert before.should_compact
    r = prune.prune(m.Conversation(messages, "shots"), "normal", ON, CFG, model=MODEL)
    assert r.acted and r.tokens_freed >= len(r.part_ids) * CFG.measure.media_decision_tokens
    # the oldest screenshots are marked, the newest kept (the protected results)
    assert sorted(r.part_ids) == sorted(f"c{k}" for k in range(len(r.part_ids))) and len(r.part_ids) < 12
    after = figures(prune.apply(m.Conversation(messages, "shots"), r.part_ids, 1_000).messages)
    assert not after.should_compact and after.media_count == 12 - len(r.part_ids)


def test_compact_keeps_the_screenshot_and_question_the_person_just_sent():
    mine = m.File("image/png", "misaligned.png", data=png(1440, 900, 250))
    messages = session(10) + [
        m.Message("b", m.ASSISTANT, [m.Part("x", m.Text("The Users page is open."))], time_completed_ms=20),
        m.Message("u1", m.USER, [m.Part("q", m.Text("Why is the Save button misaligned here?")), m.Part("f", mine)])]
    off = m.CompactionSettings(prune=False)  # the compaction alone: no prune before or after it
    assert figures(messages, off).should_compact
    r = compact.compact(compact.CompactInput(m.Conversation(messages, "shots"), MODEL, compaction=off, auto=True),
                        CFG)
    assert r.outcome == compact.COMPACTED and r.under_limit
    kept = [x.id for x in messages[[x.id for x in messages].index(r.tail_start_id):]] if r.tail_start_id else []
    assert "u1" in kept and "u1" not in r.summarized_ids
    # applied, the body still sends the person's image
    applied = ed.apply(messages, r.edits)
    sent = figures(applied, off)
    assert sent.media_count >= 1 and not sent.should_compact


def test_compact_keeps_the_person_s_question_whose_screenshots_alone_are_over_the_tail_budget():
    """Sized with its media, the newest message (a question and 3 screenshots, 6,144 tokens
    against a 5,952 budget) fit nowhere, and nothing was kept: the reference's sizing chooses then."""
    messages = []
    for k in range(14):
        ask = f"step {k}: " + "please look at the dashboard numbers again " * 40
        answer = "Done. " + "The numbers look right to me. " * 60
        messages += [m.Message(f"u{k}", m.USER, [m.Part(f"t{k}", m.Text(ask))]),
                     m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"x{k}", m.Text(answer))], time_completed_ms=k + 1)]
    shots = [m.Part(f"f{i}", m.File("image/png", f"mine{i}.png", data=png(1440, 900, 40 * i))) for i in range(3)]
    messages.append(m.Message("last", m.USER, [m.Part("q", m.Text("Why are these three pages misaligned?")), *shots]))
    off = m.CompactionSettings(prune=False)
    assert figures(messages, off).should_compact
    r = compact.compact(compact.CompactInput(m.Conversation(messages, "shots"), MODEL, compaction=off, auto=True),
                        CFG)
    assert r.tail_start_id and "last" not in r.summarized_ids


def test_prune_counts_an_attached_pdf_s_items_as_the_model_s_format_does():
    """A 16-page PDF is 16 items on Anthropic and 2 on Gemini (8 pages an item): Prune read it
    at 16 everywhere, and on Gemini thought it freed 8 times what the decision figure dropped."""
    pdf = pikepdf.new()
    for _ in range(16):
        pdf.add_blank_page()
    out = io.BytesIO()
    pdf.save(out)
    spec = m.File("application/pdf", "spec.pdf", data=out.getvalue())
    messages = [m.Message("u0", m.USER, [m.Part("t0", m.Text("Read the specs."))])] + [
        m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"c{k}", m.Tool(f"call{k}", "fetch", m.COMPLETED, {"k": k},
                                                                output="fetched", attachments=[spec]))],
                  time_completed_ms=k + 1) for k in range(3)]
    per_item = CFG.measure.media_decision_tokens
    for provider, items in ((m.ANTHROPIC, 16), (m.GEMINI, 2)):
        model = m.Model("model-x", provider, m.ModelLimits(1_000_000, 0, 8_192))
        r = prune.prune(m.Conversation(messages, "pdf"), "normal", m.CompactionSettings(
            prune=True, prune_settings=m.PruneSettings(protected_results=1, protect_tokens=0, minimum_tokens=0)),
            CFG, model=model)
        assert r.acted and r.tokens_freed == len(r.part_ids) * (items * per_item + 2), (provider, r)


def test_a_body_over_the_provider_s_bytes_asks_to_compact_whatever_its_tokens():
    """A person's screenshots (3.5 MB each) in a 200K session: the body passed Anthropic's 32 MB
    at 16,000 tokens with should_compact false, and the guard strips no media before a summary
    exists. Compacted, the history's images become notes and the next body is under it."""
    model = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 8_192))
    noise = io.BytesIO()
    PIL.Image.frombytes("RGB", (1080, 1080), os.urandom(1080 * 1080 * 3)).save(noise, "PNG")  # 3.5 MB
    messages = []
    for k in range(8):
        shot = m.File("image/png", f"p{k}.png", data=noise.getvalue())
        ask = [m.Part(f"t{k}", m.Text(f"and this one ({k})?")), m.Part(f"f{k}", shot)]
        messages += [m.Message(f"u{k}", m.USER, ask),
                     m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"x{k}", m.Text("Looks fine."))], time_completed_ms=k + 1)]
    messages.append(m.Message("q", m.USER, [m.Part("q", m.Text("Which one had the bug?"))]))
    r = figures(messages, m.CompactionSettings(), model)
    assert r.body_bytes > 32_000_000 and r.decision[0] < r.limit // 4 and r.should_compact
    done = compact.compact(compact.CompactInput(m.Conversation(messages, "big"), model, auto=True), CFG)
    after = figures(ed.apply(messages, done.edits), m.CompactionSettings(), model)
    assert after.body_bytes < 32_000_000 and not after.should_compact
    fewer = figures(messages[:6] + messages[-1:], m.CompactionSettings(), model)
    assert fewer.body_bytes < 32_000_000 and not fewer.should_compact


def test_compact_sizes_the_kept_tail_by_the_items_claude_from_opus_4_7_reads_an_image_at():
    """Opus 4.7 reads a 2560x1600 screenshot at up to 3.75 MP, three media items: a tail sized at
    one item an image kept three screenshots, 18,432 tokens of media against an 8,000 budget."""
    from contextsvc.compact import head_tail

    off = m.CompactionSettings(prune=False)
    kept = {}
    for mid in ("claude-sonnet-4-5", "claude-opus-4-7"):
        model = m.Model(mid, m.ANTHROPIC, m.ModelLimits(64_000, 0, 8_192))
        messages = [m.Message("u0", m.USER, [m.Part("t0", m.Text("Go through the settings pages."))])]
        for k in range(14):
            shot = m.File("image/png", f"screen{k}.png", data=png(2560, 1600, k))
            click = m.Tool(f"call{k}", "computer", m.COMPLETED, {"action": "left_click", "x": k, "y": 2},
                           output="Clicked.", attachments=[shot])
            messages.append(m.Message(f"a{k}", m.ASSISTANT, [m.Part(f"c{k}", click)], time_completed_ms=k + 1))
        r = compact.compact(compact.CompactInput(m.Conversation(messages, "retina"), model, compaction=off,
                                                 auto=True), CFG)
        assert r.outcome == compact.COMPACTED and r.tail_start_id
        tail = messages[[x.id for x in messages].index(r.tail_start_id):]
        items = figures(tail, off, model).media_count
        budget = head_tail.budget(window.usable(model, off, CFG), off, CFG)
        assert items * CFG.measure.media_decision_tokens <= budget, (mid, items, budget)
        kept[mid] = len(tail)
    assert kept["claude-opus-4-7"] < kept["claude-sonnet-4-5"]
