"""History projection (docs/design.md §6): only what follows the last completed compaction point."""
from __future__ import annotations

import bisect
import itertools
import operator

from . import conversation as m
from .deadline import NO_DEADLINE, Deadline
from .positions import positions


def last_index(items: list, pred) -> int:
    """Index of the last item for which pred holds, or -1."""
    return next((i for i in range(len(items) - 1, -1, -1) if pred(items[i])), -1)


def _completes(msg: m.Message) -> bool:
    """Whether msg is a finished summary: it completes the compaction it answers."""
    return msg.role == m.ASSISTANT and msg.summary and msg.finished and msg.error is None


class _Lookups:
    """What the scans over compaction points look up, each read off the messages in one pass when
    first needed: a scan of the history per point made every step quadratic in the points (a
    history of 10,000 compaction markers no summary answers took 3.6 s to measure)."""

    __slots__ = ("messages", "deadline", "_answers", "_index")

    def __init__(self, messages: list, deadline: Deadline):
        self.messages = messages
        self.deadline = deadline
        self._answers = None  # marker id -> the indices of the finished summaries answering it, ascending
        self._index = None  # message id -> the index of the last message of that id

    def summary_for(self, marker_index: int) -> int:
        """Index of the first finished summary after the compaction user message that answers it,
        or -1. An earlier attempt for the same marker may have failed: a later one that finished
        still completes the compaction."""
        msgs = self.messages
        after = marker_index + 1
        if after < len(msgs) and _completes(msgs[after]) and msgs[after].parent_id == msgs[marker_index].id:
            return after  # where a summary almost always is: no pass over the history for it
        if self._answers is None:
            self._answers = {}
            # summaries are few: only they are read in Python
            for n, j in enumerate(itertools.compress(range(len(msgs)), map(_SUMMARY, msgs))):
                self.deadline.tick(n, "projection")
                if _completes(msgs[j]):
                    self._answers.setdefault(msgs[j].parent_id, []).append(j)
        answers = self._answers.get(msgs[marker_index].id, ())
        k = bisect.bisect_right(answers, marker_index)
        return answers[k] if k < len(answers) else -1

    def parent_of(self, i: int) -> int:
        """Index of the last message before i whose id is messages[i].parent_id, or -1."""
        msgs = self.messages
        parent_id = msgs[i].parent_id
        if i and msgs[i - 1].id == parent_id:
            return i - 1  # where the message a summary answers almost always is
        if self._index is None:
            self._index = dict(zip(map(_ID, msgs), range(len(msgs))))
        k = self._index.get(parent_id, -1)
        if k < i:
            return k
        if len(self._index) == len(msgs):  # ids unique: the one message of that id is not before i
            return -1
        # an id used twice, which validation refuses: looked for one by one
        return next((k for k in range(i - 1, -1, -1) if msgs[k].id == parent_id), -1)


_SUMMARY = operator.attrgetter("summary")
_ID = operator.attrgetter("id")


def answered(messages: list, marker_index: int, deadline: Deadline = NO_DEADLINE) -> bool:
    """Whether the compaction marker at marker_index is answered by a finished summary: a
    completed compaction, which a later one builds on (never a retry of it)."""
    return _Lookups(messages, deadline).summary_for(marker_index) >= 0


def finished_pair(projected: list) -> int:
    """How many messages a projection starts with that are a finished compaction pair (the
    marker and its summary): 2, or 0. Hidden when the tail is selected: the summary goes in as
    the previous summary, never as a turn of its own."""
    if len(projected) > 1 and projected[0].compaction() is not None and projected[1].summary:
        return 2
    return 0


def compaction_points(messages: list) -> list:
    """Indices of the messages that may be compaction points (Message.may_cut: a marker, or a
    summary), last first: searched in C, since most histories hold none or few."""
    last = len(messages) - 1
    return [last - k for k in positions(list(map(_MAY_CUT, reversed(messages))), True)]


_MAY_CUT = operator.attrgetter("may_cut")


def _cut(messages: list, points: list | None, deadline: Deadline) -> tuple:
    """The last compaction point that cuts history, as (index of the message what is sent starts
    at, index of its finished summary): a marker a finished summary answers (the marker), or a
    manual summary, one whose parent is a plain user message (that message). (-1, -1) when none
    cuts. deadline: checked every CHECK_EVERY points (a history may be all markers)."""
    lookups = _Lookups(messages, deadline)
    for n, i in enumerate(compaction_points(messages) if points is None else points):
        deadline.tick(n, "projection")
        msg = messages[i]
        if msg.role == m.USER and msg.compaction() is not None:
            s = lookups.summary_for(i)
            if s >= 0:
                return i, s
        if _completes(msg):
            parent = lookups.parent_of(i)
            if parent >= 0 and messages[parent].compaction() is None:
                return parent, i
    return -1, -1


def last_compaction(messages: list, points: list | None = None, deadline: Deadline = NO_DEADLINE) -> int:
    """Stored index of the last completed compaction's summary, or -1: what was stored after it
    is what the conversation has done since (the kept tail is stored before the marker).
    points: compaction_points(messages), when the caller has them."""
    return _cut(messages, points, deadline)[1]


def project(messages: list, points: list | None = None, deadline: Deadline = NO_DEADLINE) -> list:
    """The messages to send, in send order.

    The last compaction point whose summary finished cuts history there. With a
    tail_start_id the order is [compaction user, summary, kept tail, later messages]. A manual
    summary (a finished summary whose parent is a plain user message) cuts history there too.
    points: compaction_points(messages), when the caller has them.
    """
    start, s = _cut(messages, points, deadline)
    if start < 0:
        return list(messages)
    msg = messages[start]
    if msg.compaction() is None:  # a manual summary: sent from the message it answers on
        return messages[start:]
    tail_start = msg.compaction().tail_start_id
    tail = []
    if tail_start:  # by position: ids carry no order
        first = next((k for k in range(start) if messages[k].id == tail_start), start)
        tail = messages[first:start]
    later = [x for k, x in enumerate(messages[start + 1:], start=start + 1) if k != s]
    return [msg, messages[s], *tail, *later]
