"""The memo shared by concurrent steps (memo.Memo): lookups take no lock, changes that span
several calls do. Many threads looking up, keeping, evicting and starting steps at once leave
it whole: every lookup counted once, the bytes it holds charged exactly, its order intact."""
from __future__ import annotations

import random
import threading
from collections import OrderedDict

import pytest

from contextsvc import config, memo
from contextsvc.conversation import NOTHING_SCANNED
from contextsvc.rpc import earlier_step, servicer
from contextsvc.v1 import context_pb2 as pb
from helpers import corpus
from helpers.threads import at_once

THREADS = 8
ROUNDS = 400


def _charged(mm: memo.Memo) -> int:
    return sum(size for key, (_, size) in list(mm._items.items()) if type(key) is tuple)


@pytest.mark.parametrize("hold", [0.0, 60.0])
def test_concurrent_steps_leave_the_memo_whole(hold):
    """Eight threads, each a stream of steps over shared and own keys under a small bound (that
    evicts at every step, other steps' fences too; with a hold, that refuses new entries once
    full), with the interpreter switching threads every microsecond: no error, the hits and
    misses add up to the lookups made, the charged bytes to the entries kept."""
    mm = memo.Memo(6_000, hold_seconds=hold)
    lookups = [0] * THREADS

    def steps(n: int):
        rng = random.Random(n)
        for r in range(ROUNDS):
            mm.begin_step()
            keys = [("shared", rng.randrange(30)) for _ in range(5)] + [("own", n, r % 20)]
            for key, value in zip(keys, mm.get_many(keys)):
                if value is None:
                    mm.put(key, f"{key}" * 3)
            lookups[n] += len(keys)
            mm.get(("shared", rng.randrange(30)))
            lookups[n] += 1
            mm.touch([("shared", rng.randrange(30)), None])  # touched: hits, never misses
            mm.supersede(("chain", n, r - 1), ("chain", n, r), "x" * 50, 50)
            mm.keys()

    errors = at_once(steps, THREADS)
    assert not errors
    touched = mm.hits + mm.misses - sum(lookups)
    assert 0 <= touched <= THREADS * ROUNDS  # each touch of a kept key is one hit, no more
    assert mm.size_bytes == _charged(mm) <= 6_000
    kinds = [type(k) for k in list(mm._items)]
    assert kinds.count(memo._Fence) == mm._fences and kinds.count(memo._Mark) == len(mm._marks)
    assert len(mm) == sum(k is tuple for k in kinds)


def test_every_lookup_is_counted_once_across_threads():
    """Each thread counts its own lookups; the memo's hits and misses are their sums, those of
    threads that have ended included."""
    mm = memo.Memo(1_000_000)
    mm.put(("k", 1), "one")

    def looks(times: int):
        for _ in range(times):
            mm.get(("k", 1))  # a hit
            mm.get(("k", 2))  # a miss
        mm.get_many([("k", 1), ("k", 2), None])  # a hit, a miss, nothing

    for round_ in range(3):  # threads that end, then newer ones replacing their tallies
        workers = [threading.Thread(target=looks, args=(50,)) for _ in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert mm.hits == mm.misses == (round_ + 1) * 6 * 51
    assert len(mm._tallies) <= 6 + 1  # the ended threads' tallies folded, not kept


def test_a_step_moves_its_mark_rather_than_making_another():
    """begin_step: the thread's fence goes to the back, one a thread; one another step's put
    evicted is made again."""
    mm = memo.Memo(2_000)
    mm.begin_step()
    fence = mm._step.fence
    mm.put(("a",), "x" * 10)
    mm.begin_step()
    assert mm._step.fence is fence and list(mm._items)[-1] is fence and mm._fences == 1

    def other_step():  # fills the memo: the first thread's fence, now the oldest, is evicted
        mm.begin_step()
        for i in range(40):
            mm.put(("b", i), "y" * 40)

    worker = threading.Thread(target=other_step)
    worker.start()
    worker.join()
    assert fence not in mm._items
    mm.begin_step()
    assert mm._step.fence is not fence and list(mm._items)[-1] is mm._step.fence
    assert [type(k) for k in mm._items].count(memo._Fence) == mm._fences


class _EvictedOnRead(OrderedDict):
    """An order whose entries another step evicts the moment they are read."""

    def get(self, key, default=None):
        value = super().get(key, default)
        self.pop(key, None)
        return value


def test_a_lookup_whose_entry_is_evicted_meanwhile_is_answered():
    """A lookup reads an entry, then marks it used: another step may evict it in between (no lock
    holds it). The lookup answers what it read, counted a hit, and the entry stays evicted."""
    mm = memo.Memo(1_000_000)
    for i in range(3):
        mm.put(("k", i), f"v{i}")
    mm._items = _EvictedOnRead(mm._items)
    assert mm.get(("k", 0)) == "v0"
    assert mm.get_many([("k", 1), None, ("k", 2)]) == ["v1", None, "v2"]
    assert mm.hits == 3 and mm.misses == 0 and list(mm._items) == []


_PLAIN = (str, bytes, int, float, bool, type(None))


def _plain(key) -> bool:
    """Whether hashing and comparing key runs no Python code: tuples and frozensets of str,
    bytes, numbers, None and types (an enum or a dataclass runs its own __hash__ and __eq__)."""
    if type(key) in (tuple, frozenset):
        return all(map(_plain, key))
    return type(key) in _PLAIN or isinstance(key, type)


def test_every_key_a_step_uses_is_plain_data(monkeypatch):
    """The lookups rely on a key's hash and equality running in C: a key that ran Python code
    could be interrupted inside one call on the order, by another thread changing it. Every key
    of every kind a session's steps look up or keep (each RPC, the payload guard, compaction)."""
    import test_step_memo as steps

    seen: list = []
    for name in ("get", "get_many", "touch", "_add"):
        original = getattr(memo.Memo, name)

        def recording(self, first, *rest, _original=original, _name=name, **named):
            seen.extend(first if _name in ("get_many", "touch") else [first])
            return _original(self, first, *rest, **named)
        monkeypatch.setattr(memo.Memo, name, recording)
    steps.test_the_memo_changes_no_answer(0, monkeypatch)
    steps.test_the_payload_guard_answers_the_same_with_the_memo(0)
    svc = servicer.ContextService(config.Config())
    for provider in corpus.PROVIDER_ENUM:  # every wire format, system prompts, tools, media
        for case in corpus.cases(provider, 4):
            r = case.request
            measure = pb.MeasureRequest(conversation=r.conversation, model=r.model, tools=r.tools, system=r.system)
            for call, request in ((svc.Assemble, r), (svc.Measure, measure), (svc.Assemble, r)):
                try:
                    call(request, None)
                except ValueError:
                    assert case.may_refuse
    kinds = {k[0] for k in seen if type(k) is tuple}
    assert {memo.MESSAGE, memo.GUARD, memo.PREFIX, memo.LOWERED, memo.SYSTEM, memo.TOOL_JSON} <= kinds
    bad = {(k[0], type(x).__name__) for k in seen if k is not None and not _plain(k) for x in k if not _plain(x)}
    assert bad == set()


def test_steps_kept_at_once_under_one_key_are_all_kept():
    """Sessions that share their earlier steps' key (one session id and opening message) keep
    their steps at once (rpc.earlier_step.keep): after each round every session's newest step is
    under the key, none dropped by another's keeping it in the same instant."""
    sessions, rounds = 4, 150
    mm = memo.Memo(64 << 20)
    key = (memo.CONVERTED, "shared", b"opening")
    latest: list = [None] * sessions
    between = threading.Barrier(sessions)

    def rounds_of(k: int) -> None:
        for r in range(rounds):
            wire = b"%d:%d|" % (k, r) * 40
            found = earlier_step.Found(1, latest[k], True) if latest[k] is not None else None
            latest[k] = earlier_step.keep(mm, wire, earlier_step.Located(0, len(wire), key), (len(wire),), [], (),
                                          found, False, NOTHING_SCANNED)
            between.wait()  # every session has kept its step of this round
            kept = mm.get_many([key], counted=False)[0]
            dropped = [j for j, mine in enumerate(latest) if not any(step is mine for step in kept)]
            assert not dropped, f"round {r}: the steps of sessions {dropped} were dropped"
            between.wait()  # every session has looked before the next round keeps

    def keep(k: int) -> None:
        try:
            rounds_of(k)
        except BaseException:
            between.abort()  # the other sessions stop waiting for this one
            raise

    errors = at_once(keep, sessions)
    assert not errors, errors[0]
    assert mm.size_bytes == _charged(mm)
