"""Probe benchmark of the offline summarizer: planted facts, five rolling compactions.

Each generated session is a coding task told over five rounds. Every round plants facts in
categories (the session goal, constraints, files touched, commands, errors, decisions) and ends
the way the issue describes: the last user message asks for two more things and the assistant is
mid-way through the first. Some asks are done inside the round, the in-progress one is finished at
the start of the next round, the other one two rounds later, so the probe sees asks move out of
Next Steps across compactions.

After each round the session is compacted through the real path (`compact.compact`, the whole
history as head), the response's edits are applied to the stored conversation the way a client
does (`edits.apply`), and the next round is appended to the edited conversation. Scores, per
category and round, are verbatim recall of everything planted so far (what survives the fifth
compaction is in the last column):

    goal          the session goal's needle under ## Goal
    constraints   anywhere in the summary
    files         every path a tool read or edited (reported on its own: the weakest category in
                  Factory's evaluation of summarizers)
    commands      every shell command run
    errors        every error string seen
    decisions     every decision stated
    in_progress   the request being worked on and the last step taken, under ### In Progress
    next_steps    every ask no step has done yet, under ## Next Steps
    done_kept_out asks already done that are absent from ## Next Steps (1.0 = none reappears)
and the precision of ## Next Steps: the share of its bullets that are asks still open (or the one
in progress).

The drift benchmark (bench/summary_drift.py: seven compactions of sessions that supersede what
they said earlier) runs with --drift.

Usage: python bench/summary_probe.py [--sessions 20] [--rounds 5] [--seed 0] [--drift]
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field

from contextsvc import config, conversation as m
from contextsvc.compact import run as cmod, edits as ed, template

import summary_drift

CATEGORIES = ("goal", "constraints", "files", "commands", "errors", "decisions", "in_progress",
              "next_steps", "done_kept_out")
MODEL = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000))
WHOLE_HEAD = m.CompactionSettings(tail_turns=0)  # everything is summarized: every fact is judged

SERVICES = ("ledger", "billing", "invoice", "payroll", "catalog", "shipping", "search", "auth",
            "metrics", "gateway", "scheduler", "inventory")
NOUNS = ("rates", "orders", "tokens", "quotes", "users", "events", "batches", "sessions", "refunds",
         "reports", "carts", "alerts", "tenants", "webhooks", "exports", "prices")
FEATURES = ("retry with backoff", "a timeout", "structured logging", "input validation",
            "a size limit", "pagination", "a cache", "rate limiting")
CONSTRAINTS = ("Never change the signature of `{fn}`", "Keep Python 3.11 compatibility in `{path}`",
               "Don't add dependencies beyond `{lib}`", "Always run `{cmd}` before committing",
               "Avoid touching `{path}`", "Only use `{lib}` for HTTP calls")
LIBS = ("httpx", "orjson", "attrs", "structlog", "tenacity", "pydantic", "aiohttp", "msgspec")
ERRORS = ("ModuleNotFoundError: No module named '{mod}'", "KeyError: '{key}'",
          "AssertionError: expected 200, got 503", "TypeError: {fn}() missing 1 required positional argument: '{key}'",
          "AttributeError: 'NoneType' object has no attribute '{key}'")
ASK_FORMS = ("Add {feature} to `{fn}` in {path}", "Please add {feature} to `{fn}` ({path})",
             "Rename `{fn}` to `{fn2}` in {path}", "Update {path} so `{fn}` handles empty input")


@dataclass
class Ask:
    text: str
    needle: str  # what must be found (verbatim) for the ask to count as present
    path: str
    done_round: int = -1  # round in which a step completed it; -1 = not yet
    due: int = -1  # round in which the session does it (-1: in its own round or never)


@dataclass
class Session:
    """Messages and the facts planted in them, round by round."""
    rng: random.Random
    sid: int
    messages: list = field(default_factory=list)
    goal: str = ""
    facts: dict = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    asks: list = field(default_factory=list)  # every ask made, in order
    in_progress: tuple = ()  # (ask, last step needle) at the end of the round
    _n: int = 0

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"s{self.sid}-{self._n:04d}-{kind}"

    def user(self, text: str) -> None:
        mid = self._id("u")
        self.messages.append(m.Message(mid, m.USER, [m.Part(f"{mid}:0", m.Text(text))],
                                       time_created_ms=self._n))

    def assistant(self, *contents) -> None:
        mid = self._id("a")
        parts = [m.Part(f"{mid}:{k}", m.Text(c) if isinstance(c, str) else c) for k, c in enumerate(contents)]
        self.messages.append(m.Message(mid, m.ASSISTANT, parts, time_created_ms=self._n,
                                       time_completed_ms=self._n))


def _tool(name: str, status: str, inp: dict, output: str = "", error: str = "", tag: str = "") -> m.Tool:
    return m.Tool(f"call-{tag}-{name}", name, status, inp, output=output, error=error)


def _names(rng: random.Random, r: int, k: int) -> dict:
    svc, noun = rng.choice(SERVICES), rng.choice(NOUNS)
    t = f"{r}{k}"
    return {"svc": svc, "noun": noun, "t": t,
            "path": f"src/{svc}/{noun}_{t}.py", "test": f"tests/{svc}/test_{noun}_{t}.py",
            "fn": f"load_{noun}_{t}", "fn2": f"fetch_{noun}_{t}", "mod": f"{svc}_client_{t}",
            "key": f"{noun}_id_{t}", "lib": rng.choice(LIBS), "feature": rng.choice(FEATURES)}


def _ask(rng: random.Random, r: int, k: int) -> Ask:
    n = _names(rng, r, k)
    form = rng.choice(ASK_FORMS)
    return Ask(form.format(**n).rstrip("."), n["fn"], n["path"])


def _finish(s: Session, ask: Ask, r: int, how: int) -> None:
    """A step that does the ask: an edit of its file, with or without a sentence saying so, or an
    edit of another file (a helper) and a sentence naming the function."""
    if how % 3 == 2:
        helper = f"src/common/helpers_{ask.needle}.py"
        edit = _tool("write", m.COMPLETED, {"filePath": helper, "content": "..."}, "written",
                     tag=f"fin-{ask.needle}")
        s.assistant(edit, f"Finished: `{ask.needle}` now goes through {helper}.")
        s.facts["files"].append(helper)
    else:
        edit = _tool("edit", m.COMPLETED, {"file_path": ask.path, "old_string": "x", "new_string": "y"},
                     "applied", tag=f"fin-{ask.needle}")
        s.assistant(*([f"Done: `{ask.needle}` is updated.", edit] if how % 3 else [edit]))
        s.facts["files"].append(ask.path)
    ask.done_round = r


def play_round(s: Session, r: int) -> None:
    rng = s.rng
    # finish what was left: the ask in progress, and the open ask from two rounds ago
    if s.in_progress:
        _finish(s, s.in_progress[0], r, r)
    for ask in s.asks:
        if ask.done_round < 0 and ask is not (s.in_progress[0] if s.in_progress else None) \
                and ask.due == r:
            _finish(s, ask, r, r + 1)
    n = _names(rng, r, 0)
    constraint = rng.choice(CONSTRAINTS).format(cmd=f"pytest {n['test']}", **n)
    s.facts["constraints"].append(constraint)
    a1, a2 = _ask(rng, r, 1), _ask(rng, r, 2)
    if r == 0:
        s.goal = f"Migrate the {n['svc']} service from `legacy_{n['noun']}_store` to `{n['noun']}_repo_v2`"
        s.facts["goal"].append(f"{n['noun']}_repo_v2")
        s.user(f"{s.goal}. {constraint}.\n\nFirst:\n1. {a1.text}\n2. {a2.text}")
    else:
        s.user(f"{constraint}. Then {a1.text[0].lower() + a1.text[1:]} and "
               f"{a2.text[0].lower() + a2.text[1:]}.")
    s.asks += [a1, a2]
    # work on a1: read, a failing command, a decision, the fix, a passing command
    read = _tool("read", m.COMPLETED, {"path": a1.path}, f"def {a1.needle}():\n    return None\n", tag=f"r{r}a")
    s.assistant(f"Reading {a1.path} first.", read)
    s.facts["files"].append(a1.path)
    cmd = f"pytest {n['test']} -x -q"
    err = rng.choice(ERRORS).format(**n)
    s.assistant(_tool("bash", m.COMPLETED, {"command": cmd},
                      f"E   {err}\nFAILED {n['test']}::test_{n['noun']} - {err.split(':')[0]}", tag=f"r{r}b"))
    s.facts["commands"].append(cmd)
    s.facts["errors"].append(err)
    s.facts["files"].append(n["test"])
    decision = f"use `{n['lib']}` for `{a1.needle}`"
    s.assistant(f"I'll {decision} because the current client has no retries.")
    s.facts["decisions"].append(decision)
    _finish(s, a1, r, r)
    lint = f"ruff check src/{n['svc']} --select E,F"
    s.assistant(f"Next I'll run `{lint}`.")  # announced, then done: must not stay a next step
    s.assistant(_tool("bash", m.COMPLETED, {"command": lint}, "All checks passed!", tag=f"r{r}c"))
    s.facts["commands"].append(lint)
    # a2 is done as well, by the edit of its file
    _finish(s, a2, r, r + 1)
    # the last user message asks for two more things; the assistant is mid-way through the first
    b1, b2 = _ask(rng, r, 3), _ask(rng, r, 4)
    b2.due = r + 2
    s.user(f"Two more things: {b1.text[0].lower() + b1.text[1:]}, and then "
           f"{b2.text[0].lower() + b2.text[1:]}.")
    s.asks += [b1, b2]
    if r % 3 == 0:  # read its file, and stopped there
        step = _tool("read", m.COMPLETED, {"path": b1.path}, f"def {b1.needle}():\n    ...\n", tag=f"r{r}d")
        s.assistant(f"Starting with `{b1.needle}`.", step)
        s.facts["files"].append(b1.path)
        s.in_progress = (b1, b1.path)
    elif r % 3 == 1:  # an edit of its file, interrupted
        step = _tool("edit", m.RUNNING, {"file_path": b1.path, "old_string": "a", "new_string": "b"},
                     tag=f"r{r}d")
        s.assistant(step)
        s.facts["files"].append(b1.path)
        s.in_progress = (b1, b1.path)
    else:  # a search that names the function, then a sentence
        grep = f"grep -rn {b1.needle} src"
        s.assistant(_tool("bash", m.COMPLETED, {"command": grep}, f"{b1.path}:3:def {b1.needle}():",
                          tag=f"r{r}d"))
        s.facts["commands"].append(grep)
        s.in_progress = (b1, grep)


def _section(text: str, key: str) -> str:
    return "\n".join(template.parse(text)[key])


def score(s: Session, summary: str) -> dict:
    """{category: (found, total)} and ("precision", (correct, bullets)) for one summary."""
    out = {}
    for cat in ("constraints", "files", "commands", "errors", "decisions"):
        items = list(dict.fromkeys(s.facts[cat]))
        out[cat] = (sum(x in summary for x in items), len(items))
    out["goal"] = (sum(x in _section(summary, "goal") for x in s.facts["goal"]), len(s.facts["goal"]))
    ask, step = s.in_progress
    prog = _section(summary, "in_progress")
    out["in_progress"] = ((ask.needle in prog) + (step in prog), 2)
    open_asks = [a for a in s.asks if a.done_round < 0 and a is not ask]
    done = [a for a in s.asks if a.done_round >= 0]
    bullets = template.parse(summary)["next_steps"]
    nxt = "\n".join(bullets)
    out["next_steps"] = (sum(a.needle in nxt for a in open_asks), len(open_asks))
    out["done_kept_out"] = (sum(a.needle not in nxt for a in done), len(done))
    wanted = [a.needle for a in open_asks] + [ask.needle]
    out["precision"] = (sum(any(w in b for w in wanted) for b in bullets), len(bullets))
    return out


def run_session(sid: int, rounds: int, seed: int, cfg: config.Config, summarizer=None) -> list:
    """Scores after each compaction of one session (one dict per round)."""
    s = Session(random.Random(seed * 1000 + sid), sid)
    out = []
    for r in range(rounds):
        play_round(s, r)
        res = cmod.compact(cmod.CompactInput(m.Conversation(list(s.messages), f"probe-{sid}"), MODEL,
                                             compaction=WHOLE_HEAD, now_ms=1_000 + r,
                                             id_prefix=f"c{r}-"), cfg, summarizer)
        assert res.outcome == cmod.COMPACTED, res.outcome
        s.messages = ed.apply(s.messages, res.edits)  # what a client stores
        out.append(score(s, res.summary.parts[0].content.text))
    return out


def run(sessions: int = 20, rounds: int = 5, seed: int = 0, cfg: config.Config = None,
        summarizer=None) -> dict:
    """{category or "precision": [ratio per round]}, pooled over sessions (nan: nothing to score,
    e.g. the precision of an empty Next Steps)."""
    cfg = cfg or config.Config()
    totals = {}
    for sid in range(sessions):
        for r, sc in enumerate(run_session(sid, rounds, seed, cfg, summarizer)):
            for cat, (hit, n) in sc.items():
                h, t = totals.setdefault(cat, [[0, 0] for _ in range(rounds)])[r]
                totals[cat][r] = [h + hit, t + n]
    return {cat: [h / t if t else float("nan") for h, t in per] for cat, per in totals.items()}


def table(result: dict) -> str:
    rounds = len(next(iter(result.values())))
    head = f"{'category':<15}" + "".join(f"{'c' + str(r + 1):>7}" for r in range(rounds))
    lines = [head, "-" * len(head)]
    for cat in (*[c for c in CATEGORIES if c != "files"], "precision", "files"):
        label = "NS precision" if cat == "precision" else cat
        if cat == "files":
            lines.append("-" * len(head))
            label = "files touched"
        lines.append(f"{label:<15}" + "".join(f"{x:>7.2f}" if x == x else f"{'n/a':>7}"
                                             for x in result[cat]))
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drift", action="store_true", help="the drift benchmark (seven compactions by default)")
    a = ap.parse_args(argv)
    if a.drift:
        rounds = max(a.rounds, 7)
        print(f"offline summarizer, drift, {a.sessions} sessions, after compaction cN")
        print(summary_drift.table(summary_drift.run(a.sessions, rounds, a.seed)))
        return
    result = run(a.sessions, a.rounds, a.seed)
    print(f"offline summarizer, {a.sessions} sessions, recall after compaction cN "
          f"(c{a.rounds} = what survives the last)")
    print(table(result))


if __name__ == "__main__":
    main()
