"""Every body Assemble emits for the seeded corpus (tests/helpers/corpus.py) is one its provider accepts,
as the provider's judge (tests/judges/) decides, for all nine providers (docs/design.md §6, "What the body
must pass").

The requests go through ContextService.Assemble itself, in process: the same conversion and core
call the RPC makes. A request may be refused with INVALID_ARGUMENT only where the corpus says
that is a correct answer (five cache hints, a 1h hint after a 5m one); such requests have no body
to judge. Beside the judges, two design.md §6 promises are checked on each body: reasoning signed by
another model is never replayed with its signature, and the last step keeps the tools and sets
the provider's "no tool" choice.
"""
from __future__ import annotations

import collections
import json

import pytest

from contextsvc import config, conversation as m
from contextsvc.lowering.registry import PROVIDERS
from contextsvc.rpc.servicer import ContextService
from contextsvc.errors import BadInput

from helpers import corpus
from judges import judge_for

CASES_PER_PROVIDER = 48  # with the deterministic walk in corpus.session, every feature several times


@pytest.fixture(scope="module")
def servicer():
    return ContextService(config.Config())


def _no_tool_choice(provider: str, body: dict, asked: bool) -> str:
    """Why the last-step body fails to disable tools the provider's own way, or "". asked: the
    caller's own tools_disabled, which sets the choice even where changing it costs the cache."""
    if provider == m.ANTHROPIC and not asked:  # a changed tool_choice invalidates the cached messages
        ok = body.get("tools") and "tool_choice" not in body and "MAXIMUM STEPS REACHED" in json.dumps(
            body["messages"][-1])
    elif provider == m.ANTHROPIC:
        ok = body.get("tools") and body.get("tool_choice") == {"type": "none"}
    elif provider == m.GEMINI:
        ok = body.get("tools") and (body.get("toolConfig") or {}).get("functionCallingConfig", {}).get("mode") == "NONE"
    elif provider == m.BEDROCK:
        ok = (body.get("toolConfig") or {}).get("tools") and "toolChoice" not in body.get("toolConfig", {})
    else:
        ok = body.get("tools") and body.get("tool_choice") == "none"
    return "" if ok else "the last step must keep the tools and choose the provider's 'no tool use'"


def _problems(provider: str, case: corpus.Case, servicer) -> tuple:
    """("refused" | "judged", problems) for one case."""
    try:
        response = servicer.Assemble(case.request, None)
    except BadInput as e:
        if case.may_refuse:
            return "refused", []
        return "refused", [f"unexpected-invalid-argument: {case.name}: {e}"]
    body = json.loads(response.body)
    problems = list(judge_for(provider)(body))
    text = response.body.decode()
    for sig in case.foreign_signatures:
        if sig in text:
            problems.append(f"foreign-signature: {case.name}: reasoning signed by another model is replayed "
                            "with its signature; send it as plain text")
    if case.request.max_steps and case.request.step >= case.request.max_steps or case.request.tools_disabled:
        why = _no_tool_choice(provider, body, case.request.tools_disabled)
        if why:
            problems.append(f"last-step-tool-choice: {case.name}: {why}")
    return "judged", problems


@pytest.fixture(scope="module")
def outcomes(servicer):
    out = {}
    for provider in PROVIDERS:
        counts = collections.Counter()
        failures = []
        for case in corpus.cases(provider, CASES_PER_PROVIDER):
            kind, problems = _problems(provider, case, servicer)
            counts[kind] += 1
            counts["refused-body"] += bool(problems) and kind == "judged"
            failures += [f"{case.name}: {p}" for p in problems]
        out[provider] = (counts, failures)
    return out


def _summary(failures: list) -> str:
    by_rule = collections.Counter(f.split(": ", 2)[1].split(":", 1)[0] for f in failures)
    lines = [f"  {rule}: {n}" for rule, n in by_rule.most_common()]
    examples = {}
    for f in failures:
        examples.setdefault(f.split(": ", 2)[1].split(":", 1)[0], f)
    return "\n".join(lines + ["examples:"] + [f"  {e[:300]}" for e in examples.values()])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_corpus_bodies_are_accepted(provider, outcomes):
    counts, failures = outcomes[provider]
    print(f"\n{provider}: {counts['judged']} bodies judged, {counts['refused-body']} refused by the judge, "
          f"{counts['refused']} requests answered INVALID_ARGUMENT")
    assert counts["judged"] >= CASES_PER_PROVIDER * 3 // 4
    assert not failures, (f"{counts['refused-body']} of {counts['judged']} {provider} bodies would be refused:\n"
                          + _summary(failures))


def test_corpus_covers_every_feature():
    """The corpus really holds what it claims, for every provider."""
    for provider in PROVIDERS:
        seen = set()
        for case in corpus.cases(provider, CASES_PER_PROVIDER):
            req = case.request
            seen.add(("hints", len(req.cache_hints)))
            seen.add(("last-step", bool(req.max_steps and req.step >= req.max_steps)))
            seen.add(("foreign", bool(case.foreign_signatures)))
            for msg in req.conversation.messages:
                for part in msg.parts:
                    kind = part.WhichOneof("kind")
                    seen.add(kind)
                    if kind == "text":
                        seen.add(("text", part.text.synthetic, part.text.ignored))
                    elif kind == "reasoning":
                        seen.add(("reasoning", bool(part.reasoning.signature), bool(part.reasoning.redacted_data)))
                    elif kind == "file":
                        seen.add(("mime", part.file.mime))
                        seen.add(("source", part.file.WhichOneof("source"), part.file.url[:12]))
                    elif kind == "tool":
                        seen.add(("state", part.tool.state.status))
                        for a in part.tool.state.attachments:
                            seen.add(("attachment", a.mime))
        want = {"compaction", "provider_compaction", "step_start", "step_finish", ("text", True, False), ("text", False, True),
                ("reasoning", True, False), ("reasoning", False, False), ("reasoning", False, True),
                ("hints", 5), ("last-step", True), ("foreign", True)}
        want |= {("mime", mime) for mime, _, _ in corpus.MEDIA}
        want |= {("state", s) for s in corpus.STATES}
        missing = want - seen
        assert not missing, f"{provider}: the corpus lacks {missing}"
        sources = {x for x in seen if x[0] == "source"}
        assert {s[2][:5] for s in sources if s[1] == "url"} >= {"data:", "https"}
        assert any(s[1] == "data" for s in sources)
