"""The embedded summarizer: deterministic and extractive, no key and no network (docs/design.md §5).

It fills every section of the template from the head: the person's goals and constraints from
user messages, files from tool inputs, commands from shell tool inputs, error strings from tool
errors and error-looking lines, decisions stated by the assistant, and the facts the person states
("the dev server port is 8080", "The deploy ticket is ZX-4471") verbatim in Critical Context, each
until a later statement changes it (supersede.fact_clauses, superseded_facts: "the port is now
9090", "renamed to beta_db", "X instead of Y"), its old name leaving Identifiers with it; a
statement of fact is no request. In Progress names the request
being worked on and the last step taken; Next Steps lists what the person asked (and the assistant
announced) that no later step, nor the turn's closing report ("Root cause found in rollout.py.",
"PR opened.", "All green."), has done (see _Asks). Everything it copies is copied verbatim.
Given a previous summary it updates that document (rolling update): previous bullets and new ones
are merged, duplicates dropped, each section bounded, oldest first out; the previous Next Steps
and request in progress are carried through the new messages, so a step done later ticks them off,
and what the new messages supersede (supersede.py: a blocker resolved, a decision reversed, a
constraint replaced, a file renamed or deleted) leaves the sections that state what is current.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from types import MappingProxyType

from ... import conversation as m
from ...config import SummarizerConfig
from ...deadline import NO_DEADLINE, Deadline
from ...memo import each
from ...step.reminders import unwrapped
from .. import template
from . import supersede as sup

NAME = "offline"


@dataclass(frozen=True)
class OfflineLimits:
    """The bounds of an offline summary; their values live in config (summarizer.offline_*)."""
    max_items: int
    max_goals: int
    max_item_chars: int

    @classmethod
    def of(cls, summarizer: SummarizerConfig) -> "OfflineLimits":
        return cls(summarizer.offline_max_items, summarizer.offline_max_goals,
                   summarizer.offline_max_item_chars)


DEFAULT_LIMITS = OfflineLimits.of(SummarizerConfig())


READ_TOOLS = ("read", "view", "cat", "grep", "glob", "list", "ls", "search", "codesearch", "find")
EDIT_TOOLS = ("edit", "write", "patch", "apply_patch", "multiedit", "create", "str_replace", "replace",
              "insert", "delete", "move", "rename")
SHELL_TOOLS = ("bash", "shell", "sh", "run", "exec", "execute", "terminal", "command", "run_command")
PATH_KEYS = ("path", "file_path", "filePath", "filename", "file", "paths", "files", "target_file",
             "source", "destination", "directory", "dir", "cwd")
COMMAND_KEYS = ("command", "cmd", "script", "commands")
# a tool whose name starts so only looks (an MCP server's get_issue, list_pulls, search_code)
LOOK_PREFIXES = ("read", "get", "list", "search", "fetch", "query", "find", "describe", "show", "view", "lookup")
# the agent's own bookkeeping (its todo list): no work done on the person's behalf
BOOKKEEPING_PREFIXES = ("todo",)
# what names the thing a call made or changed, in a JSON object it answers with (an issue's
# number and address, a resource's id): the Done item says them, so the next model knows it exists
OUTCOME_KEYS = ("number", "id", "key", "name", "html_url", "url", "status", "state")
MAX_CALL_FIELDS = 3  # of a call's input, and of its outcome
MAX_CALL_VALUE = 80  # characters of each

ERROR_LINE = re.compile(r"(?:Error|Exception|Traceback|\bfailed\b|\bFAILED\b|\bfatal\b)")
CONSTRAINT = re.compile(
    r"\b(?:must|never|always|don'?t|do not|should(?:n'?t)?|prefer|avoid|only|without|keep|make sure|"
    r"required?|no more than|at most|at least)\b", re.IGNORECASE)
DECISION = re.compile(
    r"\b(?:decided|decide to|instead|chose|choose|switch(?:ed)? to|use [^ ]+ (?:because|since)|because|"
    r"the fix is|the cause is|root cause|decision)\b", re.IGNORECASE)
# what the assistant means to do is a decision when it says what it chose: "I'll use X", "let's go
# with Y"; "I'll look at the handler first" is a step, not a decision
INTENT = re.compile(r"\b(?:I'll|I will|we'll|we will|going to|let's)\b", re.IGNORECASE)
CHOICE = re.compile(r"\b(?:use|using|rather|over|prefer|go with|pick|opt for|keep|default)\b", re.IGNORECASE)
NEXT = re.compile(r"\b(?:next|then I|TODO|remaining|still need|left to|afterwards|after that|"
                  r"follow[- ]up|later)\b", re.IGNORECASE)
_EXT = r"(?:py|pyi|pyx|js|jsx|ts|tsx|mjs|cjs|go|rs|java|kt|c|cc|cpp|h|hpp|cs|rb|php|swift|md|rst|txt|" \
       r"json|jsonl|yaml|yml|toml|ini|cfg|lock|sql|sh|bash|zsh|html|css|scss|proto|xml|csv|env|" \
       r"gradle|mk|cmake|tf|vue|svelte|ipynb)"
PATH = re.compile(  # a whole token that is a path: has a slash, or ends in a known extension
    r"(?:\.{1,2}/|/|~/)?(?:[\w.-]+/)+[\w.-]*\w|[\w-]+(?:\.[\w-]+)*\." + _EXT)
FILE = re.compile(r"(?:\.{1,2}/|/|~/)?(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\." + _EXT)  # a path with a file's extension
# a URL or connection string ("postgresql://shop@db:5432/shop"), kept whole (its host alone says
# nothing of where to connect), its query string included, a password in it masked
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s`'\"<>]+")
URL_END = ".,:;!?*)]}"  # the sentence's punctuation, a markdown link's bracket
CREDENTIALS = re.compile(r"(?<=://)([^/@\s:]*):[^/@\s]*@")
# an issue or pull request named as one: "issue #4711", "fixes #12" (the number: group 1), or
# "acme/shop#7" (with its repository, group 2: another's #7 is another issue); not "#333333"
ISSUE_REF = re.compile(r"\b(?:issues?|PRs?|pull requests?|pulls?|bugs?|tickets?|fix(?:es|ed)?|close[sd]?|"
                       r"resolve[sd]?|refs?|see|created|opened|filed|merged)\s+(#\d+)\b|"
                       r"\b([\w.-]+/[\w.-]+#\d+)\b", re.IGNORECASE)
TOKEN = re.compile(r"[^\s`'\"(),;<>\[\]{}|=]+")  # a word of prose, as identifiers reads it
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+[a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")
SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")

SENTENCE = re.compile(r"(?<=[.!?])(?<!\.\.\.)\s+(?=[A-Z`\"'(\[])")  # not after an ellipsis: "SELECT ... FOR"

# Asks: what the person asked for, one clause each, so that In Progress and Next Steps can name
# them and a later step can tick them off.
ASK_VERBS = (
    "add", "fix", "update", "rename", "remove", "delete", "write", "run", "make", "change", "create",
    "move", "implement", "refactor", "replace", "document", "bump", "test", "check", "port",
    "migrate", "split", "extract", "merge", "convert", "upgrade", "downgrade", "install", "configure",
    "set", "enable", "disable", "handle", "support", "drop", "clean", "format", "lint", "build",
    "deploy", "release", "publish", "commit", "push", "revert", "review", "investigate", "debug",
    "profile", "optimize", "speed", "reduce", "increase", "expose", "wire",
    "validate", "parse", "generate", "regenerate", "benchmark", "measure", "translate", "pin",
    "rewrite", "inline", "introduce", "switch", "retry", "include", "exclude", "skip", "bundle",
    "package", "ship", "finish", "complete", "find", "print", "explain", "compare",
    # the last steps of a task, said at its start ("Open a GitHub issue ... when done", "Finally,
    # ping #ops in Slack"): lost from the summary, the model never took them
    "open", "ping", "notify", "send", "post", "close", "tag", "announce", "email", "rerun", "restart",
    "upload", "share", "tell",
)
_VERB = "|".join(ASK_VERBS)
ASK_LEAD = re.compile(  # words before the verb of a request; they are dropped from the bullet
    r"^(?:(?:"
    # "When you are finished, open a PR", "once that's done, tag the release" (before "after that")
    r"(?:when|once|after)\s+(?:you(?:'re| are| have)|that(?:'s| is| has been)|it(?:'s| is)|everything(?:'s| is)|"
    r"all(?: of)? (?:this|that) (?:is|has been))?\s*(?:done|finished|complete|completed|merged|green)|"
    r"please|also|then|and|so|now|next|finally|first|lastly|plus|after that|afterwards|"
    r"can you|could you|would you|will you|i need you to|i'd like you to|i want you to|"
    r"(?:we|you)(?:'ll| will)?\s+(?:still\s+|also\s+)?(?:need|have)\s+to|still need to|"
    r"remember to|don't forget to|do not forget to|"
    r"you should|go ahead and|hi|hello|hey|help me(?: to)?)\b[,:]?\s*)+",
    re.IGNORECASE)
ASK_START = re.compile(rf"^(?:{_VERB})(?![-\w])", re.IGNORECASE)  # "Post-processing is slow" asks nothing
# "... , and then add Y", "...; fix Z", "two more things: add X"; the separator is kept (split)
CLAUSE_SPLIT = re.compile(
    rf"(,?\s+(?:and\s+then|and\s+also|and|then|also|plus)\s+|;\s+|:\s+)"
    rf"(?=(?:please\s+)?(?:{_VERB})\b)", re.IGNORECASE)
# verbs of one object, joined where CLAUSE_SPLIT split them at an "and": "find and fix", "check, and then fix"
_VERBS = rf"(?:{_VERB})(?:,?\s+and(?:\s+then|\s+also)?\s+(?:{_VERB}))*"
VAGUE_OBJECT = re.compile(  # "fix it", "find and fix that too": nothing to tick off, not a step
    rf"^{_VERBS}\s+(?:it|this|that|them|these|those|everything|all|the rest)(?:\s+(?:too|now|again|up|please))*$",
    re.IGNORECASE)
BARE_VERBS = re.compile(rf"^{_VERBS}$", re.IGNORECASE)  # "find", "find and fix": what their object follows
LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|\(?[a-z][.)])\s+(.+)$")
DONE_SAID = re.compile(
    r"\b(?:done|finished|completed|added|fixed|updated|renamed|removed|deleted|implemented|wrote|"
    r"written|created|changed|moved|replaced|bumped|documented|refactored|migrated|merged|resolved|"
    r"installed|cleaned|tidied|configured|passes|passing|works now|gone)\b"
    r"|^(?:I(?:'ve| have)?\s+)?(?!(?:need|feed|speed|seed|embed)\b)[A-Za-z]+ed\b", re.IGNORECASE)
NOT_YET = re.compile(r"\b(?:I'll|I will|will|going to|let me|let's|need to|still|not yet|next|"
                     r"haven'?t|hasn'?t|isn'?t|TODO)\b", re.IGNORECASE)
SHORT_ASIDE = 6  # words: a user message this short that names nothing is no goal
WORKING = "Working on: "  # In Progress: the request being worked on
LAST_STEP = "Last step: "  # In Progress: the last step taken
FIXED = " (since fixed)"  # Critical Context: an error line of a failure a later run of the same call cleared
FACT = "Fact: "  # Critical Context: a fact the person stated, verbatim (supersede.fact_clauses)
# a label before a fact that says only that it is one: "Important facts: the dev server port is 8080"
FACT_LABEL = re.compile(r"^(?:(?:(?:also|and|so|btw|fyi|some|important|key|other|more|a few)\s+)*"
                        r"(?:facts?|notes?|note that|info|context|details?|fyi|btw|for reference|reminder)\s*:\s+|"
                        r"(?:and|also|plus|so)\s+(?=[a-z]))", re.IGNORECASE)
# what, in a sentence that asks for something, makes it a constraint too: "Add retries, but never
# more than 3", "Refactor it and don't touch the API"; not "keep its tests green" or "only the
# parser", which say what the task is ("refactor module X and keep its tests green" is a task)
STRONG_CONSTRAINT = re.compile(
    r"\b(?:must(?:n'?t)?|never|always|don'?t|do not|shouldn'?t|should not|prefer(?:ably)?|avoid|no more than|"
    r"at most|without (?:breaking|changing|touching))\b", re.IGNORECASE)


def _blank(mt: re.Match) -> str:
    """A match's span as spaces (masked: read no further)."""
    return " " * len(mt.group(0))


def identifiers(text: str) -> list:
    """Paths, identifiers, URLs and issue numbers in prose, in order of appearance (with repeats)."""
    found = [(mt.start(), CREDENTIALS.sub(r"\1:***@", mt.group(0).rstrip(URL_END))) for mt in URL.finditer(text)]
    found += [(mt.start(mt.lastindex), mt.group(mt.lastindex)) for mt in ISSUE_REF.finditer(text)]
    masked = URL.sub(_blank, text) if found else text
    emails = [(mt.start(), mt.group(0)) for mt in sup.EMAIL.finditer(masked)]  # an address whole, not its domain
    if emails:
        found += emails
        masked = sup.EMAIL.sub(_blank, masked)
    for mt in TOKEN.finditer(masked):
        tok = mt.group(0).strip(".,:!?*")
        if len(tok) < 3:
            continue
        at = mt.start()
        if PATH.fullmatch(tok):
            found.append((at, tok))
            continue
        if "_" in tok:
            found.extend((at, x) for x in SNAKE.findall(tok))
        if "." in tok:
            found.extend((at, x) for x in DOTTED.findall(tok))
        if not tok.islower():
            found.extend((at, x) for x in CAMEL.findall(tok))
    found.sort(key=lambda x: x[0])  # stable: one token's names keep their order
    return [x for _, x in found]


def _sentences(text: str) -> list:
    out = []
    for line in text.splitlines():
        line = line.strip().lstrip("-*> ").strip()
        if line:
            out.extend(s.strip() for s in SENTENCE.split(line) if s.strip())
    return out


def _clip(text: str, limits: OfflineLimits) -> str:
    text = " ".join(text.split()) if "\n" in text else text.strip()
    if len(text) <= limits.max_item_chars:
        return text
    return text[:limits.max_item_chars] + " ..."


def _strings(value) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _strings(v)]
    return []


def _paths(inp) -> list:
    if not isinstance(inp, dict):
        return []
    out = []
    for key in PATH_KEYS:
        if key in inp:
            out.extend(s for s in _strings(inp[key]) if s and "\n" not in s and s.strip("./"))
    return out


def _call_key(cmd: str) -> str:
    """What makes two runs the same call: the command with its spaces collapsed and no hyphen or
    underscore inside a word, so a run that corrects that spelling (`flask initdb` -> `flask
    init-db`) clears the failure it fixes; any other difference is another command."""
    return JOINER.sub("", " ".join(cmd.split()))


JOINER = re.compile(r"(?<=[^\W_])[-_](?=[^\W_])")  # a hyphen or underscore between two letters or digits


def _stems(paths) -> set:
    """The names of files without their extension: "delete the seed_tmp script" names seed_tmp.py."""
    return {n.rsplit(".", 1)[0] for p in paths if FILE.fullmatch(p) for n in (p.rsplit("/", 1)[-1],)
            if len(n.rsplit(".", 1)[0]) >= 3}


def _command(inp) -> str:
    if isinstance(inp, dict):
        for key in COMMAND_KEYS:
            if key in inp:
                parts = _strings(inp[key])
                if parts:
                    return " && ".join(parts) if key == "commands" else " ".join(parts)
    return ""


# what runs the program a command is about: "python -m pytest", "npx eslint", "sudo make"
LAUNCHERS = ("sudo", "env", "time", "nice", "npx", "uvx", "bunx", "pnpx", "exec")
ASK_WORDS = re.compile(r"[\w.+-]+")
RUN_ASKS = ("run", "rerun", "check", "lint", "test", "format", "build", "execute", "verify")


def _runs(ask: str, program: str) -> bool:
    """The ask asks to run or check with program ("check flake8", "run mypy on src"), not to
    change something it names ("fix the docker build")."""
    words = ASK_WORDS.findall(ask.lower())
    return bool(words) and words[0] in RUN_ASKS and program in words


# programs that run a test suite, and those whose `test` subcommand does ("npm test", "go test")
TEST_PROGRAMS = frozenset(("pytest", "py.test", "jest", "vitest", "mocha", "tox", "nox", "rspec", "phpunit",
                           "ctest", "unittest", "karma", "ava", "nosetests", "trial"))
TEST_SUBCOMMAND = frozenset(("npm", "yarn", "pnpm", "bun", "deno", "go", "cargo", "mvn", "gradle", "gradlew",
                             "dotnet", "make", "mix", "swift", "dart", "flutter", "rake", "sbt", "lein", "stack",
                             "cabal", "zig"))
TEST_WORDS = frozenset(("test", "tests", "suite", "specs"))
# what a test run that passed prints, and what one that did not prints (with no error line the
# rules read: "1 failed, 11 passed", "Tests: 1 failed", "--- FAIL", "test result: FAILED")
SUITE_PASSED = re.compile(r"\b[1-9]\d* (?:passed|passing)\b|^ok\s|\btest result: ok\b|^PASS\b|^OK\b",
                          re.MULTILINE)
SUITE_FAILED = re.compile(r"\b[1-9]\d* (?:failed|failing|errors?|failures?)\b|\bFAIL(?:ED|URES?)?\b|"
                          r"\bno tests ran\b")


def _tests(cmd: str, output: str) -> bool:
    """The command ran a test suite (not one test by its id, not a collection) and its output says
    it passed, and nothing that it failed."""
    if "::" in cmd or "--collect-only" in cmd or not SUITE_PASSED.search(output) or SUITE_FAILED.search(output):
        return False
    for segment in sup.segments(cmd.strip()):
        words = _program_words(segment)
        if words and (words[0] in TEST_PROGRAMS or (len(words) > 1 and words[0] in TEST_SUBCOMMAND
                                                   and words[1] == "test")):
            return True
    return False


def _asks_tests(ask: str) -> bool:
    """The ask asks to run or check the tests ("check that the tests pass", "run the test suite"),
    not to write them ("add tests for the parser")."""
    words = ASK_WORDS.findall(ask.lower())
    return bool(words) and words[0] in RUN_ASKS and not TEST_WORDS.isdisjoint(words[1:])


def _program_words(cmd: str) -> list:
    """The words of the program a command runs (its first segment's), from the program's base
    name on: "python -m pytest -q" -> ["pytest", "-q"]."""
    words = sup.command_words(sup.segments(cmd.strip())[0])
    while words and (words[0] in LAUNCHERS or "=" in words[0]):
        words = words[1:]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1].startswith("python") and words[1] == "-m":
        words = words[2:]
    elif len(words) >= 2 and words[0] in ("uv", "poetry", "pipenv", "pdm", "hatch") and words[1] == "run":
        words = words[2:]
    return [words[0].rsplit("/", 1)[-1].lower(), *words[1:]] if words else []


def _program(cmd: str) -> str:
    """The program a command runs, by its base name: what an ask that names it ("check flake8",
    "run mypy") is done by, once it runs clean. "" for a program whose name is a verb of asking
    ("make", "test", "find"): it names no ask."""
    words = _program_words(cmd)
    name = words[0] if words else ""
    return "" if len(name) < 3 or name in ASK_VERBS else name


# commands that show text (a search, a file, a log): the errors their output quotes are not theirs
LOOKING = frozenset(("grep", "egrep", "rg", "ag", "ack", "cat", "less", "more", "head", "tail", "find", "fd",
                     "ls", "tree", "wc", "jq", "zcat", "zgrep", "bat", "sed", "awk", "journalctl", "kubectl"))
GIT_LOOKING = frozenset(("grep", "log", "show", "diff", "status", "blame"))


# programs a command the person quotes may start with (beside any with a -flag)
PROGRAMS = frozenset(("pytest", "python", "python3", "pip", "uv", "tox", "nox", "npm", "npx", "pnpm", "yarn", "bun",
                      "node", "deno", "make", "cmake", "cargo", "go", "rustc", "mvn", "gradle", "./gradlew", "dotnet",
                      "docker", "kubectl", "helm", "terraform", "git", "gh", "bash", "sh", "ruff", "mypy", "eslint",
                      "tsc", "jest", "vitest", "bundle", "rake", "rails", "php", "composer", "swift", "flutter"))


FLAG = re.compile(r"--?[A-Za-z]")  # "-x", "--force"; not "-1" or "-="


def _is_command(span: str) -> bool:
    """A `code span` that is a command line: two words or more, of a known program or with a flag."""
    words = span.split()
    return len(words) >= 2 and (words[0] in PROGRAMS or any(FLAG.match(w) for w in words[1:]))


def _looks(cmd: str) -> bool:
    words = _program_words(cmd)
    return bool(words) and (words[0] in LOOKING or (words[0] == "git" and len(words) > 1 and words[1] in GIT_LOOKING))


# what the name of a tool that runs checks holds (run_tests, mcp__ci__run_lint, typecheck)
CHECK_TOOL_WORDS = frozenset(("test", "pytest", "lint", "check", "typecheck", "build", "compile", "verify"))


def _runs_checks(tool: str) -> bool:
    """A word of the tool's name (snake, kebab or camel case) is a check's: not "latest_issues",
    "save_checkpoint" or "attest"."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", sup.tool_base_name(tool))
    return any(w.lower().rstrip("s") in CHECK_TOOL_WORDS for w in words)


def _kind(tool: str) -> str:
    base = sup.tool_base_name(tool.lower())
    if base in SHELL_TOOLS:
        return "shell"
    if base in EDIT_TOOLS or any(base.startswith(x) for x in ("edit", "write", "patch")):
        return "edit"
    if base in READ_TOOLS or base.startswith(LOOK_PREFIXES):
        return "read"
    if base.startswith(BOOKKEEPING_PREFIXES):
        return "bookkeeping"
    return "other"


def _called(tool: m.Tool) -> str:
    """A Done item for a completed call of another tool (an MCP server's create_issue, a
    deploy): the tool, its scalar inputs and what its answer names, so the summary says what
    the call did and a later model does not do it again."""
    def scalars(d: dict, keys) -> list:
        out = []
        for k in keys:
            v = d.get(k)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip():
                out.append(f"{k}={' '.join(str(v).split())[:MAX_CALL_VALUE]}")
            if len(out) == MAX_CALL_FIELDS:
                break
        return out

    inputs = scalars(tool.input, list(tool.input)) if isinstance(tool.input, dict) else []
    try:
        answer = json.loads(tool.output) if tool.output.lstrip().startswith("{") else None
    except ValueError:
        answer = None
    outcome = scalars(answer, OUTCOME_KEYS) if isinstance(answer, dict) else []
    if not outcome and answer is None:  # its first line (sup.headline picks what failed: this one succeeded)
        line = next((x.strip() for x in tool.output.splitlines() if x.strip()), "")
        outcome = [line[:MAX_CALL_VALUE]] if line else []
    said = f"Called `{tool.tool}`" + (f" ({', '.join(inputs)})" if inputs else "")
    return said + (f": {', '.join(outcome)}" if outcome else "")


EDIT_TEXT_KEYS = ("new_string", "new_str", "new", "content", "contents", "text", "replacement",
                  "patch", "diff", "code", "insert_text", "file_text")
OLD_TEXT_KEYS = ("old_string", "old_str", "old")
DEFINITION = re.compile(r"\b(?:def|class|function|func|fn|const|let|var|type|interface|struct|enum)\s+"
                        r"([A-Za-z_]\w*)")
MAX_EDIT_NAMES = 8


def edit_identifiers(inp) -> list:
    """The names an edit writes that were not there before: its definitions, then the
    identifiers of its new text absent from its old text (at most MAX_EDIT_NAMES)."""
    if not isinstance(inp, dict):
        return []
    new = "\n".join(s for k in EDIT_TEXT_KEYS for s in _strings(inp.get(k)))
    old = "\n".join(s for k in OLD_TEXT_KEYS for s in _strings(inp.get(k)))
    before = set(identifiers(old)) | set(DEFINITION.findall(old))
    found = [x for x in [*DEFINITION.findall(new), *identifiers(new)] if x not in before and len(x) >= 3]
    return list(dict.fromkeys(found))[:MAX_EDIT_NAMES]


CODE_SPAN = re.compile(r"`([^`\n]+)`")


# a verb that labels a statement, no ask: "Update: the port is now 9090", "Change: the DB is beta_db"
STATED = re.compile(rf"^(?:{_VERB})\s*:\s+(?!(?:please\s+)?(?:{_VERB})\b).*"
                    r"\b(?:is|are|was|were|has been|have been|isn't|aren't|wasn't)\b", re.IGNORECASE)


# a verb opening an imperative: "Check the port is 9090" asks; "Deploy config lives in X" tells
IMPERATIVE = re.compile(rf"^(?:{_VERB})\s+(?:the|that|a|an|all|every|each|our|my|your|its|this|these|those|"
                        r"whether|if|how|why|where|what|which)\b", re.IGNORECASE)


def _states(clause: str) -> bool:
    """The clause states a fact (supersede.fact_clauses) though its first word is a verb of
    asking ("Deploy config lives in `config/deploy.yaml`", "Test results are in out/")."""
    return not IMPERATIVE.match(clause) and bool(sup.fact_clauses(clause))


def asks_in(text: str) -> list:
    """The requests in a user message, one clause each and verbatim but for the words before the
    verb ("please", "and then", ...). A headline followed by a list of asks is the goal, not an
    ask: the list says what to do."""
    items, listed = [], False
    for line in text.splitlines():
        mt = LIST_ITEM.match(line)
        if mt:
            listed = True
            items.append(mt.group(1))
        elif line.strip():
            items.extend(_sentences(line))
    if listed and items and not LIST_ITEM.match(next(x for x in text.splitlines() if x.strip())):
        items = items[1:]
    out = []
    for item in items:
        verbs = ""  # verbs alone before an "and": "find and fix the bug" is one ask, of their object
        parts = CLAUSE_SPLIT.split(item)  # clause, what joins it to the next, clause, ...
        for clause, joined_by in zip(parts[::2], parts[1::2] + [""]):
            clause = verbs + ASK_LEAD.sub("", clause.strip()).strip().rstrip(".;:,!?")
            verbs = ""
            if "and" in joined_by.lower().split() and BARE_VERBS.match(clause):
                verbs = clause + joined_by
            elif ASK_START.match(clause) and not clause.lower().startswith(("make sure", "change of plan")) \
                    and not VAGUE_OBJECT.match(clause) and not STATED.match(clause) and not _states(clause):
                out.append(clause)
    return out


# what may lead a choice the person tells: "let's use X", "we'll go with Y", "please pick Z"
CHOICE_LEAD = re.compile(r"^(?:let's|let us|we(?:'ll| will| should))\s+", re.IGNORECASE)
# a sentence that tells a choice: it starts with the choosing verb; one that tells of a use ("it
# crashes when I use Safari", "INFO Using config /etc/app.yaml") chooses nothing
TELLS_CHOICE = re.compile(r"^(?:use|switch(?: back)? to|go with|move to|migrate to|opt for|pick|stick with)\b",
                          re.IGNORECASE)


# a sentence that tells where a setting comes from, and ends there: "Read the connection string
# from DATABASE_URL", "load the API keys from the environment", "take the port from config.toml";
# "read src/app.py", "get the version from package.json" or "read the test names from
# results.json and fix them" does not
TELLS_SOURCE = re.compile(
    r"^(?i:read|load|take|get|pull|fetch)\s+(?:the\s+|our\s+|its\s+|all\s+)?(?:[\w-]+\s+){0,3}?"
    r"(?i:connection\s+strings?|(?:api\s+)?keys?|tokens?|secrets?|passwords?|credentials|dsn|urls?|uris?|"
    r"endpoints?|hosts?(?:names?)?|ports?|settings?|config(?:uration)?|options?|region|bucket(?:\s+names?)?)"
    r"\s+(?i:from)\s+(?i:the\s+)?"
    r"(?:`?\$?[A-Z][A-Z0-9]*_[A-Z0-9_]+`?|`?\$[A-Z][A-Z0-9_]*`?|(?i:env|environment|config(?:uration)?|"
    r"settings|secrets?(?:\s+manager)?|vault)(?:\s+(?i:variables?|files?))?|`?[\w./-]*\.(?i:toml|ya?ml|json|ini|env|cfg|conf)`?)"
    r"\s*[.!]?$")


def _chooses(sentence: str) -> bool:
    """The person's sentence tells a choice ("Use SQLite for storage", "Let's go with Redis",
    "Read the connection string from DATABASE_URL"): an imperative, not a question, naming what it
    chooses (supersede.chosen), or where a value comes from."""
    told = CHOICE_LEAD.sub("", ASK_LEAD.sub("", sentence.strip()))
    if sentence.rstrip().endswith("?"):
        return False
    return bool(TELLS_CHOICE.match(told)) and bool(sup.chosen(told)) or bool(TELLS_SOURCE.match(told))


def code_spans(text: str) -> list:
    """The `code spans` of text that can be items (three characters or more), stripped, in order."""
    return [x.strip() for x in CODE_SPAN.findall(text) if len(x.strip()) >= 3]


def _keys(text: str) -> set:
    """What ties a step to an ask: its paths, identifiers and `code spans`."""
    keys = set(identifiers(text)) | set(code_spans(text))
    return keys | {k.rsplit("/", 1)[-1] for k in keys if "/" in k and not k.endswith("/")}


class _Asks:
    """What was asked, in order, and which steps did it: the source of In Progress and Next Steps.

    An ask is done when a later step does it: a completed edit of a file it names, a completed run
    of a command it quotes, or a sentence of the assistant saying it is done (a past-tense verb,
    nothing like "will" or "next") that names it. Any other step that names it (a read, a failed
    or interrupted call, a sentence) makes it the request being worked on."""

    def __init__(self):
        self.keys = {}  # ask -> its keys, in the order asked
        self._asking = {}  # key -> the asks that name it (every step looks its keys up here)
        self.done = set()
        self.current = ""  # the ask the latest step that named one was about
        self.last_step = ""
        self.latest = []  # asks of the latest user message
        self.latest_names = False  # the latest user message names something (_keys)
        self.steps_after_latest = 0
        self.named_after_latest = False

    def add(self, ask: str) -> None:
        if ask not in self.keys:
            self.keys[ask] = keys = _keys(ask)
            for k in keys:
                self._asking.setdefault(k, []).append(ask)

    def ask(self, asks: list, names: bool = False) -> None:
        """A request and the asks it states; names: it names a path, identifier or code span."""
        for a in asks:
            self.add(a)
        self.latest = list(asks)
        self.latest_names = names
        self.steps_after_latest = 0
        self.named_after_latest = False

    def _named(self, keys: set) -> list:
        """The asks not done yet that share a key with keys, in the order asked."""
        asking, done = self._asking, self.done
        named = {a for k in keys for a in asking.get(k, ()) if a not in done}
        return [a for a in self.keys if a in named] if len(named) > 1 else list(named)

    def step(self, desc: str, touched: set, done: set = frozenset(), command: str = "", program: str = "",
             wrote: tuple = (), tested: bool = False) -> None:
        """A step: touched, the keys it names; done, the keys it did; command, the command it ran,
        program its program when it ran clean; wrote, the names an edit wrote (an ask naming one
        and no file, or a file touched, is done); tested, it ran a test suite clean (asks to run or
        check the tests are done)."""
        self.last_step = desc
        self.steps_after_latest += 1
        did = self._named(done) + [a for a in self.keys if a not in self.done and (
            (command and command in a) or (program and _runs(a, program)) or (tested and _asks_tests(a)))]
        for a in self._named(set(wrote)):
            files = {k for k in self.keys[a] if FILE.fullmatch(k)}
            if not files or files & touched:
                did.append(a)
        for a in did:
            self.done.add(a)
        named = self._named(touched)
        if named or did:
            self.current = (named or did)[-1]
            self.named_after_latest = True

    def said_with(self, sentence: str, keys: set, says_done: bool) -> None:
        """A sentence of the assistant, with its keys and whether it says something is done
        (worked out once per message, in _facts): a step when it names an ask."""
        if not self._named(keys):
            return
        if says_done:
            self.step(sentence, set(), keys)
        else:
            self.step(sentence, keys)

    def closed_by(self, closing: str, asks: list, settled: list) -> None:
        """The turn ended on closing, a sentence saying what was done: the turn's asks it speaks of
        are done (it is the turn's own report, so one topic word or acronym in common is enough,
        unless it is a word every request of a coding session shares: "test", "bug", ...); settled,
        the steps the assistant announced before it, are taken as done or dropped."""
        said_all = _report_words(closing)
        said = said_all - GENERIC_WORDS
        words = {w.lower() for w in WORD_RUN.findall(closing)}
        # else a report of what was found or how a run ended (_reports); a look reported
        # ("Checked X: ...") is what was found, no step done
        looked = LOOKED_AT.match(closing)
        strong = _says_done(closing) and not looked
        passed = PASSED_SAID.search(closing) and not FAILED_SAID.search(closing)
        # what was found ("The redirect loop is caused by ...", "Found the redirect loop: ...") or
        # looked at ("Checked the redirect loop: ..."): it answers an ask to find or look, not one
        # to fix or add what it is about
        diagnosis = not strong and (DIAGNOSED.search(closing) or looked)
        for a in asks:
            if a in self.done:
                continue
            topic = _report_words(a)
            # or its verb said done of one of its words, however common ("Open a GitHub issue
            # about X": "issue #42 opened"); a run of the tests reported green ("All green."); a
            # look reported on ("Check the logs": "No errors.")
            if strong and (topic & said or words & _past_forms(a) and topic & said_all) \
                    or (not strong and words & _past_forms(a, last=True) and topic & said) \
                    or (passed and _asks_tests(a)) \
                    or (not strong and len(topic & said) >= 2 and (not diagnosis or _last_verb(a) in DIAGNOSIS_ASKS)) \
                    or (_last_verb(a) in LOOK_ASKS and (topic & said or LOOKED_SAID.search(closing))):
                self.done.add(a)
        self.done.update(settled)

    def done_by(self, evidence: str, looks: bool = False) -> None:
        """Asks with nothing to tie them (no path, identifier or code span) that evidence (a
        sentence saying something is done, a blocker resolved) is about are done; of a look
        reported (looks: "Checked X: ..."), the asks to look or find alone."""
        for a, keys in self.keys.items():
            if not keys and a not in self.done and (not looks or _last_verb(a) in DIAGNOSIS_ASKS) \
                    and (sup.done_by(a, evidence) or _generic_ask_done(a, evidence)):
                self.done.add(a)

    def working_on(self) -> str:
        if self.steps_after_latest and not self.named_after_latest:
            # working, on the latest request's first ask, surely: an ask from before it was left
            # for it; and a request naming what it is about whose asks are not told ("Next:
            # harden `refunds.py` the same way") is no sign of going on with an earlier one (that
            # would name it), where a question ("Any progress?") is
            first = next((a for a in self.latest if a not in self.done), "")
            if first or self.latest_names:
                return first
        if self.current and self.current not in self.done:
            return self.current
        return ""

    def open(self) -> list:
        now = self.working_on()
        return [a for a in self.keys if a not in self.done and a != now]


class _Acc:
    """Ordered, de-duplicated bullets per section."""

    def __init__(self):
        self.items = {k: {} for k in template.KEYS}

    def add(self, key: str, item: str) -> None:
        item = item.strip()
        if item:
            bucket = self.items[key]
            bucket.pop(item, None)  # a repeated fact moves to the newest position
            bucket[item] = None

    def get(self, key: str) -> list:
        return list(self.items[key])


# the past forms of the request verbs that are not verb + "ed", "d" or a doubled consonant + "ed"
IRREGULAR_DONE = MappingProxyType({"find": ("found",), "run": ("ran",), "write": ("wrote", "written"),
                                   "make": ("made",), "build": ("built",), "set": ("set",), "split": ("split",),
                                   "rewrite": ("rewrote", "rewritten"), "speed": ("sped",)})
ASK_VERB_PREFIX = re.compile(rf"^({_VERBS})\b(.*)$", re.IGNORECASE)
# what, in the clause before a done verb, says it is not done: "Not fixed:", "I thought I had
# fixed", "Once the bug is fixed", "until the bug is fixed"
HEDGED = re.compile(r"\b(?:not|never|no|thought|once|until|unless|if|should|would|could|can|will|need|needs)\b|"
                    r"n't\b", re.IGNORECASE)
CLAUSE_BREAK = re.compile(r"[,;:.!?]|\b(?:and|but|which|so)\b", re.IGNORECASE)


def _done_forms(verb: str) -> tuple:
    """verb's past forms: fixed, updated, skipped, committed (a doubled consonant), found, ran."""
    v = verb.lower()
    if v in IRREGULAR_DONE:
        return IRREGULAR_DONE[v]
    return (v + "d",) if v.endswith("e") else (v + "ed", v + v[-1] + "ed")


def _generic_ask_done(ask: str, evidence: str) -> bool:
    """An ask whose object is only words every coding request shares ("fix the bug", "find and
    fix the bugs"), which no report can tie to it by them (GENERIC_WORDS), is done by a sentence
    saying something done (_says_done) that says its last verb done of that object: the verb a
    few words before it ("Fixed: the bug was in src/lexer.ts") or after it ("the bug is fixed");
    not "I fixed the lint warnings, but the bug remains", nor hedged in its clause ("Once the bug
    is fixed")."""
    mt = ASK_VERB_PREFIX.match(ask)
    if not mt:
        return False
    obj = [w[:-1] if w.endswith("s") and w[:-1] in GENERIC_WORDS else w for w in sup.topic(mt.group(2))]
    if not obj or not set(obj) <= GENERIC_WORDS:
        return False
    last = re.findall(rf"{_VERB}", mt.group(1), re.IGNORECASE)[-1]  # "find and fix": fixed, not found
    done = "|".join(_done_forms(last))
    thing = "|".join(re.escape(w) + "s?" for w in obj)
    said = re.compile(rf"\b(?:{done})\b[\s:]+(?:[\w'-]+\s+){{0,2}}?(?:{thing})\b|"
                      rf"\b(?:{thing})\s+(?:is|are|was|were|has been|have been)\s+(?:now\s+)?(?:{done})\b",
                      re.IGNORECASE)
    mt = said.search(evidence)
    return mt is not None and not HEDGED.search(CLAUSE_BREAK.split(evidence[:mt.start()])[-1])


def _names_dropped(request: str, gone: frozenset, reversal: str) -> bool:
    """request names something reversal drops (supersede.dropped): one of its words, or a number
    of the same thing, a word beside it in the request beside a number in the reversal too
    ("port 8080", then "port 9090 instead of 8080"; "3 retries", then "5 retries instead of 3"):
    a number alone is in many requests ("uploads up to 500 KB", then "a TTL of 600 instead of
    500 seconds")."""
    if gone & {w.lower() for w in sup.WORD.findall(request)}:
        return True
    beside = _beside_numbers(request, gone)
    return bool(beside) and not beside.isdisjoint(_beside_numbers(reversal))


NUMBER_OR_WORD = re.compile(rf"{sup.NUMBER.pattern}|{sup.WORD.pattern}")


def _beside_numbers(text: str, only: frozenset | None = None) -> set:
    """The words just before and after each number of text (of only, when given), lowercased,
    but for words that carry no topic (supersede.STOP)."""
    tokens = NUMBER_OR_WORD.findall(text)
    out = set()
    for i, t in enumerate(tokens):
        if t[0].isdigit() and (only is None or t in only):
            out.update(w.lower() for w in tokens[max(0, i - 1):i + 2:2] if not w[0].isdigit())
    return out - sup.STOP


def _report_words(text: str) -> set:
    """The topic words of text and its acronyms ("check the CI config": ci, config), but for the
    words of its paths and `code spans`: those tie a step to an ask as keys (_keys), and a path's
    directories ("src", "app") are shared by asks about other files."""
    prose = PATH.sub(" ", CODE_SPAN.sub(" ", text))
    return sup.topic(prose).keys() | {w.lower() for w in ACRONYM.findall(prose)}


ACRONYM = re.compile(r"\b[A-Z]{2}\b")
WORD_RUN = re.compile(r"[A-Za-z]+")
_IRREGULAR_PAST = {"send": ("sent",), "tell": ("told",), "write": ("wrote", "written"), "run": ("ran",),
                   "rerun": ("reran",), "make": ("made",), "find": ("found",), "build": ("built",),
                   "set": ("set",), "split": ("split",), "share": ("shared",)}


def _past_forms(ask: str, last: bool = False) -> set:
    """The past forms an ask's verb may be reported done in: "open" opened, "tag" tagged, "send" sent;
    last: of its last verb ("find and fix": fixed)."""
    # of "find and fix the bug", the last: what is found is not yet fixed
    verb = (_last_verb(ask) if last else "") or (ask.split(maxsplit=1)[0].lower() if ask.strip() else "")
    if verb in _IRREGULAR_PAST:
        return set(_IRREGULAR_PAST[verb])
    return {verb + "ed", verb + "d", verb + verb[-1:] + "ed", verb[:-1] + "ied"} if verb else set()
# topic words too common in a coding session for one of them to tie a report to an ask
GENERIC_WORDS = frozenset("""test bug error issue code file function method class module feature part step
page data value line problem case thing change pass fail failure result output input""".split())


# A message of more lines than this is a paste (a log, a trace): the lines that name what its
# question names are kept, PASTED_LINES of them
PASTE_LINES = 20
PASTED_LINES = 3
NAMED_NUMBER = re.compile(r"\b([A-Za-z][\w-]*)\s+#?(\d+)\b")  # "job 42", "worker 3", "PR #17"


def _pasted_lines(text: str) -> list:
    """The lines of a pasted text (more than PASTE_LINES) that name what the message's own words
    ask about: "Here it is, why does job 42 keep retrying?" over 3,000 log lines kept none of
    them, and the summary could not say what the log showed of job 42."""
    lines = text.splitlines()
    if len(lines) <= PASTE_LINES:
        return []
    own = " ".join(line for line in lines[:2] + lines[-1:] if "?" in line) or lines[0]
    names = [re.compile(rf"\b{re.escape(word)}\s+#?{number}\b", re.IGNORECASE)
             for word, number in NAMED_NUMBER.findall(own)]
    names += [re.compile(rf"(?<![\w/.-]){re.escape(x)}(?![\w/-])") for x in identifiers(own) if len(x) >= 4]
    if not names:
        return []
    found = []
    for line in lines[1:]:
        if line.strip() and any(n.search(line) for n in names) and line.strip() not in found:
            found.append(line.strip())
            if len(found) == PASTED_LINES:
                break
    return found


FENCE = re.compile(r"^\s*(?:```|~~~)")
# a line that says what follows is a program's output: "Here is the output:", "Logs:", "stderr:"
PASTE_INTRO = re.compile(r"\b(?:output|outputs|logs?|trace(?:back)?|stack ?trace|stdout|stderr|console|dump|"
                         r"response|journal|journalctl|dmesg)\b[^:]*:\s*$", re.IGNORECASE)
INDENTED_CODE = re.compile(r"^(?: {4}|\t)(?!\s*(?:[-*\u2022]|\d+[.)])\s)")


def _prose_sentences(text: str) -> set:
    """The sentences of a user message (_sentences) the person wrote, not pasted: none from a code
    fence or an indented code block; none from a pasted log: of a run of lines (between blank
    lines), those from its first log line on (sup.LOG_LINE: "2026-12-07 10:42:01 INFO worker
    started, pid is 4411", and then "Exit status was 137"), the run after a line introducing
    output ("Here is the output:"), error lines, a long paste's lines (_pasted_lines). A value
    these give is what a program said: no fact the person states (sup.fact_clauses)."""
    pasted = set(_pasted_lines(text))
    kept, fenced, in_paste, after_intro = [], False, False, False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not line.strip():
            in_paste = after_intro  # a blank line ends a run; the one after an intro is pasted
            after_intro = False
            continue
        if fenced or INDENTED_CODE.match(line):
            continue
        if after_intro or sup.LOG_LINE.search(line) or line.strip() == sup.TRACEBACK or sup.error_lines(line, cap=1):
            in_paste = True
        if in_paste or line.strip() in pasted:
            after_intro = False
            continue
        after_intro = bool(PASTE_INTRO.search(line))
        in_paste = False
        kept.append(line)
    return set(_sentences("\n".join(kept)))


def _goal_sentence(text: str, first: str, asks: list) -> str:
    """The sentence a request's goal is: its first; in prose that opens with no ask ("Leave that
    failure for now. Next, add backoff to the retries"), the first that holds one. A headline
    over a list of asks stays the goal."""
    opening = _sentences(first)[0]
    if not asks or any(LIST_ITEM.match(line) for line in text.splitlines()) or asks[0] in opening:
        return opening
    return next((x for x in _sentences(text) if asks[0] in x), opening)


def _text_of(msg: m.Message, *, synthetic: bool) -> str:
    """Its texts joined; a user message sent mid-run as the person wrote it (the service's wrapping
    is no goal, ask or constraint of theirs)."""
    return "\n".join(unwrapped(p.content.text) for p in msg.parts
                     if isinstance(p.content, m.Text) and not p.content.ignored
                     and (synthetic or not p.content.synthetic) and p.content.text)


def _facts(msg: m.Message, limits: OfflineLimits, deadline: Deadline = NO_DEADLINE) -> tuple:
    """What extract draws from one message, in the order it uses it: a tuple of steps
    (kind, *args) that only this message and the limits decide; extract replays them through
    its state (asks, files, failed calls, what is stale), so the same message gives the same
    steps on every compaction and they can be kept (memo.py)."""
    out = []
    own_text = _text_of(msg, synthetic=False) if msg.role in (m.USER, m.ASSISTANT) else ""
    found = []
    if msg.role in (m.USER, m.ASSISTANT) and not msg.summary:
        found = identifiers(own_text)
        out.append(("identifiers", tuple(found), tuple(bool(PATH.fullmatch(x)) for x in found)))
    if msg.role == m.USER:
        text = own_text
        if text.strip() and not sup.is_ack(text):
            sentences = _sentences(text)
            asks = asks_in(text)
            prose = _prose_sentences(text)  # not a pasted log's lines, nor a code fence's
            stated = [sup.fact_clauses(s) if s in prose else [] for s in sentences]
            # a message that only sets constraints, changes the plan or states facts is no request
            if asks or not all(CONSTRAINT.search(s) or sup.is_reversal(s) or said
                               for s, said in zip(sentences, stated)):
                # the request's first sentence; a message that only sets a constraint is none
                first = next(line.strip() for line in text.splitlines() if line.strip())
                # a short aside naming nothing ("fix the lint too") is an ask, not the session's goal
                aside = len(text.split()) <= SHORT_ASIDE and not _keys(text)
                sentence = _clip(_goal_sentence(text, first, asks), limits)
                goal = "" if aside else sentence
                # and whether it names what it is about (_Asks.ask), worked out once per message
                names = bool(goal) and ("`" in goal or any(x in goal for x in found))
                # an aside with an ask is the goal of a session that has none yet ("Hi, help me
                # debug the worker.", then a pasted log: the goal was the log's question alone)
                out.append(("goal", goal, tuple(_clip(a, limits) for a in asks), names,
                            sentence if aside and asks else ""))
            else:  # the turn under way goes on; what the assistant reported before it is settled
                out.append(("told",))
            for s, said in zip(sentences, stated):
                # the facts it states, and the values it says are gone ("we moved off 8080"): not
                # in a request ("Rename alpha_db to beta_db" is a step, not done yet), but in a change of plan
                gone = sup.old_values(s) if s in prose and (not asks_in(s) or sup.is_reversal(s)) else frozenset()
                if said or gone:
                    out.append(("fact", s, tuple(_clip(FACT + FACT_LABEL.sub("", c), limits) for c, _ in said),
                                tuple(gone)))
            for s in sentences:
                if sup.is_reversal(s):  # the person changed the plan: a decision, and it supersedes
                    out.append(("reversal", _clip(s, limits)))
                    out.append(("acc", "decisions", _clip(s, limits)))
                elif _chooses(s):
                    # the person's choice ("Use SQLite for storage (file ...)"): a decision a later
                    # reversal naming what it chose supersedes
                    out.append(("acc", "decisions", _clip(s, limits)))
                # not "why does job 42 keep retrying?", nor a task ("refactor X and keep its tests green")
                if CONSTRAINT.search(s) and not s.rstrip().endswith("?") and (
                        STRONG_CONSTRAINT.search(s) or not asks_in(s)):
                    out.append(("constraint", _clip(s, limits)))
            for line in text.splitlines():
                if ERROR_LINE.search(line):
                    out.append(("acc", "critical", _clip(line, limits)))
            for line in _pasted_lines(text):
                out.append(("acc", "critical", _clip(f"Pasted: {line}", limits)))
            for s in sentences:  # "Reproduce with `pytest tests/test_race.py -x -q`"
                if not CONSTRAINT.search(s):  # "Never run `git push --force`" is a constraint
                    for span in code_spans(s):
                        if _is_command(span):
                            out.append(("acc", "critical", _clip(f"Command: `{span}`", limits)))
        elif text.strip():  # "Fix it.", "thanks": the turn goes on, what was reported before is settled
            out.append(("told",))
        for p in msg.parts:
            deadline.count("compact")
            if isinstance(p.content, m.File) and p.content.filename:
                out.append(("file", p.content.filename, "attached"))
        return tuple(out)
    if msg.role != m.ASSISTANT or msg.summary:
        return tuple(out)
    text = _text_of(msg, synthetic=True)
    if text.strip():
        out.append(("answered",))
    for s in _sentences(text):
        says_done = _says_done(s)
        if _announces(s):
            out.append(("announced", _clip(s, limits)))  # a step the assistant announced: open until done
            continue
        said = _clip(s, limits)
        said_keys = _keys(said)
        out.append(("said", said, tuple(said_keys | _stems(said_keys)), says_done))
        reversal = sup.is_reversal(s, reported=True)
        if reversal or DECISION.search(sup.OBSERVED.sub(" ", s)) or (INTENT.search(s) and CHOICE.search(s)):
            if reversal:
                out.append(("reversal", said))
            out.append(("acc", "decisions", said))
    for line in text.splitlines():
        if ERROR_LINE.search(line):
            out.append(("acc", "critical", _clip(line, limits)))
    if msg.error is not None:
        out.append(("acc", "critical", _clip(f"{msg.error.name}: {msg.error.message}".rstrip(": "), limits)))
    for p in msg.parts:
        deadline.count("compact")  # one message may hold hundreds of thousands of tool calls
        t = p.content
        if not isinstance(t, m.Tool):
            continue
        out.append(("answered",))
        kind = _kind(t.tool)
        paths = _paths(t.input)
        role = {"edit": "edited", "read": "read"}.get(kind, t.tool)
        if t.status == m.ERROR and role == "edited":
            role = "edit failed"  # the file is as it was: a failed edit listed as "edited" said otherwise
        for path in paths:
            out.append(("file", path, role))
        cmd = _command(t.input) if kind == "shell" else ""
        # a failure is the same call's: the same command, else the same tool and input
        key = _call_key(cmd) if cmd else (t.tool, json.dumps(t.input, sort_keys=True, default=str))
        cmd_keys = _keys(cmd) if cmd else set()
        touched = tuple(set(paths) | {p.rsplit("/", 1)[-1] for p in paths} | cmd_keys)
        subject = f"`{cmd}`" if cmd else (f"`{t.tool}` on `{paths[0]}`" if paths else f"`{t.tool}`")
        if kind == "edit":
            names = edit_identifiers(t.input)
            out.append(("identifiers", tuple(names), (False,) * len(names)))
        if t.status == m.COMPLETED:
            # a command's output, or a tool's that runs checks (run_tests, an MCP server's lint):
            # what it printed failing is its outcome; another tool's output is only content
            errors = sup.error_lines(t.output) if cmd or (kind == "other" and _runs_checks(t.tool)) else []
            failing = errors if errors and not _looks(cmd) else []
            last = next((x.strip() for x in reversed(t.output.splitlines()) if x.strip()), "")
            if not failing:  # a run that printed its failure failed (below)
                # a command's last line says how it ended; another tool's is only its content
                out.append(("succeeded", key, subject, None if errors or not cmd else _clip(last, limits)))
            moves = sup.moves_in_command(cmd) if cmd else sup.moves_in_tool(t.tool, t.input)
            for old, new in moves:
                out.append(("moved", old, new))
            if cmd:
                ran = _clip(f"Ran `{cmd}`", limits)
                out.append(("ran", cmd) if "`" not in cmd else ("acc", "done", ran))
                # a run that removed or renamed a path does what asks naming it asked ("delete the
                # scratch file src/tmp.py"); one that ran clean, asks naming its program ("check flake8")
                gone = {o for o, _ in moves} if not failing else set()
                gone |= {o.rsplit("/", 1)[-1] for o in gone}
                out.append(("step", ran, touched, tuple(gone | _stems(gone)),
                            "" if failing else cmd, "" if errors else _program(cmd), (),
                            not errors and _tests(cmd, t.output)))
            elif kind == "edit":
                out.append(("edited", tuple(p for p in paths if p not in {o for o, _ in moves})))
                # what it wrote does asks naming it ("expose /admin/limits" by the edit adding that route)
                out.append(("step", _clip(f"Edited {', '.join(f'`{p}`' for p in paths)}", limits), touched,
                            touched, "", "", tuple(names)))
            else:
                verb = "Read" if kind == "read" else f"`{t.tool}`"
                out.append(("step", _clip(f"{verb} {', '.join(f'`{p}`' for p in paths)}".rstrip(), limits),
                            touched, (), "", "", ()))
                if kind == "other" and not failing:
                    out.append(("acc", "done", _clip(_called(t), limits)))
            # a command's or a check tool's: a failure's lines are its own, marked when the same
            # call runs clean (what a looking command printed is context)
            for ln in errors:
                out.append(("error", key, _clip(ln, limits)) if failing else ("acc", "critical", _clip(ln, limits)))
            if failing:  # a run that printed its failure failed: it stands until the run is clean
                out.append(("failed", key, _clip(f"{subject} failed: {sup.headline(t.output)}", limits)))
        elif t.status == m.ERROR:
            error = t.error or "error"
            bullet = _clip(f"{subject} failed: {sup.headline(error)}", limits)
            out.append(("failed", key, bullet))
            for ln in sup.error_lines(error) or [sup.headline(error)]:
                out.append(("error", key, _clip(ln, limits)))
            out.append(("step", bullet, touched, (), "", "", ()))
        else:
            bullet = _clip(f"{subject} was interrupted", limits)
            out.append(("acc", "in_progress", bullet))
            out.append(("step", bullet, touched, (), "", "", ()))
    report = _report(msg, limits)
    if report:
        out.append(report)
    return tuple(out)


def _report(msg: m.Message, limits: OfflineLimits) -> tuple:
    """("report", sentence, announced after it) when the message ends on text saying what was
    done (after its tool calls, if any: one message may hold a whole turn): the last sentence that
    says so, and the steps its text announces after that sentence; else ()."""
    last = next((p.content for p in reversed(msg.parts)
                 if isinstance(p.content, m.Tool) or isinstance(p.content, m.Text) and not p.content.ignored
                 and p.content.text.strip()), None)
    if not isinstance(last, m.Text):
        return ()
    sentences = _sentences(last.text)
    for i in range(len(sentences) - 1, -1, -1):
        if _says_done(sentences[i]):
            later = tuple(_clip(x, limits) for x in sentences[i + 1:] if _announces(x))
            return ("report", _clip(sentences[i], limits), later)
    if sentences and _reports(sentences[-1]):  # "PR opened.", "All green.", "No errors in the logs."
        return ("report", _clip(sentences[-1], limits), ())
    if sentences and not NOT_YET.search(sentences[-1]) and not sentences[-1].rstrip().endswith("?") \
            and not _announces(sentences[-1]):
        return ("answer", _clip(sentences[-1], limits))
    return ()


# what a turn's last sentence reports done or found, besides what _says_done reads ("Root cause
# found in rollout.py.", "PR opened.", "All green.", "No errors."): it closes the turn's asks its
# verb or outcome is about (_Asks.closed_by), and no more: "found" said mid-turn is no step done
# a look that found nothing wrong: "No errors.", "All good.", "Looks clean."
_NOTHING_WRONG = r"no (?:errors?|failures?|issues?|problems?|warnings?)|all good|clean|looks? (?:good|fine|clean|ok)"
REPORTED = re.compile(
    r"\b(?:root cause|the cause|caused by|culprit|found|opened|sent|posted|pushed|tagged|released|published|"
    r"deployed|shipped|committed|filed|drafted|"
    r"noted|confirmed|verified|checked|reviewed|succeeded|green|pass(?:es|ed|ing)?|"
    rf"nothing (?:left|found|wrong|else)|{_NOTHING_WRONG})\b", re.IGNORECASE)
# a run of the tests reported passing ("All green.", "tests pass"), with no failure beside it
PASSED_SAID = re.compile(r"\b(?:green|pass(?:es|ed|ing)?|succeeded|all good)\b", re.IGNORECASE)
FAILED_SAID = re.compile(r"\b(?:fail(?:s|ed|ing|ures?)?|errors?|red|broken|not|n't)\b", re.IGNORECASE)
# a look reported on: "No errors.", "Nothing wrong in the config.", "Confirmed: port 9090 everywhere."
LOOKED_SAID = re.compile(rf"\b(?:nothing|confirmed|verified|fine|{_NOTHING_WRONG})\b", re.IGNORECASE)
LOOK_ASKS = ("check", "verify", "review", "inspect", "investigate", "look", "scan", "audit", "find")
# a report of what was found, no step done: it closes an ask to find or look (DIAGNOSIS_ASKS) that
# shares its words, never "Fix the login redirect loop" ("The login redirect loop is caused by ...")
DIAGNOSED = re.compile(r"\b(?:root cause|the cause|caused by|cause (?:is|was)|culprit|found|comes? from|"
                       r"due to|because|traced)\b", re.IGNORECASE)
DIAGNOSIS_ASKS = LOOK_ASKS + ("diagnose", "explain")
# ... and so is a report that leads with a look ("Checked the login redirect loop: ...")
LOOKED_AT = re.compile(r"\s*(?:I(?:'ve| have)?\s+)?(?:checked|reviewed|inspected|investigated|examined|audited|scanned|"
                       r"looked (?:at|into|over))\b", re.IGNORECASE)
# requests to tell something, which the turn's last sentence answers ("summarize the failures":
# "2 failures remain: test_a, test_b.")
ANSWER_ASKS = ("explain", "tell", "compare", "find", "print")
# ... and the verbs of telling that are no verbs of asking (ASK_VERBS), said first or after "and"
ANSWER_WORDS = re.compile(r"(?:^|\b(?:and|then)\s+)(?:summari[sz]e|list|show|report|describe|count|tell|explain)\b",
                          re.IGNORECASE)


def _asks_answer(ask: str) -> bool:
    """The ask asks to tell something ("find where X is set", "run the suite and summarize failures"):
    the turn's last sentence answers it."""
    return _last_verb(ask) in ANSWER_ASKS or bool(ANSWER_WORDS.search(ask))


def _last_verb(ask: str) -> str:
    """The last of the verbs an ask opens with ("find and fix the bug": fix), lowercased."""
    mt = ASK_VERB_PREFIX.match(ask)
    return re.findall(rf"{_VERB}", mt.group(1), re.IGNORECASE)[-1].lower() if mt else ""


def _reports(sentence: str) -> bool:
    """The sentence reports something done or found (REPORTED), saying nothing is to come."""
    return bool(REPORTED.search(sentence)) and not NOT_YET.search(sentence) and not sentence.rstrip().endswith("?")


def _says_done(sentence: str) -> bool:
    """The assistant says something is done: a past-tense lead or a word like "fixed", nothing
    like "will" or "next", and no question."""
    return bool(DONE_SAID.search(sentence) and not NOT_YET.search(sentence)) and not sentence.rstrip().endswith("?")


def _announces(sentence: str) -> bool:
    """The assistant announces a step ("Next I'll update the docs."), saying nothing done."""
    return bool(NEXT.search(sentence) and not DONE_SAID.search(sentence))


@dataclass(frozen=True)
class Stale:
    """An earlier item the history superseded: probe is the text that, found in one of sections,
    states it as current (a command under Blocked, a path under Relevant Files, a decision, a
    constraint or a step verbatim). changed_by: a later reversal that changes part of it (a
    request for JWT auth and pagination, then "session cookies instead of JWT"): the item stays,
    saying so, rather than go (drop_stale)."""
    probe: str
    sections: tuple
    changed_by: str = ""
    exact: bool = False  # a path: this path alone, not a path it ends (a deleted file's base name)
    name: bool = False  # a name of the Identifiers bullets (Critical Context) a later fact superseded


def _stale_in(item: str, stale: list, key: str) -> bool:
    return any(_names_stale(item, s, key) if s.name
               else key in s.sections and (item == s.probe or _names_path(item, s.probe) if key == "files"
                                      else item == s.probe if key == "critical" else s.probe in item)
               for s in stale)


def _names_stale(item: str, s: Stale, key: str) -> bool:
    """item is an Identifiers bullet listing the superseded name s.probe (drop_stale takes out the
    name, not the bullet)."""
    return key in s.sections and item.startswith(IDENTIFIERS) and s.probe in CODE_SPAN.findall(item)


def _names_path(bullet: str, path: str) -> bool:
    return _file_of(bullet) == path


def _file_of(bullet: str) -> str:
    """The path a Relevant Files bullet is about."""
    mt = FILE_BULLET.match(bullet)
    return mt["path"] if mt else bullet.split(":", 1)[0].strip("` ")


def drop_stale(sections: dict, stale: list) -> dict:
    """sections without the items stale says are superseded (Done keeps its record of what
    happened, but for the files since deleted or renamed away in its Edited bullets: the next
    model would take them for files that exist)."""
    renamed = {s.probe for s in stale if s.name}  # "alpha_db", once "renamed to beta_db"
    stale = [s for s in stale if not s.name]
    changed = [s for s in stale if s.changed_by]
    if changed:
        stale = [s for s in stale if not s.changed_by]
        sections = {k: [_changed(x, changed, k) for x in v] for k, v in sections.items()}
    out = {k: [x for x in v if not _stale_in(x, stale, k)] for k, v in sections.items()}
    gone = {s.probe for s in stale if "files" in s.sections}
    if gone and "done" in out:
        out["done"] = [_without_names(x, EDITED, gone) for x in out["done"]]
        out["done"] = [x for x in out["done"] if x]
    if renamed and "critical" in out:
        out["critical"] = [x for x in (_without_names(x, IDENTIFIERS, renamed) for x in out["critical"]) if x]
    return out


CHANGED = " (changed since: {})"
CHANGED_NOTE = re.compile(r" \(changed since: .*\)$")


def _changed(item: str, changed: list, key: str) -> str:
    """item, saying which later reversal changes it, when it is one one changes: the latest,
    in place of an earlier one's note (a goal carried over many compactions says it once)."""
    for s in changed:
        if key in s.sections and s.probe in item:
            item = CHANGED_NOTE.sub("", item) + CHANGED.format(s.changed_by)
    return item


def _without_names(bullet: str, prefix: str, names: set) -> str:
    """A packed bullet (_packed) without names; "" when none is left; any other bullet as it is."""
    if not bullet.startswith(prefix):
        return bullet
    kept = [n for n in CODE_SPAN.findall(bullet[len(prefix):]) if n not in names]
    return prefix + ", ".join(f"`{n}`" for n in kept) if kept else ""


GONE_BULLET = re.compile(r"^(?:Deleted `(?P<path>[^`]+)`|Renamed `(?P<old>[^`]+)` to `[^`]+`)$")
BLOCKED_BULLET = re.compile(r"^(?P<subject>`[^`]+`(?: on `[^`]+`)?) failed: ")


def _names_a_file(path: str, touched: tuple) -> bool:
    """A path in prose names a file or directory, not a pair of words ("limit/offset", "and/or"):
    its last name is a file's (`nginx.conf`, `Dockerfile`, `LICENSE`), it is absolute or
    relative to here or home, it has three names or more, it starts in a usual directory (`src/`,
    `docs/`, ...), or a file a tool touched is under it."""
    names = path.strip("/").split("/")
    if (path.startswith(("/", "./", "../", "~/")) or len(names) >= 3 or names[0].lower() in USUAL_DIRS
            or NAMED_FILE.fullmatch(names[-1])):
        return True
    under = path.rstrip("/") + "/"
    return any(p.startswith(under) for p in touched)


# a file's own name: with an extension, or a conventional one without (`Dockerfile`, `README`);
# a capitalized word alone is not one ("float/Decimal")
NAMED_FILE = re.compile(r".*\.[A-Za-z0-9]{1,10}|[A-Z]\w*file|[A-Z][A-Z0-9_]+")
USUAL_DIRS = frozenset("""src lib libs app apps test tests spec docs doc pkg cmd internal scripts script
config configs conf deploy bin build dist web api server client include tools .github .ci""".split())


def _under_way(messages: list) -> bool:
    """The agent was mid-turn when the history was cut: the last message is the assistant's and
    ends on a tool call, or a call is still pending or running."""
    last = next((x for x in reversed(messages) if not x.summary), None)
    if last is None or last.role != m.ASSISTANT:
        return False
    tools = [p.content for p in last.parts if isinstance(p.content, m.Tool)]
    return bool(tools) and (isinstance(last.parts[-1].content, m.Tool)
                            or any(t.status in (m.PENDING, m.RUNNING) for t in tools))


def extract(messages: list, limits: OfflineLimits = DEFAULT_LIMITS, previous: dict = None,
            memo=None, deadline: Deadline = NO_DEADLINE) -> dict:
    """{section key: [bullet, ...]} extracted from these messages, what they superseded left out."""
    sections, stale = extract_with_stale(messages, limits, previous, memo, deadline)
    return drop_stale(sections, stale)


def extract_with_stale(messages: list, limits: OfflineLimits = DEFAULT_LIMITS, previous: dict = None,
                       memo=None, deadline: Deadline = NO_DEADLINE) -> tuple:
    """({section key: [bullet, ...]}, [Stale, ...]) of these messages. previous (the parsed
    previous summary) carries its Next Steps and the request in progress in, for the steps of
    these messages to tick off, and its Blocked, Key Decisions, Constraints and Relevant Files,
    for these messages to supersede. memo (memo.Memo) keeps each message's facts (_facts)."""
    previous = previous or {}
    acc = _Acc()
    asks = _Asks()
    for item in previous.get("in_progress", []):
        if item.startswith(WORKING):
            asks.add(item[len(WORKING):])
            asks.current = item[len(WORKING):]
        elif item.startswith(LAST_STEP):
            asks.last_step = item[len(LAST_STEP):]
    for item in previous.get("next_steps", []):
        asks.add(item)
    # the turn under way at the cut, until a request in these messages: its request in progress and
    # the carried asks its request (the previous Goal's newest) states
    latest_goal = (previous.get("goal") or [""])[-1]
    turn = [a for a in asks.keys if a == asks.current or latest_goal and a in latest_goal]
    stale = []
    listed = {_file_of(x) for x in previous.get("files", [])}
    for item in previous.get("done", []):  # what the previous summary saw deleted or renamed away
        mt = GONE_BULLET.match(item)
        if mt and (mt["path"] or mt["old"]) not in listed:  # listed: it exists again
            stale.append(Stale(mt["path"] or mt["old"], ("files",)))
    goals = []
    previous_goals = list(previous.get("goal", []))
    files = {}  # path -> set of roles ("read", "edited", ...) in first-seen order
    failed = {}  # command (or tool and input) -> bullet, removed when the same call later succeeds
    errors = {}  # the same key -> the error lines it failed with (Critical Context)
    failing = {}  # error line -> how many failures not resolved yet printed it
    resolved = {}  # the same key -> what states its failure as current, once a later run succeeded
    marked = {}  # error line -> whether it is marked fixed now (the other form is stale)
    carried = set()  # failures of the previous summary: merge keeps their bullets unless resolved
    previous_critical = set(previous.get("critical", []))
    for item in previous.get("blocked", []):
        mt = BLOCKED_BULLET.match(item)
        if mt and mt["subject"].count("`") == 2:
            key = _call_key(mt["subject"][1:-1])
            failed[key] = item
            carried.add(key)
            line = item[mt.end():]  # its headline, as Critical Context holds it unless it was cut
            if line in previous_critical:
                errors.setdefault(key, []).append(line)
                failing[line] = failing.get(line, 0) + 1
    constraints = list(previous.get("constraints", []))
    decisions = list(previous.get("decisions", []))
    stated = [x[len(FACT):] for x in previous.get("critical", []) if x.startswith(FACT)]  # facts that hold
    last_user_answered = True
    closing = ""  # the assistant's latest sentence saying what it did, if no step came after it
    answer = ""  # else its latest text's last sentence, which answers a request to tell something
    announced = []  # what the assistant announced in the turn under way
    reported = []  # ... of it, what it announced before its closing report
    mentioned, names = [], []  # paths and identifiers in prose
    edited = []  # paths a completed edit wrote, packed into few Done bullets
    ran = []  # commands that completed, packed likewise
    settings = (limits.max_items, limits.max_goals, limits.max_item_chars)
    facts = lambda x: _facts(x, limits, deadline)  # noqa: E731

    previous_decisions = set(decisions)
    dropped_paths = {}  # path -> how often the decisions of these messages superseded name it

    def supersede(old: str, key: str, new: str) -> None:
        stale.append(Stale(old, (key,)))
        acc.add("done", _clip(f"Superseded: {old} (now: {new})", limits))
        if key == "decisions":  # the paths it named that the new one does not (_superseded_files)
            now = set(identifiers(new))
            for path in identifiers(old):
                if PATH.fullmatch(path) and path not in now:
                    dropped_paths[path] = dropped_paths.get(path, 0) + (old not in previous_decisions)

    def close_turn() -> None:
        """A turn ended on the assistant's report: Done keeps it (the turn's result outlives its
        request in Goal), and the asks it speaks of are done."""
        if closing and sup.topic(closing):
            acc.add("done", closing)
            asks.closed_by(closing, turn, reported)
        elif answer and sup.topic(answer):  # "2 failures remain: ...": the answer to "summarize the failures"
            answered = [a for a in turn if a not in asks.done and _asks_answer(a)]
            if answered:
                acc.add("done", answer)
                asks.done.update(answered)

    for message_facts in each(memo, "offline", messages, settings, facts):
        reversed_here = set()  # this message's reversals: one change of plan, unless one replaces what another chose
        for fact in message_facts:
            deadline.count("compact")
            kind = fact[0]
            if kind == "acc":
                acc.add(fact[1], fact[2])
            elif kind == "step":
                asks.step(fact[1], set(fact[2]), set(fact[3]), *fact[4:])
                closing = answer = ""
            elif kind == "file":
                files.setdefault(fact[1], {})[fact[2]] = None
            elif kind == "identifiers":
                for item, is_path in zip(fact[1], fact[2]):
                    (mentioned if is_path else names).append(item)
            elif kind == "answered":
                last_user_answered = True
            elif kind == "told":
                close_turn()
                closing, answer, announced, reported = "", "", [], []
            elif kind == "fact":
                new = [b[len(FACT):] for b in fact[2]]
                now = sup.fact_values(new)
                for old in _restate(stated, new, fact[1] if fact[3] else ""):
                    acc.items["critical"].pop(FACT + old, None)
                    stale.append(Stale(FACT + old, ("critical",)))
                    stale.extend(Stale(v, ("critical",), name=True) for v in sup.fact(old).values - now)
                for b in new:
                    acc.add("critical", FACT + b)
                    values = sup.fact(b).values
                    stale[:] = [x for x in stale if not (x.probe == FACT + b or x.name and x.probe in values)]
            elif kind == "said":
                asks.said_with(fact[1], set(fact[2]), fact[3])
                if fact[3]:
                    asks.done_by(fact[1], looks=bool(LOOKED_AT.match(fact[1])))
            elif kind == "report":
                closing, answer = fact[1], ""
                reported = [a for a in announced if a not in fact[2]]
            elif kind == "answer":
                closing, answer = "", fact[1]
            elif kind == "announced":
                asks.add(fact[1])
                announced.append(fact[1])
            elif kind == "goal":
                close_turn()
                closing, answer, announced, reported = "", "", [], []
                if fact[1]:
                    goals.append(fact[1])
                elif fact[4] and not goals and not previous_goals:
                    goals.append(fact[4])
                last_user_answered = False
                asks.ask(list(fact[2]), fact[3])
                turn = asks.latest
            elif kind == "succeeded":
                if fact[1] in failed:  # the blocker is gone; Done has the run; steps it held are done
                    bullet = failed.pop(fact[1])
                    subject = fact[2]
                    # the failure's subject and its own words (a carried one may be spelled otherwise)
                    resolved[fact[1]] = (subject[1:-1] if subject.count("`") == 2 else subject, bullet)
                    asks.done_by(bullet)
                    # Critical Context keeps what it failed with (the evidence); Done says it is over
                    said = "completed after failing" if fact[3] is None else "ran clean after failing"
                    acc.add("done", _clip(f"{subject} {said}" + (f": {fact[3]}" if fact[3] else ""), limits))
                    # its error lines stay as evidence, marked: read alone they say it still fails
                    lines = errors.pop(fact[1], [])
                    for line in lines:
                        failing[line] -= 1
                    for line in dict.fromkeys(lines):
                        if not failing.get(line):  # no other failure still printing it
                            marked[line] = True
                            acc.items["critical"].pop(line, None)
                            acc.add("critical", line + FIXED)
            elif kind == "error":
                line = fact[2]
                errors.setdefault(fact[1], []).append(line)
                failing[line] = failing.get(line, 0) + 1
                marked[line] = False
                acc.items["critical"].pop(line + FIXED, None)  # it fails again
                acc.add("critical", line)
            elif kind == "failed":
                failed[fact[1]] = fact[2]
                carried.discard(fact[1])
                resolved.pop(fact[1], None)  # failing again
            elif kind == "edited":
                edited.extend(fact[1])
                # a path written again exists again
                stale[:] = [s for s in stale if not (s.sections == ("files",) and s.probe in fact[1])]
            elif kind == "ran":
                ran.append(fact[1])
            elif kind == "moved":
                old, new = fact[1], fact[2]
                files.pop(old, None)
                stale.append(Stale(old, ("files",)))
                acc.add("done", _clip(f"Renamed `{old}` to `{new}`" if new else f"Deleted `{old}`", limits))
                if new:
                    files.setdefault(new, {})["renamed"] = None
                    stale[:] = [s for s in stale if not (s.sections == ("files",) and s.probe == new)]
            elif kind == "constraint":
                for old in [c for c in constraints if c != fact[1] and sup.replaces(fact[1], c)]:
                    constraints.remove(old)
                    supersede(old, "constraints", fact[1])
                constraints.append(fact[1])
                acc.add("constraints", fact[1])
            elif kind == "reversal":
                # a request stated before it that names what it drops stays, saying so: it may ask
                # for more ("JWT auth and pagination", then "cookies instead of JWT"); one of its
                # own words is not changed by it
                gone = sup.dropped(fact[1])
                for item in [*previous_goals, *goals, *(a for a in asks.keys if a not in asks.done)] if gone else ():
                    own = CHANGED_NOTE.sub("", item)
                    if own not in fact[1] and _names_dropped(own, gone, fact[1]):
                        stale.append(Stale(item, ("goal", "next_steps", "in_progress"), changed_by=fact[1]))
                for key, held in (("decisions", decisions), ("constraints", constraints)):
                    for old in [d for d in held if d != fact[1] and sup.reverses(fact[1], d)
                                and (d not in reversed_here or sup.replaced(fact[1]) & sup.chosen(d))]:
                        held.remove(old)
                        if sup.restates(fact[1], old):  # the same choice said again: the newer stands
                            stale.append(Stale(old, (key,)))
                        else:
                            supersede(old, key, fact[1])
                        if key == "constraints" and fact[1] not in constraints:  # it is the constraint now
                            constraints.append(fact[1])
                            acc.add("constraints", fact[1])
                decisions.append(fact[1])
                reversed_here.add(fact[1])
            if kind == "acc" and fact[1] == "decisions" and fact[2] not in decisions:
                decisions.append(fact[2])
    close_turn()  # the head ends on the assistant's report
    stale.extend(Stale(probe, ("blocked",)) for probes in resolved.values() for probe in probes)
    # the form of each error line that is no longer current, in the previous summary's bullets too
    stale.extend(Stale(line if fixed else line + FIXED, ("critical",)) for line, fixed in marked.items())
    for key, bullet in failed.items():
        if key not in carried:
            acc.add("blocked", bullet)
    stale.extend(Stale(a, ("next_steps", "in_progress")) for a in asks.keys if a in asks.done)
    now = asks.working_on()
    request = goals[-1] if goals and not (asks.latest and all(a in asks.done for a in asks.latest)) else ""
    if not now and request and asks.steps_after_latest and _under_way(messages):
        now = request  # work under way on the latest request, though no ask of it is named
    if now:
        acc.add("in_progress", WORKING + now)
    if now and asks.last_step:
        acc.items["in_progress"].pop(asks.last_step, None)  # said once, as the last step
        acc.add("in_progress", LAST_STEP + asks.last_step)
    if goals and not last_user_answered and not asks.latest:
        acc.add("in_progress", f"Answer the latest request: {goals[-1]}")
    for item in asks.open()[-limits.max_items:]:
        acc.add("next_steps", item)
    # the session's goal (its first request) stays; then the most recent requests
    for goal in ([*goals[:1], *goals[1:][-(limits.max_goals - 1):]] if limits.max_goals > 1 else goals[-1:]):
        acc.add("goal", goal)
    stale.extend(_superseded_files(dropped_paths, files, mentioned, previous))
    touched = tuple(files)
    for path in mentioned:  # a path named in prose, unless deleted or renamed away (by its base name too)
        if not any(s.sections == ("files",) and (s.probe == path or not s.exact and s.probe.endswith("/" + path))
                   for s in stale) \
                and _names_a_file(path, touched):
            files.setdefault(path, {})["mentioned"] = None
    for path, roles in files.items():
        acc.add("files", f"`{path}`: {', '.join(roles)}")
    names = [x for x in names if x not in files]
    for bullet in _packed(IDENTIFIERS, names[-limits.max_items * 4:], limits):
        acc.add("critical", bullet)
    for prefix, done in ((RAN, ran), (EDITED, edited)):
        for bullet in _packed(prefix, done[-limits.max_items * 4:], limits):
            acc.add("done", bullet)
    return {key: _bounded(key, acc.get(key), limits) for key in template.KEYS}, stale


def _superseded_files(dropped: dict, files: dict, mentioned: list, previous: dict) -> list:
    """Stale Relevant Files: the paths a superseded decision named ("Use SQLite (file
    /var/data/shop.db)", then "use Postgres instead") that nothing else makes relevant: no tool
    read, wrote or was given them (here or in the previous summary), the prose names them no
    more often than the superseded decisions of these messages did, and the previous summary
    names them nowhere but in its Relevant Files and Key Decisions (a sentence of an earlier head
    naming one, kept only as "mentioned", cannot be told from the decision's own)."""
    roles = {_file_of(x): x for x in previous.get("files", [])}
    elsewhere = " ".join(x for key, items in previous.items() if key not in ("files", "decisions") for x in items)
    out = []
    for path, named in dropped.items():
        earlier = roles.get(path)
        if path in files or (earlier is not None and not earlier.endswith(f": {MENTIONED}")) \
                or mentioned.count(path) > named or path in elsewhere:
            continue
        out.append(Stale(path, ("files",), exact=True))
    return out


CRITICAL_FACTOR = 4  # Critical Context holds this many times max_items bullets
IDENTIFIERS = "Identifiers: "  # Critical Context: names in prose, packed
EDITED = "Edited: "  # Done: files written, packed (Relevant Files says the same per path)
RAN = "Ran: "  # Done: commands that completed, packed
PACKED = {"critical": (IDENTIFIERS,), "done": (EDITED, RAN)}


def _repack(key: str, items: list, limits: OfflineLimits) -> list:
    """Packed bullets of a section unpacked, each name once (newest position), packed again as
    the newest bullets: a rolling summary never repeats a name per compaction."""
    for prefix in PACKED[key]:
        names = [n for x in items if x.startswith(prefix) for n in CODE_SPAN.findall(x[len(prefix):])]
        if names:
            names = list(dict.fromkeys(reversed(names)))[::-1]  # each once, at its newest position
            items = [x for x in items if not x.startswith(prefix)] + \
                _packed(prefix, names[-limits.max_items * 4:], limits)
    return items


FILE_BULLET = re.compile(r"^`(?P<path>[^`]+)`: (?P<roles>.*)$")
MENTIONED = "mentioned"
WRITTEN = re.compile(r": (?:.*, )?(?:edited|renamed|attached)(?:,|$)")  # a file the session wrote or was given


def _files(items: list) -> list:
    """File bullets with one bullet per path, its roles merged in first-seen order."""
    roles, other = {}, []
    for item in items:
        mt = FILE_BULLET.match(item)
        if not mt:
            other.append(item)
            continue
        seen = roles.pop(mt["path"], {})  # a path seen again moves to the newest position
        seen.update(dict.fromkeys(r.strip() for r in mt["roles"].split(",") if r.strip()))
        roles[mt["path"]] = seen
    return other + [f"`{p}`: {', '.join(r)}" for p, r in roles.items()]


def _bounded(key: str, items: list, limits: OfflineLimits) -> list:
    """A section cut to its bound, oldest first out; the session's goal (the first) stays, and
    files only named in prose go before files a tool read or edited."""
    if key == "goal":
        cap = limits.max_goals
        return items[:1] + items[1:][-(cap - 1):] if cap > 1 and len(items) > cap else items[-cap:]
    if key in PACKED:
        items = _repack(key, items, limits)
    if key == "critical":  # error lines and names copied verbatim: the agent's evidence
        # the facts the person stated (the newest max_items) go last: error lines come and go,
        # a port or a ticket number said once is said nowhere else
        facts = [x for x in items if x.startswith(FACT)][-limits.max_items:]
        room = max(0, limits.max_items * CRITICAL_FACTOR - len(facts))
        others = [x for x in items if not x.startswith(FACT)]
        keep = set(facts) | set(others[max(0, len(others) - room):] if room else ())
        return [x for x in items if x in keep]
    if key == "files":
        items = _files(items)
        over = len(items) - limits.max_items
        if over > 0:  # oldest first: named only, then not written, then any
            order = sorted(range(len(items)), key=lambda i: (
                0 if items[i].endswith(f": {MENTIONED}") else 1 if not WRITTEN.search(items[i]) else 2, i))
            dropped = set(order[:over])
            items = [x for i, x in enumerate(items) if i not in dropped]
        return items
    return items[-limits.max_items:]


def _packed(prefix: str, names: list, limits: OfflineLimits) -> list:
    """names as `code` spans in as few bullets as fit max_item_chars each (never cut a name)."""
    out, line = [], ""
    for name in dict.fromkeys(names):
        piece = f"`{name}`"
        if line and len(prefix) + len(line) + 2 + len(piece) > limits.max_item_chars:
            out.append(prefix + line)
            line = ""
        line = f"{line}, {piece}" if line else piece
    if line:
        out.append(prefix + line)
    return out


def merge(previous: dict, new: dict, limits: OfflineLimits = DEFAULT_LIMITS) -> dict:
    """One rolling document: previous facts, then new ones; duplicates once; sections bounded."""
    out = {}
    for key in template.KEYS:
        old = previous.get(key, [])
        fresh = new.get(key, [])
        if key == "in_progress" and fresh:
            old = []  # what was under way then is done or blocked now
        bucket = {}
        for item in [*old, *fresh]:
            if key != "goal":  # the first goal keeps its place: it is the session's
                bucket.pop(item, None)
            bucket[item] = None
        items = list(bucket)
        if key == "critical" and old and fresh:
            items = _current_facts(items)
        out[key] = _bounded(key, items, limits)
    return out


def _restate(stated: list, new: list, said: str) -> list:
    """stated (the fact clauses that hold, in order) with the clauses new, stated in the sentence
    said ("" where it names no value gone), after it: those they supersede leave
    (supersede.superseded_facts), a fact said again stands once. The facts that left."""
    gone = []
    for old in sup.superseded_facts(stated, new, said):
        stated.remove(old)
        if old not in new:
            gone.append(old)
    stated.extend(new)
    return gone


def _current_facts(items: list) -> list:
    """Critical Context with the facts a later fact supersedes left out (supersede.superseded_facts),
    and the names they alone gave from its Identifiers: two summaries merged, the later one's
    "the port is now 9090" and the earlier one's "the dev server port is 8080" are not both current."""
    current, gone = [], set()
    for item in items:
        if item.startswith(FACT):
            gone.update(_restate(current, [item[len(FACT):]], item[len(FACT):]))
    if not gone:
        return items
    names = sup.fact_values(gone) - sup.fact_values(current)
    items = [x for x in items if not (x.startswith(FACT) and x[len(FACT):] in gone and x[len(FACT):] not in current)]
    return [x for x in (_without_names(x, IDENTIFIERS, names) for x in items) if x]


def summarize(messages: list, previous: str = "", limits: OfflineLimits = DEFAULT_LIMITS, memo=None,
              deadline: Deadline = NO_DEADLINE) -> str:
    if not previous:
        return template.render(extract(messages, limits, memo=memo, deadline=deadline))
    before = template.parse(previous)
    sections, stale = extract_with_stale(messages, limits, before, memo, deadline)
    merged = drop_stale(merge(before, sections, limits), stale)
    # the previous Next Steps and request in progress went through extract, which ticked off
    # what these messages did: its answer replaces them
    fresh = drop_stale({"in_progress": sections["in_progress"], "next_steps": sections["next_steps"]}, stale)
    merged.update(fresh)
    return template.render(merged)


class OfflineSummarizer:
    """The summarizer interface over the extractive summarizer."""

    name = NAME

    def __init__(self, limits: OfflineLimits = DEFAULT_LIMITS, memo=None):
        self.limits = limits
        self.memo = memo  # memo.Memo: each message's facts, kept across compactions

    def summarize(self, job) -> str:
        return summarize(job.messages, job.previous, self.limits, self.memo, job.deadline)

    def merge(self, partials: list, previous: str = "", max_tokens: int = 0, deadline=None) -> str:
        merged = template.parse(previous) if previous else {k: [] for k in template.KEYS}
        for text in partials:
            merged = self.merge_sections(merged, template.parse(text))
        return template.render(merged)

    def merge_sections(self, a: dict, b: dict) -> dict:
        return merge(a, b, self.limits)
