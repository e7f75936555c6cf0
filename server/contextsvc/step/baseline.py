"""The baseline (docs/design.md §3 "Forward-looking pre-flight"): the last reported usage a
projection starts from, rebased on what changed before it since the provider counted it.

The provider counted the request that produced the baseline assistant message. A tool output
pruned after that answer (by Prune, or by the payload guard in this step), or a medium the guard
stripped, was counted whole and is sent as its placeholder now: the projection takes the
provider's count minus the figure of what was removed plus the figure of what replaced it, so a
prune that frees enough always clears should_compact.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import operator
from dataclasses import dataclass
from typing import Optional

from .. import conversation as m, projection
from ..memo import REBASED, Memo
from ..model_ids import same_model, same_provider
from ..positions import positions
from .pieces import message_piece
from .plan import Plan


def baseline(messages: list) -> Optional[m.Message]:
    """The last finished assistant, when its reported usage can anchor a projection."""
    i = projection.last_index(messages, lambda x: x.role == m.ASSISTANT and x.finished)
    if i < 0:
        return None
    msg = messages[i]
    if msg.summary or msg.usage.input_side() == 0:
        return None
    if any(x.role == m.ASSISTANT and not x.finished for x in messages[i + 1:]):
        return None
    return msg


def as_counted(messages: list, base: m.Message, before: list | None, latest: int | None = None) -> list:
    """(message as sent now, message as the provider counted it) of every message before base
    that changed since base was answered. before: the messages as they were before this step
    changed some of them (the payload guard), one for one with messages; None when it changed
    none. latest: the latest time a tool output of the messages as they were (before, else
    messages) was compacted, when known (conversation.Scanned): none since base was answered,
    and none of them is looked at for one. The messages to look at are picked in C: a step's
    history is a thousand messages, of which few or none changed (the guard's copies are
    hundreds)."""
    since = base.time_completed_ms
    none_since = latest is not None and latest <= since
    if before is None and none_since:
        return []
    end = _position(messages, base)
    head = messages[:end]
    was = head if before is None else before[:end]
    if none_since:  # the copies this step made are all that changed
        picked = list(map(operator.is_not, was, head))
        return list(zip(itertools.compress(head, picked), itertools.compress(was, picked)))
    compacted = list(map(since.__lt__, map(m.LAST_COMPACTED_MS, was)))  # counted whole, sent compacted
    picked = compacted if before is None else list(map(operator.or_, compacted, map(operator.is_not, was, head)))
    then = list(itertools.compress(was, picked))
    for i in positions(list(itertools.compress(compacted, picked)), True):
        then[i] = _uncompacted(then[i], since)
    return list(zip(itertools.compress(head, picked), then))


_DIGEST = operator.attrgetter("digest")


def _position(messages: list, msg: m.Message) -> int:
    """The index of msg (this very object) in messages, looking from the end (the baseline is
    near it); len(messages) when absent."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i] is msg:
            return i
    return len(messages)


def _uncompacted(msg: m.Message, since_ms: int) -> m.Message:
    """msg (with a tool output compacted after since_ms) with those outputs whole again, as they
    were counted."""
    parts = [m.Part(p.id, dataclasses.replace(p.content, time_compacted_ms=0))
             if isinstance(p.content, m.Tool) and p.content.time_compacted_ms > since_ms else p
             for p in msg.parts]
    return dataclasses.replace(msg, parts=parts)


def counted_plan(history: list, base: m.Message, pairs: list, plan: Plan, memo: Memo | None) -> Plan:
    """The plan of the request base answered, with the rules of a request's media
    (step.many_images) as they stood for it: plan itself where they stand as now. The rules are
    of the whole request, so a step past one leaves out media the provider counted at the last
    (ten screenshots: some 20K tokens its count still holds). history: the messages as sent now
    (projection.project); pairs: as_counted's, each message as counted in place of the one now."""
    switched = bool(base.model_id) and not same_model(base.model_id, plan.model.id) and (
        not base.provider_id or same_provider(base.provider_id, plan.model.provider))
    if not (pairs or switched or plan.image_side or leaves_out(plan)):
        return plan  # within the rules now, and base's request held no more than this one
    end = _position(history, base)
    if end == len(history):
        return plan
    ruled = plan
    if switched:  # the rules base's request stood under were its model's (Bedrock's cap of Claude up to Sonnet 4)
        ruled = dataclasses.replace(plan, model=dataclasses.replace(plan.model, id=base.model_id))
    was = {id(now): then for now, then in pairs}
    counted = [was.get(id(x), x) for x in history[:end]] if was else history[:end]
    earlier = _earlier_steps(base)
    if earlier is not None:
        counted.append(earlier)
    then = ruled.for_images(counted, memo)
    rules = (then.image_side, then.images_left_out, then.media_left_out)
    if rules == (plan.image_side, plan.images_left_out, plan.media_left_out):
        return plan
    return dataclasses.replace(plan, image_side=rules[0], images_left_out=rules[1], media_left_out=rules[2])


def _earlier_steps(base: m.Message) -> m.Message | None:
    """base's steps before its last, where it holds media and has more than one step: the last
    step's request held them, and its count is base's usage (a computer-use turn of thirty
    screenshots is one message). None otherwise."""
    if not base.has_media:
        return None
    starts = [i for i, p in enumerate(base.parts) if isinstance(p.content, m.StepStart)]
    if not starts or starts[-1] == 0:
        return None
    return dataclasses.replace(base, parts=base.parts[:starts[-1]])  # a copy of its own: no digest


def with_rules_changed(pairs: list, history: list, base: m.Message, plan: Plan, counted: Plan) -> list:
    """pairs, and (message, message) for each other one before base that the media rules lower
    otherwise now (plan) than for base's request (counted)."""
    if counted is plan:
        return pairs
    listed = set(map(id, itertools.chain.from_iterable(pairs)))
    side = plan.image_side != counted.image_side
    return pairs + [(x, x) for x in itertools.compress(history[:_position(history, base)], map(m.HAS_MEDIA, history))
                    if id(x) not in listed and (side or plan.left_out(x) != counted.left_out(x))]


def changed_pieces(pairs: list, plan: Plan, memo: Memo | None, counted: Plan | None = None) -> tuple:
    """((JSON text, lengths) of each element now, media items now, the same as counted) of the
    changed messages, each lowered alone with media as placeholders (the estimate's text): now
    under plan, as counted under counted (counted_plan; plan when None)."""
    plan = dataclasses.replace(plan, placeholders=True)
    then_plan = plan if counted is None else dataclasses.replace(counted, placeholders=True)
    now_texts, then_texts, now_media, then_media = [], [], 0, 0
    for now, then in pairs:
        a, b = message_piece(now, plan, memo), message_piece(then, then_plan, memo)
        now_texts += a.texts
        then_texts += b.texts
        now_media += a.media_count
        then_media += b.media_count
    return now_texts, now_media, then_texts, then_media


def changed_key(pairs: list, plan: Plan, counted: Plan | None = None) -> tuple | None:
    """The memo's key of the figures of these changed messages now minus as counted (REBASED):
    the digest of each one's digests now and as counted (pairs_hash), and the settings those
    figures read (with counted, counted_plan's: what its rules and plan's leave out of each);
    None when a message has no digest."""
    digests = list(map(_DIGEST, itertools.chain.from_iterable(pairs)))  # in C: the guard's pairs are hundreds
    if not all(digests):
        return None
    h = pairs_hash()
    h.update(b"".join(digests))
    counted = plan if counted is None else counted
    if leaves_out(plan) or leaves_out(counted):
        # the same messages lower otherwise where the rules leave out some of them: which, now and then
        h.update(bytes(plan.left_out(now) * 3 + counted.left_out(then) for now, then in pairs))
        h.update(counted.image_side.to_bytes(4, "little"))
    return _rebased_key(h.digest(), plan)


def leaves_out(plan: Plan) -> bool:
    """Whether plan's media rules leave out some messages' media (Plan.left_out)."""
    return bool(plan.images_left_out or plan.media_left_out)


def pairs_hash():
    """The hash of changed_key's digest, fed each pair's digests (now, then) in the pairs' order:
    one who makes the pairs one by one (the payload guard's copies) can feed it as they come."""
    return hashlib.blake2b(digest_size=16, person=b"rebased")


def _rebased_key(digest: bytes, plan: Plan) -> tuple:
    mc = plan.cfg.measure
    # the factor as a pair of ints: a Fraction hashes and compares in Python code (memo.Memo); the
    # model's id and the proxy encoding name the counter the script corrections count with
    return (REBASED, digest, plan.model.provider, plan.model.id, plan.image_side, mc.factor.as_integer_ratio(),
            mc.calibrated_figures, mc.measured_margins, mc.exact_encoding)


@dataclass(frozen=True, slots=True)
class KnownPairs:
    """What a step knows of the messages it changed itself (the payload guard's copies, each
    with its original as `before`): the pairs_hash digest of their pairs, the position of the
    last."""
    digest: bytes
    last: int


def known_key(messages: list, base: m.Message, known: KnownPairs | None, latest: int | None,
              plan: Plan) -> tuple | None:
    """changed_key of as_counted(messages, base, before, latest) without making the pairs, when
    they are the ones known stands for: no tool output of before was compacted since base was
    answered (latest), so the messages that changed are the step's own, and all of them come
    before base. None otherwise."""
    if known is None or latest is None or latest > base.time_completed_ms or known.last >= _position(messages, base) \
            or leaves_out(plan):  # its digest holds nothing of what the rules leave out
        return None
    return _rebased_key(known.digest, plan)
