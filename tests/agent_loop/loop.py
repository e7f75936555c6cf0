"""The agent loop, in Python: a scripted session against the real service and the fake provider.

One step, as the README's "The agent loop" describes it, one Assemble call per step:
  1. Assemble the conversation (the editor context, so the environment details are injected;
     step and max_steps; the cache_state of the last body the provider accepted passed back as
     previous_cache_state). A step whose figures say it fits sends this body: no Prune.
  2. Only when figures.should_compact: Prune first (reason NORMAL, compaction.prune=true, the
     model given so its gates scale with the window), apply it and Assemble again when it acted.
     Prune is lossless but breaks the cached prefix, so it is spent only on a request that would
     not fit otherwise. While figures.should_compact still holds: Compact(auto) with this turn's
     attempt count, apply the response (apply_compaction, omittable messages dropped) and
     Assemble again; stop on CONTEXT_OVERFLOW (the turn ends) or NOTHING_TO_DO.
  3. Store Assemble's persist parts (apply_persist) and POST its body, unchanged, with the HTTP
     headers Assemble names (the beta the provider's own context management needs).
  4. If the provider refuses it as too long: Compact(overflow, auto), apply, Assemble, resend.
  5. Store the scripted assistant answer: a step-start part, the text, the tool parts completed
     with their outputs (through TruncateToolOutput), a step-finish part with the usage the
     provider reported (input; cleared: what its own context management cleared, from the
     answer's applied_edits) and the script's output count, completed now (completed_ms).

Attempts count the compactions since the provider last answered: the continue message a
compaction inserts starts a new agent turn, as upstream.

run_session() returns a summary with what the test asserts: compactions (figures, outcome,
under_limit, the decision figure of the conversation after applying: a Measure, which has no
per-step fields, as tokens_after is defined), refusals (with the content classes in the
conversation), prune runs that acted, tool calls without their result in any body sent, and one
entry per POST (`sent`, in the order the provider logs them) with the step, what changed the
messages in that step (compaction, prune) and the body's cache_report; with provider_managed on
(CompactionSettings.provider_managed), what the provider's own context management cleared, as its
answer's `context_management.applied_edits` says (`cleared`, one entry per answer that cleared).
"""
from __future__ import annotations

import base64
import dataclasses
import json
import time
import urllib.error
import urllib.request

from contextsvc_client import apply_compaction, apply_persist, apply_prune
from contextsvc.v1 import context_pb2 as pb

from .fake_provider import first_difference, is_prefix, unpaired_tool_calls

WINDOWS = {32_000: 4_096, 200_000: 8_192}   # context -> output limit of the two test models
MODELS = {  # provider name -> (proto enum, model id)
    "anthropic": (pb.PROVIDER_ANTHROPIC, "claude-sonnet-4-5"),
    "openai": (pb.PROVIDER_OPENAI, "gpt-4o"),
    "bedrock": (pb.PROVIDER_BEDROCK, "anthropic.claude-sonnet-4-5-v1:0"),
    "openai-responses": (pb.PROVIDER_OPENAI_RESPONSES, "gpt-5"),
    "gemini": (pb.PROVIDER_GEMINI, "gemini-2.5-flash"),
}
COMPACT_LOOP_GUARD = 10   # compactions in one step before the loop gives up (the service caps at 3)
REFUSAL_RETRIES = 3       # overflow compactions after refusals of one step
CURRENT_TIME = "2026-01-05T10:00:00+00:00"   # fixed, so bodies are reproducible
MAX_STEPS = 100           # the agent's step cap per turn (AssembleRequest.max_steps)

DEADLINES = {"Measure": 5, "Assemble": 5, "Prune": 5, "TruncateToolOutput": 5, "Compact": 10}
DIRECTIONS = {"head": pb.TRUNCATE_DIRECTION_HEAD, "tail": pb.TRUNCATE_DIRECTION_TAIL}


def model(provider: str, window: int) -> pb.Model:
    enum, model_id = MODELS[provider]
    return pb.Model(id=model_id, provider=enum, limits=pb.ModelLimits(context=window, output=WINDOWS[window]))


def tool_definitions(defs: list) -> list[pb.ToolDefinition]:
    """A script's tool definitions (its "tools", or a step's "tool_set") as the requests carry them."""
    return [pb.ToolDefinition(**t) for t in defs]


SYSTEM = pb.SystemPrompt(
    soul="You are a coding agent working in a Python repository. Be precise and terse.",
    env=pb.EnvInfo(working_directory="/work/app", is_git_repo=True, platform="linux", date="2026-01-05",
                   shell="bash"))


def completed_ms(script_ms: int) -> int:
    """When an answer is stored as completed: on the clock that stamps prunes and compactions
    (now), never before the script's own time. The baseline is rebased on what was compacted
    after its answer completed (SPEC §3): a script's fixed past time would make every later prune
    look newer than every answer."""
    return max(script_ms + 1000, int(time.time() * 1000))


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
    cleared: list = dataclasses.field(default_factory=list)
    sent: list = dataclasses.field(default_factory=list)
    turns_ended: int = 0
    max_input: int = 0
    elapsed_s: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Session:
    def __init__(self, stub, provider_url: str, provider: str, window: int, compact_deadline: float = 10,
                 max_steps: int = MAX_STEPS, model_id: str = "", provider_managed: bool = False):
        self.stub = stub
        self.url = provider_url
        self.provider = provider
        self.window = window
        self.model = model(provider, window)
        if model_id:  # another model of the provider (its tokenizer may differ)
            self.model.id = model_id
        self.tools: list[pb.ToolDefinition] = []
        self.settings = pb.CompactionSettings(prune=True, provider_managed=provider_managed)
        self.deadlines = {**DEADLINES, "Compact": compact_deadline}
        self.messages: list[pb.Message] = []
        self.session_id = ""
        self.attempts = 0
        self.env_for: tuple[str, str] = ("", "")   # (user message id, environment_details)
        self.cache_state = b""     # cache_state of the last body the provider accepted
        self.changed: set = set()  # what changed in this step: compaction, prune (the stored messages), tools
        self.max_steps = max_steps
        self.kinds: dict = {}      # tool part id -> content class (for refusal reports)
        self.last_kinds: list = []
        self.summary = Summary(provider, window)

    # ---- RPCs ------------------------------------------------------------------------------

    def conversation(self) -> pb.Conversation:
        return pb.Conversation(session_id=self.session_id, messages=self.messages)

    def measure(self) -> pb.MeasureResponse:
        """The decision figure of the stored conversation, no per-step fields: what a
        CompactResponse's tokens_after is defined against (a check, not a loop decision)."""
        return self.stub.Measure(pb.MeasureRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings), timeout=self.deadlines["Measure"])

    def compact(self, overflow: bool, step: int, before: pb.Figures | None) -> pb.CompactResponse:
        r = self.stub.Compact(pb.CompactRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings, overflow=overflow, auto=True, attempts=self.attempts,
            id_prefix="cs-"), timeout=self.deadlines["Compact"])
        self.attempts += 1
        self.messages = apply_compaction(self.messages, r, drop_omittable=True)
        self.changed.add("compaction")
        after = self.measure()
        self.summary.compactions.append({
            "step": step, "overflow": overflow, "outcome": pb.CompactOutcome.Name(r.outcome),
            "tokens_before": r.tokens_before, "tokens_after": r.tokens_after, "limit": r.limit,
            "under_limit": r.under_limit, "measured_after": after.decision.tokens,
            "should_compact_before": before.should_compact if before else None,
            "should_compact_after": after.should_compact, "method": r.decision_method,
            "edits": len(r.edits), "omitted": len(r.omittable_ids), "messages_after": len(self.messages),
        })
        return r

    def prune(self, step: int, figures: pb.Figures) -> bool:
        # how far over its limit the request is: a prune below its minimum that makes it fit acts
        r = self.stub.Prune(pb.PruneRequest(conversation=self.conversation(), model=self.model,
                                            reason=pb.PRUNE_REASON_NORMAL, compaction=self.settings,
                                            tokens_needed=max(0, figures.projected - figures.limit + 1),
                                            tools=self.tools, system=SYSTEM),
                            timeout=self.deadlines["Prune"])
        if r.acted:
            self.messages = apply_prune(self.messages, r)
            self.changed.add("prune")
            self.summary.prunes.append({"step": step, "parts": len(r.part_ids), "tokens_freed": r.tokens_freed,
                                        "fits": r.fits})
        return r.acted

    def assemble(self, step_in_turn: int) -> pb.AssembleResponse:
        last_user = next((m.id for m in reversed(self.messages) if m.role == pb.ROLE_USER), "")
        env = self.env_for[1] if self.env_for[0] == last_user else ""
        r = self.stub.Assemble(pb.AssembleRequest(
            conversation=self.conversation(), model=self.model, tools=self.tools, system=SYSTEM,
            compaction=self.settings, step=step_in_turn, max_steps=self.max_steps,
            editor=pb.EditorContext(current_time=CURRENT_TIME, working_directory="/work/app",
                                    environment_details=env),
            previous_cache_state=self.cache_state),
            timeout=self.deadlines["Assemble"])
        self.env_for = (last_user, r.environment_details)
        if r.pruned_part_ids:   # the payload guard cleared old outputs in the body: store that too
            self.messages = apply_prune(self.messages, pb.PruneResponse(part_ids=r.pruned_part_ids))
            self.changed.add("prune")
        return r

    def truncate(self, text: str, direction: str) -> str:
        return self.stub.TruncateToolOutput(pb.TruncateToolOutputRequest(
            text=text, direction=DIRECTIONS[direction]), timeout=self.deadlines["TruncateToolOutput"]).content

    # ---- provider ----------------------------------------------------------------------------

    def post(self, body: bytes, headers: dict) -> tuple[int, dict]:
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    # ---- the loop ------------------------------------------------------------------------------

    def prepare(self, step: int, step_in_turn: int) -> pb.AssembleResponse | None:
        """Steps 1 and 2: the Assemble whose body is sent, or None when the turn ended
        (CONTEXT_OVERFLOW). Prune only when the request would not fit, then Compact only when it
        still would not."""
        a = self.assemble(step_in_turn)
        if a.figures.should_compact and self.prune(step, a.figures):
            a = self.assemble(step_in_turn)
            # whether what the prune left fits (its own decision figure), and whether a compaction
            # still follows: the two must never hold together
            self.summary.prunes[-1].update(fits_after=a.figures.decision.tokens < a.figures.limit,
                                           should_compact_after=a.figures.should_compact)
        for _ in range(COMPACT_LOOP_GUARD):
            if not a.figures.should_compact:
                break
            r = self.compact(overflow=False, step=step, before=a.figures)
            if r.outcome == pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW:
                return None
            a = self.assemble(step_in_turn)
            if r.outcome not in (pb.COMPACT_OUTCOME_COMPACTED, pb.COMPACT_OUTCOME_INSUFFICIENT):
                break
        return a

    def content_classes(self) -> dict:
        """Tool outputs still sent (not compacted) in the conversation, by content class."""
        counts: dict = {}
        for m in self.messages:
            for p in m.parts:
                if p.WhichOneof("kind") == "tool" and not p.tool.state.time_compacted_ms:
                    kind = self.kinds.get(p.id, "?")
                    counts[kind] = counts.get(kind, 0) + 1
        return counts

    def send(self, step: int, step_in_turn: int, a: pb.AssembleResponse) -> dict | None:
        """Steps 3 and 4: the provider's answer, or None when it kept refusing."""
        for retry in range(REFUSAL_RETRIES + 1):
            self.messages = apply_persist(self.messages, a)
            body = json.loads(a.body)
            problems = unpaired_tool_calls(self.provider, body)
            if problems:
                self.summary.unpaired.append({"step": step, "problems": problems[:5]})
            status, answer = self.post(a.body, dict(a.headers))
            self.summary.requests += 1
            self.summary.sent.append(sent_entry(step, status, self.changed, a.cache_report))
            if status == 200:
                self.cache_state = a.cache_state   # what the provider's cache now holds
                return answer
            f = a.figures
            self.summary.refusals.append({
                "step": step, "retry": retry, "status": status, "error": answer,
                "should_compact": f.should_compact, "decision": f.decision.tokens, "projected": f.projected,
                "limit": f.limit, "output_tokens": a.output_tokens, "body_bytes": a.body_bytes,
                "content": self.content_classes(),
                "last_step_kinds": self.last_kinds})
            if problems or retry == REFUSAL_RETRIES:
                return None
            c = self.compact(overflow=True, step=step, before=f)
            if c.outcome == pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW:
                return None
            a = self.assemble(step_in_turn)
        return None

    def record_clearing(self, step: int, answer: dict) -> int:
        """The input tokens the provider's own context management cleared from the request it
        answered (stored with the usage: Usage.cleared)."""
        edits = (answer.get("context_management") or {}).get("applied_edits", ())
        for edit in edits:
            self.summary.cleared.append({"step": step, "type": edit["type"], "tool_uses": edit["cleared_tool_uses"],
                                         "tokens": edit["cleared_input_tokens"]})
        return sum(edit["cleared_input_tokens"] for edit in edits)

    def store_answer(self, spec: dict, usage_input: int, cleared: int = 0):
        a = spec["assistant"]
        usage = pb.Usage(input=usage_input, output=a["output_tokens"], cleared=cleared)
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
            self.kinds[t["part_id"]] = t.get("kind", "?")
        self.last_kinds = [t.get("kind", "?") for t in a["tools"]]
        parts.append(pb.Part(id=a["step_finish_id"], step_finish=pb.StepFinishPart(reason="tool-calls", tokens=usage)))
        parent = next((m.id for m in reversed(self.messages) if m.role == pb.ROLE_USER), "")
        self.messages.append(pb.Message(
            id=a["id"], role=pb.ROLE_ASSISTANT, time_created_ms=a["time_ms"], time_completed_ms=completed_ms(a["time_ms"]),
            parts=parts, usage=usage, model_id=self.model.id, provider_id=self.provider, parent_id=parent))

    def run(self, script: dict, steps: int | None = None) -> Summary:
        t0 = time.monotonic()
        self.session_id = script["session_id"]
        self.tools = tool_definitions(script["tools"])
        step_in_turn = 0
        for i, spec in enumerate(script["steps"][:steps]):
            if spec["user"]:
                self.messages.append(user_message(spec["user"]))
                self.attempts, step_in_turn = 0, 0
            step_in_turn += 1
            self.summary.steps += 1
            self.changed = set()
            if "tool_set" in spec:  # an MCP server connected or gone: the tools sent from now on
                self.tools = tool_definitions(spec["tool_set"])
                self.changed.add("tools")
            a = self.prepare(i, step_in_turn)
            if a is None:
                self.summary.turns_ended += 1   # the person would be asked; the script goes on
                self.messages.append(pb.Message(id=f"{spec['assistant']['id']}-continue", role=pb.ROLE_USER,
                                                parts=[pb.Part(id=f"{spec['assistant']['id']}-continue-p", text=pb.TextPart(text="Continue."))]))
                self.attempts, step_in_turn = 0, 0
                continue
            answer = self.send(i, step_in_turn, a)
            if answer is None:
                continue
            self.attempts = 0
            cleared = self.record_clearing(i, answer)
            used = answer["usage"]["input_tokens"]
            self.summary.max_input = max(self.summary.max_input, used)
            self.store_answer(spec, used, cleared)
        self.summary.elapsed_s = round(time.monotonic() - t0, 2)
        return self.summary


def sent_entry(step: int, status: int, changed: set, report: pb.CacheReport) -> dict:
    """One POST as a summary's `sent` holds it: the step, the provider's status, what changed in
    that step (compaction, prune: the messages; tools: the definitions) and the body's cache_report."""
    return {"step": step, "status": status, "changed": sorted(changed),
            "cache": {"compared": report.compared, "prefix_kept": report.prefix_kept,
                      "segment": report.segment, "index": report.index, "cause": report.cause,
                      "rewrite": report.rewrite.tokens, "reused_elements": report.reused_elements}}


def cache_breaks(summary: dict) -> list[dict]:
    """The accepted bodies whose cache_report says the previous accepted body's prefix did not
    survive, with what the loop changed in that step."""
    return [{"step": s["step"], "changed": s["changed"], **s["cache"]} for s in summary["sent"]
            if s["status"] == 200 and s["cache"]["compared"] and not s["cache"]["prefix_kept"]]


def breaks_by_cause(summary: dict) -> dict:
    out: dict = {}
    for b in cache_breaks(summary):
        out[b["cause"]] = out.get(b["cause"], 0) + 1
    return out


def cache_violations(summary: dict, log: list) -> list[str]:
    """What the session's bodies broke of the cache contract, as readable lines.

    log: the fake provider's entries for this session's POSTs, in order (each carries the body's
    elements in cache order, markers removed). No break may have cause "other" but one in the tool
    definitions on a step that changed them: every break is a compaction or a prune that acted in
    that step (a compaction marks tool outputs compacted too), new tools, or the first step; and
    the previous accepted body is a prefix of the next on every step that changed none of these,
    and its cache_report agrees.
    """
    out = []
    sent = summary["sent"]
    if len(sent) != len(log):
        return [f"{len(sent)} POSTs but {len(log)} provider log entries"]
    accepted = [(s, e) for s, e in zip(sent, log) if s["status"] == 200]
    if accepted and accepted[0][0]["cache"]["compared"]:
        out.append("the first body was compared with a previous cache_state")
    out += [f"step {s['step']}: no cache_report (previous_cache_state not passed back?)"
            for s, _ in accepted[1:] if not s["cache"]["compared"]]
    for b in cache_breaks(summary):
        explained = b["cause"] in b["changed"] or (b["cause"] == "prune" and "compaction" in b["changed"])
        if b["segment"] == "tools" and "tools" in b["changed"]:  # the client changed them
            continue
        if b["cause"] not in ("compaction", "prune") or not explained:
            out.append(f"step {b['step']}: cache break cause {b['cause']!r} at {b['segment']}[{b['index']}] "
                       f"(this step changed: {b['changed'] or 'nothing'}; rewrite {b['rewrite']} tokens)")
    for (_, e0), (s1, e1) in zip(accepted, accepted[1:]):
        if s1["changed"]:
            continue
        if not is_prefix(e0.elements, e1.elements):
            out.append(f"step {s1['step']}: the previous body is not a prefix of this one (first difference "
                       f"{first_difference(e0.elements, e1.elements)}; cache_report {s1['cache']})")
        elif not s1["cache"]["prefix_kept"]:
            out.append(f"step {s1['step']}: the bodies keep the prefix but cache_report says {s1['cache']}")
    return out


def run_session(stub, provider_url: str, provider: str, window: int, script: dict,
                steps: int | None = None, compact_deadline: float = 10, model_id: str = "",
                provider_managed: bool = False) -> Summary:
    return Session(stub, provider_url, provider, window, compact_deadline, model_id=model_id,
                   provider_managed=provider_managed).run(script, steps)
