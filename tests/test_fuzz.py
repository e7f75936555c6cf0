"""Fuzzing over loopback: arbitrary, mostly-valid conversations and random mutations of them sent
to every RPC, and raw bytes for each request type. The property: a defined status (never UNKNOWN
or INTERNAL, INVALID_ARGUMENT naming a field) and a server that still answers.

CI runs a bounded number of examples; bench/fuzz_long.py runs the same strategies for longer.
"""
from __future__ import annotations

import json
import os

import grpc
from hypothesis import HealthCheck, given, settings, strategies as st

from contextsvc.v1 import context_pb2 as pb
from helpers.rpc import RESPONSES, call, request_for

EXAMPLES = int(os.environ.get("CONTEXTSVC_FUZZ_EXAMPLES", "120"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("CONTEXTSVC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEFINED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.NOT_FOUND}
CONVERSATION_RPCS = ("Measure", "Assemble", "Compact", "Prune")

# ---- strategies ----------------------------------------------------------------------------------

def mostly(valid, invalid, odds=40):
    """valid, except once in `odds` draws: a conversation draws dozens of these, so about half
    of the requests carry no mistake and the rest one or two."""
    # not an end of the range: hypothesis draws the ends (and 0 when shrinking) far more often
    return st.integers(0, odds - 1).flatmap(lambda k: invalid if k == odds // 2 else valid)


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
small_ints = st.integers(-3, 5)
enum_values = lambda n: mostly(st.integers(1, n), st.sampled_from([0, n + 1, 99, -1]))  # noqa: E731

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20)
tool_inputs = mostly(
    st.one_of(st.just(""), st.dictionaries(st.text(max_size=10), json_values, max_size=5).map(json.dumps)),
    st.one_of(st.just("{nope"), st.just("[1,2]"), st.just('{"n": NaN}'),
              st.integers(1, 3000).map(lambda d: '{"a":' * d + "1" + "}" * d)))


def part_kinds(draw_id):
    return st.one_of(
        texts.map(lambda t: {"text": pb.TextPart(text=t)}),
        st.builds(lambda t, s: {"reasoning": pb.ReasoningPart(text=t, signature=s)}, texts, texts),
        st.builds(lambda call, name, status, inp, out, comp: {"tool": pb.ToolPart(
            call_id=call, tool=name, state=pb.ToolState(status=status, input_json=inp, output=out,
                                                        time_compacted_ms=comp))},
            mostly(st.sampled_from(["call_1", "call_2", "call_3"]), st.just("")),
            mostly(st.sampled_from(["bash", "read", "edit", "skill"]), st.just("")),
            enum_values(4), tool_inputs, texts, mostly(st.sampled_from([0, 1]), st.just(-1))),
        st.builds(lambda mime, url: {"file": pb.FilePart(mime=mime, filename="f", url=url)},
                  st.sampled_from(["image/png", "application/pdf", "text/plain", ""]), st.just("https://x/y")),
        st.just({"step_start": pb.StepStartPart()}),
        st.builds(lambda i, o: {"step_finish": pb.StepFinishPart(tokens=pb.Usage(input=i, output=o))},
                  st.integers(-5, 10**6), st.integers(-5, 10**5)),
        st.builds(lambda a, o, t: {"compaction": pb.CompactionPart(auto=a, overflow=o, tail_start_id=t)},
                  st.booleans(), st.booleans(), st.sampled_from(["", "msg_0003", "msg_9999"])),
        texts.map(lambda t: {"subtask": pb.SubtaskPart(prompt=t, description="d", agent="explore")}),
        st.just({"agent": pb.AgentPart(name="build")}),
        st.just({"patch": pb.PatchPart(hash="abc", files=["src/a.py"])}),
    )


@st.composite
def messages(draw, index):
    role = draw(mostly(st.just(pb.ROLE_ASSISTANT if index % 2 else pb.ROLE_USER), enum_values(2)))
    parts = []
    for j in range(draw(st.integers(0, 4))):
        kind = draw(mostly(part_kinds(None), st.just({})))  # {}: a part with no kind
        if "tool" in kind and role != pb.ROLE_ASSISTANT and draw(mostly(st.just(True), st.just(False))):
            kind = {"text": pb.TextPart(text="a tool result needs its call in an assistant message")}
        part = pb.Part(id=draw(mostly(st.sampled_from([f"p{index}_{j}", ""]), st.just("p_dup"))))
        for name, value in kind.items():
            getattr(part, name).CopyFrom(value)
            getattr(part, name).SetInParent()  # an empty kind message still names the kind
        parts.append(part)
    usage = pb.Usage(input=draw(mostly(st.integers(0, 300_000), st.just(-1))), output=draw(st.integers(0, 5000)))
    return pb.Message(id=f"msg_{index:04d}", role=role, parts=parts, usage=usage,
                      time_completed_ms=draw(mostly(st.sampled_from([0, 1]), st.just(-1))),
                      summary=draw(st.booleans()) and role == pb.ROLE_ASSISTANT,
                      parent_id=draw(st.sampled_from(["", "", "msg_0000", "msg_9999"])))


@st.composite
def conversations(draw):
    msgs = [draw(messages(i)) for i in range(draw(mostly(st.integers(1, 12), st.just(0))))]
    # mutations of the ids: mostly none, sometimes a duplicate, a swap or an empty id
    for _ in range(draw(st.integers(0, 2))):
        if len(msgs) >= 2:
            i = draw(st.integers(0, len(msgs) - 1))
            k = draw(st.integers(0, len(msgs) - 1))
            what = draw(mostly(st.just("none"), st.sampled_from(["dup", "swap", "empty"])))
            if what == "dup":
                msgs[i].id = msgs[k].id
            elif what == "swap":
                msgs[i].id, msgs[k].id = msgs[k].id, msgs[i].id
            elif what == "empty":
                msgs[i].id = ""
    return pb.Conversation(session_id=draw(st.sampled_from(["", "s1", "s2"])), messages=msgs)


models = st.builds(
    lambda i, p, c, inp, o: pb.Model(id=i, provider=p, limits=pb.ModelLimits(context=c, input=inp, output=o)),
    mostly(st.sampled_from(["claude-sonnet-4-5", "gpt-4-turbo", "gemini-2.5-pro", "x"]), st.just("")),
    enum_values(len(pb.Provider.values()) - 1),
    mostly(st.sampled_from([0, 200_000, 8_000, 1]), st.just(-1)), mostly(st.sampled_from([0, 100_000]), st.just(-1)),
    mostly(st.sampled_from([0, 64_000, 4_000]), st.just(-1)))

compaction_settings = st.builds(
    lambda t, tail, res: pb.CompactionSettings(**{k: v for k, v in
                                                  (("threshold_percent", t), ("tail_turns", tail), ("reserved", res))
                                                  if v is not None}),
    st.one_of(st.none(), mostly(st.floats(1, 100), st.floats(allow_nan=True))),
    st.one_of(st.none(), mostly(st.integers(0, 5), st.just(-1))),
    st.one_of(st.none(), st.integers(-1, 50_000)))

tool_defs = st.lists(st.builds(lambda n, s: pb.ToolDefinition(name=n, input_schema_json=s),
                               mostly(st.sampled_from(["read", "bash", "edit", "grep"]), st.just("")), tool_inputs),
                     max_size=3, unique_by=lambda t: t.name)  # duplicates: test_bad_input


@st.composite
def requests(draw, rpc):
    req = request_for(rpc, conversation=draw(conversations()), model=draw(models))
    if draw(st.booleans()):
        req.compaction.CopyFrom(draw(compaction_settings))
    if rpc != "Prune":
        req.tools.extend(draw(tool_defs))
    if rpc == "Prune":
        req.reason = draw(enum_values(3))
    elif rpc == "Compact":
        req.attempts = draw(small_ints)
        req.overflow = draw(st.booleans())
    elif rpc == "Assemble":
        req.step = draw(small_ints)
        req.max_steps = draw(small_ints)
        req.cache_ttl = draw(st.sampled_from([0, 1, 2, 9]))
    elif rpc == "Measure":
        req.exact = draw(st.booleans())
    return req


def check_defined(code, details):
    assert code in DEFINED, (code, details)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        field, _, why = details.partition(": ")
        assert field and why, details  # "field.path: why"


def assert_alive(channel):
    code, r = call(channel, "Measure", request_for("Measure"))
    assert code == grpc.StatusCode.OK and r.body_bytes > 0


# ---- the properties --------------------------------------------------------------------------------

def _conversation_property(rpc):
    @FUZZ
    @given(req=requests(rpc))
    def prop(channel, req):
        code, details = call(channel, rpc, req)
        check_defined(code, details)
        if code == grpc.StatusCode.OK and rpc == "Assemble":
            assert json.loads(details.body) is not None
        assert_alive(channel)
    return prop


test_fuzz_measure = _conversation_property("Measure")
test_fuzz_assemble = _conversation_property("Assemble")
test_fuzz_compact = _conversation_property("Compact")
test_fuzz_prune = _conversation_property("Prune")


@FUZZ
@given(text=st.one_of(texts, st.lists(texts, max_size=3000).map("\n".join)), max_lines=st.integers(-2, 3000),
       max_bytes=st.integers(-2, 100_000), direction=st.integers(-1, 4), task=st.booleans())
def test_fuzz_truncate_and_read_back(channel, text, max_lines, max_bytes, direction, task):
    req = pb.TruncateToolOutputRequest(text=text, max_lines=max_lines, max_bytes=max_bytes, direction=direction,
                                       has_task_tool=task)
    code, r = call(channel, "TruncateToolOutput", req)
    check_defined(code, r)
    if code == grpc.StatusCode.OK and r.truncated:
        code, back = call(channel, "ReadTruncated", pb.ReadTruncatedRequest(output_id=r.output_id, limit=10**7))
        assert code == grpc.StatusCode.OK and back.text == text.rstrip("\n")[:len(back.text)]


@FUZZ
@given(output_id=st.one_of(texts, st.from_regex(r"tool_[0-9a-f]{26}", fullmatch=True)),
       offset=st.integers(-2, 10**12), limit=st.integers(-2, 10**12))
def test_fuzz_read_truncated(channel, output_id, offset, limit):
    code, details = call(channel, "ReadTruncated", pb.ReadTruncatedRequest(output_id=output_id, offset=offset,
                                                                           limit=limit))
    check_defined(code, details)


def _seed(rpc) -> bytes:
    if rpc in CONVERSATION_RPCS:
        return request_for(rpc).SerializeToString()
    if rpc == "TruncateToolOutput":
        return pb.TruncateToolOutputRequest(text="a\n" * 3000, max_lines=10).SerializeToString()
    return pb.ReadTruncatedRequest(output_id="tool_0000000000000000000000000a", limit=5).SerializeToString()


@st.composite
def mutated_bytes(draw, seed: bytes):
    """A valid request's bytes with bytes flipped, cut, inserted or duplicated, or pure noise."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=512))
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        what = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if what == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif what == "cut":
            del data[i:i + draw(st.integers(1, 16))]
        elif what == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[i:i] = data[i:i + draw(st.integers(1, 64))]
    return bytes(data)


def _raw_property(rpc):
    @FUZZ
    @given(data=mutated_bytes(_seed(rpc)))
    def prop(channel, data):
        code, details = call(channel, rpc, data)
        check_defined(code, details)
        assert_alive(channel)
    return prop


for _rpc in RESPONSES:
    globals()[f"test_fuzz_raw_bytes_{_rpc}"] = _raw_property(_rpc)
