"""A seeded corpus of agent sessions as AssembleRequests, for tests that judge what Assemble emits.

`cases(provider, count, seed)` gives Case objects: the protobuf request plus what the test must
know about it (whether INVALID_ARGUMENT is a correct answer, signatures that must not be
replayed). Every case draws its features from the same seeded random source, and the first
cases of every provider walk through each feature deterministically, so every part kind, tool
state, media type and source, id style and cache-hint form appears for every provider whatever
the count.
"""
from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field

from contextsvc.v1 import context_pb2 as pb

from helpers.convo import text

PROVIDER_ENUM = {
    "anthropic": pb.PROVIDER_ANTHROPIC, "openai": pb.PROVIDER_OPENAI,
    "openai-compatible": pb.PROVIDER_OPENAI_COMPATIBLE, "bedrock": pb.PROVIDER_BEDROCK,
    "openrouter": pb.PROVIDER_OPENROUTER, "alibaba": pb.PROVIDER_ALIBABA, "copilot": pb.PROVIDER_COPILOT,
    "gemini": pb.PROVIDER_GEMINI, "openai-responses": pb.PROVIDER_OPENAI_RESPONSES,
}
# Model ids per provider: the first of each is the session's model; gateways also serve
# non-Claude models, which take no cache markers.
MODELS = {
    "anthropic": ["claude-sonnet-4-5"],
    "openai": ["gpt-5"],
    "openai-compatible": ["claude-sonnet-4-5", "llama-3.3-70b"],
    "bedrock": ["anthropic.claude-sonnet-4-5-20250929-v1:0"],
    "openrouter": ["anthropic/claude-sonnet-4.5", "openai/gpt-5"],
    "alibaba": ["qwen3-max"],
    "copilot": ["claude-sonnet-4.5", "gpt-5"],
    "gemini": ["gemini-3-pro-preview"],
    "openai-responses": ["gpt-5"],
}
GATEWAYS = ("openai-compatible", "openrouter", "alibaba", "copilot")  # Chat Completions gateways
OTHER_MODEL = "other-model-7"  # a model the session switched away from

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"><rect width="1" height="1"/></svg>'
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
MEDIA = [("image/png", "a.png", PNG), ("image/jpeg", "photo.jpg", JPEG), ("image/gif", "anim.gif", GIF),
         ("image/webp", "pic.webp", WEBP), ("image/svg+xml", "logo.svg", SVG), ("image/heic", "phone.heic", HEIC),
         ("application/pdf", "report.pdf", PDF), ("application/pdf", "report.pdf", PDF)]
SOURCES = ["inline", "data-base64", "data-plain", "data-params", "data-broken", "http"]

# Tool call ids as other providers write them.
ID_STYLES = [
    lambda r, n: f"call_{r.getrandbits(40):x}{n}",
    lambda r, n: f"toolu_01{r.getrandbits(64):016x}{n}",
    lambda r, n: f"functions.read:{n}",
    lambda r, n: f"call-{n}.{r.randrange(100)}:x",
    lambda r, n: "call_" + "x" * 60 + str(n),
    lambda r, n: f"tooluse_{r.getrandbits(48):x}{n}",
]
STATES = [pb.TOOL_STATUS_PENDING, pb.TOOL_STATUS_RUNNING, pb.TOOL_STATUS_COMPLETED, pb.TOOL_STATUS_ERROR]

TOOLS = [
    pb.ToolDefinition(name="read", description="Read a file", input_schema_json=json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {"path": {"type": "string"}, "offset": {"type": "number", "minimum": 1.0, "default": 1.0}},
        "required": ["path"], "additionalProperties": False})),
    pb.ToolDefinition(name="bash", description="Run a shell command", input_schema_json=json.dumps({
        "type": "object", "properties": {"command": {"type": "string"},
                                         "timeout": {"type": "number", "exclusiveMinimum": 0, "default": 1e-07}},
        "required": ["command"]})),
    pb.ToolDefinition(name="edit", description="Edit a file", input_schema_json=json.dumps({
        "type": "object", "definitions": {"edit": {"type": "object", "properties": {
            "old": {"type": "string"}, "new": {"type": "string"}}}},
        "properties": {"path": {"type": "string"}, "edits": {"type": "array", "items": {"$ref": "#/definitions/edit"}}},
        "additionalProperties": {"type": "string"}})),
    pb.ToolDefinition(name="screenshot", description="Capture the screen", input_schema_json="{}"),
]


@dataclass
class Case:
    name: str
    request: pb.AssembleRequest
    may_refuse: bool = False  # INVALID_ARGUMENT is a correct answer (5 hints, TTLs out of order,
    # a last_tool hint on a gateway)
    foreign_signatures: list = field(default_factory=list)  # must not reach the body as signatures


def _sig(r: random.Random) -> str:
    """A provider signature: opaque base64, as Anthropic and Gemini write them."""
    return base64.b64encode(r.randbytes(r.choice([24, 48]))).decode()


def _file(r: random.Random, k: int, source: str = "") -> pb.FilePart:
    mime, name, data = MEDIA[k % len(MEDIA)]
    source = source or r.choice(SOURCES)
    b64 = base64.b64encode(data).decode()
    if source == "inline":
        return pb.FilePart(mime=mime, filename=name, data=data)
    if source == "data-base64":
        return pb.FilePart(mime=mime, filename=name, url=f"data:{mime};base64,{b64}")
    if source == "data-plain":
        payload = "%3Csvg%3E%3C/svg%3E" if "svg" in mime else "hello%20world"
        return pb.FilePart(mime=mime, filename=name, url=f"data:{mime},{payload}")
    if source == "data-params":
        return pb.FilePart(mime=mime, filename=name, url=f"data:{mime};name={name};base64,{b64}")
    if source == "data-broken":  # a client's corrupted copy: not base64, or cut short
        broken = r.choice(["@@@", b64 + "=", b64.rstrip("=") + "====", b64.rstrip("=")[:-1], b64[:8] + "\n" + b64[8:]])
        return pb.FilePart(mime=mime, filename=name, url=f"data:{mime};base64,{broken}")
    return pb.FilePart(mime=mime, filename=name, url=f"https://example.com/files/{name}")


def _tool(r, pid, call_id, state, attachments=(), compacted=False):
    name = r.choice(["read", "bash", "edit", "screenshot"])
    args = {"read": {"path": "src/app.py", "offset": 1.0},
            "bash": {"command": "pytest -q", "timeout": 1e-07},
            "edit": {"path": "a.py", "edits": [{"old": "x", "new": "y"}], "ratio": -0.0},
            "screenshot": {}}[name]
    st = pb.ToolState(status=state, input_json=json.dumps(args), attachments=list(attachments),
                      time_compacted_ms=5 if compacted else 0)
    if state == pb.TOOL_STATUS_COMPLETED:
        st.output = r.choice(["ok", "def f():\n    return 1\n", "", "   "])
    elif state == pb.TOOL_STATUS_ERROR:
        st.error = r.choice(["exit 1: 2 failed", "permission denied"])
    return pb.Part(id=pid, tool=pb.ToolPart(call_id=call_id, tool=name, state=st))


class _Ids:
    def __init__(self):
        self.n = 0

    def __call__(self, prefix="p"):
        self.n += 1
        return f"{prefix}{self.n:05d}"


def session(r: random.Random, provider: str, k: int) -> Case:
    """One session; k (the case number) drives the deterministic walk over the features."""
    pid, mid = _Ids(), _Ids()
    model_id = MODELS[provider][k % len(MODELS[provider])]
    style = ID_STYLES[k % len(ID_STYLES)]
    messages, foreign = [], []
    calls = 0

    def user(*parts, **kw):
        messages.append(pb.Message(id=mid("msg_"), role=pb.ROLE_USER, parts=list(parts), **kw))
        return messages[-1]

    def assistant(*parts, **kw):
        kw.setdefault("time_completed_ms", 1)
        kw.setdefault("model_id", model_id)
        messages.append(pb.Message(id=mid("msg_"), role=pb.ROLE_ASSISTANT, parts=list(parts),
                                   usage=pb.Usage(input=1000, output=50), **kw))
        return messages[-1]

    # The first user message: sometimes its only sent part is ignored.
    first = [text(pid(), "Fix the parser", ignored=True)] if k % 9 == 4 else [text(pid(), "Fix the parser in src/parse.py")]
    if k % 3 == 0:
        first.append(pb.Part(id=pid(), file=_file(r, k, SOURCES[k % len(SOURCES)])))
    if k % 5 == 1:
        first.append(text(pid(), "<system-reminder>be careful</system-reminder>", synthetic=True))
    user(*first)

    for turn in range(r.randint(1, 3) + (k % 2)):
        parts = [pb.Part(id=pid(), step_start=pb.StepStartPart())]
        steps = r.randint(1, 2)
        for step in range(steps):
            if step:
                parts.append(pb.Part(id=pid(), step_start=pb.StepStartPart()))
            kind = (k + turn + step) % 5
            if kind == 0:
                parts.append(pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Think first.", signature=_sig(r))))
                parts.append(text(pid(), r.choice(["", " ", "\n"])))
                parts.append(pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Then act.", signature=_sig(r))))
            elif kind == 1:
                parts.append(pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Unsigned thoughts.")))
            elif kind == 2:
                parts.append(pb.Part(id=pid(), reasoning=pb.ReasoningPart(
                    redacted_data=base64.b64encode(r.randbytes(32)).decode())))
            elif kind == 3:
                parts.append(pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Signed thoughts.", signature=_sig(r))))
            elif turn == 0:
                # OpenAI's server-side compaction item: sent back to Responses, dropped elsewhere
                # (no draw from r, so the rest of the walk is unchanged)
                parts.append(pb.Part(id=pid(), provider_compaction=pb.ProviderCompactionPart(
                    provider_id="openai-responses",
                    encrypted_content=base64.b64encode(f"compacted history {k}".encode()).decode())))
            if r.random() < 0.7:
                parts.append(text(pid(), r.choice(["Looking at it.", "Done with that.", "  \n", "Next 你好 😀"])))
            for c in range(r.choice([1, 1, 2, 3])):
                calls += 1
                state = STATES[(k + calls) % 4] if turn < 2 else pb.TOOL_STATUS_COMPLETED
                attach = [_file(r, k + calls)] if state == pb.TOOL_STATUS_COMPLETED and r.random() < 0.4 else []
                if attach and r.random() < 0.3:
                    attach.append(_file(r, k + calls + 3))
                parts.append(_tool(r, pid(), style(r, calls), state, attach, compacted=r.random() < 0.1))
            parts.append(pb.Part(id=pid(), step_finish=pb.StepFinishPart(reason="tool-calls")))
        msg = assistant(*parts)
        if k % 7 == 3 and turn == 0:
            # The session switched models: this reasoning was signed by another model.
            msg.model_id = OTHER_MODEL
            sig = "foreign" + _sig(r)
            msg.parts.insert(1, pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Old model thoughts.", signature=sig)))
            foreign.append(sig)
        extra = [text(pid(), r.choice(["Also check the tests", "继续", "ok"]))]
        if r.random() < 0.35:
            extra.append(pb.Part(id=pid(), file=_file(r, k + turn + 5)))
        user(*extra)

    thinking_last = ""
    if k % 10 == 7:
        # A step that produced only signed reasoning: the message's last block is a thinking block.
        thinking_last = assistant(pb.Part(id=pid(), step_start=pb.StepStartPart()),
                                  pb.Part(id=pid(), reasoning=pb.ReasoningPart(text="Hmm.", signature=_sig(r))),
                                  pb.Part(id=pid(), step_finish=pb.StepFinishPart(reason="stop"))).id
        user(text(pid(), "Go on"))

    if k % 6 == 5:
        # A compaction: marker, finished summary, later turn.
        marker = user(pb.Part(id=pid(), compaction=pb.CompactionPart(auto=True)))
        assistant(text(pid(), "Summary: parser fixed, tests pending."), summary=True, parent_id=marker.id)
        user(text(pid(), "Continue"))

    step = 1 + (k % 4)
    max_steps = step if k % 4 == 2 else 0
    req = pb.AssembleRequest(
        conversation=pb.Conversation(session_id=f"sess-{provider}-{k}", messages=messages),
        model=pb.Model(id=model_id, provider=PROVIDER_ENUM[provider],
                       limits=pb.ModelLimits(context=200_000, output=16_000),
                       media_in_tool_results=provider in ("anthropic", "bedrock") or k % 2 == 0),
        tools=TOOLS,
        tools_disabled=k % 11 == 10,
        system=pb.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be brief.",
                               env=pb.EnvInfo(working_directory="/repo", is_git_repo=True, platform="linux",
                                              date="2026-12-02")),
        step=step, max_steps=max_steps,
    )
    if k % 4 == 1:
        req.editor.CopyFrom(pb.EditorContext(current_time="2026-12-02T10:00:00+00:00", working_directory="/repo",
                                             visible_files=["src/parse.py"]))
    may_refuse = False
    hints = k % 8
    ids = [x.id for x in messages if not any(p.HasField("compaction") for p in x.parts)]
    if hints == 1:
        req.cache_ttl = pb.CACHE_TTL_1H
    elif hints in (2, 3):
        req.cache_hints.extend([pb.CacheHint(system_block=0, ttl=pb.CACHE_TTL_1H),
                                pb.CacheHint(message_id=ids[-1])])
        # The gateways take markers on message content parts only and refuse a last_tool hint:
        # there it comes in every other such case, so the rest still give a body to judge.
        if hints == 3 and req.tools and (provider not in GATEWAYS or k % 16 == 3):
            req.cache_hints.insert(0, pb.CacheHint(last_tool=True, ttl=pb.CACHE_TTL_1H))
            may_refuse = provider in GATEWAYS
    elif hints == 5:
        # Five explicit hints: more markers than any provider takes.
        req.cache_hints.extend([pb.CacheHint(system_block=0), pb.CacheHint(system_block=1)]
                               + [pb.CacheHint(message_id=i) for i in ids[-3:]])
        may_refuse = True
    elif hints == 6:
        # A 1h hint after a 5m one: Anthropic refuses that order.
        req.cache_hints.extend([pb.CacheHint(system_block=0), pb.CacheHint(message_id=ids[-1], ttl=pb.CACHE_TTL_1H)])
        may_refuse = True
    if thinking_last and not req.cache_hints and k % 6 != 5:
        # A hint on that message: its marker must not land on the thinking block. Where the
        # reasoning is not sent, the message lowers to nothing and the hint has no target.
        req.cache_hints.append(pb.CacheHint(message_id=thinking_last))
        may_refuse = True
    return Case(f"{provider}-{k}", req, may_refuse, foreign)


def cases(provider: str, count: int, seed: int = 14) -> list:
    r = random.Random(f"{seed}-{provider}")
    return [session(r, provider, k) for k in range(count)]
