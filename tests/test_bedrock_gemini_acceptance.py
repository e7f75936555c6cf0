"""Bodies Bedrock Converse and Gemini accept (docs/design.md §6, "What the body must pass"): each test is a
refusal seen from the provider, built in process as the golden tests build theirs."""
from __future__ import annotations

import base64
import json
import re

import pytest

from contextsvc import assemble, config, conversation as m

PDF = b"%PDF-1.4 tiny"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"/>'
SCHEMA = {  # what an MCP server sends: JSON Schema, not Gemini's OpenAPI subset
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"where": {"$ref": "#/$defs/place"}, "mode": {"anyOf": [{"const": "a"}, {"const": "b"}]}},
    "required": ["where"],
    "additionalProperties": False,
    "$defs": {"place": {"type": "string"}},
}


def p(pid, content):
    return m.Part(pid, content)


def user(mid, *contents):
    return m.Message(mid, m.USER, [p(f"{mid}-{k}", c) for k, c in enumerate(contents)])


def assistant(mid, *contents, **kw):
    return m.Message(mid, m.ASSISTANT, [p(f"{mid}-{k}", c) for k, c in enumerate(contents)],
                     time_completed_ms=1, **kw)


def pdf(filename):
    return m.File("application/pdf", filename, data=PDF)


def call(call_id, output="ok", name="read"):
    return m.Tool(call_id, name, m.COMPLETED, {"path": "a.py"}, output=output)


def body(provider, *messages, schema=None, name="read", model_id="model-x") -> dict:
    inp = assemble.AssembleInput(
        m.Conversation(session_id="sess-acc", messages=list(messages)),
        m.Model(model_id, provider, m.ModelLimits(200_000, 0, 16_000)),
        [m.ToolDefinition(name, "Read a file", schema or {"type": "object", "properties": {"path": {"type": "string"}}})],
        m.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be brief."),
        m.CompactionSettings())
    return json.loads(assemble.assemble(inp, config.Config()).body)


def texts(value):
    """Every "text" string in the body, at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "text" and isinstance(v, str):
                yield v
            else:
                yield from texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)


def documents(b):
    return [blk["document"] for msg in b["messages"] for blk in msg["content"] if "document" in blk]


def converse_accepts(b):
    """botocore's own check of the Converse input shape (types, required members, enums)."""
    botocore = pytest.importorskip("botocore.session")
    from botocore.validate import ParamValidator

    def to_bytes(v):
        if isinstance(v, dict):
            return {k: base64.b64decode(x) if k == "bytes" else to_bytes(x) for k, x in v.items()}
        return [to_bytes(x) for x in v] if isinstance(v, list) else v

    shape = botocore.get_session().get_service_model("bedrock-runtime").operation_model("Converse").input_shape
    report = ParamValidator().validate({"modelId": "model-x", **to_bytes(b)}, shape)
    assert not report.has_errors(), report.generate_report()


# --- Bedrock Converse -------------------------------------------------------------------------

def test_bedrock_sends_no_blank_text_block():
    b = body(m.BEDROCK,
             user("m1", m.Text("Look at a.py"), m.Text(" \n ")),
             assistant("m2", m.StepStart(),
                       m.Reasoning("first", signature="sig-1"), m.Text(""), m.Reasoning("second", signature="sig-2"),
                       m.Text("  \n"), call("c1", output="\n\t"), call("c2", output="")),
             user("m3", m.Text("Go on")))
    assert all(t.strip() for t in texts(b["messages"])), list(texts(b["messages"]))
    steps = b["messages"][1]["content"]
    # the two signed reasoning blocks now sit side by side: Converse needs no spacer between them
    kinds = [next(iter(blk)) for blk in steps if "cachePoint" not in blk]
    assert kinds == ["reasoningContent", "reasoningContent", "toolUse", "toolUse"]
    results = [blk["toolResult"]["content"] for blk in b["messages"][2]["content"] if "toolResult" in blk]
    assert results == [[{"text": "[No output]"}], [{"text": "[No output]"}]]
    converse_accepts(b)


def test_bedrock_document_names_are_unique_and_earlier_ones_never_change():
    msgs = [user("m1", m.Text("Read these"), pdf("report.pdf"), pdf("report.docx.pdf")),
            assistant("m2", m.Text("Read.")),
            user("m3", m.Text("And this one"), pdf("Report.pdf"), pdf("report.pdf"))]
    names = [d["name"] for d in documents(body(m.BEDROCK, *msgs))]
    assert names == ["report", "report-docx", "Report (2)", "report (3)"]
    assert len({n.casefold() for n in names}) == len(names)
    earlier = [d["name"] for d in documents(body(m.BEDROCK, *msgs[:1]))]
    assert earlier == names[:2]  # adding documents later renames nothing before them


def test_bedrock_document_names_stay_within_200_characters():
    long = "x" * 300 + ".pdf"
    b = body(m.BEDROCK, user("m1", m.Text("Both"), pdf(long), pdf(long)))
    names = [d["name"] for d in documents(b)]
    assert names == ["x" * 200, "x" * 196 + " (2)"]
    converse_accepts(b)


def test_bedrock_document_without_text_gets_its_name_as_text():
    b = body(m.BEDROCK, user("m1", pdf("spec sheet.pdf")))
    assert b["messages"][0]["content"] == [
        {"document": {"format": "pdf", "name": "spec sheet", "source": {"bytes": base64.b64encode(PDF).decode()}}},
        {"text": "spec sheet"},
        {"cachePoint": {"type": "default"}},
    ]
    converse_accepts(b)


def test_bedrock_body_starts_with_a_user_message():
    b = body(m.BEDROCK, user("m1", m.Text("hidden", ignored=True)),
             assistant("m2", m.Text("Summary of the work so far.")), user("m3", m.Text("Go on")))
    assert [msg["role"] for msg in b["messages"]] == ["user", "assistant", "user"]
    assert b["messages"][0]["content"] == [{"text": "[Conversation start]"}]
    converse_accepts(b)


def media_parts():
    """One of each kind of media part the media table must sort, from every kind of source."""
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    return [m.File("image/svg+xml", "logo.svg", data=SVG),
            m.File("image/heic", "phone.heic", data=b"\x00\x00\x00\x18ftypheic"),
            m.File("image/gif", "anim.gif", url=f"data:image/gif;base64,{b64(b'GIF89a')}"),
            m.File("application/pdf", "report.pdf", url=f"data:application/pdf;name=report.pdf;base64,{b64(PDF)}"),
            m.File("image/png", "a.png", url=f"data:image/png;name=a.png;base64,{b64(PNG)}"),
            m.File("image/png", "web.png", url="https://example.com/web.png")]


def test_bedrock_media_follow_the_shared_table():
    files = media_parts()
    shot = m.Tool("c1", "read", m.COMPLETED, {"path": "a.py"}, output="ok", attachments=files)
    b = body(m.BEDROCK, user("m1", m.Text("Look"), *files), assistant("m2", m.StepStart(), shot),
             user("m3", m.Text("Go on")))
    expected = [{"text": "[Attached image/svg+xml: logo.svg]"}, {"text": "[Attached image/heic: phone.heic]"},
                {"image": {"format": "gif", "source": {"bytes": base64.b64encode(b"GIF89a").decode()}}},
                {"document": {"format": "pdf", "name": "report", "source": {"bytes": base64.b64encode(PDF).decode()}}},
                {"image": {"format": "png", "source": {"bytes": base64.b64encode(PNG).decode()}}},
                {"text": "[Attached image/png: web.png]"}]  # Converse takes bytes or S3, not web URLs
    assert b["messages"][0]["content"][1:7] == expected
    result = b["messages"][2]["content"][0]["toolResult"]["content"]
    assert [next(iter(x)) for x in result] == ["text", "text", "text", "image", "document", "image", "text"]
    assert result[4]["document"]["format"] == "pdf" and result[4]["document"]["name"] == "report (2)"
    converse_accepts(b)


def test_bedrock_auto_places_at_most_4_cache_points():
    msgs = []
    for k in range(6):
        msgs += [user(f"m{2 * k:02d}", m.Text(f"question {k}")),
                 assistant(f"m{2 * k + 1:02d}", m.StepStart(), call(f"c{k}"))]
    b = body(m.BEDROCK, *msgs, user("m99", m.Text("last")))
    points = json.dumps(b).count('"cachePoint"')
    assert 1 <= points <= 4
    converse_accepts(b)


# --- Gemini -----------------------------------------------------------------------------------

def test_gemini_sends_json_schema_as_parameters_json_schema():
    b = body(m.GEMINI, user("m1", m.Text("hi")), schema=SCHEMA)
    declaration = b["tools"][0]["functionDeclarations"][0]
    assert "parameters" not in declaration  # the OpenAPI subset refuses $schema, $ref, const, ...
    assert declaration["parametersJsonSchema"] == SCHEMA
    types = pytest.importorskip("google.genai.types")
    types.FunctionDeclaration.model_validate(declaration)


@pytest.mark.parametrize("parts, signed", [
    # a thought, then text, then the call: the signature belongs on the call, not on the text
    ([m.Reasoning("think", signature="gsig"), m.Text("Reading it."), call("c1"), call("c2")], 1),
    # a thought between two parallel calls: the first call carries it
    ([call("c1"), m.Reasoning("think", signature="gsig"), call("c2")], 0),
])
def test_gemini_puts_the_thought_signature_on_the_first_function_call(parts, signed):
    b = body(m.GEMINI, user("m1", m.Text("Look at a.py")), assistant("m2", m.StepStart(), *parts),
             user("m3", m.Text("Go on")))
    model_parts = b["contents"][1]["parts"]
    assert [k for k, part in enumerate(model_parts) if "thoughtSignature" in part] == [signed]
    assert "functionCall" in model_parts[signed] and model_parts[signed]["thoughtSignature"] == "gsig"


def test_gemini_body_starts_with_a_user_turn():
    b = body(m.GEMINI, user("m1", m.Text("hidden", ignored=True)),
             assistant("m2", m.StepStart(), call("c1")), user("m3", m.Text("Go on")))
    assert [c["role"] for c in b["contents"]] == ["user", "model", "user"]
    assert b["contents"][0]["parts"] == [{"text": "[Conversation start]"}]


def test_gemini_replays_no_signature_that_is_not_base64():
    # thoughtSignature is bytes on the wire: "sig-def" fails the whole request
    for model_id, stand_in in (("gemini-2.5-flash", {}), ("gemini-3-pro-preview", {"thoughtSignature": UNSIGNED})):
        b = body(m.GEMINI, user("m1", m.Text("Look at a.py")),
                 assistant("m2", m.StepStart(), m.Reasoning("think", signature="sig-def"), call("c1")),
                 user("m3", m.Text("Go on")), model_id=model_id)
        assert b["contents"][1]["parts"] == [{"functionCall": {"name": "read", "args": {"path": "a.py"}}, **stand_in}]


UNSIGNED = "skip_thought_signature_validator"  # Gemini's documented stand-in for a call it did not sign
GSIG = base64.b64encode(b"gemini's own signature").decode()


def claude_step(mid):
    """A tool-loop step Claude answered: signed thinking (Anthropic's signature), then a call."""
    return assistant(mid, m.StepStart(), m.Reasoning("plan", signature="EqQBCkYIBxgCKkB"), m.Text("Listing."),
                     call(f"c-{mid}"), model_id="claude-sonnet-4-5", provider_id=m.ANTHROPIC)


@pytest.mark.parametrize("model_id, expected", [
    ("gemini-3-pro-preview", UNSIGNED), ("models/gemini-3.5-flash", UNSIGNED), ("gemini-2.5-pro", None)])
def test_gemini_3_gets_the_stand_in_signature_on_calls_another_model_made(model_id, expected):
    """A switch to Gemini 3 in the middle of a tool loop: Claude's calls of the current turn carry
    no Gemini signature, and Gemini 3 refuses the request (400 "Function call is missing a
    thought_signature") unless each step's first call has one; its documentation gives the
    stand-in. Gemini 2.5 validates none, and gets none."""
    b = body(m.GEMINI, user("m1", m.Text("List the files")), claude_step("m2"), claude_step("m3"),
             model_id=model_id)
    calls = [p for c in b["contents"] for p in c["parts"] if "functionCall" in p]
    assert len(calls) == 2 and [p.get("thoughtSignature") for p in calls] == [expected, expected]
    from judges import judge_for
    assert judge_for(m.GEMINI)(b) == []


@pytest.mark.parametrize("stored_as", (m.GEMINI, "google", "google-vertex"))
def test_gemini_keeps_its_own_signatures_under_the_provider_id_agents_store(stored_as):
    """The AI SDK and opencode store Gemini's answers under `google`: that is Gemini's own
    signature, kept (dropping it sent the call unsigned, and Gemini 3 refused the turn)."""
    step = assistant("m2", m.StepStart(), m.Reasoning("plan", signature=GSIG), call("c1"),
                     model_id="gemini-3-pro-preview", provider_id=stored_as)
    b = body(m.GEMINI, user("m1", m.Text("Look at a.py")), step, model_id="gemini-3-pro-preview")
    assert [p.get("thoughtSignature") for p in b["contents"][1]["parts"]] == [GSIG]


def test_a_real_signature_wins_over_the_stand_in_when_two_messages_join():
    """Two answers of one turn joined into one model content (a blank user message between them
    dropped): the turn's first call takes the signature the other message carries, not the
    stand-in its own message got."""
    first = assistant("m2", m.StepStart(), m.Reasoning("plan", signature=GSIG), m.Text("Reading a.py."),
                      model_id="gemini-3-pro-preview", provider_id=m.GEMINI)
    second = assistant("m4", m.StepStart(), call("c1"), model_id="gemini-3-pro-preview", provider_id=m.GEMINI)
    b = body(m.GEMINI, user("m1", m.Text("Look")), first, user("m3", m.Text(" ")), second,
             model_id="gemini-3-pro-preview")
    model = [c for c in b["contents"] if c["role"] == "model"]
    assert len(model) == 1
    assert [p.get("thoughtSignature") for p in model[0]["parts"]] == [None, GSIG]  # text, call


def test_gemini_media_follow_the_shared_table():
    files = media_parts()
    shot = m.Tool("c1", "read", m.COMPLETED, {"path": "a.py"}, output="ok", attachments=files)
    b = body(m.GEMINI, user("m1", m.Text("Look"), *files), assistant("m2", m.StepStart(), shot),
             user("m3", m.Text("Go on")))
    user_parts = b["contents"][0]["parts"][1:]
    assert user_parts[0] == {"text": "[Attached image/svg+xml: logo.svg]"}
    assert user_parts[1]["inlineData"]["mimeType"] == "image/heic"  # Gemini takes heic
    assert user_parts[2] == {"text": "[Attached image/gif: anim.gif]"}
    assert user_parts[3] == {"inlineData": {"mimeType": "application/pdf", "data": base64.b64encode(PDF).decode()}}
    assert user_parts[4] == {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}}
    assert user_parts[5] == {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/web.png"}}
    moved = [p for c in b["contents"] for p in c["parts"] if "inlineData" in p or "fileData" in p]
    assert {(p.get("inlineData") or p["fileData"])["mimeType"] for p in moved} == {"image/heic", "application/pdf", "image/png"}
    assert "image/gif" not in json.dumps(moved) and "svg" not in json.dumps(moved)


# --- tool names -------------------------------------------------------------------------------

ODD_NAMES = ["github.create issue/v2", "3d-render", "mcp__server__" + "t" * 80]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_bedrock_tool_names_are_mapped_alike_in_definition_and_call(name):
    from contextsvc.lowering import bedrock, tool_ids
    b = body(m.BEDROCK, user("m1", m.Text("hi")), assistant("m2", m.StepStart(), call("c1", name=name)),
             user("m3", m.Text("go")), name=name)
    spec = b["toolConfig"]["tools"][0]["toolSpec"]["name"]
    used = b["messages"][1]["content"][0]["toolUse"]["name"]
    assert spec == used == tool_ids.wire_name(bedrock.FORMAT, name) and len(spec) <= 64
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", spec)
    converse_accepts(b)
    assert tool_ids.wire_name(bedrock.FORMAT, "read_file") == "read_file"  # a valid name is unchanged


@pytest.mark.parametrize("name", ODD_NAMES)
def test_gemini_function_names_are_mapped_alike_in_declaration_call_and_response(name):
    from contextsvc.lowering import gemini, tool_ids
    b = body(m.GEMINI, user("m1", m.Text("hi")), assistant("m2", m.StepStart(), call("c1", name=name)),
             user("m3", m.Text("go")), name=name)
    declared = b["tools"][0]["functionDeclarations"][0]["name"]
    parts = [p for c in b["contents"] for p in c["parts"]]
    called = next(p["functionCall"]["name"] for p in parts if "functionCall" in p)
    answered = next(p["functionResponse"]["name"] for p in parts if "functionResponse" in p)
    assert declared == called == answered == tool_ids.wire_name(gemini.FORMAT, name)
    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}", declared)
    assert tool_ids.wire_name(gemini.FORMAT, "mcp.server:read") == "mcp.server:read"
    from judges import judge_for
    assert judge_for(m.GEMINI)(b) == []
