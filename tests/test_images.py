"""Images a provider refuses a whole request over (docs/design.md §6, "What the body must pass"):
bytes of another type than declared, over the provider's bytes per image, over its pixels per
side. Such an image stays in the history, so every later request of the session would be
refused too: it goes under its real type, or as a note saying why it is not sent. Real images
from Pillow; the bodies are judged by the providers' own libraries (tests/judges), which read
each image with Pillow too."""
from __future__ import annotations

import base64
import io
import json

import PIL.Image
import pytest
from hypothesis import given, settings, strategies as st

from contextsvc import assemble, config, conversation as m
from contextsvc.lowering import images
from judges import judge_for

FORMATS = {"PNG": images.PNG, "JPEG": images.JPEG, "GIF": images.GIF, "WEBP": images.WEBP}
LIMIT = 5 * 2**20 * 3 // 4  # Anthropic's 5 MB of base64, Bedrock's 3.75 MB: the same raw bytes
ALL = (m.ANTHROPIC, m.BEDROCK, m.OPENAI, m.OPENAI_RESPONSES, m.GEMINI, m.OPENROUTER)


def picture(fmt: str, w: int, h: int, **save) -> bytes:
    out = io.BytesIO()
    PIL.Image.new("RGB", (w, h), (200, 30, 90)).save(out, fmt, **save)
    return out.getvalue()


def padded(data: bytes, size: int) -> bytes:
    """A PNG of exactly size bytes: chunks after IEND are ignored by readers."""
    return data + b"\0" * (size - len(data))


def body(provider, *files: m.File) -> dict:
    inp = assemble.AssembleInput(
        m.Conversation(session_id="img", messages=[
            m.Message("u1", m.USER, [m.Part("t", m.Text("Look at these"))]
                      + [m.Part(f"f{k}", f) for k, f in enumerate(files)])]),
        m.Model("model-x", provider, m.ModelLimits(200_000, 0, 16_000)), [], m.SystemPrompt(soul="Be brief."),
        m.CompactionSettings())
    return json.loads(assemble.assemble(inp, config.Config()).body)


def sent(b: dict) -> list:
    """(declared type, bytes) of each inline image in the body, whatever its format's shape."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            if v.get("type") == "base64" and v.get("media_type", "").startswith("image/"):
                out.append((v["media_type"], base64.b64decode(v["data"])))
            elif "image" in v and isinstance(v["image"], dict) and "format" in v["image"]:
                out.append(("image/" + v["image"]["format"], base64.b64decode(v["image"]["source"]["bytes"])))
            elif "inlineData" in v:
                out.append((v["inlineData"]["mimeType"], base64.b64decode(v["inlineData"]["data"])))
            else:
                for k, x in v.items():
                    if k in ("image_url", "url") and isinstance(x, str) and x.startswith("data:image/"):
                        head, data = x[5:].split(";base64,")
                        out.append((head, base64.b64decode(data)))
                    elif k == "image_url" and isinstance(x, dict) and x.get("url", "").startswith("data:image/"):
                        head, data = x["url"][5:].split(";base64,")
                        out.append((head, base64.b64decode(data)))
                    else:
                        walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(b)
    return out


def notes(b: dict) -> list:
    return [t for t in json.dumps(b).split('"') if t.startswith("[Attached ")]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(FORMATS)), st.integers(1, 9000), st.integers(1, 40), st.booleans())
def test_type_and_size_are_read_as_pillow_reads_them(fmt, w, h, variant):
    save = {}
    if fmt == "JPEG":
        # a progressive JPEG, and one whose frame header follows 40 KB of EXIF
        save = {"progressive": True} if variant else {"exif": b"Exif\0\0" + bytes(40_000)}
    elif fmt == "WEBP":
        w = min(w, 16383)
        save = {"lossless": variant}
    data = picture(fmt, w, h, **save) if fmt != "WEBP" or not variant or w * h < 2_000_000 else picture(fmt, w, h)
    with PIL.Image.open(io.BytesIO(data)) as image:
        assert images.kind(data) == FORMATS[fmt] == image.get_format_mimetype()
        assert images.dimensions(data) == image.size == (w, h)


def test_an_extended_webp_is_read_by_its_canvas():
    out = io.BytesIO()
    PIL.Image.new("RGBA", (321, 7), (1, 2, 3, 4)).save(out, "WEBP")  # alpha: the VP8X header
    assert out.getvalue()[12:16] == b"VP8X" and images.dimensions(out.getvalue()) == (321, 7)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FORMATS)), st.integers(0, 400), st.binary(max_size=64))
def test_a_cut_or_corrupt_header_reads_as_unknown_never_raises(fmt, cut, tail):
    """A header cut anywhere reads as its real size or as unknown, never as another size; bytes
    after the cut may say anything, but never raise."""
    data = picture(fmt, 33, 17)
    assert images.dimensions(data[:cut]) in (None, (33, 17))
    size = images.dimensions(data[:cut] + tail)
    assert size is None or (len(size) == 2 and all(isinstance(x, int) and x >= 0 for x in size))


@pytest.mark.parametrize("provider", ALL)
@pytest.mark.parametrize("declared", ("image/jpeg", "image/webp", "IMAGE/PNG", "image/png; name=a.png"))
def test_an_image_goes_under_the_type_its_bytes_are(provider, declared):
    png = picture("PNG", 64, 48)
    b = body(provider, m.File(declared, "shot.jpg", data=png))
    assert sent(b) == [("image/png", png)], notes(b)
    assert judge_for(provider)(b) == []


@pytest.mark.parametrize("provider", ALL)
def test_an_image_over_the_providers_bytes_is_a_note_saying_so(provider):
    at_limit, over = padded(picture("PNG", 64, 48), LIMIT), padded(picture("PNG", 64, 48), LIMIT + 1)
    b = body(provider, m.File("image/png", "fits.png", data=at_limit), m.File("image/png", "big.png", data=over))
    if provider in (m.ANTHROPIC, m.BEDROCK):
        assert sent(b) == [("image/png", at_limit)]
        assert notes(b) == [f"[Attached image/png: big.png (not sent: 3.8 MB, over the 3.75 MB {provider} "
                            "takes per image)]"]
    else:  # OpenAI takes 20 MB an image, Gemini 20 MB a request: the payload guard's to bound
        assert sent(b) == [("image/png", at_limit), ("image/png", over)]
    assert judge_for(provider)(b) == []


@pytest.mark.parametrize("provider", ALL)
def test_an_image_over_the_providers_pixels_is_a_note_saying_so(provider):
    wide, tall = picture("PNG", 8000, 2), picture("GIF", 3, 8001)
    url = "data:image/gif;base64," + base64.b64encode(tall).decode()
    b = body(provider, m.File("image/png", "wide.png", data=wide), m.File("image/gif", "tall.gif", url=url))
    if provider in (m.ANTHROPIC, m.BEDROCK):
        assert sent(b) == [("image/png", wide)]
        assert notes(b) == [f"[Attached image/gif: tall.gif (not sent: 3x8001 px, over the 8000 px {provider} "
                            "takes per side)]"]
    elif provider == m.GEMINI:  # takes no GIF at all
        assert sent(b) == [("image/png", wide)] and notes(b) == ["[Attached image/gif: tall.gif]"]
    else:
        assert sent(b) == [("image/png", wide), ("image/gif", tall)]
    assert judge_for(provider)(b) == []


def test_bytes_of_a_type_the_provider_does_not_take_are_a_note():
    gif = picture("GIF", 5, 5)
    b = body(m.GEMINI, m.File("image/png", "anim.png", data=gif))
    assert sent(b) == [] and notes(b) == [
        "[Attached image/png: anim.png (not sent: its bytes are image/gif, which gemini does not take)]"]


def test_the_judges_refuse_what_the_providers_refuse():
    """The rule each test above relies on: without the service's reading, the judges say no."""
    png = base64.b64encode(picture("PNG", 10, 10)).decode()
    block = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                                                      "data": png}}]}
    problems = judge_for(m.ANTHROPIC)({"model": "x", "max_tokens": 10, "messages": [block]})
    assert [p.split(":")[0] for p in problems] == ["image"], problems
    wide = base64.b64encode(picture("PNG", 8001, 1)).decode()
    converse = {"messages": [{"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": wide}}}]}]}
    assert [p.split(":")[0] for p in judge_for(m.BEDROCK)(converse)] == ["image"]


@pytest.mark.parametrize("model_id, provider, size, items", [
    ("claude-opus-4-7", m.ANTHROPIC, (2560, 1600), 3),  # read at 3.75 MP: 5,000 tokens
    ("claude-opus-4-7", m.ANTHROPIC, (1920, 1080), 2),  # 2,765 tokens
    ("claude-opus-4-7", m.ANTHROPIC, (1280, 800), 1),  # 1,365 tokens
    ("anthropic.claude-opus-4-7-v1:0", m.BEDROCK, (2560, 1600), 3),
    ("claude-sonnet-4-5", m.ANTHROPIC, (2560, 1600), 1),  # resized to 1.15 MP: 1,600 tokens
    ("gpt-4o", m.OPENAI, (2560, 1600), 1),
])
def test_an_image_counts_the_items_its_pixels_cost_the_model(model_id, provider, size, items):
    """Opus 4.7 reads an image at up to 3.75 MP, about 5,000 tokens: 12 retina screenshots
    counted at 2,048 each put a request 11,000 tokens over a 64K window with should_compact false."""
    from contextsvc import measure
    conv = m.Conversation([m.Message("u1", m.USER, [m.Part("t", m.Text("What is on the screen?")),
                                                    m.Part("f", m.File("image/png", "s.png",
                                                                       data=picture("PNG", *size)))])])
    r = measure.measure(measure.MeasureInput(conv, m.Model(model_id, provider, m.ModelLimits(64_000, 0, 8_192)), [],
                                             m.SystemPrompt(), m.CompactionSettings()), config.Config())
    assert r.media_count == items


def test_chat_completions_names_the_call_of_each_image_a_tool_message_cannot_carry():
    """Tool messages carry text only: their images follow in a user message, where two parallel
    screenshots (window A, window B) could not be told apart."""
    def body_of(calls):
        parts = [m.Part(f"p{k}", m.Tool(f"call_{k}", "screenshot", m.COMPLETED, {"window": k}, output="taken",
                                       attachments=[m.File("image/png", f"w{k}.png", data=picture("PNG", 8 + k, 8))]))
                 for k in calls]
        inp = assemble.AssembleInput(m.Conversation(session_id="img", messages=[
            m.Message("u1", m.USER, [m.Part("t", m.Text("Compare the two windows"))]),
            m.Message("a1", m.ASSISTANT, parts, time_completed_ms=1)]),
            m.Model("gpt-4o", m.OPENAI, m.ModelLimits(128_000, 0, 16_000)),
            [m.ToolDefinition("screenshot", "Takes one.", {"type": "object"})], m.SystemPrompt(),
            m.CompactionSettings())
        return json.loads(assemble.assemble(inp, config.Config()).body)

    both = body_of([0, 1])
    moved = both["messages"][-1]
    assert moved["role"] == "user"
    assert [b["type"] for b in moved["content"]] == ["text", "image_url", "text", "image_url"]
    assert [b["text"] for b in moved["content"][::2]] == ["Media of tool call call_0:", "Media of tool call call_1:"]
    assert [PIL.Image.open(io.BytesIO(base64.b64decode(b["image_url"]["url"].split(",")[1]))).size
            for b in moved["content"][1::2]] == [(8, 8), (9, 8)]
    assert judge_for(m.OPENAI)(both) == []
    one = body_of([0])["messages"][-1]
    assert [b["type"] for b in one["content"]] == ["image_url"]  # one call's: nothing to tell apart
