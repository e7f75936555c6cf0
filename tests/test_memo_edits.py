"""Sessions that do not only grow: the memo changes no answer.

Between two steps an agent's history does more than grow: a tool call that was running completes
(the same ids, new bytes), the user edits an earlier message, the session reverts to an earlier
message or drops one from the middle, the client marks old outputs pruned, the tools, the system
prompt or the model change, and another conversation reuses the session id. Each step's Measure,
Assemble and Prune, and now and then Compact, go through the server's own parse (the earlier
step's resumption included: the histories pass the skeleton parse's size and the prefix's message
count) to a servicer with the memo, shared by every step, and to one without; the answers, or the
refusals, are compared byte for byte.
"""
from __future__ import annotations

import json
import random

import pytest

from contextsvc import config
from contextsvc.compact import run as compact_run
from contextsvc.memo import CONVERTED
from contextsvc.rpc import conversion, servicer
from contextsvc.rpc.earlier_step import SKELETON_FROM_BYTES
from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES
from contextsvc.v1 import context_pb2 as pb
from contextsvc_client import apply_compaction
from helpers.convo import assistant, text, tool, user
from helpers.steps import Context, memo_config
from helpers.threads import at_once

WORDS = ("parse the config in src/app/main.py keep ParseError stable run pytest tests/test_main.py "
         "the cause is in utils.read_file Error: failed to import 你好 😀 naïve").split()
OUTPUT_LINE = "    def handle(self, request):  # returns the parsed body\n"

METHODS = {"Measure": pb.MeasureRequest, "Assemble": pb.AssembleRequest, "Prune": pb.PruneRequest,
           "Compact": pb.CompactRequest}
MODELS = (("claude-sonnet-4-5", pb.PROVIDER_ANTHROPIC), ("gpt-4o", pb.PROVIDER_OPENAI),
          ("gpt-5", pb.PROVIDER_OPENAI_RESPONSES), ("gemini-2.5-pro", pb.PROVIDER_GEMINI),
          ("anthropic.claude-sonnet-4-5", pb.PROVIDER_BEDROCK))
TOOLS = [pb.ToolDefinition(name=n, description=f"{n} a file", input_schema_json=json.dumps(
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
    for n in ("read", "edit", "bash", "grep", "mcp__github__create_issue")]


class Session:
    """One agent session's state between steps, and the edits made to it."""

    def __init__(self, rng: random.Random, session_id: str = "s", opening: str = "", tag: str = ""):
        self.rng, self.n, self.session_id, self.tag = rng, 0, session_id, tag  # tag: starts its ids
        self.opening = opening  # the first user message's text, when given (else random)
        self.messages: list = []
        self.tools = list(TOOLS[:3])
        self.system = pb.SystemPrompt(soul="You are a coding agent.", agent_prompt="Be precise.")
        self.model_at = 0
        self.context = rng.choice((40_000, 200_000))
        self.cache_state = b""

    def words(self, k: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(k))

    def grow(self) -> None:
        """An assistant step with tool calls (the last one maybe still running), a user turn now
        and then."""
        rng, n = self.rng, f"{self.tag}{self.n}"
        self.n += 1
        if not self.messages and self.opening:
            self.messages.append(user("u", text("up", self.opening)))
            return
        if not self.messages or rng.random() < 0.3:
            self.messages.append(user(f"u{n}", text(f"u{n}p", self.words(rng.randint(3, 40)))))
            return
        parts = [text(f"a{n}t", self.words(rng.randint(0, 30)))]
        for k in range(rng.randint(1, 3)):
            name = rng.choice([t.name for t in self.tools])
            running = k == 2 or rng.random() < 0.15
            status = pb.TOOL_STATUS_RUNNING if running else rng.choice(
                (pb.TOOL_STATUS_COMPLETED,) * 5 + (pb.TOOL_STATUS_ERROR,))
            out = "" if running else OUTPUT_LINE * rng.randint(5, 60)
            p = tool(f"a{n}x{k}", f"c{n}_{k}", name, {"path": f"src/f{rng.randint(0, 9)}.py"}, out, status=status)
            if status == pb.TOOL_STATUS_ERROR:
                p.tool.state.error = "Traceback: " + self.words(4)
            parts.append(p)
        self.messages.append(assistant(f"a{n}", *parts, usage=pb.Usage(input=rng.randint(1_000, 30_000),
                                                                         output=rng.randint(10, 500))))

    # the edits: each changes the history in place, as an agent or its user may between two steps

    def complete_running(self) -> None:
        for msg in reversed(self.messages):
            for p in msg.parts:
                if p.HasField("tool") and p.tool.state.status == pb.TOOL_STATUS_RUNNING:
                    p.tool.state.status = pb.TOOL_STATUS_COMPLETED
                    p.tool.state.output = OUTPUT_LINE * self.rng.randint(1, 30)
                    return

    def edit_user(self) -> None:
        users = [x for x in self.messages if x.role == pb.ROLE_USER]
        if users:
            self.rng.choice(users).parts[0].text.text = self.words(self.rng.randint(2, 20))

    def revert(self) -> None:
        if len(self.messages) > 4:
            del self.messages[self.rng.randint(2, len(self.messages) - 1):]

    def drop_middle(self) -> None:
        if len(self.messages) > 6:
            del self.messages[self.rng.randint(1, len(self.messages) - 3)]

    def mark_pruned(self) -> None:
        outputs = [p for x in self.messages[:-4] for p in x.parts
                   if p.HasField("tool") and p.tool.state.status == pb.TOOL_STATUS_COMPLETED
                   and not p.tool.state.time_compacted_ms]
        for p in self.rng.sample(outputs, min(len(outputs), self.rng.randint(1, 6))):
            p.tool.state.time_compacted_ms = 1_700_000_000_000

    def change_usage(self) -> None:
        answers = [x for x in self.messages if x.role == pb.ROLE_ASSISTANT]
        if answers:
            self.rng.choice(answers).usage.input += self.rng.randint(1, 5_000)

    def change_tools(self) -> None:
        if self.rng.random() < 0.5 and len(self.tools) > 1:
            self.tools.pop(self.rng.randrange(len(self.tools)))
        else:
            self.tools.append(self.rng.choice(TOOLS))
            self.tools = list({t.name: t for t in self.tools}.values())

    def change_system(self) -> None:
        self.system.agent_prompt = self.words(self.rng.randint(2, 12))

    def change_model(self) -> None:
        self.model_at = (self.model_at + 1) % len(MODELS)

    def replace_history(self) -> None:
        """Another conversation under the same session id (a client reusing ids)."""
        self.messages = []
        for _ in range(self.rng.randint(4, 40)):
            self.grow()

    EDITS = ("complete_running", "edit_user", "revert", "drop_middle", "mark_pruned", "change_usage",
             "change_tools", "change_system", "change_model", "replace_history")

    def request(self, method: str) -> bytes:
        mid, provider = MODELS[self.model_at]
        conv = pb.Conversation(session_id=self.session_id, messages=self.messages)
        mdl = pb.Model(id=mid, provider=provider, limits=pb.ModelLimits(context=self.context, output=8_000))
        if method == "Prune":
            reason = self.rng.choice((pb.PRUNE_REASON_NORMAL, pb.PRUNE_REASON_PAYLOAD_LIMIT))
            return pb.PruneRequest(conversation=conv, model=mdl, reason=reason).SerializeToString()
        if method == "Compact":
            return pb.CompactRequest(conversation=conv, model=mdl, tools=self.tools, system=self.system,
                                     auto=True).SerializeToString()
        req = METHODS[method](conversation=conv, model=mdl, tools=self.tools, system=self.system,
                              previous_cache_state=self.cache_state, exact=self.rng.random() < 0.2,
                              editor=pb.EditorContext(current_time="2026-12-06T10:00:00Z",
                                                      working_directory="/repo"),
                              step=self.n % 5, max_steps=4)
        return req.SerializeToString()


def _servicers(memo_bytes: int = 0):
    """(with the memo: memo_bytes, 0 for the default bound; without it)"""
    on = servicer.ContextService(memo_config(memo_bytes) if memo_bytes else config.Config())
    off = servicer.ContextService(memo_config(0))
    assert on.memo is not None and off.memo is None
    return on, off


def _answer(svc, method: str, data: bytes):
    """The method's response bytes through the transport's own parse, or its refusal."""
    try:
        return svc.serialized(method)(conversion.parser(METHODS[method], svc.memo)(data), Context())
    except Exception as e:  # noqa: BLE001 - a refusal is an answer too: compared by kind and text
        return type(e).__name__, str(e)


# a memo that holds a few steps of these sessions: entries evicted, and not kept, between steps
SMALL_MEMO = 1 << 20


def _run_session(session: Session, on, off, steps: int, label: str) -> int:
    """steps steps of session, each grown and edited, every answer of on equal to off's; the
    largest request's size."""
    rng, largest = session.rng, 0
    for _ in range(PREFIX_FROM_MESSAGES + 8):  # past the prefix resumption's message count
        session.grow()
    for step in range(steps):
        for _ in range(rng.randint(1, 3)):
            session.grow()
        for edit in rng.sample(Session.EDITS, rng.choice((0, 1, 1, 2))):
            getattr(session, edit)()
        methods = ["Measure", "Assemble", "Prune"] + (["Compact"] if step % 9 == 8 else [])
        for method in methods:
            data = session.request(method)
            largest = max(largest, len(data))
            got, expected = _answer(on, method, data), _answer(off, method, data)
            assert got == expected, f"{label}, step {step}, {method}"
            if not isinstance(got, bytes):
                continue
            if method == "Assemble":
                session.cache_state = pb.AssembleResponse.FromString(got).cache_state
            elif method == "Compact":
                answer = pb.CompactResponse.FromString(got)
                if answer.outcome == pb.COMPACT_OUTCOME_COMPACTED:
                    session.messages = list(apply_compaction(session.messages, answer))
    return largest


@pytest.mark.parametrize("memo_bytes", [0, SMALL_MEMO], ids=["default memo", "small memo"])
@pytest.mark.parametrize("seed", range(8))
def test_edited_sessions_are_answered_the_same_with_and_without_the_memo(seed, memo_bytes, monkeypatch):
    monkeypatch.setattr(compact_run.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    on, off = _servicers(memo_bytes)
    largest = _run_session(Session(random.Random(seed)), on, off, 36, f"seed {seed}")
    assert largest >= SKELETON_FROM_BYTES  # the skeleton parse was reached
    assert on.memo.hits > 0


THREADS = 4


@pytest.mark.parametrize("memo_bytes", [0, SMALL_MEMO], ids=["default memo", "small memo"])
def test_concurrent_edited_sessions_are_answered_the_same(memo_bytes, monkeypatch):
    """THREADS sessions stepped at once on one memo, the interpreter switching threads every
    microsecond; two of them under one session id and opening with the same message (a fleet
    running one task), whose earlier steps are kept under the same key (earlier_step)."""
    monkeypatch.setattr(compact_run.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    on, off = _servicers(memo_bytes)
    sessions = [Session(random.Random(100 + k), "shared", "fix the failing parser test", f"t{k}") if k < 2
                else Session(random.Random(100 + k), f"s{k}") for k in range(THREADS)]

    def run(k: int) -> None:
        _run_session(sessions[k], on, off, 18, f"thread {k}")

    errors = at_once(run, THREADS)
    assert not errors, errors[0]
    assert on.memo.hits > 0
    if memo_bytes:
        return  # the small memo need not hold the sessions' last steps at the end
    # both sessions' last steps were kept under one key
    shared = [key for key in on.memo.keys() if key[0] == CONVERTED and key[1] == "shared"]
    assert len(shared) == 1
    # a message id: its role's letter, the session's tag, its number
    assert {step.messages[-1].id[1:3] for step in on.memo.get(shared[0])} >= {"t0", "t1"}
