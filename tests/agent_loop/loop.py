"""The agent loop, in Python: a scripted session against the real service and the fake provider.

One step, as the README's "The agent loop" describes it:
  1. Measure the conversation; while should_compact: Compact(auto) with this turn's attempt
     count and apply the response (apply_compaction, omittable messages dropped); stop on
     CONTEXT_OVERFLOW (the turn ends) or NOTHING_TO_DO.
  2. Prune (reason NORMAL, compaction.prune=true) and apply it when it acted.
  3. Assemble (passing back environment_details within a user message's turn) and POST the body.
  4. If the provider refuses it as too long: Compact(overflow, auto), apply, Assemble, resend.
  5. Store the scripted assistant answer: a step-start part, the text, the tool parts completed
     with their outputs (through TruncateToolOutput), a step-finish part with the usage the
     provider reported (input) and the script's output count.

Attempts count the compactions since the provider last answered: the continue message a
compaction inserts starts a new agent turn, as upstream.

run_session() returns a summary with what the test asserts: compactions (figures, outcome,
under_limit, the Measure after applying), refusals, prune runs that acted, and tool calls
without their result in any body sent.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import time
import urllib.error
import urllib.request

from contextsvc.client import apply_compaction, apply_prune
from contextsvc.v1 import context_pb2 as pb

from .fake_provider import unpaired_tool_calls

WINDOWS = {32_000: 4_096, 200_000: 8_192}   # context -> output limit of the two test models
MODELS = {  # provider name -> (proto enum, model id)
    "anthropic": (pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
    "openai": (pb.PROVIDER_OPENAI, "gpt-4o"),
    "bedrock": (pb.PROVIDER_BEDROCK, "anthropic.claude-sonnet-4-5-v1:0"),
}
COMPACT_LOOP_GUARD = 10   # compactions in one step before the loop gives up (the service caps at 3)
REFUSAL_RETRIES = 3       # overflow compactions after refusals of one step
CURRENT_TIME = "2026-01-05T10:00:00+00:00"   # fixed, so bodies are reproducible

DEADLINES = {"Measure": 5, "Assemble": 5, "Prune": 5, "TruncateToolOutput": 5, "Compact": 10}
DIRECTIONS = {"head": pb.TRUNCATE_DIRECTION_HEAD, "tail": pb.TRUNCATE_DIRECTION_TAIL}


def model(provider: str, window: int) -> pb.Model:
    enum, model_id = MODELS[provider]
    return pb.Model(id=model_id, provider=enum, limits=pb.ModelLimits(context=window, output=WINDOWS[window]))


def tool_definitions(script: dict) -> list[pb.ToolDefinition]:
    return [pb.ToolDefinition(**t) for t in script["tools"]]


SYSTEM = pb.SystemPrompt(
    soul="You are a coding agent working in a Python repository. Be precise and terse.",
    env=pb.EnvInfo(working_directory="/work/app", is_git_repo=True, platform="linux", date="2026-01-05",
                   shell="bash"))


def user_message(spec: dict) -> pb.Message:
    parts = []
    for p in spec["parts"]:
        if p["type"] == "text":
            parts.append(pb.Part(id=p["id"], text=pb.TextPart(text=p["text"])))
        else:
            parts.append(pb.Part(id=p["id"], file=pb.FilePart(mime=p["mime"], filename=p["filename"],
                                                              data=base64.b64decode(p["data_b64"]))))
    return pb.Message(id=spec["id"], role=pb.ROLE_USER, time_created_ms=spec["time_ms"], parts=parts)


@dataclasses.dataclass
class Summary:
    provider: str
    window: int
    steps: int = 0
    requests: int = 0
    compactions: list = dataclasses.field(default_factory=list)
    refusals: list = dataclasses.field(default_factory=list)
    prunes: list = dataclasses.field(default_factory=list)
    unpaired: list = dataclasses.field(default_factory=list)
    turns_ended: int = 0
    max_input: int = 0
    elapsed_s: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Session:
    def __init__(self, stub, provider_url: str, provider: str, window: int, compact_deadline: float = 10):
        self.stub = stub
        self.url = provider_url
        self.provider = provider
        self.window = window
        self.model = model(provider, window)
        self.tools: list[pb.ToolDefinition] = []
        self.settings = pb.CompactionSettings(prune=True)
        self.deadlines = {**DEADLINES, "Compact": compact_deadline}
        self.messages: list[pb.Message] = []
        self.session_id = ""
        self.attempts = 0
        self.env_for: tuple[str, str] = ("", "")   # (user message id, environment_details)
        self.summary = Summary(provider, window)

    # ---- RPCs ------------------------------------------------------------------------------

    def conversation(self) -> pb.Conversation:
        return pb.Conversation(session_id=self.session_id, messages=self.messages)

    def measure(self) -> pb.MeasureResponse:
        return self.stub.Measure(pb.MeasureRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings), timeout=self.deadlines["Measure"])

    def compact(self, overflow: bool, step: int, before: pb.MeasureResponse | None) -> pb.CompactResponse:
        r = self.stub.Compact(pb.CompactRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings, overflow=overflow, auto=True, attempts=self.attempts,
            id_prefix="cs-"), timeout=self.deadlines["Compact"])
        self.attempts += 1
        self.messages = apply_compaction(self.messages, r, drop_omittable=True)
        after = self.measure()
        self.summary.compactions.append({
            "step": step, "overflow": overflow, "outcome": pb.CompactOutcome.Name(r.outcome),
            "tokens_before": r.tokens_before, "tokens_after": r.tokens_after, "limit": r.limit,
            "under_limit": r.under_limit, "measured_after": after.decision.tokens,
            "measure_should_compact_before": before.should_compact if before else None,
            "should_compact_after": after.should_compact, "method": r.decision_method,
            "edits": len(r.edits), "omitted": len(r.omittable_ids), "messages_after": len(self.messages),
        })
        return r

    def prune(self, step: int):
        r = self.stub.Prune(pb.PruneRequest(conversation=self.conversation(), model=self.model,
                                            reason=pb.PRUNE_REASON_NORMAL, compaction=self.settings),
                            timeout=self.deadlines["Prune"])
        if r.acted:
            self.messages = apply_prune(self.messages, r)
            self.summary.prunes.append({"step": step, "parts": len(r.part_ids), "tokens_freed": r.tokens_freed})

    def assemble(self, step_in_turn: int) -> pb.AssembleResponse:
        last_user = next((m.id for m in reversed(self.messages) if m.role == pb.ROLE_USER), "")
        env = self.env_for[1] if self.env_for[0] == last_user else ""
        r = self.stub.Assemble(pb.AssembleRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings, step=step_in_turn,
            editor=pb.EditorContext(current_time=CURRENT_TIME, working_directory="/work/app",
                                    environment_details=env)),
            timeout=self.deadlines["Assemble"])
        self.env_for = (last_user, r.environment_details)
        if r.pruned_part_ids:   # the payload guard cleared old outputs in the body: store that too
            self.messages = apply_prune(self.messages, pb.PruneResponse(part_ids=r.pruned_part_ids))
        return r

    def truncate(self, text: str, direction: str) -> str:
        return self.stub.TruncateToolOutput(pb.TruncateToolOutputRequest(
            text=text, direction=DIRECTIONS[direction]), timeout=self.deadlines["TruncateToolOutput"]).content

    # ---- provider ----------------------------------------------------------------------------

    def post(self, body: bytes) -> tuple[int, dict]:
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    # ---- the loop ------------------------------------------------------------------------------

    def compact_while_needed(self, step: int) -> bool:
        """Step 1; False when the turn ended (CONTEXT_OVERFLOW)."""
        for _ in range(COMPACT_LOOP_GUARD):
            m = self.measure()
            if not m.should_compact:
                return True
            r = self.compact(overflow=False, step=step, before=m)
            if r.outcome == pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW:
                return False
            if r.outcome not in (pb.COMPACT_OUTCOME_COMPACTED, pb.COMPACT_OUTCOME_INSUFFICIENT):
                return True
        return True

    def send(self, step: int, step_in_turn: int) -> dict | None:
        """Steps 2-4: the provider's answer, or None when it kept refusing."""
        m = None
        for retry in range(REFUSAL_RETRIES + 1):
            m = self.measure()
            r = self.assemble(step_in_turn)
            body = json.loads(r.body)
            problems = unpaired_tool_calls(self.provider, body)
            if problems:
                self.summary.unpaired.append({"step": step, "problems": problems[:5]})
            status, answer = self.post(r.body)
            self.summary.requests += 1
            if status == 200:
                return answer
            self.summary.refusals.append({
                "step": step, "retry": retry, "status": status, "error": answer,
                "should_compact": m.should_compact, "decision": m.decision.tokens, "projected": m.projected,
                "limit": m.limit, "output_tokens": r.output_tokens, "body_bytes": r.body_bytes})
            if problems or retry == REFUSAL_RETRIES:
                return None
            c = self.compact(overflow=True, step=step, before=m)
            if c.outcome == pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW:
                return None
        return None

    def store_answer(self, spec: dict, usage_input: int):
        a = spec["assistant"]
        usage = pb.Usage(input=usage_input, output=a["output_tokens"])
        parts = [pb.Part(id=a["step_start_id"], step_start=pb.StepStartPart()),
                 pb.Part(id=a["text_part_id"], text=pb.TextPart(text=a["text"]))]
        for t in a["tools"]:
            state = pb.ToolState(
                status=pb.TOOL_STATUS_COMPLETED, input_json=json.dumps(t["input"]),
                output=self.truncate(t["output"], t["direction"]), title=t["tool"],
                time_start_ms=a["time_ms"], time_end_ms=a["time_ms"] + 500,
                attachments=[pb.FilePart(mime=x["mime"], filename=x["filename"], data=base64.b64decode(x["data_b64"]))
                             for x in t["attachments"]])
            parts.append(pb.Part(id=t["part_id"], tool=pb.ToolPart(call_id=t["call_id"], tool=t["tool"], state=state)))
        parts.append(pb.Part(id=a["step_finish_id"], step_finish=pb.StepFinishPart(reason="tool-calls", tokens=usage)))
        parent = next((m.id for m in reversed(self.messages) if m.role == pb.ROLE_USER), "")
        self.messages.append(pb.Message(
            id=a["id"], role=pb.ROLE_ASSISTANT, time_created_ms=a["time_ms"], time_completed_ms=a["time_ms"] + 1000,
            parts=parts, usage=usage, model_id=self.model.id, provider_id=self.provider, parent_id=parent))

    def run(self, script: dict, steps: int | None = None) -> Summary:
        t0 = time.monotonic()
        self.session_id = script["session_id"]
        self.tools = tool_definitions(script)
        step_in_turn = 0
        for i, spec in enumerate(script["steps"][:steps]):
            if spec["user"]:
                self.messages.append(user_message(spec["user"]))
                self.attempts, step_in_turn = 0, 0
            step_in_turn += 1
            self.summary.steps += 1
            if not self.compact_while_needed(i):
                self.summary.turns_ended += 1   # the person would be asked; the script goes on
                self.messages.append(pb.Message(id=f"{spec['assistant']['id']}-continue", role=pb.ROLE_USER,
                                                parts=[pb.Part(id=f"{spec['assistant']['id']}-continue-p", text=pb.TextPart(text="Continue."))]))
                self.attempts, step_in_turn = 0, 1
                continue
            self.prune(i)
            answer = self.send(i, step_in_turn)
            if answer is None:
                continue
            self.attempts = 0
            used = answer["usage"]["input_tokens"]
            self.summary.max_input = max(self.summary.max_input, used)
            self.store_answer(spec, used)
        self.summary.elapsed_s = round(time.monotonic() - t0, 2)
        return self.summary


def run_session(stub, provider_url: str, provider: str, window: int, script: dict,
                steps: int | None = None, compact_deadline: float = 10) -> Summary:
    return Session(stub, provider_url, provider, window, compact_deadline).run(script, steps)
