"""Converted messages are reused by wire bytes: same result as converting, never stale, bounded."""
from __future__ import annotations


import grpc
import pytest

from helpers import convo
from helpers.steps import memo_config
from contextsvc.rpc import conversion
from contextsvc.memo import ENTRY_OVERHEAD, MESSAGE, Memo, resident_size
from contextsvc.v1 import context_pb2 as pb

import workload


def test_cached_conversion_equals_plain_conversion():
    conv = workload.conversation(200_000)
    cache = Memo(64 * 1024 * 1024)
    plain = conversion.conversation(conv)
    first = conversion.conversation(conv, memo=cache)
    assert cache.misses == len(conv.messages) and cache.hits == 0
    again = conversion.conversation(conv, memo=cache)
    assert cache.hits == len(conv.messages)
    assert plain == first == again


def test_a_changed_message_is_converted_again():
    cache = Memo(1024 * 1024)
    conv = convo.small_conversation()
    conversion.conversation(conv, memo=cache)
    conv.messages[2].parts[0].text.text = "A different request"  # same id, new content
    got = conversion.conversation(conv, memo=cache)
    assert got.messages[2].parts[0].content.text == "A different request"
    assert cache.hits == 2 and cache.misses == 4


def test_invalid_messages_still_fail_with_their_path():
    cache = Memo(1024 * 1024)
    conv = convo.small_conversation()
    conversion.conversation(conv, memo=cache)
    conv.messages[1].parts[1].tool.state.input_json = "{not json"
    with pytest.raises(conversion.BadInput) as e:
        conversion.conversation(conv, memo=cache)
    assert e.value.field == "conversation.messages[1].parts[1].tool.state.input_json"


def test_the_cache_is_bounded_by_real_memory_oldest_out():
    # each message is charged its objects' real size: three fit in three and a half of them
    msgs = [convo.user(f"m{i}", convo.text(f"p{i}", "x" * 900)) for i in range(5)]
    first = conversion.conversation(pb.Conversation(messages=[msgs[0]])).messages[0]
    one = resident_size((MESSAGE, first.digest)) + resident_size(first) + ENTRY_OVERHEAD
    bound = 3 * one + one // 2
    cache = Memo(bound)
    for msg in msgs:
        conversion.conversation(pb.Conversation(messages=[msg]), memo=cache)
    assert cache.size_bytes <= bound and len(cache) == 3
    conversion.conversation(pb.Conversation(messages=[msgs[0]]), memo=cache)  # evicted: converted again
    assert cache.hits == 0
    conversion.conversation(pb.Conversation(messages=[msgs[4]]), memo=cache)  # newest: still there
    assert cache.hits == 1


def test_server_answers_the_same_with_and_without_the_cache(stub):
    from helpers.server import start_server

    req = workload.measure_request(100_000)
    uncached = start_server(memo_bytes=0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{uncached.port}") as ch:
            from contextsvc.v1 import context_pb2_grpc as pb_grpc
            plain = pb_grpc.ContextServiceStub(ch).Measure(req, timeout=30)
    finally:
        uncached.stop(grace=1)
    first, second = stub.Measure(req, timeout=30), stub.Measure(req, timeout=30)
    assert first == second == plain
    grown = pb.MeasureRequest()
    grown.CopyFrom(req)
    grown.conversation.messages.append(convo.user("zz-new", convo.text("zz-p", "one more request " * 50)))
    assert stub.Measure(grown, timeout=30).body_bytes > plain.body_bytes


def test_conversion_copies_no_wire_bytes():
    """Each message's digest is taken from its bytes where they lie in the request: converting
    eight 4 MB messages peaks near their converted text, not near twice it."""
    import tracemalloc

    conv = pb.Conversation(messages=[convo.user(f"m{i}", convo.text(f"p{i}", chr(97 + i) * (4 << 20)))
                                     for i in range(8)])
    wire = conv.SerializeToString()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        converted = conversion.conversation(conv, wire=wire)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(converted.messages) == 8
    assert peak < 44 << 20, f"peak {peak / 2**20:.0f} MB for 32 MB of text"


class _CountingDeadline:
    """A Deadline that never expires and counts how often it is asked."""
    def __init__(self):
        from contextsvc.deadline import Deadline
        self.asked = 0
        self.deadline = Deadline(None, cancelled=self._ask)

    def _ask(self):
        self.asked += 1
        return False


def test_converting_the_new_messages_checks_the_deadline_whatever_the_cache_holds():
    """The cache holding exactly the messages at which a count over positions would check: the
    conversion of the other 2,000 still checks the caller's deadline as it goes."""
    from contextsvc.deadline import CHECK_EVERY

    msgs = [convo.user(f"m{i}", convo.text(f"p{i}", f"text {i}")) for i in range(2 * CHECK_EVERY * 2)]
    cache = Memo(64 << 20)
    conversion.conversation(pb.Conversation(messages=msgs[::CHECK_EVERY]), memo=cache)  # warm those
    counting = _CountingDeadline()
    conversion.conversation(pb.Conversation(messages=msgs), memo=cache, deadline=counting.deadline)
    wire_checks = -(-len(msgs) // CHECK_EVERY)  # the serializing pass
    assert counting.asked > wire_checks, "no check while converting the new messages"


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (numbers below 16)."""
    return bytes([number << 3 | 2]) + _varint(len(payload)) + payload


def _reordered(msg) -> bytes:
    """msg written with its fields in reverse order: another encoder's bytes for the same message."""
    out = b""
    for fd, _ in reversed(msg.ListFields()):
        one = type(msg)()
        one.CopyFrom(msg)
        for other, _ in msg.ListFields():
            if other is not fd:
                one.ClearField(other.name)
        out += one.SerializeToString()
    return out


def _request_bytes(request, messages: list) -> bytes:
    """request's bytes with its conversation's messages written as the bytes given."""
    rest = pb.MeasureRequest()
    rest.CopyFrom(request)
    rest.ClearField("conversation")
    conv = _field(1, request.conversation.session_id.encode()) + b"".join(_field(2, m) for m in messages)
    return _field(1, conv) + rest.SerializeToString()


def test_the_same_message_written_differently_is_a_miss_never_a_wrong_answer():
    """A message's key is the digest of the bytes it came in: the same message with its fields in
    another order, or with an unknown field appended, is converted again (a miss), and every
    answer is the one its canonical bytes give, with the memo or without."""
    from contextsvc import config
    from contextsvc.rpc import servicer

    request = convo.measure_request(convo.small_conversation())
    msgs = list(request.conversation.messages)
    canonical = [m.SerializeToString() for m in msgs]
    written = list(canonical)
    written[1] = _reordered(msgs[1])
    written[2] = canonical[2] + b"\xf8\x06\x01"  # field 111 (no such field), varint 1
    assert written[1] != canonical[1] and pb.Message.FromString(written[1]) == msgs[1]

    cache = Memo(1 << 20)
    first = conversion.request_conversation(request, cache, wire=_request_bytes(request, canonical))
    assert cache.misses == len(msgs) and cache.hits == 0
    data = _request_bytes(request, written)
    again = conversion.request_conversation(pb.MeasureRequest.FromString(data), cache, wire=data)
    assert cache.misses == len(msgs) + 2 and cache.hits == len(msgs) - 2
    assert again == first == conversion.conversation(request.conversation)
    assert [x.digest for x in again.messages] != [x.digest for x in first.messages]

    with_memo = servicer.ContextService(config.Config())
    without = servicer.ContextService(memo_config(0))
    expected = without.Measure(request, None)
    for wire in (_request_bytes(request, canonical), data, data):
        got = with_memo.Measure(conversion.Received(pb.MeasureRequest.FromString(wire), wire), None)
        assert got == expected


def test_a_growing_conversation_converts_only_what_it_adds():
    """From PREFIX_FROM_MESSAGES messages on, the conversion of a conversation's first messages is
    kept by the digest of their bytes (CONVERTED): a step that resends them converts and hashes
    only the messages it adds; the result equals a conversion without the memo at every step, and
    an earlier message changed (same count) is never served from the kept prefix."""
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    conv = workload.conversation(200_000)
    assert len(conv.messages) > PREFIX_FROM_MESSAGES + 20
    cache = Memo(64 * 1024 * 1024)
    hashed = []
    original = conversion.message_keys

    def counting(wire, spans):
        hashed.append(len(spans))
        return original(wire, spans)

    conversion.message_keys = counting
    try:
        for n in range(PREFIX_FROM_MESSAGES, PREFIX_FROM_MESSAGES + 20):
            grown = pb.Conversation(session_id=conv.session_id, messages=conv.messages[:n])
            assert conversion.conversation(grown, memo=cache) == conversion.conversation(grown)
        changed = pb.Conversation()
        changed.CopyFrom(grown)
        changed.messages[3].parts[0].text.text = "A different request"
        got = conversion.conversation(changed, memo=cache)
        assert got == conversion.conversation(changed)
        assert got.messages[3].parts[0].content.text == "A different request"
    finally:
        conversion.message_keys = original
    with_memo = hashed[0::2]  # each step converts with the memo, then without
    assert with_memo[0] == PREFIX_FROM_MESSAGES and with_memo[1:20] == [1] * 19, with_memo
    assert with_memo[20] == len(changed.messages)  # nothing of it was served from a prefix


def test_a_step_resumes_from_the_bytes_of_the_earlier_one_it_starts_with():
    """The session's last step is kept with its bytes (rpc.earlier_step): a step starting with
    all of them converts after them, and its Lineage says so; one whose last message was
    edited resumes before it (its Lineage names the earlier step, that message dropped);
    another session never resumes from it, and sessions sharing a key (no session id, the same
    first message) each resume from their own; a request writing its conversation in two pieces
    (protobuf merges them) takes the general way. Every answer equals a conversion without the
    memo."""
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    base = workload.conversation(200_000)
    n = PREFIX_FROM_MESSAGES + 8
    cache = Memo(64 * 1024 * 1024)
    scanned = []
    original = conversion.message_spans

    def counting(wire, at=0):
        spans = original(wire, at)
        scanned.append(len(spans))
        return spans

    conversion.message_spans = counting
    try:
        def convert(conv):
            scanned.clear()
            got = conversion.conversation(conv, memo=cache)
            assert got == conversion.conversation(conv)
            return got, scanned[0]

        first, _ = convert(pb.Conversation(session_id="s1", messages=base.messages[:n]))
        grown, seen = convert(pb.Conversation(session_id="s1", messages=base.messages[:n + 2]))
        assert seen == 2 and grown.lineage.kept == n and grown.lineage.kept_digest == first.lineage.digest
        edited = pb.Conversation(session_id="s1", messages=base.messages[:n + 2])
        edited.messages[-1].parts[0].text.text = "an edited request"
        got, seen = convert(edited)
        # resumed before the edited message: the earlier step's, as converted then, is dropped
        assert seen == 1 and got.lineage.kept == n + 1 and got.lineage.kept_digest == grown.lineage.digest
        assert [x.id for x in got.lineage.dropped] == [grown.messages[-1].id] and got.lineage.dropped[0] is not got.messages[-1]
        _, seen = convert(pb.Conversation(session_id="s2", messages=base.messages[:n + 2]))
        assert seen == n + 2  # another session's bytes are not compared with
        # two sessions without a session id starting with the same message, stepping in turn:
        # each resumes from its own last step
        other = [pb.Message(id=f"o{k}", role=pb.ROLE_USER, parts=[pb.Part(id=f"o{k}p", text=pb.TextPart(text="x"))])
                 for k in range(6)]
        a, b = list(base.messages[:n]), list(base.messages[:1]) + list(base.messages[2:n + 1])
        for k in range(3):
            for msgs in (a, b):
                msgs.append(other[2 * k])
                _, seen = convert(pb.Conversation(messages=msgs))
                assert seen == (len(msgs) if k == 0 else 1), (k, seen)
        # the conversation field twice: its first n messages, then 4 more
        head = pb.Conversation(session_id="s1", messages=base.messages[:n]).SerializeToString()
        rest = pb.Conversation(messages=base.messages[n:n + 4]).SerializeToString()
        raw = b"\x0a" + _varint(len(head)) + head + b"\x0a" + _varint(len(rest)) + rest
        two = pb.MeasureRequest.FromString(raw)
        assert len(two.conversation.messages) == n + 4
        scanned.clear()
        got = conversion.request_conversation(two, memo=cache, wire=raw)
        assert got == conversion.request_conversation(two, wire=raw)
        assert scanned[0] == n + 4  # the general way: every message scanned
    finally:
        conversion.message_spans = original


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_a_request_of_a_great_many_fields_takes_the_general_way():
    """Locating the conversation reads a request's entries in Python, MAX_ENTRIES at most: a
    request of more (here tools) is converted the general way, the same as without the memo."""
    from contextsvc.rpc import earlier_step
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    base = workload.conversation(200_000)
    req = pb.MeasureRequest(conversation=pb.Conversation(session_id="s", messages=base.messages[:PREFIX_FROM_MESSAGES]))
    req.tools.extend(pb.ToolDefinition(name=f"t{i}") for i in range(earlier_step.MAX_ENTRIES))
    wire = req.SerializeToString()
    assert earlier_step.locate(wire, 1, "s") is None
    cache = Memo(64 * 1024 * 1024)
    for _ in range(2):
        got = conversion.request_conversation(req, memo=cache, wire=wire)
        assert got == conversion.request_conversation(req, wire=wire) and got.lineage is None
    del req.tools[1:]  # a few entries: located
    assert earlier_step.locate(req.SerializeToString(), 1, "s") is not None


def test_the_parse_leaves_out_the_messages_of_the_earlier_step(monkeypatch):
    """The server's parse (conversion.parser with the memo) finds the session's earlier step in
    the request's bytes and parses only what follows its messages: every conversion and answer
    equals a whole parse without the memo, and an error in a new message names its place in the
    whole conversation. A request it cannot stand for exactly is parsed whole: an earlier step
    whose messages had another field between them, a session id written after the messages
    (the key read before them is not the session's), bytes that do not parse (the whole parse's
    own error); and so is one under SKELETON_FROM_BYTES (these requests are, until the bound is
    lowered)."""
    from google.protobuf.message import DecodeError

    from contextsvc import config
    from contextsvc.errors import BadInput
    from contextsvc.rpc import earlier_step, servicer
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    base = workload.measure_request(200_000)
    n = PREFIX_FROM_MESSAGES + 6
    assert len(base.conversation.messages) > n + 12
    with_memo = servicer.ContextService(config.Config())
    without = servicer.ContextService(memo_config(0))
    parse = conversion.parser(pb.MeasureRequest, with_memo.memo)

    def step(wire: bytes, left_out: int):
        got = parse(wire)
        whole = pb.MeasureRequest.FromString(wire)
        assert (got.resumed.found.kept if got.resumed is not None else 0) == left_out
        assert len(got.message.conversation.messages) == len(whole.conversation.messages) - left_out
        assert with_memo.Measure(got, None) == without.Measure(whole, None)
        return got

    def request(session: str, k: int) -> pb.MeasureRequest:
        r = pb.MeasureRequest()
        r.CopyFrom(base)
        del r.conversation.messages[k:]
        r.conversation.session_id = session
        return r

    step(request("s1", n).SerializeToString(), 0)  # the first step: parsed whole
    small = request("s1", n + 1).SerializeToString()
    assert len(small) < earlier_step.SKELETON_FROM_BYTES
    step(small, 0)  # small enough to parse whole
    monkeypatch.setattr(earlier_step, "SKELETON_FROM_BYTES", 0)
    for k in range(n + 2, n + 4):  # each parses only the message it adds
        step(request("s1", k).SerializeToString(), k - 1)

    # a new message refused: the same error, naming its index in the whole conversation
    bad = request("s1", n + 4)
    bad.conversation.messages[-1].role = 77
    with pytest.raises(BadInput) as got:
        with_memo.Measure(parse(bad.SerializeToString()), None)
    with pytest.raises(BadInput) as plain:
        without.Measure(bad, None)
    assert f"conversation.messages[{n + 3}].role" in str(got.value) == str(plain.value)
    # bytes that do not parse: the whole parse's error
    cut = request("s1", n + 4).SerializeToString()[:-3]
    with pytest.raises(DecodeError) as got:
        parse(cut)
    with pytest.raises(DecodeError) as plain:
        pb.MeasureRequest.FromString(cut)
    assert str(got.value) == str(plain.value)

    # a session id written after the messages: the key read before them ("") finds the step of
    # a conversation without one; the parse's session id differs, so the request is parsed whole
    step(request("", n).SerializeToString(), 0)
    r = request("s2", n + 1)
    rest = pb.MeasureRequest()
    rest.CopyFrom(r)
    rest.ClearField("conversation")
    late = b"".join(_field(2, x.SerializeToString()) for x in r.conversation.messages) + _field(1, b"s2")
    wire = _field(1, late) + rest.SerializeToString()
    assert pb.MeasureRequest.FromString(wire) == r
    assert step(wire, 0).message.conversation.session_id == "s2"
    # an earlier step with another field between its messages: its next step is parsed whole
    messages = [x.SerializeToString() for x in request("s3", n).conversation.messages]
    gap = _field(1, b"s3") + b"".join(_field(2, x) for x in messages[:3]) + b"\x18\x01" + \
        b"".join(_field(2, x) for x in messages[3:])  # field 3 (unknown), varint 1
    wire = _field(1, gap) + rest.SerializeToString()
    step(wire, 0)
    grown = request("s3", n + 1).conversation.messages[-1].SerializeToString()
    wire = _field(1, gap + _field(2, grown)) + rest.SerializeToString()
    step(wire, 0)


def test_the_conversion_scans_only_the_messages_a_step_adds():
    """What a step's scans read of every message (conversation.Scanned: the messages that may cut
    history, the latest compaction of a tool output) comes with the conversion, from the
    session's earlier step for the messages it kept: equal at every step to a scan of the whole
    conversation, whether a step adds messages, resumes before an edited one, or comes alone."""
    from helpers.convo import assistant, text, tool, user
    from contextsvc import conversation as m, projection
    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    def step_messages(k: int) -> list:
        pid = f"k{k}"
        if k % 7 == 3:  # a compaction: marker, then its summary
            return [user(f"u{k}", pb.Part(id=pid, compaction=pb.CompactionPart(auto=True))),
                    assistant(f"a{k}", text(pid + "s", "Summary."), summary=True, parent_id=f"u{k}")]
        compacted = 1_000 + k if k % 3 == 0 else 0  # a tool output the client stored as pruned
        return [user(f"u{k}", text(pid, f"go on {k}")),
                assistant(f"a{k}", tool(pid + "t", f"c{k}", "read", {"path": "x"}, "out " * 50, compacted=compacted))]

    cache = Memo(64 * 1024 * 1024)
    msgs = []
    for k in range(PREFIX_FROM_MESSAGES + 10):
        msgs += step_messages(k)
        convs = [pb.Conversation(session_id="s", messages=msgs)]
        if k % 5 == 4:  # the last message edited: the step resumes before it
            edited = pb.Conversation(session_id="s", messages=msgs)
            edited.messages[-2].parts[0].text.text = "edited"
            convs.append(edited)
        for c in convs:
            for memo in (cache, None):
                got = conversion.conversation(c, memo=memo)
                whole = m.NOTHING_SCANNED.extended(0, got.messages)
                assert got.scanned == whole
                assert got.scanned.points == projection.compaction_points(got.messages)
                assert got.scanned.last_compacted_ms == max(x.last_compacted_ms() for x in got.messages)
    assert got.scanned.cuts and got.scanned.last_compacted_ms > 0


def test_a_conversation_token_names_its_bytes_whichever_way_it_was_reached():
    """Lineage.digest (the token what a stage keeps for a whole conversation is keyed by) is
    chained from the earlier step's: hashed over the new bytes after all of that step, or after
    the first messages a step starts with when it edited or dropped the rest. Over a session that
    grows, edits its last messages and drops some, no token names two different conversations,
    the same conversation sent again keeps its token, and steps took both ways."""
    import random

    from contextsvc.rpc.message_keys import PREFIX_FROM_MESSAGES

    rng, cache = random.Random(11), Memo(64 * 1024 * 1024)
    source = workload.conversation(300_000).messages
    taken = PREFIX_FROM_MESSAGES + 4
    messages, named, routes = list(source[:taken]), {}, set()  # named: token -> the messages' bytes
    for step in range(60):
        move = rng.choice(("grow", "grow", "edit", "drop", "again"))
        if move == "grow":
            messages += source[taken:taken + rng.randint(1, 3)]
            taken += 3
        elif move == "edit":
            at = len(messages) - rng.randint(1, 2)
            edited = pb.Message()
            edited.CopyFrom(messages[at])
            edited.parts.append(convo.text(f"stored{step}", rng.choice(("a stored part", "another"))))
            messages[at] = edited
        elif move == "drop" and len(messages) > PREFIX_FROM_MESSAGES + 2:
            del messages[-1]
        conv = pb.Conversation(session_id="tokens", messages=messages)
        got = conversion.conversation(conv, memo=cache)
        wire = b"".join(x.SerializeToString() for x in messages)
        assert named.setdefault(got.lineage.digest, wire) == wire, f"step {step}: one token, two conversations"
        routes.add("dropped" if got.lineage.dropped else "whole" if got.lineage.kept else "none")
    assert {"dropped", "whole"} <= routes, routes
