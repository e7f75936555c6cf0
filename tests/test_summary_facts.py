"""Facts the person states in the offline summary (review 29, R2): a value they give ("the dev
server port is 8080", "The deploy ticket is ZX-4471") is kept verbatim in Critical Context across
compactions; a later change ("the port is now 9090 (we moved off 8080)", "renamed to beta_db",
"X instead of Y", "no longer") supersedes it, its old name leaving Identifiers; a request the
assistant reported done, or a statement of fact, is no Next Step; consecutive tasks are neither
"Superseded" nor constraints."""
from __future__ import annotations

import time

from contextsvc import conversation as m
from contextsvc.compact import template
from contextsvc.compact.summarizers import offline, supersede
from contextsvc.v1 import context_pb2 as pb
from contextsvc_client import apply_compaction

FIRST = ("We are fixing the flaky deploy. Important facts: the dev server port is 8080. "
         "The deploy ticket is ZX-4471. The database name is alpha_db.")
UPDATE = "Update: the port is now 9090 (we moved off 8080). The database was renamed to beta_db."
FACTS = ("the dev server port is 8080.", "The deploy ticket is ZX-4471.", "The database name is alpha_db.")


def _user(mid, text):
    return m.Message(mid, m.USER, [m.Part(f"{mid}:0", m.Text(text))])


def _assistant(mid, *contents):
    return m.Message(mid, m.ASSISTANT, [m.Part(f"{mid}:{k}", m.Text(c) if isinstance(c, str) else c)
                                        for k, c in enumerate(contents)], time_completed_ms=1)


def _turn(n, text, reply):
    """A user message, two tool steps and the assistant's answer."""
    ls = [m.Tool(f"call-{n}-{k}", "bash", m.COMPLETED, {"command": "ls"}, output="x = 1\n" * 10) for k in (0, 1)]
    return [_user(f"u{n}", text), _assistant(f"a{n}a", "Checking the repo.", ls[0]),
            _assistant(f"a{n}b", "Checking the repo.", ls[1]), _assistant(f"a{n}c", reply)]


def _first_head():
    return (_turn(1, FIRST, "Understood, starting now.")
            + _turn(2, "Look at the failing test and find the root cause.", "Root cause found in rollout.py.")
            + _turn(3, "Fix it.", "Fixed.") + _turn(4, "Run the tests again.", "All green."))


def _second_head():
    return (_turn(5, UPDATE, "Done, configs updated.") + _turn(6, "Open a PR.", "PR opened.")
            + _turn(7, "Check the logs.", "No errors."))


def _identifiers(s: dict) -> list:
    return [n for x in s["critical"] if x.startswith(offline.IDENTIFIERS) for n in offline.CODE_SPAN.findall(x)]


def test_facts_the_person_states_are_kept_verbatim_in_critical_context():
    s = template.parse(offline.summarize(_first_head()))
    for f in FACTS:
        assert any(x.endswith(f) for x in s["critical"]), (f, s["critical"])
    assert s["goal"][0] == "We are fixing the flaky deploy.", s["goal"]
    # carried through a later compaction that does not mention them
    rolled = template.parse(offline.summarize(_turn(9, "Add a retry to `deploy.sh`.", "Added."),
                                              offline.summarize(_first_head())))
    for f in FACTS:
        assert any(x.endswith(f) for x in rolled["critical"]), (f, rolled["critical"])
    # not facts: a plan, a question, a description naming no value, a pronoun's
    for text in ("We are fixing the flaky deploy.", "What is the port?", "The build is broken.", "It is 8080."):
        assert supersede.fact_clauses(text) == [], text


def test_a_changed_fact_supersedes_the_earlier_one_and_its_name_leaves_identifiers():
    rolled = offline.summarize(_second_head(), offline.summarize(_first_head()))
    s = template.parse(rolled)
    critical = "\n".join(s["critical"])
    assert "Update: the port is now 9090 (we moved off 8080)." in critical
    assert "The database was renamed to beta_db." in critical
    assert "the dev server port is 8080." not in critical and "alpha_db" not in critical, critical
    assert "The deploy ticket is ZX-4471." in critical  # unchanged, still holds
    assert "beta_db" in _identifiers(s) and "alpha_db" not in _identifiers(s)
    # the same in one summary of the whole history, and in a merge of two partial summaries
    whole = template.parse(offline.summarize(_first_head() + _second_head()))
    assert not any("port is 8080" in x or "alpha_db" in x for x in whole["critical"]), whole["critical"]
    merged = template.parse(offline.OfflineSummarizer().merge(
        [offline.summarize(_first_head()), offline.summarize(_second_head())]))
    assert not any("port is 8080" in x or "alpha_db" in x for x in merged["critical"]), merged["critical"]
    assert any("9090" in x for x in merged["critical"]) and any("ZX-4471" in x for x in merged["critical"])


def test_instead_of_and_no_longer_supersede_a_fact_and_a_request_does_not_yet():
    first = [_user("u1", "Speed up the report queries. The database name is alpha_db. The cache host is redis-1."),
             _assistant("a1", "Reading the queries.")]
    for change in ("Use beta_db instead of alpha_db.", "alpha_db is no longer used; it is beta_db now.",
                   "We no longer use alpha_db."):
        s = template.parse(offline.summarize([_user("u2", change), _assistant("a2", "Switching.")],
                                             offline.summarize(first)))
        assert not any("The database name is alpha_db." in x for x in s["critical"]), (change, s["critical"])
        assert "alpha_db" not in _identifiers(s), change
        assert any("The cache host is redis-1." in x for x in s["critical"]), change
    # a request to rename is a step: the name holds until it is done
    s = template.parse(offline.summarize([_user("u2", "Rename alpha_db to beta_db in the config.")],
                                         offline.summarize(first)))
    assert any("The database name is alpha_db." in x for x in s["critical"]), s["critical"]
    # another port is another fact: "the metrics port" does not supersede "the port"
    s = template.parse(offline.summarize([_user("u1", "Fix the exporter. The port is 8080."),
                                          _user("u2", "The metrics port is 9100.")]))
    assert sum("port is" in x for x in s["critical"]) == 2, s["critical"]


def test_facts_are_bounded_and_outlast_error_lines():
    limits = offline.OfflineLimits(max_items=3, max_goals=3, max_item_chars=400)
    msgs = [_user("u1", "Fix the build. " + " ".join(f"The mirror{k} host is host{k}.example.com." for k in range(6)))]
    for k in range(20):
        msgs.append(_assistant(f"a{k}", f"ValueError: bad input number {k}"))
    s = template.parse(offline.summarize(msgs, limits=limits))
    facts = [x for x in s["critical"] if x.startswith(offline.FACT)]
    assert facts == [f"{offline.FACT}The mirror{k} host is host{k}.example.com." for k in (3, 4, 5)], s["critical"]
    assert len(s["critical"]) <= limits.max_items * offline.CRITICAL_FACTOR


def test_requests_reported_done_and_statements_of_fact_are_not_next_steps():
    first = offline.summarize(_first_head())
    s = template.parse(first)
    assert s["next_steps"] == [] and s["in_progress"] == [], s
    s = template.parse(offline.summarize(_second_head(), first))
    assert s["next_steps"] == [], s["next_steps"]
    assert not any("Update:" in x for x in s["goal"] + s["next_steps"] + s["in_progress"]), s
    assert not any("Check the logs" in x for x in s["in_progress"]), s["in_progress"]
    # the head cut before the answers: the same requests are still to do
    s = template.parse(offline.summarize([_user("u1", "Open a PR."), _user("u2", "Run the tests again.")]))
    assert any("Open a PR" in x for x in s["next_steps"] + s["in_progress"]), s
    # a fact whose first word is a verb of asking tells, a look at it asks
    assert offline.asks_in("Deploy config lives in `config/deploy.yaml`.") == []
    assert offline.asks_in("Check the port is 9090 everywhere.") == ["Check the port is 9090 everywhere"]
    # a report of something else does not close a request
    s = template.parse(offline.summarize([_user("u1", "Open a PR for the fix."), _assistant("a1", "All green.")]))
    assert any("Open a PR" in x for x in s["next_steps"] + s["in_progress"]), s


def test_consecutive_tasks_are_neither_superseded_nor_constraints():
    msgs = []
    for i in range(1, 5):
        msgs += [_user(f"u{i}", f"Next task {i}: refactor module shipyard/mod{i}.py and keep its tests green."),
                 _assistant(f"a{i}", f"Refactored shipyard/mod{i}.py; tests green.")]
    first = offline.summarize(msgs[:4])
    for s in (template.parse(offline.summarize(msgs)), template.parse(offline.summarize(msgs[4:], first))):
        assert not any(x.startswith("Superseded:") for x in s["done"]), s["done"]
        assert s["constraints"] == [], s["constraints"]
        assert not any("mod3.py" in x for x in s["next_steps"]), s["next_steps"]
    # a constraint said with a task is one; two tasks with the same constraint are not a change
    s = template.parse(offline.summarize([
        _user("u1", "Task 1: refactor mod1.py and never touch the public API."),
        _user("u2", "Task 2: refactor mod2.py and never touch the public API.")]))
    assert len(s["constraints"]) == 2 and not any(x.startswith("Superseded:") for x in s["done"]), s
    # a constraint with another value still replaces the earlier one
    assert supersede.replaces("Allow at most 5 retries per job.", "Never allow more than 3 retries per job.")


def _pb_user(n, text):
    return pb.Message(id=f"u{n}", role=pb.ROLE_USER, parts=[pb.Part(id=f"p{n}", text=pb.TextPart(text=text))])


def _pb_turn(n, text, reply):
    now = int(time.time() * 1000)
    out = [_pb_user(n, text)]
    for k in range(2):
        out.append(pb.Message(
            id=f"a{n}_{k}", role=pb.ROLE_ASSISTANT, parent_id=f"u{n}", time_completed_ms=now,
            usage=pb.Usage(input=1000, output=50),
            parts=[pb.Part(id=f"a{n}_{k}t", text=pb.TextPart(text="Checking the repo.")),
                   pb.Part(id=f"a{n}_{k}c", tool=pb.ToolPart(call_id=f"toolu_{n}_{k}", tool="bash", state=pb.ToolState(
                       status=pb.TOOL_STATUS_COMPLETED, input_json='{"command":"ls"}', output="x = 1\n" * 1000)))]))
    out.append(pb.Message(id=f"a{n}_r", role=pb.ROLE_ASSISTANT, parent_id=f"u{n}", time_completed_ms=now,
                          usage=pb.Usage(input=1000, output=50),
                          parts=[pb.Part(id=f"a{n}_rt", text=pb.TextPart(text=reply))]))
    return out


def test_two_compactions_through_the_server_keep_the_current_facts(stub):
    model = pb.Model(id="claude-sonnet-4-5", provider=pb.PROVIDER_ANTHROPIC,
                     limits=pb.ModelLimits(context=48000, output=8000))

    def compact(msgs):
        r = stub.Compact(pb.CompactRequest(conversation=pb.Conversation(session_id="facts", messages=msgs),
                                           model=model, auto=True), timeout=30)
        assert r.outcome == pb.COMPACT_OUTCOME_COMPACTED, r.outcome
        return apply_compaction(msgs, r, drop_omittable=True), template.parse(r.summary.parts[0].text.text)

    msgs = (_pb_turn(1, FIRST, "Understood, starting now.")
            + _pb_turn(2, "Look at the failing test and find the root cause.", "Root cause found in rollout.py.")
            + _pb_turn(3, "Fix it.", "Fixed.") + _pb_turn(4, "Run the tests again.", "All green."))
    msgs, s1 = compact(msgs)
    for f in FACTS:
        assert any(x.endswith(f) for x in s1["critical"]), (f, s1["critical"])
    msgs += (_pb_turn(5, UPDATE, "Done, configs updated.") + _pb_turn(6, "Open a PR.", "PR opened.")
             + _pb_turn(7, "Check the logs.", "No errors."))
    msgs, s2 = compact(msgs)
    critical = "\n".join(s2["critical"])
    assert "ZX-4471" in critical and "Update: the port is now 9090 (we moved off 8080)." in critical, critical
    assert "The database was renamed to beta_db." in critical
    assert "port is 8080" not in critical and "alpha_db" not in critical, critical
    assert "alpha_db" not in _identifiers(s2)
    steps = "\n".join(s2["next_steps"])
    for done in ("Run the tests again", "find the root cause", "Update:", "Open a PR"):
        assert done not in steps, (done, steps)


def test_a_diagnosis_closes_an_ask_to_find_not_one_to_fix_or_add():
    """Review 29c: a turn ending on what was found ("... is caused by ...", "Found X: ...") or
    looked at ("Checked X: ...") took "Fix the login redirect loop" for done, sharing two of its
    words; it answers an ask to find or look."""
    read = m.Tool("call-1", "read", m.COMPLETED, {"filePath": "src/auth.py"}, output="def login(): ...\n" * 5)
    for closing in ("The login redirect loop is caused by the session cookie being dropped in the middleware.",
                    "Found the login redirect loop: the session cookie is dropped by the middleware.",
                    "Root cause of the login redirect loop: the middleware drops the session cookie.",
                    # a look reported on answers an ask to look, as a diagnosis does
                    "Checked the login redirect loop: the middleware drops the session cookie.",
                    "Reviewed the login redirect loop code path; the cookie write comes after the redirect."):
        msgs = [_user("u1", "Fix the login redirect loop and add a regression test for it."),
                _assistant("a1", "Reading the auth code.", read), _assistant("a2", closing),
                _user("u2", "ok, what options do we have?"),
                _assistant("a3", "We can set SameSite=Lax or move the cookie write before the redirect.")]
        s = template.parse(offline.summarize(msgs))
        assert any("Fix the login redirect loop" in x for x in s["next_steps"] + s["in_progress"]), (closing, s)
        assert any("add a regression test" in x for x in s["next_steps"] + s["in_progress"]), (closing, s)
    # an ask to find what it found is answered
    msgs = [_user("u1", "Find out why the login redirect loop happens."), _assistant("a1", "Reading.", read),
            _assistant("a2", "The login redirect loop is caused by the session cookie being dropped in the middleware.")]
    s = template.parse(offline.summarize(msgs))
    assert not any("login redirect loop happens" in x for x in s["next_steps"] + s["in_progress"]), s
    msgs = [_user("u1", "Check the login redirect loop in staging."), _assistant("a1", "Reading.", read),
            _assistant("a2", "Checked the login redirect loop: the middleware drops the session cookie.")]
    s = template.parse(offline.summarize(msgs))
    assert not any("Check the login redirect loop" in x for x in s["next_steps"] + s["in_progress"]), s


def test_a_value_named_gone_supersedes_only_a_fact_of_its_subject():
    """Review 29c: "not X", "changed X to", "from X to" said of something else dropped a fact
    whose value is X; the sentence must be about the fact's subject, or name X replaced."""
    cases = (
        (["We are adding a job queue. The main database is Postgres 16. The deploy ticket is ZX-4471.",
          "Do not use Postgres for the job queue, use Redis instead."], "The main database is Postgres 16."),
        (["The entry point is main.py. The dev server port is 8080.",
          "FYI I changed main.py to use asyncio, please update the tests."], "The entry point is main.py."),
        (["The deploy ticket is ZX-4471. Fix the rollout script.",
          "New bug: the login page 500s. This is not ZX-4471, it's a separate bug."], "The deploy ticket is ZX-4471."),
    )
    for (first, second), kept in cases:
        msgs = [_user("u1", first), _assistant("a1", "Understood."), _user("u2", second), _assistant("a2", "OK.")]
        for s in (template.parse(offline.summarize(msgs)),
                  template.parse(offline.summarize(msgs[2:], offline.summarize(msgs[:2])))):
            assert any(x.endswith(kept) for x in s["critical"]), (second, s["critical"])
    # what still supersedes: the subject stated, or the value named replaced, with nothing else named
    port, db = "the dev server port is 8080.", "The database name is alpha_db."
    for said, old in (("Update: the port is now 9090 (we moved off 8080).", port),
                      ("The dev server port is no longer 8080, it is 9090.", port),
                      ("The database was renamed to beta_db.", db), ("Use beta_db instead of alpha_db.", db),
                      ("We no longer use alpha_db.", db), ("alpha_db is no longer used; it is beta_db now.", db),
                      ("The deploy ticket is not ZX-4471 but ZX-4480.", "The deploy ticket is ZX-4471.")):
        new = [c for c, _ in supersede.fact_clauses(said)]
        assert supersede.superseded_facts([old], new, said) == [old], said
    for said, old in (("The metrics port is 9100, not 8080.", port),
                      ("Use Redis instead of Postgres for the job queue.", "The main database is Postgres 16."),
                      ("Rename the alpha_db fixture to use the new schema.", db)):
        new = [c for c, _ in supersede.fact_clauses(said)]
        assert supersede.superseded_facts([old], new, said) == [], said


def test_pasted_log_lines_and_code_fences_state_no_facts():
    """Review 29c: lines of a pasted log ("... INFO worker started, pid is 4411", "Exit status was
    137") or of a code fence became "Fact:" bullets, kept across every compaction."""
    paste = ("Why does the worker crash? The queue host is redis-1. Here is the output:\n\n"
             "2026-12-07 10:42:01 INFO worker started, pid is 4411\n"
             "2026-12-07 10:42:03 WARN retry 3: upstream is 10.0.0.7:6379\n"
             "Job 8812 was at step 4\nExit status was 137\n\n"
             "And the config:\n```\nThe port is 8080\nowner is Priya\n```\n"
             "Output:\nThe exit code is 137\n")
    msgs = [_user("u1", paste), _assistant("a1", "Exit 137 means the OOM killer; the worker is out of memory."),
            _user("u2", "ok, raise the memory limit in deploy/worker.yaml"),
            _assistant("a2", "Raised the memory limit in deploy/worker.yaml.")]
    s = template.parse(offline.summarize(msgs))
    facts = [x for x in s["critical"] if x.startswith(offline.FACT)]
    assert facts == [f"{offline.FACT}The queue host is redis-1."], s["critical"]
    for line in ("2026-12-07 10:42:01 INFO worker started, pid is 4411", "WARN retry 3: upstream is 10.0.0.7:6379",
                 "[12:01:07] the port is 8080", "level=info msg=started port=8080"):
        assert supersede.fact_clauses(line) == [], line


def test_an_e_mail_address_is_a_value_kept_whole():
    """Review 30: "The owner is alice@example.com." stated no fact (an address was no value), and
    the summary kept `example.com` alone among its identifiers, the owner lost at the first
    compaction; its retention read 1.0 all the same."""
    msgs = [_user("u1", "The owner is alice@example.com. The project codename is BLUEFIN. Please fix the flaky test."),
            _assistant("a1", "Looking at it.")]
    s = template.parse(offline.summarize(msgs))
    critical = "\n".join(s["critical"])
    assert "The owner is alice@example.com." in critical and "The project codename is BLUEFIN." in critical, critical
    assert "`example.com`" not in critical, critical
    assert offline.identifiers("mail alice@example.com, see https://bob@x.org/a") == [
        "alice@example.com", "https://bob@x.org/a"]
    # a later owner supersedes it
    later = msgs + [_user("u2", "The owner is now bob@example.com."), _assistant("a2", "Noted.")]
    critical = "\n".join(template.parse(offline.summarize(later))["critical"])
    assert "bob@example.com" in critical and "alice@example.com" not in critical, critical


def test_a_look_reported_closes_the_asks_to_look_beside_the_steps_done():
    """Review 30: a look reported ("Checked X: ...", "Investigated X: ...") closes an ask to look,
    in a turn's report and said mid-turn, beside the steps said done, as it did before looks
    stopped closing asks to fix."""
    for ask, reply in (
            ("Fix the typo in the README and check the login redirect loop.",
             "Fixed the typo in the README. Checked the login redirect loop: the cookie is dropped."),
            ("Investigate the flaky payment test.", "Investigated the flaky payment test: a race in the retry loop."),
            ("Review src/auth.py, then update the docs.", "Reviewed src/auth.py: it is fine. Updated the docs.")):
        s = template.parse(offline.summarize([_user("u1", ask), _assistant("a1", reply)]))
        assert s["next_steps"] + s["in_progress"] == [], (ask, s)
