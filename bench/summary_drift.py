"""Drift benchmark of the offline summarizer: seven rolling compactions of sessions that supersede
what they said earlier (issue 27).

Each seeded session is a maintenance task told over seven rounds. Every round plants facts (a
request, a constraint, a decision, files read and edited, an identifier that only an edit's input
holds, a failing command with a traceback, a linter run with codes) and supersedes some earlier
ones, each kind in turn:
    blocker     the command that failed earlier now succeeds (its blocker must leave Blocked)
    step        an announced next step with no identifier is done (it must leave Next Steps)
    decision    a decision is reversed ("change of plan", "instead", "switch to", "revert",
                "no longer"; it must leave Key Decisions)
    constraint  a constraint is replaced (another version or number, or reversed; it must leave
                Constraints)
    file        a file is renamed or deleted (`git mv`, `mv`, `rm`, a rename tool; its old path must
                leave Relevant Files)
The person also answers with acknowledgements ("good", "keep going", "fix it", "thanks"), and every
round ends with the assistant mid-way through a command, so In Progress must never be empty.

After each round the session is compacted through the real path (`compact.compact`, the whole
history as head) and the response's edits are applied as a client does. Per round:
    facts kept         planted facts still true, found verbatim anywhere in the summary
    first stretch      the same, for the first round's facts only
    error lines        every error and exception line of every failed command, found verbatim
    superseded current superseded items the summary still states as current (a count)
    in progress named  the command under way, named under ### In Progress
    empty sections     sections left empty although the history had material (a count, the
                       retention report's)
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from contextsvc import config, conversation as m
from contextsvc.compact import run as cmod, edits as ed, template

MODEL = m.Model("claude-sonnet-4-5", m.ANTHROPIC, m.ModelLimits(200_000, 0, 64_000))
WHOLE_HEAD = m.CompactionSettings(tail_turns=0)

SERVICES = ("ingest", "notifier", "exporter", "indexer", "mailer", "uploader", "billing", "crawler")
MODULES = ("redis", "boto3", "yaml", "orjson", "psycopg", "lxml", "zstandard", "msgpack")
CHOICES = (("SQLite", "Redis", "the job queue"), ("Celery", "RQ", "the task runner"),
           ("requests", "httpx", "the HTTP client"), ("CSV", "Parquet", "the export format"),
           ("cron", "APScheduler", "the nightly schedule"), ("Flask", "FastAPI", "the admin API"),
           ("PostgreSQL", "DuckDB", "the report store"), ("pickle", "msgpack", "the cache encoding"))
REVERSALS = ("Change of plan: use {b} for {topic} instead of {a}.",
             "Let's switch to {b} for {topic}; {a} does not fit.",
             "Revert {topic} to {b}, {a} broke the staging deploy.",
             "We no longer use {a} for {topic}; {b} replaces it.",
             "Use {b} instead of {a} for {topic}.")
CONSTRAINTS = (("Keep Python 3.9 compatibility in the {svc} package.", "Target Python 3.12 only in the {svc} package."),
               ("Keep Node 18 support in the {svc} CLI.", "The {svc} CLI may target Node 22 only."),
               ("Never allow more than 3 retries per {svc} job.", "Allow at most 5 retries per {svc} job."),
               ("Don't add asyncio to the {svc} worker.", "Change of plan: asyncio is fine in the {svc} worker now."),
               ("Keep line length at 88 in the {svc} code.", "Line length for the {svc} code is 120 from now on."),
               ("Only use tabs in the {svc} Makefile.", "No longer use tabs in the {svc} Makefile; spaces instead."),
               ("Use at most 4 workers for the {svc} pool.", "Use at most 8 workers for the {svc} pool."))
STEPS = (("Next I'll update the deployment notes for the {svc} rollout.",
          "Updated the deployment notes for the {svc} rollout."),
         ("Next I'll clean up the stale {svc} fixtures.", "Cleaned up the stale {svc} fixtures, they are gone now."),
         ("After that I'll document the {svc} retry settings.", "Documented the {svc} retry settings."),
         ("Later I'll tidy the {svc} logging configuration.", "Tidied the {svc} logging configuration: done."))
EXCEPTIONS = ("KeyError: '{svc}_token'", "AttributeError: 'NoneType' object has no attribute 'flush_{svc}'",
              "ValueError: invalid literal for int() with base 10: '{svc}'",
              "TypeError: run_{svc}() missing 1 required positional argument: 'limit'")
ACKS = ("good", "keep going", "Fix it", "thanks", "ok, continue", "great, go on")


@dataclass
class Fact:
    text: str
    round: int
    superseded: bool = False


@dataclass
class Stale:
    """A superseded item: probe, found under one of sections, states it as current."""
    probe: str
    sections: tuple
    round: int


@dataclass
class Session:
    rng: random.Random
    sid: int
    messages: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # error and exception lines of failed commands
    stale: list = field(default_factory=list)
    open: dict = field(default_factory=dict)  # what later rounds supersede, by kind
    under_way: str = ""  # the command the round ends in the middle of
    _n: int = 0

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"d{self.sid}-{self._n:04d}-{kind}"

    def user(self, text: str) -> None:
        mid = self._id("u")
        self.messages.append(m.Message(mid, m.USER, [m.Part(f"{mid}:0", m.Text(text))], time_created_ms=self._n))

    def assistant(self, *contents) -> None:
        mid = self._id("a")
        parts = [m.Part(f"{mid}:{k}", m.Text(c) if isinstance(c, str) else c) for k, c in enumerate(contents)]
        self.messages.append(m.Message(mid, m.ASSISTANT, parts, time_created_ms=self._n, time_completed_ms=self._n))

    def tool(self, name: str, inp: dict, status: str = m.COMPLETED, output: str = "", error: str = "") -> m.Tool:
        return m.Tool(f"call-{self._id('t')}", name, status, inp, output=output, error=error)

    def plant(self, text: str, r: int) -> Fact:
        f = Fact(text, r)
        self.facts.append(f)
        return f

    def supersede(self, fact: Fact, probe: str, sections: tuple, r: int) -> None:
        fact.superseded = True
        self.stale.append(Stale(probe, sections, r))


def _traceback(svc: str, exc: str, n: int) -> str:
    return (f"Traceback (most recent call last):\n  File \"src/{svc}/main.py\", line {n}, in <module>\n"
            f"    main()\n  File \"src/{svc}/core.py\", line {n + 30}, in main\n    run()\n{exc}")


def play_round(s: Session, r: int) -> None:
    rng = s.rng
    svc = SERVICES[(s.sid + r) % len(SERVICES)]
    mod = MODULES[(s.sid * 3 + r) % len(MODULES)]
    t = f"{r}{rng.randrange(10)}"
    path, test = f"src/{svc}/jobs_{t}.py", f"tests/{svc}/test_jobs_{t}.py"
    # supersede what earlier rounds left open, one kind after another
    if "blocker" in s.open:  # the same command now succeeds
        cmd, fact, step = s.open.pop("blocker")
        s.assistant("Installing the missing package.",
                    s.tool("bash", {"command": f"pip install {fact}"}, output=f"Successfully installed {fact}"))
        s.assistant(s.tool("bash", {"command": cmd}, output="worker started\nprocessed 12 jobs"))
        s.supersede(step, step.text, ("next_steps", "in_progress"), r)
        s.stale.append(Stale(cmd, ("blocked",), r))
    if "step" in s.open and r % 2 == 0:
        step, done = s.open.pop("step")
        s.assistant(done)
        s.supersede(step, step.text, ("next_steps", "in_progress"), r)
    if "decision" in s.open:
        fact, a, b, topic = s.open.pop("decision")
        text = REVERSALS[(s.sid + r) % len(REVERSALS)].format(a=a, b=b, topic=topic)
        (s.user if r % 2 else s.assistant)(text)
        s.supersede(fact, fact.text, ("decisions",), r)
        s.plant(text, r)
    if "constraint" in s.open:
        fact, new = s.open.pop("constraint")
        s.user(new)
        s.supersede(fact, fact.text, ("constraints",), r)
        s.plant(new, r)
    if "file" in s.open:
        fact, how = s.open.pop("file"), r % 4
        old = fact.text
        new = old.replace("jobs_", "tasks_")
        if how == 0:
            s.assistant(s.tool("bash", {"command": f"git mv {old} {new}"}))
        elif how == 1:
            s.assistant(s.tool("bash", {"command": f"mv {old} {new}"}, output=""))
        elif how == 2:
            s.assistant(s.tool("rename", {"source": old, "destination": new}, output="renamed"))
        else:
            new = ""
            s.assistant(s.tool("bash", {"command": f"git rm -q {old}"}, output=f"rm '{old}'"))
        s.supersede(fact, old, ("files",), r)
        if new:
            s.plant(new, r)
    # the request, with a constraint
    a, b, topic = CHOICES[(s.sid + r) % len(CHOICES)]
    fn = f"flush_{svc}_{t}"
    old_c, new_c = (x.format(svc=svc) for x in CONSTRAINTS[(s.sid + r) % len(CONSTRAINTS)])
    s.user(f"Harden the {svc} jobs in {path}: make `{fn}` safe to retry. {old_c}")
    s.plant(fn, r)
    s.plant(path, r)
    s.open.setdefault("constraint", (s.plant(old_c, r), new_c))
    s.assistant(f"Reading {path}.", s.tool("read", {"path": path}, output=f"def {fn}():\n    pass\n"))
    # a decision
    decision = f"I'll use {a} for {topic} because it is already deployed."
    s.assistant(decision)
    s.open.setdefault("decision", (s.plant(decision, r), a, b, topic))
    # an edit whose new name lives only in its input
    helper = f"RetryBudget{svc.capitalize()}{t}"
    s.assistant(s.tool("edit", {"file_path": path, "old_string": f"def {fn}():",
                                "new_string": f"class {helper}:\n    pass\n\n\ndef {fn}():"}, output="applied"))
    s.plant(helper, r)
    # a failing run: a traceback, and the fix announced with no identifier to tie it
    if "blocker" not in s.open:
        cmd = f"python -m {svc}.worker --once"
        exc = f"ModuleNotFoundError: No module named '{mod}'"
        err = _traceback(svc, exc, 10 + r)
        s.assistant(s.tool("bash", {"command": cmd}, status=m.ERROR, error=err))
        s.errors += [exc, f'File "src/{svc}/main.py", line {10 + r}, in <module>']
        s.plant(cmd, r)
        step = s.plant(f"Next I'll fix the {svc} worker's missing {mod} module.", r)
        s.assistant(step.text)
        s.open["blocker"] = (cmd, mod, step)
    else:  # a test run that fails with another exception
        cmd = f"pytest {test} -q"
        exc = EXCEPTIONS[(s.sid + r) % len(EXCEPTIONS)].format(svc=svc)
        s.assistant(s.tool("bash", {"command": cmd}, status=m.ERROR,
                           error=f"{_traceback(svc, exc, 40 + r)}\nFAILED {test}::test_retry - {exc.split(':')[0]}"))
        s.errors += [exc, f"FAILED {test}::test_retry - {exc.split(':')[0]}"]
        s.plant(cmd, r)
    # the linter, with codes
    lint = f"ruff check src/{svc}"
    codes = [f"src/{svc}/jobs_{t}.py:{3 + r}:8: F401 [*] `{mod}` imported but unused",
             f"src/{svc}/jobs_{t}.py:{20 + r}:89: E501 Line too long (97 > 88)"]
    s.assistant(s.tool("bash", {"command": lint}, status=m.ERROR, error="\n".join(codes + ["Found 2 errors."])))
    s.errors += codes
    s.plant(lint, r)
    if "step" not in s.open and r % 2:
        step, done = (x.format(svc=svc) for x in STEPS[(s.sid + r) % len(STEPS)])
        s.assistant(step)
        s.open["step"] = (s.plant(step, r), done)
    if "file" not in s.open and r:
        s.open["file"] = s.plant(path, r)  # renamed or deleted next round
    s.user(ACKS[(s.sid + r) % len(ACKS)])
    # mid-way through a command at compaction time
    s.under_way = f"pytest {test} -x"
    s.assistant("Running the tests again.", s.tool("bash", {"command": s.under_way}, status=m.RUNNING))


def _section(summary: str, *keys) -> str:
    parsed = template.parse(summary)
    return "\n".join(x for k in keys for x in parsed[k])


def score(s: Session, summary: str, retention) -> dict:
    valid = [f for f in s.facts if not f.superseded]
    first = [f for f in valid if f.round == 0]
    current = sum(any(st.probe in _section(summary, k) for k in st.sections) for st in s.stale)
    return {"facts": (sum(f.text in summary for f in valid), len(valid)),
            "first": (sum(f.text in summary for f in first), len(first)),
            "errors": (sum(e in summary for e in s.errors), len(s.errors)),
            "superseded_current": current, "superseded_total": len(s.stale),
            "in_progress": int(s.under_way in _section(summary, "in_progress")),
            "empty_sections": len(retention.empty_sections),
            "retention_superseded": len(retention.superseded_current)}


def run_session(sid: int, rounds: int = 7, seed: int = 0, cfg: config.Config = None) -> list:
    """Scores after each compaction of one session, and the last summary."""
    cfg = cfg or config.Config()
    s = Session(random.Random(seed * 1000 + sid), sid)
    out = []
    for r in range(rounds):
        play_round(s, r)
        res = cmod.compact(cmod.CompactInput(m.Conversation(list(s.messages), f"drift-{sid}"), MODEL,
                                             compaction=WHOLE_HEAD, now_ms=1_000 + r, id_prefix=f"c{r}-"), cfg)
        assert res.outcome == cmod.COMPACTED, res.outcome
        s.messages = ed.apply(s.messages, res.edits)
        out.append(score(s, res.summary.parts[0].content.text, res.retention))
    return out


ROWS = (("facts kept", "facts"), ("first stretch", "first"), ("error lines", "errors"),
        ("superseded cur.", "superseded_current"), ("in progress", "in_progress"),
        ("empty sections", "empty_sections"), ("ret. supersed.", "retention_superseded"))


def run(sessions: int = 8, rounds: int = 7, seed: int = 0) -> dict:
    """{row: [value per round]} pooled over sessions: ratios for kept facts and lines, totals for
    counts (superseded current: summed over sessions, out of superseded_total)."""
    per = [run_session(sid, rounds, seed) for sid in range(sessions)]
    out = {}
    for key in ("facts", "first", "errors"):
        out[key] = [sum(p[r][key][0] for p in per) / max(1, sum(p[r][key][1] for p in per)) for r in range(rounds)]
    for key in ("superseded_current", "superseded_total", "in_progress", "empty_sections", "retention_superseded"):
        out[key] = [sum(p[r][key] for p in per) for r in range(rounds)]
    out["sessions"] = sessions
    return out


def table(result: dict) -> str:
    rounds = len(result["facts"])
    head = f"{'per round':<17}" + "".join(f"{'c' + str(r + 1):>7}" for r in range(rounds))
    lines = [head, "-" * len(head)]
    for label, key in ROWS:
        vals = result[key]
        if key in ("facts", "first", "errors"):
            cells = [f"{v:>7.3f}" for v in vals]
        elif key == "superseded_current":
            cells = [f"{f'{v}/{t}':>7}" for v, t in zip(vals, result["superseded_total"])]
        elif key == "in_progress":
            n = result["sessions"]
            cells = [f"{f'{v}/{n}':>7}" for v in vals]
        else:
            cells = [f"{v:>7}" for v in vals]
        lines.append(f"{label:<17}" + "".join(cells))
    return "\n".join(lines)
