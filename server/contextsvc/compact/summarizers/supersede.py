"""What makes an earlier fact of a session stale (a decision reversed, a constraint replaced, a
value the person stated changed), and which lines of a failure matter
(docs/design.md §5, "What the offline summarizer recognizes").

Pure text rules, shared by the offline summarizer (which drops what is stale from the sections
that state what is current) and the retention report (which counts what a summary still states
as current although the history superseded it).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

# A sentence that reverses an earlier decision or constraint ("actually" after an ellipsis too:
# "Hmm... Actually, Redis for the job queue").
REVERSAL = re.compile(
    r"\b(?:change of plans?|changed? (?:my|our|the) mind|on second thought|instead|switch(?:ed|ing)? "
    r"(?:to|back|over)|revert(?:ed|ing)?|roll(?:ed)? back|no longer|not anymore|anymore|rather than|"
    r"scrap(?:ped)?|drop(?:ped)? the|replace[sd]? (?:the|that|this)|abandon(?:ed)?|from now on|going forward|"
    r"(?:^|\.\.\.\s*)actually)\b", re.IGNORECASE)
# What the assistant reports it undid ("the parser.ts guard is reverted", "reverting the guard"):
# an edit taken back, no change of plan; "reverted to" or "back" chooses (the person's "I reverted
# the Redis job queue" stays a reversal: undone, the decision is)
UNDONE_REPORTED = re.compile(r"\brevert(?:ed|ing)\b(?!\s+(?:back|to)\b)", re.IGNORECASE)
# What something did where something else was expected ("compute_total() returns 21.63 instead of
# 21.64"): a bug's description compares two values and chooses nothing, its "instead" no reversal.
# The value is a few words at most, without a comma: "the test still gives errors, switch to
# Redis instead of SQLite" and "the benchmark showed we should use Redis instead of SQLite" choose.
OBSERVED = re.compile(
    r"\b(?:returns?|returned|gives?|gave|prints?|printed|outputs?|yields?|yielded|produces?|produced|"
    r"raises?|raised|throws?|threw|shows?|showed|displays?|displayed|evaluates? to|got|comes? out|"
    r"came out)(?:\s+[^\s;!?,]+){1,3}\s+instead of\b", re.IGNORECASE)  # at most 3 words apart: bounded
# A change from one thing to another: "switched the lock from Redis to Memcached" (the thing left
# is the first group, what is chosen follows), "replace Redis with Memcached"
_FROM_TO = (r"\b(?:switch(?:es|ed|ing)?|mov(?:e|es|ed|ing)|migrat(?:e|es|ed|ing)|chang(?:e|es|ed|ing)|"
            r"port(?:s|ed|ing)?|convert(?:s|ed|ing)?)\b(?:\s+[\w'-]+){0,4}?\s+from\s+([\w.+#-]+)\s+to")
_REPLACE_WITH = r"\breplac(?:e|es|ed|ing)\s+([\w.+#-]+)\s+(?:with|by)"
# The choice a decision states: what it uses, switches or moves to, goes with, takes instead.
CHOSEN = re.compile(
    r"\b(?:use[sd]?|using|switch(?:ed|ing)?(?: back)? to|go(?:ing)? with|went with|move[sd]? to|"
    r"migrate[sd]? to|opt(?:ed)? for|pick(?:ed)?)\s+([\w.+#-]+)|([\w.+#-]+)\s+instead of\b|"
    # "switched the lock from Redis to Memcached", "replace Redis with Memcached"
    rf"{_FROM_TO}\s+([\w.+#-]+)|{_REPLACE_WITH}\s+([\w.+#-]+)", re.IGNORECASE)


def is_reversal(text: str, reported: bool = False) -> bool:
    """text changes a plan: a reversal's words outside any description of what something did
    instead of what was expected. reported: the assistant's text, where an edit reported undone
    is none (UNDONE_REPORTED)."""
    text = OBSERVED.sub(" ", text)
    return bool(REVERSAL.search(UNDONE_REPORTED.sub(" ", text) if reported else text))


NEGATED = re.compile(r"\b(?:no longer|not|never|stop(?:ped)?|anymore)\b|n't\b", re.IGNORECASE)


def chosen(text: str) -> frozenset:
    """The things text says are chosen ("use Redis instead of SQLite": redis), lowercased; not
    one a negation before it in its clause drops ("we no longer use SQLite" chooses nothing),
    while one after it drops another ("use Postgres, not SQLite" chooses postgres)."""
    out = set()
    for mt in CHOSEN.finditer(text):
        clause = re.split(r"[,.;:!?]", text[max(0, mt.start() - NEGATION_REACH):mt.start()])[-1]
        word = (mt.group(1) or mt.group(2) or mt.group(4) or mt.group(6)).lower().rstrip(".-")  # no full stop
        if word not in STOP and not NEGATED.search(clause):
            out.add(word)
    return frozenset(out)


NEGATION_REACH = 24  # characters before a choice a negation of it is looked for ("will no longer be")


# What a reversal drops: "instead of X", "rather than X", "use Y, not X", "no longer use X",
# "drop X", "stop using X" (the first word after them that names something, STOP words skipped)
DROPPED = re.compile(
    r"(?:\binstead of|\brather than|,\s*not|\bno longer (?:use|using|need|want)|\bstop using|"
    r"\b(?:drop|scrap|abandon|remove)(?:s|ped|ed|ping|ing)?)\s+((?:[\w.+#/-]+\s+){0,2}[\w.+#/-]+)", re.IGNORECASE)
# ... and what it says is gone before those words: "Redis is no longer used", "from Redis to
# Memcached", "replace Redis with Memcached"
DROPPED_BEFORE = re.compile(r"([\w.+#/-]+)\s+(?:is|are)\s+no longer\s+(?:used|needed|in use)\b|"
                            rf"{_FROM_TO}|{_REPLACE_WITH}", re.IGNORECASE)


def dropped(text: str) -> frozenset:
    """The things a reversal drops ("session cookies instead of JWT": jwt), lowercased."""
    return _first_words(DROPPED.findall(text) + [g for groups in DROPPED_BEFORE.findall(text) for g in groups if g])


def _first_words(phrases: list) -> frozenset:
    """The first word of each phrase that names something (STOP words skipped), lowercased."""
    out = set()
    for phrase in phrases:
        word = next((w for w in (x.lower().rstrip(".-") for x in phrase.split()) if w and w not in STOP), None)
        if word:
            out.add(word)
    return frozenset(out)


# What a choice replaces: "instead of X", "rather than X", "use Y, not X" (not "drop X": dropping
# part of a choice, "drop the Postgres extensions", keeps the choice)
REPLACED = re.compile(r"(?:\binstead of|\brather than|,\s*not)\s+((?:[\w.+#/-]+\s+){0,2}[\w.+#/-]+)", re.IGNORECASE)


def replaced(text: str) -> frozenset:
    """The things a choice in text replaces ("use Redis instead of Memcached": memcached), lowercased."""
    return _first_words(REPLACED.findall(text))


def restates(new: str, old: str) -> bool:
    """new makes the same choice as old ("use Redis instead of SQLite", then "the cache now uses
    Redis instead of SQLite"): the newer statement stands, the older was not reversed."""
    a = chosen(new)
    return bool(a) and a == chosen(old)


# Words that carry no topic: grammar, the verbs of asking and reporting, the reversal's own words.
STOP = frozenset("""
a an the and or but if of to in on at by for with from into onto over under as is are was were be
been being it its this that these those there here then than so too very also just now still yet
i i'll i'm i've we we'll we're let let's you your our my me us he she they them their not no nor
do does did done don't can could would should will shall may might must need needs needed want
keep keeping make sure use using used only always never avoid prefer instead change plan switch
switched back revert reverted longer anymore rather going next first then after before later
again more less all any some each every other same new old fix fixed fixing add added adding run
ran running update updated write wrote written remove removed create created move moved rename
renamed delete deleted finish finished complete completed check checked get got set one two
target targets support supports work working thing things way because since about actually
okay ok please thanks thank good great fine nice yes sure it's that's what which when while
""".split())
NAMED = re.compile(r"[A-Z]|\d|[_./`-]")  # a word that names something: capitalized, versioned, a path
VERSION = re.compile(r"\b([A-Za-z][\w+#-]*)\s+v?(\d+(?:\.\d+)*)\b")
NUMBER = re.compile(r"(?<![\w./-])\d+(?:\.\d+)*(?![\w/-])")
QUOTED = re.compile(r"`([^`]+)`|'([^'\s]+)'|\"([^\"]+)\"")
WORD = re.compile(r"[A-Za-z][\w.+#-]*\w|[A-Za-z]")


def topic(text: str) -> MappingProxyType:
    """{word (lowercased, no possessive or plural s): named?} of the words that carry a topic,
    read-only. A compaction compares every open step with every later sentence, so the topics of
    short texts (steps, decisions, constraints) are kept; a long text is worked out each time."""
    return _topic(text) if len(text) <= _CACHED_LEN else MappingProxyType(_topic_words(text))


_CACHED_LEN = 2048  # texts up to this long have their topic cached (a bound on the cache's memory)


@lru_cache(maxsize=16384)
def _topic(text: str) -> MappingProxyType:
    return MappingProxyType(_topic_words(text))


# a URL is one name ("postgres://localhost/billing_test"): its scheme is no topic of the text (a
# constraint naming that database URL was read as superseded by keeping keys "instead of Postgres")
URL = re.compile(r"\b[A-Za-z][\w+.-]*://[^\s`'\"<>()]+")


def _topic_words(text: str) -> dict:
    out = {url.lower().rstrip(".,;:"): True for url in URL.findall(text)}
    text = URL.sub(" ", text)
    quoted = {w.lower() for groups in QUOTED.findall(text) for q in groups for w in WORD.findall(q)}
    for w in WORD.findall(text.replace("`", " ")):
        low = w.lower()
        low = low[:-2] if low.endswith("'s") else low
        if low in STOP or len(low) < 3:
            continue
        if low.endswith("s") and not low.endswith("ss") and len(low) > 4:
            low = low[:-1]
        out[low] = out.get(low, False) or bool(NAMED.search(w)) or w.lower() in quoted
    return out


def same_topic(a: str, b: str) -> bool:
    """Two statements about the same thing: two topic words in common, or one that names something."""
    ta, tb = topic(a), topic(b)
    shared = ta.keys() & tb.keys()
    return len(shared) >= 2 or any(ta[w] or tb[w] for w in shared)


def reverses(new: str, old: str) -> bool:
    """new, a reversal ("change of plan", "instead", "switch to", "revert", "no longer"), is
    about what old said: it names something old said that it drops ("use Memcached instead of
    Redis" reverses "use Redis for the lock", not "keep the key format invoice:lock:{id}"), or
    makes another choice on the topic of old's; or, naming nothing it drops, shares old's topic."""
    if not is_reversal(new):
        return False
    gone = topic(" ".join(dropped(new))).keys()  # a number ("from 30s to 60s") is no topic word: none
    if gone and not gone & topic(old).keys():
        # it drops another thing: it reverses old only by choosing anew what old chose, on its
        # topic ("use Postgres for the job queue and remove the cron script" after "use SQLite for
        # the job queue"); a constraint choosing nothing stays ("keep the key format ...")
        return bool(chosen(old)) and bool(chosen(new) - chosen(old)) and same_topic(new, old)
    return same_topic(new, old)


def replaces(new: str, old: str) -> bool:
    """new states the same constraint as old with another value: a reversal of it, the same named
    thing at another version ("Python 3.9" then "Python 3.11"), or the same words with another
    number ("at most 3 retries" then "at most 5 retries")."""
    if reverses(new, old):
        return True
    # a task's or a step's own number ("Next task 2: ...") is no value or version of a constraint:
    # two tasks in a row are two tasks, not one changed
    new, old = ORDINAL.sub(" ", new), ORDINAL.sub(" ", old)
    versions = {w.lower(): v for w, v in VERSION.findall(old)}
    for w, v in VERSION.findall(new):
        if versions.get(w.lower(), v) != v:  # the same thing at another version, said of the same rest
            rest_new, rest_old = (topic(x).keys() - {w.lower()} for x in (NUMBER.sub("", new), NUMBER.sub("", old)))
            if rest_new <= rest_old or rest_old <= rest_new or len(rest_new & rest_old) >= 2:
                return True
    n_new, n_old = set(NUMBER.findall(new)), set(NUMBER.findall(old))
    return bool(n_new and n_old and n_new != n_old) and same_topic(NUMBER.sub("", new), NUMBER.sub("", old))


ORDINAL = re.compile(r"\b(?:tasks?|steps?|items?|parts?|phases?|stages?|points?|questions?|issues?|tickets?|"
                     r"PRs?|pull requests?|no\.|numbers?|#)\s*#?\d+\b|(?<!\w)#\d+\b", re.IGNORECASE)


def done_by(step: str, evidence: str) -> bool:
    """A step with no identifier to tie it ("fix the worker's missing redis module") is done by
    evidence (a sentence saying it is done, a blocker resolved) that shares two topic words with
    it, or one the evidence names (quoted, capitalized, versioned)."""
    ts, te = topic(step), topic(evidence)
    shared = ts.keys() & te.keys()
    return len(shared) >= 2 or any(te[w] for w in shared)


ACK_WORDS = frozenset("""
ok okay k good great nice cool perfect thanks thank thx ty you yes yep yeah sure fine lgtm go on
ahead keep going continue carry proceed right sounds looks works do it that this please now great
awesome excellent alright all done wonderful and so next fix it them
""".split())


def is_ack(text: str) -> bool:
    """An acknowledgement or a go-ahead ("good", "keep going", "fix it", "thanks"): never a goal,
    a constraint or a next step."""
    words = re.findall(r"[a-z']+", text.lower())
    return 0 < len(words) <= 6 and all(w.strip("'") in ACK_WORDS for w in words)


# Lines of a failure that say what failed: an exception line, a traceback frame, a test's E line
# or FAILED line, a linter's path:line:col: CODE line, an error: or fatal: line.
EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault)"
                       r"(?::.*)?$")
FRAME = re.compile(r'^File "[^"]+", line \d+')
# the line a Python traceback ends with, unindented after its frames: the exception's (dotted)
# name and its message, whatever the name ends in (requests.exceptions.ReadTimeout,
# sqlalchemy.exc.NoResultFound, StopIteration)
RAISED = re.compile(r"^[A-Za-z_][\w.]*(?::.*)?$")
LINT = re.compile(r"^\S+?:\d+(?::\d+)?:?\s+(?:[A-Z]{1,4}\d{2,5}|[a-z]+(?:-[a-z]+)+)\b")
TEST_LINE = re.compile(r"^(?:E\s{2,}\S|FAILED\s|ERROR\s)")
PLAIN_ERROR = re.compile(r"^(?:error|fatal|panic)(?:\[\w+\])?:|\b(?:Error|ERROR):\s", re.IGNORECASE)
TRACEBACK = "Traceback (most recent call last):"


def error_lines(text: str, cap: int = 8) -> list:
    """The lines that say what failed, in order, each once: the exception line (a traceback's
    last line) and the first frame's location, linter codes with their lines, test E/FAILED
    lines, error: lines. Never the "Traceback (most recent call last):" header alone."""
    return _error_lines(text, cap)[0]


def _error_lines(text: str, cap: int = 8) -> tuple:
    """(error_lines, the exception lines among them)."""
    out, raised, frame_seen, in_frames = [], [], False, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line == TRACEBACK:
            continue
        if FRAME.match(line):
            in_frames = True
            if not frame_seen:
                frame_seen = True
                out.append(line)
            continue
        if in_frames and not raw[:1].isspace():  # the first line after the frames and their code
            in_frames = False
            if RAISED.match(line):
                out.append(line)
                raised.append(line)
                continue
        if EXCEPTION.match(line):
            out.append(line)
            raised.append(line)
        elif LINT.match(line) or TEST_LINE.match(line) or PLAIN_ERROR.search(line):
            out.append(line)
    out = list(dict.fromkeys(out))
    if len(out) > cap:  # the first frame and the last lines: the exception is last
        out = out[:1] + out[-(cap - 1):]
    return out, raised


def headline(text: str) -> str:
    """The one line that says what failed: the exception line (the last), else the first error
    line, else the first line."""
    lines, raised = _error_lines(text)
    exc = [x for x in lines if x in raised]
    if exc:
        return exc[-1]
    plain = [x for x in lines if not FRAME.match(x)]
    if plain:
        return plain[0]
    first = [x.strip() for x in text.splitlines() if x.strip() and x.strip() != TRACEBACK]
    return first[0] if first else ""


RENAME_KEYS = (("source", "destination"), ("old_path", "new_path"), ("from", "to"), ("src", "dst"),
               ("oldPath", "newPath"), ("path", "new_path"), ("file_path", "new_file_path"))
DELETE_TOOLS = ("delete", "remove", "rm", "delete_file", "remove_file")


SEGMENT = re.compile(r"\s*(?:&&|\|\||;)\s*")  # between the commands of a command line


def segments(cmd: str) -> list:
    """The commands of a command line, split at `&&`, `||` and `;`."""
    return SEGMENT.split(cmd)


def command_words(cmd: str) -> list:
    """A command's words, as the shell splits them (on whitespace when it cannot)."""
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def moves_in_command(cmd: str) -> list:
    """[(old path, new path or "" when deleted)] of `mv`, `git mv`, `rm`, `git rm` in a command."""
    out = []
    for part in segments(cmd):
        words = command_words(part)
        if words[:1] == ["git"]:
            words = words[1:]
        if not words or words[0] not in ("mv", "rm"):
            continue
        args = [w for w in words[1:] if not w.startswith("-")]
        if words[0] == "mv" and len(args) == 2:
            out.append((args[0], args[1]))
        elif words[0] == "rm":
            out.extend((a, "") for a in args)
    return out


def tool_base_name(tool: str) -> str:
    """The tool's own name, without an MCP server's prefix ("mcp__ci__run_lint", "github.create_issue")."""
    return tool.rsplit(".", 1)[-1].rsplit("__", 1)[-1]


def moves_in_tool(tool: str, inp) -> list:
    """[(old path, new path or "")] of an edit tool's rename, move or delete."""
    if not isinstance(inp, dict):
        return []
    for old_key, new_key in RENAME_KEYS:
        old, new = inp.get(old_key), inp.get(new_key)
        if isinstance(old, str) and isinstance(new, str) and old and new and old != new:
            return [(old, new)]
    if tool_base_name(tool.lower()) in DELETE_TOOLS:
        paths = [inp.get(k) for k in ("path", "file_path", "filePath", "file")]
        return [(p, "") for p in paths if isinstance(p, str) and p]
    return []



# Facts the person states: a subject, a link and a value that names something ("the dev server
# port is 8080", "The deploy ticket is ZX-4471", "The database was renamed to beta_db", "Deploy
# config lives in `config/deploy.yaml`"). The summary keeps them verbatim; a later statement of
# the same subject with another value ("the port is now 9090"), or one naming the value as gone
# ("we moved off 8080", "use X instead of Y", "Y is no longer used"), supersedes them.
FACT_LINK = re.compile(
    r"\s(?:(?:(?:is|are|was|were|has been|have been|got|gets)\s+)?(?:now\s+|just\s+)?"
    r"(?:renamed|changed|moved|switched|bumped|updated|migrated|pinned|upgraded|downgraded|set)\s+(?:to|as)"
    r"|(?:is|are|was|were)(?:\s+(?:now|still|currently|always|actually))?(?:\s+(?:set to|named|called|at|on|in))?"
    r"|(?:lives?|sits?|is kept|is stored|are kept|are stored)\s+(?:in|at|on|under)|(?:runs?|listens?)\s+on"
    r"|points?\s+(?:to|at))\s+", re.IGNORECASE)
# what a value may be: a `code span`, a URL, a number ("8080", "3.11", "10.0.0.5"), a ticket
# ("ZX-4471"), a name with a separator ("alpha_db", "config/deploy.yaml", "release/2026.12") or a
# hyphen and a digit ("redis-1", "us-east-1"), a capitalized name ("Postgres", "Priya Raman"); not a
# plain word ("broken", "fixing", "slow")
# an e-mail address, whole (its domain alone is no value of "the owner is alice@example.com")
EMAIL = re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
FACT_VALUE = re.compile(
    rf"`[^`]+`|{EMAIL.pattern}|[A-Za-z][\w+.-]*://\S+|\d[\w.:/%+-]*|[A-Z][A-Z0-9]+-\d+|"
    r"(?=[\w./-]*[A-Za-z])[\w.-]*\w[_./][\w./-]*\w|(?=[\w-]*\d)[A-Za-z]\w*-[\w-]*\w|"
    r"[A-Z][^\W_]*(?:[-'][^\W_]+)*(?:\s+[A-Z][^\W_]*(?:[-'][^\W_]+)*)*")
FACT_FILLER = re.compile(r"^(?:(?:the|a|an|our|my|now|port|version|v|number|no\.|ticket|branch|named|called)\s+)+",
                         re.IGNORECASE)
# a subject that names nothing: "it is now ...", "this is Bob", "we are fixing ...", "what is 8080?"
FACT_PRONOUNS = frozenset("""it this that there here which what who whom whose why how when where he she
they we i you everything something nothing anything someone everyone all both each one""".split())
SUBJECT_LEAD = re.compile(r"^(?:(?:also|and|so|but|btw|fyi|note|note that|please note|remember|remember that|"
                          r"now|then|oh|ok|okay|the|our|my|its|their|your|a|an)\b[,:]?\s*)+", re.IGNORECASE)
# "The on-call engineer changed: it is now Tomasz": the subject is said before the label
CHANGED_LABEL = re.compile(r"^(?P<subject>.+?)\s+(?:has\s+)?(?:changed|moved|was renamed|is different|"
                           r"was updated|got updated|was replaced)$", re.IGNORECASE)
# where one sentence states two facts: "the database name is alpha_db and the on-call engineer is Priya"
FACT_SPLIT = re.compile(r",?\s+and\s+(?=(?:the|our|my|its|their)\s)|;\s+|,\s+(?=(?:the|our|my|its|their)\s)",
                        re.IGNORECASE)
MAX_SUBJECT_WORDS = 6


@dataclass(frozen=True)
class Fact:
    """One fact a clause states: the topic words of its subject and its value's words."""
    subject: frozenset
    values: frozenset


# a line of a log, of a tool's output or of a shell session: a timestamp, a level, a prompt, key=value
# fields ("2026-12-07 10:42:01 INFO worker started, pid is 4411", "WARN retry 3: upstream is
# 10.0.0.7:6379", "[12:01:07] ...", "level=info msg=..."): what a program said, no fact the person states
LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|\[?\d{1,2}:\d{2}:\d{2}\b|"
    r"[A-Z][a-z]{2}\s+\d{1,2}\s+\d{1,2}:\d{2}:\d{2}\b|"
    r"[\[<]?(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|FATAL|CRITICAL|CRIT|PANIC|SEVERE)[\]>]?(?=[\s:\]|])|"
    r"[$#%]\s+\S|\w+=\S+\s+\w+=\S+)"
    r"|\b(?:level|lvl|severity)=\w+", re.UNICODE)


def fact_clauses(sentence: str) -> list:
    """[(clause, Fact)] of the facts a sentence of the person states, each clause verbatim (a
    sentence stating two facts gives two); [] for a question, a sentence stating none, or a line
    of a log (LOG_LINE: the person pasted it, the program said it). The offline summarizer gives
    it the person's own prose alone: no line of a code fence or of a pasted log."""
    if sentence.rstrip().endswith("?") or LOG_LINE.search(sentence):
        return []
    out = []
    for clause in FACT_SPLIT.split(sentence):
        f = fact(clause)
        if f is not None:
            out.append((clause.strip(), f))
    return out


def fact(clause: str) -> "Fact | None":
    """The fact a clause states, or None."""
    mt = FACT_LINK.search(clause)
    if mt is None:
        return None
    subject, rest = clause[:mt.start()], clause[mt.end():]
    label, _, own = subject.rpartition(":")
    own = SUBJECT_LEAD.sub("", own.strip())
    if label and (not own or own.split()[0].lower() in FACT_PRONOUNS):
        said = CHANGED_LABEL.match(label.strip().rsplit(":", 1)[-1].strip())
        if said is None:
            return None
        own = SUBJECT_LEAD.sub("", said["subject"])
    words = own.split()
    if not words or len(words) > MAX_SUBJECT_WORDS or words[0].lower().strip(",") in FACT_PRONOUNS:
        return None
    if "(" in own or '"' in own:
        return None
    topic_words = frozenset(topic(own))
    if not topic_words:
        return None
    named = re.search(r"\b(?:named|called|renamed|rename|name)\s*$", clause[:mt.end()], re.IGNORECASE)
    rest = FACT_FILLER.sub("", rest.strip())
    value = FACT_VALUE.match(rest)
    if value is None and named:  # "the branch is named main": any word
        value = re.match(r"[\w.-]+", rest)
    if value is None or not value.group(0).strip(".-"):
        return None
    text = value.group(0).rstrip(".,;:!?")
    return Fact(topic_words, _value_words(text))


def _value_words(text: str) -> frozenset:
    return frozenset(w.strip("`'\".,;:!?()") for w in text.split() if w.strip("`'\".,;:!?()"))


# what a change names as the old value: "moved off 8080", "instead of alpha_db", "use beta_db, not
# alpha_db", "no longer ZX-1", "formerly X", "was previously X", "renamed alpha_db to beta_db",
# "from 8080 to 9090", "replace X with Y", "X is no longer used" name it replaced or gone; a bare
# "not X" only denies it of what the sentence is about ("This is not ZX-4471, it's a separate bug",
# "Do not use Postgres for the job queue"), and a change of X to no value changes X, replacing
# nothing ("I changed main.py to use asyncio")
_OLD_AFTER = re.compile(
    r"(?:(?P<comma>,\s*not)|\b(?:instead of|rather than|(?P<not>not)|"
    r"no longer(?:\s+(?:use|using|on|at|in|called|named|is|be))?|(?:moved|move|moving) off|"
    r"off of|away from|formerly|previously|used to be|was previously|no more))\s+((?:[^\s,;()]+\s*){1,3})",
    re.IGNORECASE)
_OLD_BEFORE = re.compile(
    r"\b(?:from|renam(?:e|es|ed|ing)|replac(?:e|es|ed|ing)|chang(?:e|es|ed|ing)|swap(?:s|ped|ping)?)\s+"
    r"((?:[^\s,;()]+\s+){1,3}?)(?:to|with|by|for)\s+([^\s,;()]+)|"
    r"([^\s,;()]+)\s+(?:is|are)\s+(?:no longer|not)\s+(?:used|needed|in use|current|valid|right|correct)\b",
    re.IGNORECASE)
_OLD_STOP = frozenset(("to", "with", "by", "for", "and", "or", "in", "on", "at", "the", "a", "an", "port",
                       "use", "using", "yesterday", "today", "anymore", "now", "any", "more", "be"))


def _strip(word: str) -> str:
    return word.strip("`'\".,;:!?()")


def _named_old(sentence: str) -> list:
    """[(value, replaced)] of the values a sentence names as no longer current, each one a value as
    FACT_VALUE reads it ("do not touch the parser" names none); replaced: named replaced or gone
    ("instead of", "moved off", "renamed X to Y"), not only denied ("not X")."""
    out = []
    for mt in _OLD_AFTER.finditer(sentence):
        words = [_strip(w) for w in mt.group(3).split()]
        while words and words[0].lower() in ("the", "a", "an", "port", "use", "using"):
            words = words[1:]
        if words:
            out.append((words[0], not mt.group("not")))
    for mt in _OLD_BEFORE.finditer(sentence):
        if mt.group(1):
            new = _strip(mt.group(2))
            if not (FACT_VALUE.fullmatch(new) and new.lower() not in STOP):  # "changed main.py to use asyncio"
                continue
            out.extend((_strip(w), True) for w in mt.group(1).split() if w.lower() not in _OLD_STOP)
        else:
            out.append((_strip(mt.group(3)), True))
    return [(w, replaced) for w, replaced in out if w and FACT_VALUE.fullmatch(w)]


def old_values(sentence: str) -> frozenset:
    """The values a sentence of the person names as no longer current (_named_old); whether they
    are a fact's value no more depends on what the sentence is about (superseded_facts)."""
    return frozenset(w for w, _ in _named_old(sentence))


def _names_gone(sentence: str, f: Fact) -> bool:
    """sentence names a value of the fact f gone, and of f's subject: the words it says besides its
    values are f's subject's (the subject stated, with no fact of another subject: "the port is
    now 9090 (we moved off 8080)" of "the dev server port is 8080", not "the metrics port is 9100,
    not 8080"), or none ("use beta_db instead of alpha_db", "We no longer use alpha_db": the value
    itself replaced); a value only denied ("not X") needs all of the subject's words ("The deploy
    ticket is not ZX-4471", not "This is not ZX-4471")."""
    named = [replaced for w, replaced in _named_old(sentence) if w in f.values]
    if not named:
        return False
    values = " ".join(w for w in map(_strip, sentence.split()) if w and FACT_VALUE.fullmatch(w))
    said = topic(sentence).keys() - topic(values).keys()
    if any(not g.subject <= f.subject for _, g in fact_clauses(sentence)):
        return False  # a fact of another subject: "the metrics port is 9100, not 8080"
    if f.subject <= said:
        return True
    return any(named) and (not said or bool(said & f.subject))


def fact_values(clauses) -> set:
    """The values the fact clauses state (each one's fact)."""
    return {v for c in clauses for f in (fact(c),) if f for v in f.values}


def superseded_facts(current: list, new: list = (), said: str = "") -> list:
    """The fact clauses of current (verbatim, each stating one fact) that a later sentence
    supersedes: those whose value said (the sentence) names as gone, of their subject
    (_names_gone), and the one (or those) whose subject a fact clause of new states again ("the
    port is now 9090" after "the dev server port is 8080": its subject's words are among theirs;
    of several such, those of the same words)."""
    parsed = [(c, fact(c)) for c in current]
    facts = [f for f in map(fact, new) if f is not None]
    now = {v for f in facts for v in f.values}
    out = [c for c, f in parsed if f is not None and said and not f.values <= now and _names_gone(said, f)]
    for f_new in facts:
        same = [(c, f) for c, f in parsed if f is not None and c not in out and f_new.subject <= f.subject]
        exact = [c for c, f in same if f.subject == f_new.subject]
        out.extend(exact or ([same[0][0]] if len(same) == 1 else []))  # the newer stands, its value again or another
    return list(dict.fromkeys(out))
