"""Provider rules each wire format must follow, checked on Assemble's body over loopback."""
from __future__ import annotations

import base64
import json

import convo
from contextsvc.v1 import context_pb2 as pb

PDF = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 tiny").decode()


def body(stub, messages, provider):
    conv = pb.Conversation(session_id="sess-q", messages=messages)
    r = stub.Assemble(pb.AssembleRequest(conversation=conv, model=convo.model(provider=provider)), timeout=10)
    return json.loads(r.body)


def reasoning(pid, text, signature=""):
    return pb.Part(id=pid, reasoning=pb.ReasoningPart(text=text, signature=signature))


def turn(*assistant_parts):
    return [convo.user("m1", convo.text("p1", "Look at a.py")),
            convo.assistant("m2", *assistant_parts),
            convo.user("m3", convo.text("p9", "Go on"))]


def test_bedrock_drops_unsigned_reasoning_and_keeps_signed(stub):
    b = body(stub, turn(reasoning("r1", "unsigned thought"), reasoning("r2", "signed thought", "sig-abc"),
                        convo.text("p2", "Reading it.")), pb.PROVIDER_BEDROCK)
    assistant = b["messages"][1]["content"]
    assert "unsigned thought" not in json.dumps(b)
    assert assistant[0] == {"reasoningContent": {"reasoningText": {"text": "signed thought", "signature": "sig-abc"}}}
    assert assistant[1] == {"text": "Reading it."}


def test_bedrock_document_names_use_only_the_characters_converse_accepts(stub):
    for filename, expected in [("report.final_v2 (draft).pdf", "report-final-v2 (draft)"),
                               ("a  b\t.pdf", "a b"), ("日本語.pdf", "document"), ("", "document")]:
        part = pb.Part(id="f1", file=pb.FilePart(mime="application/pdf", filename=filename, url=PDF))
        b = body(stub, [convo.user("m1", convo.text("p1", "Summarize"), part)], pb.PROVIDER_BEDROCK)
        doc = b["messages"][0]["content"][1]["document"]
        assert doc["name"] == expected, filename
        assert doc["format"] == "pdf"


def test_gemini_replays_the_thought_signature_on_the_function_call(stub):
    call = convo.tool("t1", "call_1", "read", {"path": "a.py"}, "x = 1\n")
    b = body(stub, turn(reasoning("r1", "I should read it", "gem-sig-1"), call), pb.PROVIDER_GEMINI)
    model_parts = b["contents"][1]["parts"]
    assert model_parts[0] == {"functionCall": {"name": "read", "args": {"path": "a.py"}},
                              "thoughtSignature": "gem-sig-1"}
    assert "I should read it" not in json.dumps(b)  # the thought itself is not replayed


def test_gemini_drops_reasoning_without_signature(stub):
    b = body(stub, turn(reasoning("r1", "plain thought"), convo.text("p2", "Done.")), pb.PROVIDER_GEMINI)
    assert b["contents"][1]["parts"] == [{"text": "Done."}]
