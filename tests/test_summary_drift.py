"""Supersession in the offline summarizer and the honest retention figure (issue 27): each kind
of superseded fact leaves the sections that state what is current, in the rolling update too;
a failure's exception line, a linter's codes and an edit's new names are kept; the seven-round
drift benchmark (bench/summary_drift.py) meets the targets."""
from __future__ import annotations

import dataclasses

import pytest

import summary_drift as drift

from contextsvc import conversation as m
from contextsvc.compact import retention, template
from contextsvc.compact.summarizers import offline, supersede

TRACEBACK = ("Traceback (most recent call last):\n  File \"src/worker/main.py\", line 7, in <module>\n"
             "    import redis\nModuleNotFoundError: No module named 'redis'")


def _user(mid, text):
    return m.Message(mid, m.USER, [m.Part(f"{mid}:0", m.Text(text))])


def _assistant(mid, *contents):
    return m.Message(mid, m.ASSISTANT, [m.Part(f"{mid}:{k}", m.Text(c) if isinstance(c, str) else c)
                                        for k, c in enumerate(contents)], time_completed_ms=1)


def _bash(cmd, status=m.COMPLETED, output="ok", error=""):
    return m.Tool(f"call-{cmd}-{status}", "bash", status, {"command": cmd}, output=output, error=error)


def _rolled(first: list, later: list) -> dict:
    """The summary of first rolled forward over later, parsed: supersession in the rolling update."""
    return template.parse(offline.summarize(later, offline.summarize(first)))


def test_a_later_success_of_the_same_command_removes_its_blocker_and_the_step_it_held():
    first = [_user("u1", "Start the worker in src/worker/main.py"),
             _assistant("a1", _bash("python -m worker", m.ERROR, error=TRACEBACK)),
             _assistant("a2", "Next I'll fix the worker's missing redis module.")]
    s = template.parse(offline.summarize(first))
    assert any("python -m worker" in x for x in s["blocked"])
    later = [_assistant("a3", _bash("pip install redis"), _bash("python -m worker", output="started"))]
    for s in (_rolled(first, later), template.parse(offline.summarize(first + later))):
        assert s["blocked"] == []
        assert any("python -m worker" in x for x in s["done"])
        assert not any("redis module" in x for x in s["next_steps"] + s["in_progress"])


def test_a_finished_next_step_leaves_next_steps():
    first = [_user("u1", "Tidy the release in `release.sh`"),
             _assistant("a1", "After that I'll update the deployment notes for the rollout.")]
    assert any("deployment notes" in x for x in template.parse(offline.summarize(first))["next_steps"])
    s = _rolled(first, [_assistant("a2", "Updated the deployment notes for the rollout.")])
    assert not any("deployment notes" in x for x in s["next_steps"] + s["in_progress"])


def test_a_reversed_decision_leaves_key_decisions_and_done_records_it():
    old = "I'll use SQLite for the job queue because it needs no server."
    first = [_user("u1", "Add a job queue to `jobs/queue.py`"), _assistant("a1", old)]
    assert old in template.parse(offline.summarize(first))["decisions"]
    for reversal in ("Change of plan: use Redis for the job queue instead of SQLite.",
                     "Let's switch to Redis for the job queue.",
                     "Revert the job queue to Redis.",
                     "We no longer use SQLite for the job queue."):
        s = _rolled(first, [_user("u2", reversal)])
        assert old not in s["decisions"] and reversal in s["decisions"], reversal
        assert any(old in x for x in s["done"])


def test_a_replaced_constraint_leaves_constraints():
    for old, new in (("Keep Python 3.9 compatibility.", "Target Python 3.11 only."),
                     ("Never allow more than 3 retries per job.", "Allow at most 5 retries per job."),
                     ("Don't use asyncio in the worker.", "Change of plan: asyncio is fine in the worker.")):
        first = [_user("u1", f"Add retries to `jobs/run.py`. {old}")]
        assert old in template.parse(offline.summarize(first))["constraints"]
        s = _rolled(first, [_user("u2", new)])
        assert old not in s["constraints"] and new in s["constraints"], (old, new)
    # two constraints on different things both hold
    s = _rolled([_user("u1", "Keep Python 3.9 compatibility.")], [_user("u2", "Never change the public API.")])
    assert len(s["constraints"]) == 2


def test_a_renamed_or_deleted_file_leaves_relevant_files():
    first = [_user("u1", "Clean up src/app/util.py"),
             _assistant("a1", m.Tool("c1", "read", m.COMPLETED, {"path": "src/app/util.py"}, output="x"))]
    moves = {"git mv src/app/util.py src/app/helpers.py": "src/app/helpers.py",
             "mv src/app/util.py src/app/helpers.py": "src/app/helpers.py",
             "git rm src/app/util.py": "", "rm -f src/app/util.py": ""}
    for cmd, new in moves.items():
        s = _rolled(first, [_assistant("a2", _bash(cmd, output=""))])
        files = "\n".join(s["files"])
        assert "`src/app/util.py`" not in files, cmd
        assert (new in files) if new else files == "", cmd
        assert any("src/app/util.py" in x for x in s["done"]), cmd
    rename = m.Tool("c2", "rename", m.COMPLETED, {"source": "src/app/util.py", "destination": "src/app/helpers.py"},
                    output="renamed")
    s = _rolled(first, [_assistant("a2", rename)])
    assert [x for x in s["files"] if "util.py" in x] == [] and any("helpers.py" in x for x in s["files"])


def test_the_exception_line_and_first_frame_of_a_traceback_are_kept():
    text = offline.summarize([_user("u1", "Run the worker"),
                              _assistant("a1", _bash("python -m worker", m.ERROR, error=TRACEBACK))])
    s = template.parse(text)
    assert s["blocked"] == ["`python -m worker` failed: ModuleNotFoundError: No module named 'redis'"]
    assert "ModuleNotFoundError: No module named 'redis'" in s["critical"]
    assert 'File "src/worker/main.py", line 7, in <module>' in s["critical"]
    assert "Traceback (most recent call last):" not in text


def test_the_exception_line_is_kept_whatever_the_exception_s_name_ends_in():
    """A traceback ends with the exception's line, unindented after its frames: requests'
    ReadTimeout, SQLAlchemy's NoResultFound, psycopg's UniqueViolation and StopIteration name
    no Error or Exception, and the summary kept the first frame in their place (and the
    retention figure did not count the loss). A line after frames that is no exception's stays
    out."""
    for last in ["requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api.stripe.com', port=443): Read timed out.",
                 "sqlalchemy.exc.NoResultFound: No row was found when one was required",
                 'psycopg.errors.UniqueViolation: duplicate key value violates unique constraint "invoices_pkey"',
                 "StopIteration"]:
        error = ('Traceback (most recent call last):\n  File "src/billing/sync.py", line 88, in push\n'
                 f"    resp = session.post(url)\n{last}")
        msgs = [_user("u1", "Sync invoices"), _assistant("a1", _bash("python -m billing.sync", m.ERROR, error=error))]
        s = template.parse(offline.summarize(msgs))
        assert s["blocked"] == [f"`python -m billing.sync` failed: {last}"], last
        assert last in s["critical"] and last in retention.extract(msgs)
    framed = 'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n    f()\nthe run was stopped by hand'
    s = template.parse(offline.summarize([_user("u1", "Run a.py"), _assistant("a1", _bash("python a.py", m.ERROR,
                                                                                          error=framed))]))
    assert "the run was stopped by hand" not in s["critical"]


def test_linter_codes_with_their_lines_are_kept():
    out = "src/a.py:3:8: F401 [*] `os` imported but unused\nsrc/a.py:40:89: E501 Line too long (97 > 88)\nFound 2 errors."
    for tool in (_bash("ruff check src", m.ERROR, error=out), _bash("ruff check src", output=out)):
        s = template.parse(offline.summarize([_user("u1", "Lint src"), _assistant("a1", tool)]))
        for line in out.splitlines()[:2]:
            assert line in s["critical"], line


def test_identifiers_only_in_an_edit_input_are_kept():
    edit = m.Tool("c1", "edit", m.COMPLETED, {"file_path": "src/q.py", "old_string": "def run():",
                                             "new_string": "class RetryBudget:\n    max_attempts = 3\n\ndef run():"},
                  output="applied")
    msgs = [_user("u1", "Add a retry budget to src/q.py"), _assistant("a1", edit)]
    text = offline.summarize(msgs)
    assert "RetryBudget" in text and "max_attempts" in text
    assert "RetryBudget" in retention.extract(msgs)


def test_acknowledgements_are_not_goals_constraints_or_steps():
    msgs = [_user("u1", "Add a timeout to `fetch` in src/net.py"),
            _assistant("a1", m.Tool("c1", "read", m.COMPLETED, {"path": "src/net.py"}, output="x"))]
    for i, ack in enumerate(("good", "keep going", "Fix it", "thanks")):
        msgs += [_user(f"k{i}", ack), _assistant(f"b{i}", _bash(f"pytest -k t{i}"))]
    s = template.parse(offline.summarize(msgs))
    assert s["goal"] == ["Add a timeout to `fetch` in src/net.py"]
    assert s["constraints"] == [] and s["next_steps"] == []
    assert s["in_progress"][0] == "Working on: Add a timeout to `fetch` in src/net.py"
    # a short aside naming nothing is the work asked for now, not the session's goal
    s = template.parse(offline.summarize(msgs + [_user("k9", "fix the lint too"),
                                                 _assistant("b9", _bash("ruff check src"))]))
    assert s["goal"] == ["Add a timeout to `fetch` in src/net.py"]
    assert s["in_progress"][0] == "Working on: fix the lint too"


def test_a_message_sent_mid_run_is_summarized_as_the_person_wrote_it():
    """A user message sent while the loop ran is stored wrapped in the service's reminder
    (step.reminders.wrap_mid_run): the summary takes its goal, asks and constraints from the
    person's words, never a "<system-reminder>" line; the same as the message unwrapped."""
    from contextsvc.step.reminders import wrap_mid_run

    head = [_user("u1", "Add type hints to src/app/lexer.py and make mypy pass."),
            _assistant("a1", _bash("pytest -k lexer", output="3 passed"))]
    for said in ("Also: keep the line length at 100 (ruff), not 88.",
                 "Then port src/app/parser.py to the new token stream."):
        wrapped, changed = wrap_mid_run(_user("u2", said))
        assert changed and "<system-reminder>" in wrapped.parts[0].content.text
        tail = [_assistant("a3", _bash("mypy src/app"))]
        got = template.parse(offline.summarize(head + [wrapped] + tail))
        assert got == template.parse(offline.summarize(head + [_user("u2", said)] + tail)), said
        assert not any("system-reminder" in x for section in got.values() for x in section), got


def test_a_call_that_did_something_is_done_with_what_it_made():
    """A completed call of another tool (an MCP server's create_issue) is a Done item naming the
    tool, its inputs and what its answer names (the issue's number and address), so a later model
    does not open the issue again; a call that only looks (get_, list_, search_) or keeps the
    agent's own todo list is no Done item; nor is a failed one."""
    import json

    created = json.dumps({"id": 2000000041, "number": 41, "title": "parse_list recursion", "state": "open",
                          "html_url": "https://github.com/acme/app/issues/41", "user": {"login": "bot"}}, indent=2)
    msgs = [_user("u1", "Open a GitHub issue in acme/app about the parser recursion bug."),
            _assistant("a1", m.Tool("c1", "mcp__github__create_issue", m.COMPLETED,
                                    {"owner": "acme", "repo": "app", "title": "parse_list recursion", "labels": ["bug"]},
                                    output=created)),
            _assistant("a2", m.Tool("c2", "mcp__github__list_issues", m.COMPLETED, {"repo": "app"}, output="[]"),
                       m.Tool("c3", "todowrite", m.COMPLETED, {"todos": [{"content": "triage"}]}, output="ok"),
                       m.Tool("c4", "deploy", m.COMPLETED, {"env": "staging"},  # its first line, not its error's
                              output="Deployed build 7 to staging\nwarning: error: 502 once, retried"),
                       m.Tool("c5", "mcp__github__close_issue", m.ERROR, {"number": 40}, error="403 Forbidden"))]
    for s in (template.parse(offline.summarize(msgs)), _rolled(msgs[:2], msgs[2:])):
        done = s["done"]
        assert any("`mcp__github__create_issue`" in x and "title=parse_list recursion" in x and "number=41" in x
                   and "https://github.com/acme/app/issues/41" in x for x in done), done
        assert any(x.startswith("Called `deploy` (env=staging): Deployed build 7 to staging") for x in done), done
        assert not any(k in x for x in done for k in ("list_issues", "todowrite", "close_issue")), done


def test_retention_reports_superseded_items_still_current_and_empty_sections():
    msgs = [_user("u1", "Start the worker in src/worker/main.py"),
            _assistant("a1", _bash("python -m worker", m.ERROR, error=TRACEBACK)),
            _assistant("a2", _bash("python -m worker", output="started"), _bash("pytest -x", m.RUNNING))]
    stale = "## Progress\n### Blocked\n- `python -m worker` failed: ModuleNotFoundError\n### In Progress\n- (none)"
    r = retention.report(msgs, "", stale)
    assert r.superseded_current == ("python -m worker",)
    assert "in_progress" in r.empty_sections and "goal" in r.empty_sections
    good = retention.report(msgs, "", offline.summarize(msgs))
    assert good.superseded_current == () and good.empty_sections == ()


def test_drift_benchmark_meets_the_targets_after_six_compactions():
    result = drift.run(sessions=3, rounds=7, seed=2)
    table = drift.table(result)
    for r in range(6, 7):
        assert result["facts"][r] >= 0.95, table
        assert result["errors"][r] == 1.0, table
        assert result["superseded_current"][r] <= 1 * result["sessions"], table
        assert result["in_progress"][r] == result["sessions"], table
    assert all(total > 0 for total in result["superseded_total"][1:]), table
    assert all(v == result["sessions"] for v in result["in_progress"]), table
    for sid in range(3):  # at most one superseded item stated as current, in every session
        assert drift.run_session(sid, 7, seed=5)[-1]["superseded_current"] <= 1, sid


def _edit(cid, path, old, new):
    return m.Tool(cid, "edit", m.COMPLETED, {"file_path": path, "old_string": old, "new_string": new},
                  output=f"Edited {path}")


def test_a_run_that_deletes_a_file_does_the_ask_naming_it_and_done_no_longer_lists_it_as_edited():
    first = [_user("u1", "Add a scratch helper in src/gw/bucket_tmp.py"),
             _assistant("a1", _edit("c1", "src/gw/bucket_tmp.py", "", "# scratch")),
             _user("u2", "Change of plan: delete the scratch file src/gw/bucket_tmp.py and update `src/gw/app.py`")]
    assert any("bucket_tmp" in x for x in template.parse(offline.summarize(first))["next_steps"])
    later = [_assistant("a2", _bash("rm src/gw/bucket_tmp.py", output=""))]
    for s in (_rolled(first, later), template.parse(offline.summarize(first + later))):
        open_items = s["next_steps"] + [x for x in s["in_progress"] if x.startswith(offline.WORKING)]
        assert open_items == ["update `src/gw/app.py`"], s  # not done
        assert "Deleted `src/gw/bucket_tmp.py`" in s["done"]
        assert not any(x.startswith("Edited: ") and "bucket_tmp" in x for x in s["done"]), s["done"]
    # written again, it exists again
    s = _rolled(first, later + [_assistant("a3", _edit("c2", "src/gw/bucket_tmp.py", "", "# again"))])
    assert any(x.startswith("Edited: ") and "bucket_tmp" in x for x in s["done"])


def test_a_failing_run_is_blocked_until_the_same_run_is_clean_which_does_the_ask_naming_its_program():
    lint = "src/gw/ratelimit.py:41:80: E501 line too long (88 > 79 characters)"
    first = [_user("u1", "Update CHANGELOG.md with the limiter, then check flake8."),
             _assistant("a1", _edit("c1", "CHANGELOG.md", "", "- limiter")),
             _assistant("a2", _bash("flake8 src/gw", output=lint))]  # completed, with a lint failure
    s = template.parse(offline.summarize(first))
    assert s["blocked"] == [f"`flake8 src/gw` failed: {lint}"] and lint in s["critical"]
    assert any("check flake8" in x for x in s["next_steps"] + s["in_progress"])
    again = template.parse(offline.summarize(first + [_assistant("a9", _bash("flake8 src/gw", output=lint))]))
    assert again["blocked"] == s["blocked"] and not any("ran clean" in x for x in again["done"])  # failed again
    later = [_assistant("a3", _edit("c2", "src/gw/ratelimit.py", "x" * 88, "x")),
             _assistant("a4", _bash("flake8 src/gw", output=""))]
    for s in (_rolled(first, later), template.parse(offline.summarize(first + later))):
        assert s["blocked"] == [] and s["next_steps"] == [], s
        assert "`flake8 src/gw` ran clean after failing" in s["done"]
        # the evidence stays, marked as over, as Done says
        assert lint + offline.FIXED in s["critical"] and lint not in s["critical"]
    tests = [_user("u1", "Run pytest on src/gw"),
             _assistant("a1", _bash("pytest -q", output="E       AssertionError: expected 429\n1 failed")),
             _assistant("a2", _bash("python -m pytest -q", output="==== 5 passed in 0.42s ===="))]
    s = template.parse(offline.summarize(tests))
    assert "`pytest -q` failed: E       AssertionError: expected 429" in s["blocked"]  # another command
    assert s["next_steps"] == [] and not any(x.startswith("Working on") for x in s["in_progress"])
    s = template.parse(offline.summarize(tests + [_assistant("a3", _bash("pytest -q", output="5 passed"))]))
    assert s["blocked"] == [] and "`pytest -q` ran clean after failing: 5 passed" in s["done"]
    # a program named like a verb of asking does no ask
    s = template.parse(offline.summarize([_user("u1", "Make the limit configurable in src/gw/config.py"),
                                          _assistant("a1", _bash("make build", output="done"))]))
    assert any("Make the limit configurable" in x for x in s["next_steps"] + s["in_progress"])


def test_an_edit_that_writes_what_an_ask_names_does_it_unless_the_ask_names_another_file():
    msgs = [_user("u1", "Expose the current value on the admin endpoint /admin/limits, "
                        "and add RATE_LIMIT_RPS to docs/configuration.md"),
            _assistant("a1", _edit("c1", "src/gw/admin.py", "routes = [",
                                   'routes = [("/admin/limits", limits),\n    RATE_LIMIT_RPS,'))]
    s = template.parse(offline.summarize(msgs))
    open_items = s["next_steps"] + s["in_progress"]
    assert not any("/admin/limits" in x for x in open_items), open_items
    assert any("docs/configuration.md" in x for x in open_items), open_items


def test_relevant_files_keep_the_files_written_before_those_only_read():
    msgs = [_user("u1", "Rate-limit the gateway"),
            _assistant("a1", _edit("c1", "src/gw/server.py", "a", "b"), _edit("c2", "src/gw/middleware.py", "a", "b"))]
    msgs += [_assistant(f"r{k}", m.Tool(f"r{k}", "read", m.COMPLETED, {"path": f"docs/page_{k}.md"}, output="x"))
             for k in range(offline.DEFAULT_LIMITS.max_items + 3)]
    files = "\n".join(template.parse(offline.summarize(msgs))["files"])
    assert "`src/gw/server.py`: edited" in files and "`src/gw/middleware.py`: edited" in files
    assert "docs/page_0.md" not in files and f"docs/page_{offline.DEFAULT_LIMITS.max_items + 2}.md" in files


def test_an_intention_is_no_decision_unless_it_says_what_was_chosen():
    s = template.parse(offline.summarize([
        _user("u1", "Rate-limit src/gw/server.py"),
        _assistant("a1", "I'll look at the request handler first."),
        _assistant("a2", "I'll use a sliding window rather than a token bucket.")]))
    assert s["decisions"] == ["I'll use a sliding window rather than a token bucket."]


def test_a_run_that_failed_does_no_ask_and_blocks_unless_it_only_showed_text():
    failing = [_user("u1", "Update the rate limiter in src/limits.py and make `pytest -q` pass"),
               _assistant("a1", _bash("pytest -q", output="FAILED tests/test_api.py::test_limit - AssertionError"))]
    s = template.parse(offline.summarize(failing))
    assert "make `pytest -q` pass" in s["next_steps"] + [x.removeprefix(offline.WORKING) for x in s["in_progress"]]
    assert s["blocked"] == ["`pytest -q` failed: FAILED tests/test_api.py::test_limit - AssertionError"]
    s = template.parse(offline.summarize(failing + [_assistant("a2", _bash("pytest -q", output="12 passed"))]))
    assert "make `pytest -q` pass" not in s["next_steps"] and s["blocked"] == []
    # a build that printed its errors failed, and blocks until it builds
    s = template.parse(offline.summarize([_user("u1", "Get `cargo build` working again"),
                                          _assistant("a1", _bash("cargo build", output="error[E0308]: mismatched types"))]))
    assert s["blocked"] == ["`cargo build` failed: error[E0308]: mismatched types"]
    assert "Get `cargo build` working again" in s["next_steps"] + [x.removeprefix(offline.WORKING) for x in s["in_progress"]]
    # a search or a log whose output quotes an error is no failure; a clean run of a program an
    # ask names does only an ask to run or check it
    s = template.parse(offline.summarize([
        _user("u1", "Find where we log the upload failures in src/, and fix the docker build"),
        _assistant("a1", _bash('grep -rn "Error:" src/', output='src/upload.py:41: log.warning("Error: upload failed")')),
        _assistant("a2", _bash("tail -n 50 logs/app.log", output=TRACEBACK)),
        _assistant("a3", _bash("docker ps", output="CONTAINER ID   IMAGE"))]))
    assert s["blocked"] == []
    assert "fix the docker build" in s["next_steps"] + [x.removeprefix(offline.WORKING) for x in s["in_progress"]]


def _tool(cid, tool, inp, output="", status=m.COMPLETED, error=""):
    return m.Tool(cid, tool, status, inp, output=output, error=error)


def test_a_turn_s_closing_report_stays_in_done_and_does_the_asks_it_speaks_of():
    pagination = "Done: GET /tasks takes limit (default 50, max 200) and offset; 6 tests pass."
    turns = [_user("u0", "Build a task API with CRUD on /tasks."),
             _assistant("a0", "Done: the task API serves CRUD on /tasks."),
             _user("u1", "Add pagination to GET /tasks: limit and offset query params, default 50, max 200."),
             _assistant("a1", _edit("c1", "app/routes.py", "def list_tasks():", "def list_tasks(limit=50):")),
             _assistant("a2", _bash("pytest -q", output="6 passed")),
             _assistant("a3", pagination),
             _user("u2", "Open a GitHub issue about alembic migrations, and check the CI config."),
             _assistant("a4", _tool("c2", "mcp__github__create_issue", {"title": "alembic"}, '{"number": 42}'),
                        _tool("c3", "read", {"file_path": ".github/workflows/ci.yml"}, "jobs:\n  test: {}")),
             _assistant("a5", "Done: issue #42 opened; CI already runs a postgres:16 service."),
             _user("u3", "Rename the field done to completed everywhere."),
             _assistant("a6", _edit("c4", "app/models.py", "done", "completed")),
             _user("u4", "Add a search endpoint on /tasks/search.")]
    s = template.parse(offline.summarize(turns))
    assert not any("pagination" in g for g in s["goal"])  # its request left the goals kept
    assert pagination in s["done"]  # what the turn did outlives it
    assert not any("CI config" in x or "GitHub issue" in x for x in s["next_steps"] + s["in_progress"]), s
    # the turn under way at the cut ends in the next head: its carried asks are done by its report
    first = [_user("u1", "Switch to postgres instead of sqlite (psycopg 3). Also delete the seed_tmp script."),
             _assistant("a1", _edit("c1", "app/db.py", "sqlite3", "psycopg"))]
    s = template.parse(offline.summarize(first))
    assert any("postgres" in x or "seed_tmp" in x for x in s["next_steps"] + s["in_progress"])
    later = [_assistant("a2", _bash("rm scripts/seed_tmp.py", output="")),
             _assistant("a3", "Done: the app now runs on postgres."),
             _user("u2", "Add a search endpoint on /tasks/search.")]
    s = _rolled(first, later)
    assert not any("postgres" in x or "seed_tmp" in x for x in s["next_steps"] + s["in_progress"]), s
    assert "Done: the app now runs on postgres." in s["done"]
    # a report that speaks of something else does no ask
    s = template.parse(offline.summarize([_user("u1", "Add a search endpoint on /tasks/search."),
                                          _assistant("a1", "Done: the README typo is gone.")]))
    assert any("search endpoint" in x for x in s["next_steps"] + s["in_progress"])


def test_a_failure_spelled_otherwise_is_cleared_by_the_run_that_corrects_it():
    error = "Error: No such command 'initdb'."
    first = [_user("u1", "Create the database schema."),
             _assistant("a1", _bash("flask --app app initdb", m.ERROR, error=error))]
    s = template.parse(offline.summarize(first))
    assert s["blocked"] == [f"`flask --app app initdb` failed: {error}"] and error in s["critical"]
    later = [_assistant("a2", _bash("flask --app app init-db", output="Initialized the database."))]
    for s in (_rolled(first, later), template.parse(offline.summarize(first + later))):
        assert s["blocked"] == [], s
        assert error + offline.FIXED in s["critical"] and error not in s["critical"]
    # it fails again: blocked again, its line no longer marked
    again = later + [_assistant("a3", _bash("flask --app app initdb", m.ERROR, error=error))]
    for s in (_rolled(first + later, again[1:]), template.parse(offline.summarize(first + again))):
        assert s["blocked"] == [f"`flask --app app initdb` failed: {error}"], s
        assert error in s["critical"] and error + offline.FIXED not in s["critical"]
    # another command's failure stays
    s = template.parse(offline.summarize(first + [_assistant("a2", _bash("flask --app app run", output="ok"))]))
    assert s["blocked"] and error in s["critical"]


def test_a_deleted_file_named_later_by_its_base_name_is_no_relevant_file():
    first = [_user("u1", "Add a seed script, then remove it once the data is in."),
             _assistant("a1", _tool("c1", "write", {"file_path": "scripts/seed_tmp.py", "content": "seed()"}, "ok")),
             _assistant("a2", _bash("rm scripts/seed_tmp.py", output="")),
             _assistant("a3", _tool("c2", "grep", {"pattern": "seed", "path": "."}, "no matches"))]
    later = [_assistant("a4", "Removed seed_tmp.py as asked; nothing imports scripts/seed_tmp.py.")]
    for s in (_rolled(first, later), template.parse(offline.summarize(first + later))):
        assert not any("seed_tmp" in x for x in s["files"]), s["files"]
        assert not any(x.startswith("`.`") for x in s["files"])  # the search's "here" names no file
        assert "Deleted `scripts/seed_tmp.py`" in s["done"]


def test_a_pair_of_words_with_a_slash_is_no_file():
    s = template.parse(offline.summarize([
        _user("u1", "Add limit/offset paging to gw/core and note it in docs/paging (see /work/app); read/write "
                    "both, and check deploy/Dockerfile, config/nginx.conf and lib/parser.lua."),
        _assistant("a1", _edit("c1", "gw/core/routes.py", "def list_tasks():", "def list_tasks(limit=50):"))]))
    files = [x.split("`")[1] for x in s["files"]]
    assert "limit/offset" not in files and "read/write" not in files, files
    assert {"gw/core", "gw/core/routes.py", "docs/paging", "/work/app", "deploy/Dockerfile", "config/nginx.conf",
            "lib/parser.lua"} <= set(files), files  # a touched file under it, a usual directory, a file's name


def test_a_turn_s_report_settles_what_the_assistant_announced_before_it():
    turn = [_user("u1", "Continue with the billing module."),
            _assistant("a1", "Checking batch next.", _tool("c1", "read", {"file_path": "src/billing/batch.py"}, "x")),
            _assistant("a2", "Checking rollback next.", _tool("c2", "read", {"file_path": "src/billing/rb.py"}, "y")),
            _assistant("a3", "Done with this part. Next I'll update the changelog for billing."),
            _user("u2", "Now the ledger module.")]
    s = template.parse(offline.summarize(turn))
    assert not any("Checking" in x for x in s["next_steps"] + s["in_progress"]), s
    assert any("update the changelog" in x for x in s["next_steps"] + s["in_progress"])  # announced after it
    # without a report the announcements stay open
    s = template.parse(offline.summarize(turn[:3] + turn[4:]))
    assert any("Checking rollback" in x for x in s["next_steps"] + s["in_progress"])


def test_a_tool_that_is_no_command_completes_after_failing_without_its_content():
    s = template.parse(offline.summarize([
        _user("u1", "Read the config."),
        _assistant("a1", _tool("c1", "read", {"file_path": "conf/app.yaml"}, status=m.ERROR, error="ENOENT: no such file")),
        _assistant("a2", _tool("c2", "read", {"file_path": "conf/app.yaml"}, "port: 8080\nreturn self.schema["))]))
    assert "`read` on `conf/app.yaml` completed after failing" in s["done"], s["done"]
    assert not any("schema[" in x for x in s["done"])


def test_a_report_ticks_off_only_its_own_turn_s_asks_and_is_no_question():
    earlier = [_user("u1", "Add tests for the parser. Document the parser API in docs/api.md."),
               _assistant("a1", "Next I'll write the parser docs."),
               _user("u2", "Fix the crash on empty input in the parser."),
               _assistant("a2", _edit("c1", "src/parser.py", "x", "y"))]
    s = _rolled(earlier, [_assistant("a3", "Fixed: the parser no longer crashes on empty input.")])
    open_ = s["next_steps"] + s["in_progress"]
    # the turn under way is done; the parser asks of an earlier turn are not, though they share a word
    assert not any("crash" in x for x in open_), s
    assert any("Add tests for the parser" in x for x in open_) and any("docs/api.md" in x for x in open_), s
    # a question saying nothing is done, and a word every request shares, tick nothing off
    for report in ("Based on the workflow, the deploy job has no retry; shall I add one?",
                   "Fixed the parser crash; the existing tests pass."):
        s = template.parse(offline.summarize([
            _user("u1", "Add a test for the CSV exporter and fix the flaky deploy job."),
            _assistant("a1", _tool("c1", "read", {"file_path": ".github/workflows/ci.yml"}, "x")),
            _assistant("a2", report), _user("u2", "Now the docs.")]))
        assert any("CSV exporter" in x for x in s["next_steps"] + s["in_progress"]), (report, s)
        assert report not in s["done"] or "?" not in report


def test_a_report_after_the_turn_s_tool_calls_in_the_same_message_closes_it():
    # one assistant message may hold the whole turn (its calls, then its report)
    s = template.parse(offline.summarize([
        _user("u1", "Check the CI config."),
        _assistant("a1", _edit("c1", ".github/workflows/ci.yml", "x", "y"), "Done: the CI config now caches pip."),
        _user("u2", "Now the docs.")]))
    assert not any("CI config" in x for x in s["next_steps"] + s["in_progress"]), s
    assert "Done: the CI config now caches pip." in s["done"]


def test_a_file_deleted_then_written_again_stays_relevant_over_later_compactions():
    heads = [[_user("u1", "Rework the config loading."), _assistant("a1", _bash("rm app/config.py", output=""))],
             [_assistant("a2", _tool("c1", "write", {"file_path": "app/config.py", "content": "X = 1"}, "ok"))],
             [_assistant("a3", "Looking at the tests now."), _assistant("a4", _bash("pytest -q", output="3 passed"))]]
    summary = ""
    for head in heads:
        summary = offline.summarize(head, summary)
    s = template.parse(summary)
    assert any(x.startswith("`app/config.py`") for x in s["files"]), s["files"]
    assert any("app/config.py" in x for x in s["done"] if x.startswith(offline.EDITED)), s["done"]
    # renamed away and back
    summary = ""
    for head in ([_user("u1", "Tidy src."), _assistant("a1", _bash("mv src/util.py src/helpers.py", output=""))],
                 [_assistant("a2", _bash("mv src/helpers.py src/util.py", output=""))],
                 [_assistant("a3", _bash("pytest -q", output="3 passed"))]):
        summary = offline.summarize(head, summary)
    files = template.parse(summary)["files"]
    assert any(x.startswith("`src/util.py`") for x in files) and not any("helpers.py" in x for x in files), files


def test_a_carried_failure_s_line_is_marked_only_when_no_other_failure_prints_it():
    refused = "ConnectionRefusedError: [Errno 111] Connection refused"
    first = [_user("u1", "Seed the database and start the worker."),
             _assistant("a1", _bash("python seed.py", output=f"Traceback (most recent call last):\n{refused}")),
             _assistant("a2", _bash("python worker.py", output=f"Traceback (most recent call last):\n{refused}"))]
    s = _rolled(first, [_assistant("a3", _bash("python worker.py", output="started"))])
    assert any("python seed.py" in x for x in s["blocked"]), s
    assert refused in s["critical"] and refused + offline.FIXED not in s["critical"], s["critical"]
    s = _rolled(first, [_assistant("a3", _bash("python worker.py", output="started")),
                        _assistant("a4", _bash("python seed.py", output="seeded"))])
    assert s["blocked"] == [] and refused + offline.FIXED in s["critical"] and refused not in s["critical"], s


def test_only_a_hyphen_or_underscore_inside_a_word_makes_two_commands_one():
    for failed, later, same in (("flask --app app initdb", "flask --app app init-db", True),
                                ("make build_all", "make  buildall", True),
                                ("python -c 'print(1/0)'", "python -c 'print(10)'", False),
                                ("git push origin Release", "git push origin release", False)):
        s = template.parse(offline.summarize([
            _user("u1", "Get it working."), _assistant("a1", _bash(failed, m.ERROR, error="Error: boom")),
            _assistant("a2", _bash(later, output="ok"))]))
        assert (s["blocked"] == []) == same, (failed, later, s["blocked"])


def test_a_report_in_the_next_head_does_the_carried_asks_its_turn_s_request_states():
    first = [_user("u1", "Switch to postgres instead of sqlite and add a health check in app/health.py."),
             _assistant("a1", _tool("c1", "read", {"file_path": "app/health.py"}, "x"))]
    s = template.parse(offline.summarize(first))
    assert any("postgres" in x for x in s["next_steps"]) and not any("postgres" in x for x in s["in_progress"]), s
    s = _rolled(first, [_assistant("a2", _edit("c2", "app/health.py", "x", "y")),
                        _assistant("a3", "Done: the app now runs on postgres."),
                        _user("u2", "Now the docs.")])
    assert not any("postgres" in x for x in s["next_steps"] + s["in_progress"]), s


def test_a_report_ties_no_ask_by_the_directories_of_its_paths():
    s = template.parse(offline.summarize([
        _user("u1", "Two more things: add a timeout to `fetch_rates` in src/billing/rates.py, and then "
                    "add pagination to `list_orders` in src/billing/orders.py."),
        _assistant("a1", _tool("c1", "write", {"filePath": "src/common/helpers_rates.py", "content": "..."}, "ok"),
                   "Finished: `fetch_rates` now goes through src/common/helpers_rates.py."),
        _user("u2", "Now the docs.")]))
    assert any("list_orders" in x for x in s["next_steps"] + s["in_progress"]), s  # "src" ties nothing


def test_a_bug_s_wrong_value_instead_of_the_right_one_is_no_decision():
    """ "returns 21.63 instead of 21.64" describes the bug: it is the goal, never a Key Decision,
    and it reverses nothing the session decided about the same function."""
    decided = "I'll use Decimal in compute_total because float rounds 19.99 * 1.0825 down."
    first = [_user("u1", "Fix src/billing/totals.py: compute_total() returns 21.63 instead of 21.64 for a 19.99 item."),
             _assistant("a1", decided),
             _user("u2", "The export still prints 3.3000000000000003 instead of 3.30 in compute_total's report.")]
    for s in (template.parse(offline.summarize(first)), _rolled(first[:2], first[2:])):
        assert s["decisions"] == [decided], s["decisions"]
        assert not any("Superseded" in x for x in s["done"])
    # a value a few words from its verb: a choice said after a comma, or after a report, still reverses
    from contextsvc.compact.summarizers import supersede
    assert supersede.is_reversal("Since the test still gives errors, switch to Redis instead of SQLite.")
    assert supersede.is_reversal("The benchmark showed we should use Redis instead of SQLite.")
    reversal = "Change of plan: use float with round() in compute_total instead of Decimal."
    s = template.parse(offline.summarize(first + [_user("u3", reversal)]))
    assert decided not in s["decisions"] and any(x.startswith("Superseded: " + decided) for x in s["done"])


def test_a_decision_said_again_replaces_its_earlier_wording_without_superseding_it():
    """The person switches the cache to Redis, the assistant says so again in its own words: one
    decision stands, the newest wording, and Done records one change of plan (SQLite's), not the
    Redis decision superseded by itself."""
    sqlite = "Decision: store the rate cache in SQLite, because it needs no server."
    redis = "Change of plan: use Redis instead of SQLite for the rate cache."
    again = "Decision reversed: the rate cache now uses Redis instead of SQLite."
    first = [_user("u1", "Add a rate cache to src/rates.py"), _assistant("a1", sqlite), _user("u2", redis),
             _assistant("a2", again)]
    for s in (template.parse(offline.summarize(first)), _rolled(first[:3], first[3:])):
        assert s["decisions"] == [again], s["decisions"]
        superseded = [x for x in s["done"] if x.startswith("Superseded: ")]
        assert len(superseded) == 1 and superseded[0].startswith("Superseded: " + sqlite), superseded
    back = "Actually, switch back to SQLite for the rate cache."
    s = template.parse(offline.summarize(first + [_user("u3", back)]))
    assert again not in s["decisions"] and any(x.startswith("Superseded: " + again) for x in s["done"])


def test_a_pair_of_words_with_a_capital_is_not_a_file():
    """ "float/Decimal" is two words; `deploy/Dockerfile` and `docs/LICENSE` name files."""
    s = template.parse(offline.summarize([
        _user("u1", "Audit src/billing for float/Decimal mixing and check deploy/Dockerfile and docs/LICENSE too.")]))
    files = " ".join(s["files"])
    assert "float/Decimal" not in files
    assert "deploy/Dockerfile" in files and "docs/LICENSE" in files


def test_a_request_a_later_reversal_changes_stays_and_says_so():
    """"Add JWT auth ... and pagination" stayed a live Goal and Next Step after "session cookies
    instead of JWT", next to the Key Decision that dropped JWT: the model was told both. It stays
    (it asks for pagination too), saying what changed it, in the summary and rolled forward."""
    ask = "Add JWT auth to all write endpoints, and pagination to GET /api/v1/tasks with limit/offset"
    reversal = "We decided JWT is overkill: use server-side session cookies instead of JWT for auth."
    first = [_user("u1", ask + "."), _assistant("a1", "Adding JWT auth now.")]
    later = [_user("u2", reversal), _assistant("a2", "Auth now uses session cookies.")]
    note = f"(changed since: {reversal})"
    for s in (template.parse(offline.summarize(first + later)), _rolled(first, later)):
        live = [x for x in s["goal"] + s["next_steps"] if "JWT auth" in x]
        assert live and all(x.startswith(ask) and x.endswith(note) for x in live), s
        assert reversal in s["decisions"]
    # a request the same message makes is not changed by its own reversal
    s = template.parse(offline.summarize([_user("u1", "Change of plan: use cookies instead of JWT and update `src/auth.py`")]))
    assert not any("changed since" in x for x in s["goal"] + s["next_steps"] + s["in_progress"]), s
    # a later reversal of something the request does not name leaves it (and its note) as it is,
    # rolled forward as often as it may be: one note, the latest that names what it drops
    s = _rolled(first + later, [_user("u3", "Release notes for the tasks API v2, please."),
                                _user("u4", "Revert the tasks endpoints to plain JSON instead of msgpack.")])
    live = [x for x in s["goal"] + s["next_steps"] if "JWT auth" in x]
    assert live and all(x.count("changed since") == 1 and x.endswith(note) for x in live), s
    assert not any("changed since" in x for x in s["goal"] + s["next_steps"] if "Release notes" in x), s


@pytest.mark.parametrize("reversal", [
    "Change of plan: run the dev server on port 9090 instead of 8080 from now on.",
    "From now on run the dev server on port 9090, not 8080.",
    "Use port 9090 instead of 8080."])
def test_a_request_whose_number_a_later_reversal_drops_says_so(reversal):
    """"... on port 8080", then "... 9090 instead of 8080": a number is what the reversal drops
    (it named no word the request has, so the request stayed as it was, rolled forward through
    every later summary); a number the reversal drops in another topic changes nothing."""
    ask = "Fix the rate limiter in src/ratelimit/bucket.py and run the dev server on port 8080"
    first = [_user("u1", ask + "."), _assistant("a1", "Reading the code.")]
    later = [_user("u2", reversal), _assistant("a2", "Updating the port.")]
    for s in (template.parse(offline.summarize(first + later)), _rolled(first, later)):
        live = [x for x in s["goal"] + s["next_steps"] if "port 8080" in x]
        assert live and all(x.endswith(f"(changed since: {reversal})") for x in live), s
    other = "Keep 3 retries in src/client.py and run the dev server on port 8080"
    for unrelated in ("Set the cache TTL to 60 instead of 3 seconds.", "Set the cache TTL to 600 instead of 8080 seconds.",
                      "Use 9090 instead of 8080.", "Use 4 spaces instead of 3 in the test fixtures."):
        s = template.parse(offline.summarize([_user("u1", other + "."), _assistant("a1", "Reading."),
                                              _user("u2", unrelated)]))
        assert not any("changed since" in x for x in s["goal"] + s["next_steps"]), s
    s = template.parse(offline.summarize([_user("u1", other + "."), _assistant("a1", "Reading."),
                                          _user("u2", "Keep 5 retries instead of 3 in src/client.py.")]))
    live = [x for x in s["goal"] + s["next_steps"] if "3 retries" in x]
    assert live and all(x.endswith("(changed since: Keep 5 retries instead of 3 in src/client.py.)") for x in live), s


def test_two_verbs_of_one_object_are_one_step_and_a_reversal_s_own_message_stands_whole():
    """"Please find and fix the bug" made two Next Steps, "find" (a verb alone: nothing to tick
    off) and "fix the bug", both kept after "Fixed: the bug was in src/lexer.ts"; and the second
    sentence of a message correcting an earlier decision superseded the first ("Superseded:
    Correction: the bug is in lexer.ts instead ... (now: Change of plan: ... fix lexer.ts
    instead.)"): one message's sentences are one change of plan. An earlier decision it reverses
    is still superseded."""
    parser = "Decision: the bug is in parser.ts: parseBlock() dereferences token.kind without an EOF check."
    lexer = "Correction: the bug is in lexer.ts instead: nextToken() returns undefined at end of input."
    plan = "Change of plan: revert the parser.ts guard and fix lexer.ts instead."
    messages = [_user("u1", "The CLI crashes on menu.tpl. Please find and fix the bug."), _assistant("a1", parser),
                _user("u2", "Still crashes."), _assistant("a2", lexer + " " + plan), _user("u3", "ok"),
                _assistant("a3", "Fixed: the bug was in src/lexer.ts. Tests pass."),
                _user("u4", "Now update the changelog.")]
    assert offline.asks_in("The CLI crashes. Please find and fix the bug.") == ["find and fix the bug"]
    # verbs with nothing after them are an ask still; joined verbs of a pronoun are none
    assert offline.asks_in("Commit and push.") == ["Commit and push"]
    assert offline.asks_in("Fix the parser, then release.") == ["Fix the parser", "release"]
    assert offline.asks_in("Review; merge the PR.") == ["Review", "merge the PR"]
    assert offline.asks_in("Please find and fix it.") == [] == offline.asks_in("Check and fix that too.")
    s = template.parse(offline.summarize(messages))
    steps = s["next_steps"] + s["in_progress"]
    assert not any(x in ("find", "fix the bug") or x.endswith("find and fix the bug") for x in steps), s
    assert lexer in s["decisions"] and plan in s["decisions"], s["decisions"]
    superseded = [x for x in s["done"] if x.startswith("Superseded: ")]
    assert [x.startswith("Superseded: " + parser[:40]) for x in superseded] == [True], superseded
    # the turn's own report says it done; a report of something else, or of it not done, does not
    for ask, report, done in (
            ("find and fix the bug", "Fixed the bug: the tokenizer skipped EOF.", True),
            ("find and fix the bug", "The bugs are fixed now.", True),
            ("find and fix the bug", "Fixed the typo in the README.", False),
            ("find and fix the bug", "Found the bug in the tokenizer.", False),
            ("find and fix the bug", "I fixed the lint warnings, but the bug remains.", False),
            ("find and fix the bug", "Not fixed: the bug reproduces with the second coupon.", False),
            ("find and fix the bug", "Once the bug is fixed, the nightly job goes green again.", False),
            ("find and fix the bug", "Added a guard to the tokenizer, which fixed the bug.", True),
            ("find and fix the bug", "When I added the EOF check, that fixed the bug.", True),
            ("find and fix the bug", "Not sure why it helped, but I fixed the bug.", True),
            ("run the tests", "Renamed the fixtures so we can run the tests.", False),
            ("run the tests", "Renamed the fixtures; now I run the tests with pytest.", False),
            ("fix the crash in src/parser.py", "I ran into an error in src/parser.py.", False)):
        s = template.parse(offline.summarize([_user("u1", f"Please {ask}."), _assistant("a1", report)]))
        assert any(ask in x for x in s["next_steps"] + s["in_progress"]) != done, (report, s)
    # one message's reversals stand together, unless the later drops what the earlier chose
    s = template.parse(offline.summarize([_user("u1", "Use Redis for the cache."), _assistant("a1", "Using Redis."),
                                          _user("u2", "Switch to Memcached instead of Redis. Actually no, use Redis "
                                                      "instead of Memcached, but with a 120s TTL.")]))
    assert not any(x.startswith("Switch to Memcached") for x in s["decisions"]), s["decisions"]
    s = template.parse(offline.summarize([_user("u1", "Use Postgres instead of MySQL from now on. Drop the Postgres "
                                                      "extensions we do not need, use plain Postgres instead.")]))
    assert any(x.startswith("Use Postgres instead of MySQL") for x in s["decisions"]), s["decisions"]


def test_a_decision_said_again_in_other_words_is_not_superseded_by_itself():
    """"Actually use Postgres, not SQLite." then "Switching to Postgres.": the same choice (its
    "not" drops SQLite, not Postgres), so Done did not record it as superseded by its restatement."""
    s = template.parse(offline.summarize([
        _user("u1", "Store tasks in SQLite."), _assistant("a1", "I'll use SQLite through SQLAlchemy."),
        _user("u2", "Actually use Postgres, not SQLite."), _assistant("a2", "Switching to Postgres.")]))
    assert not any(x.startswith("Superseded: Actually use Postgres") for x in s["done"]), s["done"]
    assert any("SQLite through SQLAlchemy" in x and x.startswith("Superseded:") for x in s["done"]), s["done"]
    assert any("Postgres" in x for x in s["decisions"])


def test_the_person_s_choice_is_a_key_decision_a_later_reversal_supersedes():
    """"Use SQLite for storage (file ...)" in the person's first message was no decision (only the
    message's first sentence made the goal): the first summary named no database. It is a Key
    Decision until "use Postgres instead of SQLite" supersedes it; a question naming a tool
    ("Can you use grep ...?") chooses nothing."""
    first = [_user("u1", "We are building the checkout service. Use SQLite for storage (file /var/data/shop.db). "
                         "Keep all timestamps in UTC. Can you use grep to find the callers?"),
             _assistant("a1", "Reading the service.")]
    s = template.parse(offline.summarize(first))
    assert s["decisions"] == ["Use SQLite for storage (file /var/data/shop.db)."]
    assert s["constraints"] == ["Keep all timestamps in UTC."]
    later = [_user("u2", "Change of plan: use Postgres instead of SQLite."), _assistant("a2", "Switching.")]
    rolled = _rolled(first, later)
    assert rolled["decisions"] == ["Change of plan: use Postgres instead of SQLite."]
    assert any(x.startswith("Superseded: Use SQLite for storage") for x in rolled["done"]), rolled["done"]


def test_a_file_only_a_superseded_decision_named_leaves_relevant_files():
    """"Use SQLite for storage (file /var/data/shop.db)", then "use Postgres instead": the
    database file stayed in Relevant Files as current after the choice was superseded. It goes,
    within one compaction and from a rolling summary alike; a file the agent read, or the person
    names again, stays."""
    choice = _user("u1", "We are building the checkout service. Use SQLite for storage (file /var/data/shop.db). "
                         "Keep the schema in db/schema.sql.")
    reversal = _user("u2", "Change of plan: use Postgres instead of SQLite.")
    first = [choice, _assistant("a1", "Reading the service.")]
    later = [reversal, _assistant("a2", "Switching.")]

    def files_of(s):
        return [x.split("`")[1] for x in s["files"]]

    assert "/var/data/shop.db" in files_of(template.parse(offline.summarize(first)))
    for s in (template.parse(offline.summarize(first + later)), _rolled(first, later)):
        assert "/var/data/shop.db" not in files_of(s), s["files"]
        assert "db/schema.sql" in files_of(s)
        assert any(x.startswith("Superseded: Use SQLite for storage") for x in s["done"]), s["done"]
    read = _assistant("a3", m.Tool("r1", "read", m.COMPLETED, {"path": "/var/data/shop.db"}, output="SQLite format 3"))
    again = _user("u3", "Copy the rows of /var/data/shop.db into Postgres first.")
    assert "/var/data/shop.db" in files_of(template.parse(offline.summarize(first + [read] + later)))
    assert "/var/data/shop.db" in files_of(template.parse(offline.summarize(first + later + [again])))
    assert "/var/data/shop.db" in files_of(_rolled(first + [read], later))
    # a path it ends with may be another file (a test fixture here)
    fixture = _user("u4", "Regenerate data/shop.db for the tests from the dump.")
    assert "data/shop.db" in files_of(template.parse(offline.summarize(first + later + [fixture])))
    # the previous summary names it elsewhere (a constraint of an earlier head): it stays
    kept = [_user("u1", "Use SQLite for storage (file /var/data/shop.db). The rows of /var/data/shop.db must "
                        "be migrated before the switch."), _assistant("a1", "Noted.")]
    assert "/var/data/shop.db" in files_of(_rolled(kept, later))


def test_where_a_value_comes_from_is_a_key_decision():
    """"Read the connection string from DATABASE_URL" was in no section (no ask verb, no choosing
    verb): where the code takes a value from (an environment variable, the environment, a config
    file) is a Key Decision; asking to read a file, or logs from a time, is none."""
    said = ("Set up the payment client. Read the connection string from DATABASE_URL. Please load the API keys "
            "from the environment. Read src/app.py first. Get the logs from yesterday. Read the API key from .env. "
            "Read the failing test names from results.json and fix them. Get the version from package.json. "
            "Pull the latest changes from the settings branch first. Source the virtualenv from env/bin/activate.")
    s = template.parse(offline.summarize([_user("u1", said), _assistant("a1", "On it.")]))
    assert s["decisions"] == ["Read the connection string from DATABASE_URL.",
                              "Please load the API keys from the environment.",
                              "Read the API key from .env."], s["decisions"]


def test_ordinary_text_tells_no_choice_and_names_no_issue():
    """A user sentence tells a choice when it starts with the choosing verb (after "please",
    "let's", ...): bug reports and pasted logs that mention a use are no Key Decision. A colour
    ("#333333") or a step number is no issue; a URL keeps its query string and masks a password."""
    said = ("It crashes when I use Safari. The old code used jQuery for this. I wonder if we should use Redis. "
            "2024-05-01 INFO Using config /etc/app.yaml. Let's go with Postgres for the store. "
            "Make the header #333333 as in step #10. Fixes issue #4711, see https://api.example.com/v1/search?q=foo&limit=10 "
            "and postgresql://admin:s3cret@db.internal:5432/shop.")
    s = template.parse(offline.summarize([_user("u1", said), _assistant("a1", "On it.")]))
    assert s["decisions"] == ["Let's go with Postgres for the store."], s["decisions"]
    critical = " ".join(s["critical"])
    assert "`#4711`" in critical and "#333333" not in critical and "#10" not in critical
    assert "`https://api.example.com/v1/search?q=foo&limit=10`" in critical
    assert "`postgresql://admin:***@db.internal:5432/shop`" in critical and "s3cret" not in critical


def test_an_issue_named_with_its_repository_keeps_the_repository():
    """"acme/shop#7" and "acme/billing#7" are two issues: each is kept with its repository (both
    were kept as one ambiguous "#7"); an issue named as one ("fixes #12") keeps its number."""
    said = "The checkout bug is acme/shop#7, not acme/billing#7; the fix also closes #12."
    s = template.parse(offline.summarize([_user("u1", said), _assistant("a1", "On it.")]))
    critical = " ".join(s["critical"])
    assert "`acme/shop#7`" in critical and "`acme/billing#7`" in critical and "`#12`" in critical
    assert "`#7`" not in critical


def test_a_connection_string_and_an_issue_number_outlive_many_compactions():
    """A URL is kept whole (its host alone was: `db.internal`), and an issue number ("#4711") is an
    identifier: through five rolling compactions whose Done list, twelve items long, dropped the
    step that created the issue after the second."""
    summary = ""
    batch = [_user("u1", "File an issue for the checkout DB lock. The database is "
                         "postgresql://shop@db.internal:5432/shop from now on."),
             _assistant("a1", m.Tool("c1", "mcp__github__create_issue", m.COMPLETED, {"title": "DB lock"},
                                     output='{"number": 4711}'), "Created issue #4711 for the database lock.")]
    for c in range(5):
        for i in range(12):
            n = 100 * c + i
            batch.append(_assistant(f"a{n}x", m.Tool(f"r{n}", "read", m.COMPLETED, {"path": f"app/h{n}.py"},
                                                     output="def h(): pass")))
        summary = offline.summarize(batch, summary)
        batch = [_user(f"u{c}z", f"Read the next batch ({c}).")]
        s = template.parse(summary)
        assert any("#4711" in x for x in s["critical"]), (c, s["critical"])
        assert any("`postgresql://shop@db.internal:5432/shop`" in x for x in s["critical"]), (c, s["critical"])
    assert not any("Created issue #4711" in x for x in s["done"])  # the Done list let it go


def test_retention_counts_what_the_previous_summary_carried():
    """Counted over the head alone, a rolling summary that let an item of the previous summary
    go reported it kept everything: five compactions dropping the step that created an issue and
    forty read files each said 12/12. The previous summary's code spans are counted apart (its
    bounds let the oldest go by design: one ratio would mix that with loss)."""
    first = [_user("u1", "Triage the lock."),
             _assistant("a1", m.Tool("c1", "mcp__github__create_issue", m.COMPLETED, {"title": "DB lock"},
                                     output='{"number": 4711}'))]
    previous = offline.summarize(first)
    assert "`mcp__github__create_issue`" in previous
    head = [_assistant(f"a{n}", m.Tool(f"d{n}", "deploy_service", m.COMPLETED, {"service": f"svc{n}"}, output="ok"))
            for n in range(2, 16)]
    summary = offline.summarize(head, previous)
    assert "mcp__github__create_issue" not in summary  # the Done list let it go
    r = retention.report(head, previous, summary)
    assert r.missing == () and r.ratio == 1.0  # the head's items: all kept
    assert "mcp__github__create_issue" in r.carried_missing and r.carried_kept < r.carried


def test_a_request_the_person_defers_is_a_next_step_until_done():
    """"We still need to add rate limiting later" asked for nothing the rules read as a request (a
    lead "we need to" was known, "we still need to" not): it was in no section, and the next model
    never added the rate limiting. It is a Next Step, through a rolling compaction, until done."""
    first = [_user("u1", "Add pagination to the /tasks endpoint. We still need to add rate limiting later. "
                         "Don't forget to bump the version."),
             _assistant("a1", "Adding pagination now.")]
    s = template.parse(offline.summarize(first))
    assert "add rate limiting later" in s["next_steps"] and "bump the version" in s["next_steps"], s["next_steps"]
    rolled = _rolled(first, [_assistant("a2", "Added pagination to the /tasks endpoint.")])
    assert "add rate limiting later" in rolled["next_steps"], rolled["next_steps"]
    done = _rolled(first, [_assistant("a2", "Added rate limiting to the /tasks endpoint.")])
    assert "add rate limiting later" not in done["next_steps"], done["next_steps"]


def test_a_clean_test_run_does_the_ask_to_check_the_tests():
    """"Check that the tests pass" named no program, so a clean `pytest -q` (or `npm test`) never
    did it: it stayed a Next Step after the tests passed. A run of a test suite that says it
    passed, and nothing that failed, does an ask to run or check the tests; a failing one (its
    summary line alone too), one test by its id, or an ask to write tests, stays."""
    ask = _user("u1", "Fix the date parser in src/dates.py and check that the tests pass. Add tests for leap years.")
    for run, output, done in (("pytest -q", "12 passed in 0.3s", True), ("npm test", "Tests: 40 passed", True),
                              ("pytest -q", "FAILED tests/test_dates.py::test_leap - assert 28 == 29", False),
                              ("pytest -q --tb=no", "1 failed, 11 passed in 0.4s", False),
                              ("go test ./...", "--- FAIL: TestLeap (0.00s)\nFAIL\tdates\t0.1s", False),
                              ("pytest tests/test_dates.py::test_leap", "1 passed in 0.1s", False),
                              ("git test", "ok", False)):
        s = template.parse(offline.summarize([ask, _assistant("a1", _bash(run, output=output))]))
        assert ("check that the tests pass" not in s["next_steps"]) == done, (run, output, s["next_steps"])
        assert "Add tests for leap years" in s["next_steps"], s["next_steps"]


def test_an_edit_the_assistant_reports_undone_is_no_decision_but_the_person_undoing_one_reverses_it():
    ask = "Use a guard in src/parser.ts to stop at EOF, and fix the lexer bug."
    for report in ("Fixed: the bug was in src/lexer.ts; the parser.ts guard is reverted.",
                   "Fixed the lexer bug and reverted the parser.ts guard.",
                   "Fixed the lexer bug. I am reverting the parser.ts guard."):
        s = template.parse(offline.summarize([_user("u1", ask), _assistant("a1", report)]))
        # a report of what was undone states no choice and supersedes nothing
        assert not s["decisions"], (report, s["decisions"])
    # what reverts to something, or asks to revert, still changes the plan; and the person
    # undoing what carried out a decision undoes the decision
    first = [_user("u1", "Add a job queue to `jobs/queue.py`."), _assistant("a1", "I'll use Redis for the job queue.")]
    for reversal in ("Revert the job queue to SQLite.", "I reverted the Redis job queue, it broke staging.",
                     "The Redis job queue is reverted; it broke staging."):
        s = _rolled(first, [_user("u2", reversal)])
        assert "I'll use Redis for the job queue." not in s["decisions"], (reversal, s["decisions"])
    s = _rolled(first, [_assistant("a2", "Reverted to the old queue in jobs/queue.py: Redis is no longer used.")])
    assert "I'll use Redis for the job queue." not in s["decisions"], s["decisions"]


def _call(name, inp, out):
    return m.Tool(f"call-{name}-{len(out)}", name, m.COMPLETED, inp, output=out)


def test_a_reversal_supersedes_what_names_the_thing_it_drops_and_a_restatement_nothing():
    """"Use Memcached instead of Redis for the lock. Keep the key format `invoice:lock:{id}`.": the
    assistant's "Switched the lock from Redis to Memcached; Redis is no longer used" shared the
    word "lock" with the constraint and superseded it, though it drops Redis alone; and it
    superseded the person's choice of Memcached that it carries out."""
    first = [_user("u1", "Add a per-tenant lock to `src/billing/locks.py`."),
             _assistant("a1", "I'll use Redis for the per-tenant lock because the workers share it.")]
    later = [_user("u2", "Actually use Memcached instead of Redis for the lock. Keep the key format "
                         "`invoice:lock:{tenant_id}`."),
             _assistant("a2", "Switched the lock from Redis to Memcached (`pymemcache`, `add` with expire=30); "
                              "Redis is no longer used.")]
    s = _rolled(first, later)
    assert s["constraints"] == ["Keep the key format `invoice:lock:{tenant_id}`."], s["constraints"]
    assert not any("Redis for the per-tenant lock" in x for x in s["decisions"]), s["decisions"]
    assert any("Superseded: I'll use Redis" in x for x in s["done"]), s["done"]
    # the person's choice, carried out, is said again: no "Superseded" line for it
    assert not any("Superseded: Actually use Memcached" in x for x in s["done"]), s["done"]
    for reversal, drops in (("Replace Redis with Memcached for the lock.", {"redis"}),
                            ("We moved the queue from SQLite to Postgres.", {"sqlite"}),
                            ("Redis is no longer used.", {"redis"}),
                            ("Use Memcached instead of Redis.", {"redis"})):
        assert supersede.dropped(reversal) == drops, reversal
    assert supersede.dropped("Migrating the lock from Redis to Memcached.") == {"redis"}
    assert supersede.chosen("Switched the lock from Redis to Memcached.") == {"memcached"}
    # a reversal dropping a number, or another thing beside its new choice, still reverses
    queue = [_user("u1", "Add a job queue to `jobs/queue.py`."),
             _assistant("a1", "I'll use SQLite for the job queue because it needs no server.")]
    for reversal in ("Change of plan: use Postgres for the job queue and remove the cron script.",
                     "Hmm... Actually, use Postgres for the job queue."):
        s = _rolled(queue, [_user("u2", reversal)])
        assert "I'll use SQLite for the job queue because it needs no server." not in s["decisions"], reversal
    s = _rolled([_user("u1", "Set the invoice lock timeout to 30s.")],
                [_user("u2", "Change of plan: change the invoice lock timeout from 30s to 60s.")])
    assert not any("to 30s." in x for x in s["constraints"] + s["decisions"]), s
    assert supersede.chosen("Replace Redis with Memcached.") == {"memcached"}


def test_an_ellipsis_ends_no_sentence_and_a_check_tool_s_failure_and_a_quoted_command_are_kept():
    s = template.parse(offline.summarize([
        _user("u1", "Fix the invoice race. Reproduce with `pytest tests/test_invoice_concurrency.py -x -q`."),
        _assistant("a1", "Running the repro.", _call(
            "mcp__ci__run_tests", {"args": ["-x"]},
            "E   psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "
            "\"invoice_number_key\"\n1 failed in 2.1s")),
        _assistant("a2", "Root cause: the SELECT ... FOR UPDATE is skipped when the row is missing.")]))
    assert "Root cause: the SELECT ... FOR UPDATE is skipped when the row is missing." in s["decisions"], s
    assert "Command: `pytest tests/test_invoice_concurrency.py -x -q`" in s["critical"], s["critical"]
    error = ("E   psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "
             "\"invoice_number_key\"")
    assert error in s["critical"] and any("run_tests` failed" in x for x in s["blocked"]), s
    # another tool's output is content, not its outcome, whatever its name holds ("latest",
    # "checkpoint"); a quoted name, an expression or a command the person forbids is no command
    for tool in ("fetch_notes", "mcp__sentry__latest_issues", "mcp__memory__save_checkpoint"):
        s = template.parse(offline.summarize([
            _user("u1", "Read the notes about `ConfigLoader`; set `retries = -1` and `count -= 1`. "
                        "Never run `git push --force` on main."),
            _assistant("a1", "Reading.", _call(tool, {"id": 3}, "Error: the port was 0 in March.\nfixed"))]))
        assert not s["blocked"] and not any("Command" in x or "Error: the port" in x for x in s["critical"]), s


def test_a_request_that_tells_no_ask_is_worked_on_rather_than_an_earlier_one():
    """After "Next: harden src/billing/refunds.py the same way", a read of that file is work on
    it: In Progress kept "Working on" the task before it, which the steps no longer named."""
    first = [_user("u1", "Task A: fix the dashboard duplicates in `grafana/billing.json`."),
             _assistant("a1", "Reading the panel.", _call("read_file", {"path": "grafana/billing.json"}, "{}"))]
    later = [_assistant("a2", "Task A finished: the panel query dedups by invoice number."),
             _user("u2", "Next: harden `src/billing/refunds.py` the same way. Keep the Python 3.9 constraint."),
             _assistant("a3", "Reading.", _call("read_file", {"path": "src/billing/refunds.py"}, "def refund(): ..."))]
    s = _rolled(first, later)
    assert not any("dashboard duplicates" in x for x in s["in_progress"]), s["in_progress"]
    assert any("refunds.py" in x for x in s["in_progress"]), s["in_progress"]
    # a question names nothing it asks for: the ask the steps were about is still worked on
    s = _rolled([_user("u1", "Fix the EOF handling in `src/lexer.ts`."),
                 _assistant("a1", "Reading.", _call("read_file", {"path": "src/lexer.ts"}, "let eof;"))],
                [_user("u2", "Any progress? The demo is at 3pm."),
                 _assistant("a2", "Running.", _call("read_file", {"path": "src/util.ts"}, "export {}"))])
    assert any("EOF handling" in x for x in s["in_progress"]), s["in_progress"]


def test_a_constraint_naming_a_url_is_not_superseded_by_a_choice_dropping_the_url_s_scheme():
    """"Never run migrations against prod: always use DATABASE_URL=postgres://localhost/billing_test"
    was marked superseded by "keep idempotency keys in Redis ... instead of Postgres" (its URL's
    scheme read as the Postgres the decision drops), and the rolling summary carried the safety
    constraint away. A URL is one name; a decision dropping Postgres where a constraint chose
    it still supersedes it."""
    guard = "Never run migrations against prod: always use DATABASE_URL=postgres://localhost/billing_test"
    first = [_user("u1", f"Migrate the billing client in src/billing/stripe_client.py to Stripe API v3. {guard}"),
             _assistant("a1", _bash("pytest tests/billing -q", output="12 passed"))]
    later = [_user("u2", "Keep the idempotency keys in Redis under billing:idem:{order_id} instead of Postgres."),
             _assistant("a2", _bash("pytest tests/billing -q", output="13 passed"))]
    s = _rolled(first, later)
    assert any(guard in x for x in s["constraints"]), s["constraints"]
    assert not any(x.startswith("Superseded: Never run migrations") for x in s["done"]), s["done"]
    assert "postgres://localhost/billing_test" in supersede.topic(guard)
    # what the constraint chose, the decision drops: superseded as before
    chose = "Always store the idempotency keys in Postgres."
    assert supersede.replaces("Keep the idempotency keys in Redis instead of Postgres.", chose)


def test_a_request_opening_with_a_preamble_has_its_ask_as_the_goal():
    """"Leave that failure for now. Next, add exponential backoff ..." put the preamble in Goal and
    the ask nowhere there. The goal is the first sentence holding an ask; a headline over a list of
    asks stays the goal."""
    ask = "Next, add exponential backoff to the webhook retries in src/billing/webhooks.py (max 5 attempts)."
    msgs = [_user("u1", "Add a retry budget to src/billing/webhooks.py"), _assistant("a1", _bash("pytest -q")),
            _user("u2", f"Leave that failure for now. {ask}"), _assistant("a2", _bash("pytest -q"))]
    goals = template.parse(offline.summarize(msgs))["goal"]
    assert goals == ["Add a retry budget to src/billing/webhooks.py", ask], goals
    listed = [_user("u1", "Tidy the billing module:\n- rename charge() to capture()\n- drop the v1 client")]
    assert template.parse(offline.summarize(listed))["goal"] == ["Tidy the billing module:"]


@pytest.mark.parametrize("text, asks", [
    ("After that's done, tag v1.2.", ["tag v1.2"]),
    ("Post-processing is slow on big files.", []),
    ("Once that's done, tag the release v2.0.", ["tag the release v2.0"]),
])
def test_a_lead_before_a_deferred_step_and_a_verb_that_starts_a_word(text, asks):
    assert offline.asks_in(text) == asks


@pytest.mark.parametrize("request_, last_step, report", [
    ("Fix the flaky test tests/test_payment.py::test_refund_rounding: EUR refunds are off by one cent. "
     "Do not change the public API of payments/refund.py. Open a GitHub issue describing the root cause when done.",
     "Open a GitHub issue describing the root cause when done", "Done: issue #57 opened."),
    ("Add a --dry-run flag to scripts/deploy.sh. Then update docs/deploy.md. Finally, ping #ops in Slack with "
     "the PR link.", "ping #ops in Slack with the PR link", "Done: pinged #ops in Slack."),
    ("Bump lodash to 4.17.21 in package.json. When you are finished, open a PR against the release-2.3 branch.",
     "open a PR against the release-2.3 branch", "Done: the PR is opened."),
])
def test_the_last_steps_of_a_task_said_at_its_start_are_kept_until_done(request_, last_step, report):
    """Deferred steps ("... when done", "Finally, ping #ops", "When you are finished, open a PR")
    were in no section of the summary: once the request was summarized, the model never took them."""
    turns = [_user("u1", request_), _assistant("a1", _bash("git status", output="clean"))]
    s = template.parse(offline.summarize(turns))
    assert last_step in s["next_steps"] + s["in_progress"], s
    # the turn's own report of it done ticks it off
    s = template.parse(offline.summarize(turns + [_assistant("a2", report)]))
    assert last_step not in s["next_steps"] + s["in_progress"], s


def test_a_pasted_log_keeps_the_lines_naming_what_its_question_asks_about():
    """3,000 log lines under "why does job 42 keep retrying?" kept none of them."""
    log = [f"2026-12-07T10:{i % 60:02d}:00Z worker-{i % 9} WARN retrying job {i * 13 % 997}" for i in range(3000)]
    turns = [_user("u1", "Here it is, why does job 42 keep retrying?\n" + "\n".join(log))]
    critical = template.parse(offline.summarize(turns))["critical"]
    kept = [c for c in critical if c.startswith("Pasted: ")]
    assert len(kept) == 3 and all(c.endswith("retrying job 42") for c in kept), critical
    # a message of a few lines is no paste; nothing is quoted from it
    short = [_user("u1", "Why does job 42 keep retrying?\n" + "\n".join(log[:5]))]
    assert not [c for c in template.parse(offline.summarize(short))["critical"] if c.startswith("Pasted: ")]


def test_a_short_first_request_is_the_goal_and_a_question_is_no_constraint():
    """"Hi, help me debug the worker.", then a pasted log asking "why does job 42 keep
    retrying?": the goal was the question alone, listed under Constraints too ("keep")."""
    log = "\n".join(f"2026-12-07T10:{i % 60:02d}:00Z worker-{i % 9} WARN retrying job {i * 13 % 997}"
                    for i in range(300))
    turns = [_user("u1", "Hi, help me debug the worker."), _assistant("a1", "Sure, paste the log."),
             _user("u2", "Here it is, why does job 42 keep retrying?\n" + log)]
    s = template.parse(offline.summarize(turns))
    assert s["goal"][0] == "Hi, help me debug the worker." and "why does job 42 keep retrying?" in s["goal"][1]
    assert s["constraints"] == []
    # an aside after a goal is an ask, not a goal, as before
    s = template.parse(offline.summarize([_user("u1", "Build the task API in `app/api.py`."),
                                          _user("u2", "fix the lint too")]))
    assert s["goal"] == ["Build the task API in `app/api.py`."]


def test_a_file_whose_only_edit_failed_is_not_listed_edited():
    out = "\n".join(f"line {i}: ok" for i in range(50))
    failed = m.Tool("c2", "edit_file", m.ERROR, {"path": "payments/vat.py", "old_string": "float(rate)",
                                                   "new_string": "Decimal(rate)"},
                    error="Error: payments/vat.py is read-only")
    turns = [_user("u1", "Use Decimal in payments/vat.py."),
             _assistant("a1", m.Tool("c1", "read_file", m.COMPLETED, {"path": "payments/vat.py"}, output=out)),
             _assistant("a2", failed)]
    files = template.parse(offline.summarize(turns))["files"]
    assert files == ["`payments/vat.py`: read, edit failed, mentioned"], files
    # once an edit of it succeeds, it is edited
    done = dataclasses.replace(failed, call_id="c3", status=m.COMPLETED, error="", output="ok")
    files = template.parse(offline.summarize(turns + [_assistant("a3", done)]))["files"]
    assert files == ["`payments/vat.py`: read, edit failed, edited, mentioned"], files
