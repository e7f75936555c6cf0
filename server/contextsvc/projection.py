"""History projection (docs/design.md §6): only what follows the last completed compaction point."""
from __future__ import annotations

import operator

from . import conversation as m
from .positions import positions


def last_index(items: list, pred) -> int:
    """Index of the last item for which pred holds, or -1."""
    return next((i for i in range(len(items) - 1, -1, -1) if pred(items[i])), -1)


def _completed_summary_for(messages: list, user_index: int) -> int:
    """Index of the finished summary answering the compaction user message, or -1.

    An earlier attempt for the same marker may have failed: a later one that finished still
    completes the compaction.
    """
    user_id = messages[user_index].id
    for j in range(user_index + 1, len(messages)):
        msg = messages[j]
        if (msg.role == m.ASSISTANT and msg.summary and msg.parent_id == user_id and msg.finished
                and msg.error is None):
            return j
    return -1


def answered(messages: list, marker_index: int) -> bool:
    """Whether the compaction marker at marker_index is answered by a finished summary: a
    completed compaction, which a later one builds on (never a retry of it)."""
    return _completed_summary_for(messages, marker_index) >= 0


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


def last_compaction(messages: list, points: list | None = None) -> int:
    """Stored index of the last completed compaction's summary, or -1: what was stored after it
    is what the conversation has done since (the kept tail is stored before the marker).
    points: compaction_points(messages), when the caller has them."""
    for i in compaction_points(messages) if points is None else points:
        msg = messages[i]
        if msg.role == m.USER and msg.compaction() is not None:
            s = _completed_summary_for(messages, i)
            if s >= 0:
                return s
        if msg.role == m.ASSISTANT and msg.summary and msg.finished and msg.error is None:
            parent = next((k for k in range(i - 1, -1, -1) if messages[k].id == msg.parent_id), -1)
            if parent >= 0 and messages[parent].compaction() is None:
                return i
    return -1


def project(messages: list, points: list | None = None) -> list:
    """The messages to send, in send order.

    The last compaction point whose summary finished cuts history there. With a
    tail_start_id the order is [compaction user, summary, kept tail, later messages]. A manual
    summary (a finished summary whose parent is a plain user message) cuts history there too.
    points: compaction_points(messages), when the caller has them.
    """
    for i in compaction_points(messages) if points is None else points:
        msg = messages[i]
        if msg.role == m.USER and msg.compaction() is not None:
            s = _completed_summary_for(messages, i)
            if s < 0:
                continue
            tail_start = msg.compaction().tail_start_id
            tail = []
            if tail_start:  # by position: ids carry no order
                start = next((k for k in range(i) if messages[k].id == tail_start), i)
                tail = messages[start:i]
            later = [x for k, x in enumerate(messages[i + 1:], start=i + 1) if k != s]
            return [msg, messages[s], *tail, *later]
        if msg.role == m.ASSISTANT and msg.summary and msg.finished and msg.error is None:
            parent = next((k for k in range(i - 1, -1, -1) if messages[k].id == msg.parent_id), -1)
            if parent >= 0 and messages[parent].compaction() is None:
                return messages[parent:]
    return list(messages)
