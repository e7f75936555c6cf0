"""Ready-made requests and sessions for the RPC suites, bytes that are not a request (GARBAGE),
and a call by raw method path."""
from __future__ import annotations

import copy

import grpc

from contextsvc.v1 import context_pb2 as pb
from helpers import convo


OK = grpc.StatusCode.OK


def request_for(rpc, conversation=None, model=None):
    conv = conversation or convo.small_conversation()
    mdl = model or convo.model()
    if rpc == "Measure":
        return pb.MeasureRequest(conversation=conv, model=mdl)
    if rpc == "Assemble":
        return pb.AssembleRequest(conversation=conv, model=mdl, step=1)
    if rpc == "Compact":
        return pb.CompactRequest(conversation=conv, model=mdl)
    return pb.PruneRequest(conversation=conv, model=mdl, reason=pb.PRUNE_REASON_PAYLOAD_LIMIT)


RESPONSES = {"Measure": pb.MeasureResponse, "Assemble": pb.AssembleResponse, "Compact": pb.CompactResponse,
             "Prune": pb.PruneResponse, "TruncateToolOutput": pb.TruncateToolOutputResponse,
             "ReadTruncated": pb.ReadTruncatedResponse}


def call(channel, rpc, request, timeout=60):
    """(code, details or response): the outcome of one call, by raw method path."""
    data = request if isinstance(request, bytes) else request.SerializeToString()
    method = channel.unary_unary(f"/contextsvc.v1.ContextService/{rpc}",
                                 request_serializer=lambda b: b,
                                 response_deserializer=RESPONSES[rpc].FromString)
    try:
        return OK, method(data, timeout=timeout)
    except grpc.RpcError as e:
        return e.code(), e.details()


TOOLS = [pb.ToolDefinition(name="read", description="Read a file",
                           input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}')]


SYSTEM = pb.SystemPrompt(soul="You are a careful coding agent.", agent_prompt="Prefer small diffs.",
                         env=pb.EnvInfo(working_directory="/repo", is_git_repo=True, platform="linux",
                                        date="2026-12-02"),
                         instructions=[pb.Instruction(path="AGENTS.md", content="Run the tests.")])


def request(conv=None, provider=pb.PROVIDER_ANTHROPIC, **kw):
    return pb.AssembleRequest(conversation=conv or convo.small_conversation(),
                              model=convo.model(provider=provider), tools=TOOLS, system=SYSTEM, **kw)


def big_conversation_with_summary():
    msgs = [convo.user("msg_001", convo.text("u1", "start"), pb.Part(id="img1", file=pb.FilePart(
                mime="image/png", filename="shot.png", data=b"\x89PNG\r\n\x1a\n" + b"\x89PNG" * 50_000))),
            convo.assistant("msg_002", convo.text("a2", "looked")),
            pb.Message(id="msg_003", role=pb.ROLE_USER, parts=[pb.Part(id="c3", compaction=pb.CompactionPart(auto=True))]),
            convo.assistant("msg_004", convo.text("s4", "## Goal\n- ship"), summary=True, parent_id="msg_003"),
            convo.user("msg_005", convo.text("u5", "go on"), pb.Part(id="img5", file=pb.FilePart(
                mime="image/png", filename="after.png", data=b"\x89PNG\r\n\x1a\n" + b"\x89PNG" * 10_000)))]
    n = 5
    for t in range(14):  # 14 outputs of 25,000 tokens: 1.4 MB, over the payload guard
        n += 1
        msgs.append(convo.assistant(f"msg_{n:03d}", convo.tool(f"t{n}", f"call_{n}", "read", {"path": f"f{t}"},
                                                               "y" * 100_000)))
        n += 1
        msgs.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", f"next {t}")))
    return pb.Conversation(session_id="big", messages=msgs)


def session(turns=8, output_chars=8_000):
    msgs, n = [], 0
    for t in range(turns):
        n += 1
        msgs.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", f"Please fix src/module_{t}.py; keep the API stable")))
        n += 1
        msgs.append(convo.assistant(
            f"msg_{n:03d}",
            convo.tool(f"t{n}", f"call_{n}", "bash", {"command": f"pytest tests/test_module_{t}.py"},
                       f"FAILED tests/test_module_{t}.py::test_parse - ValueError: bad token\n" + "." * output_chars),
            convo.text(f"a{n}", f"Decided to rewrite parse_token in src/module_{t}.py"),
            usage=pb.Usage(input=2_000 * n, output=100)))
    n += 1
    msgs.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", "now run the whole suite")))
    return pb.Conversation(session_id="s", messages=msgs)


def compact_request(conv=None, context=30_000, **kw):
    return pb.CompactRequest(conversation=conv or session(), model=convo.model(context=context, output=4_000), **kw)


def long_session(turns=6, output_chars=60_000):
    """Each turn: a user ask, an assistant reading a big file. ~15,000 tokens per output."""
    msgs, n = [], 0
    for t in range(turns):
        n += 1
        msgs.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", f"step {t}")))
        n += 1
        msgs.append(convo.assistant(f"msg_{n:03d}", convo.tool(f"t{n}", f"call_{n}", "read", {"path": f"f{t}.py"},
                                                                "x" * output_chars)))
    return pb.Conversation(messages=msgs)


def cache_steps(provider):
    """(label, conversation, system, expected cause) for consecutive steps of one session: tool
    steps and turns that only append, a pruned output, a changed system, a compaction."""
    steps = []
    conv = pb.Conversation(session_id="s1", messages=[convo.user("msg_001", convo.text("u1", "Fix the parser."))])
    system = copy.deepcopy(SYSTEM)
    steps.append(("first", copy.deepcopy(conv), copy.deepcopy(system), None))
    n = 1
    for k in range(1, 7):
        n += 1
        conv.messages.append(convo.assistant(f"msg_{n:03d}", convo.text(f"a{n}", f"Reading part {k}."),
                                             convo.tool(f"t{n}", f"call_{n}", "read", {"path": f"src/p{k}.py"},
                                                        f"def f{k}():\n    return {k}\n" * 200)))
        steps.append((f"tool step {k}", copy.deepcopy(conv), copy.deepcopy(system), "new_turn"))
        if k == 4:  # an answer of whitespace alone, sent as nothing: the next user text joins the results
            n += 1
            conv.messages.append(convo.assistant(f"msg_{n:03d}", convo.text(f"a{n}", " \n ")))
            n += 1
            conv.messages.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", "Go on.")))
            steps.append(("whitespace answer", copy.deepcopy(conv), copy.deepcopy(system), "new_turn"))
        if k % 3 == 0:
            n += 1
            conv.messages.append(convo.assistant(f"msg_{n:03d}", convo.text(f"a{n}", "Done with this part.")))
            n += 1
            conv.messages.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", f"Now part {k + 1}.")))
            steps.append((f"new turn {k}", copy.deepcopy(conv), copy.deepcopy(system), "new_turn"))
    conv.messages[1].parts[1].tool.state.time_compacted_ms = 1_700_000_000_000  # a prune that acted
    steps.append(("prune", copy.deepcopy(conv), copy.deepcopy(system), "prune"))
    system.instructions.append(pb.Instruction(path="docs/RULES.md", content="Never force-push."))
    steps.append(("system", copy.deepcopy(conv), copy.deepcopy(system), "other"))
    n += 1
    conv.messages.append(convo.user(f"msg_{n:03d}", pb.Part(id=f"c{n}", compaction=pb.CompactionPart(auto=True))))
    n += 1
    conv.messages.append(convo.assistant(f"msg_{n:03d}", convo.text(f"a{n}", "## Goal\nFix the parser."),
                                         summary=True, parent_id=f"msg_{n - 1:03d}"))
    n += 1
    conv.messages.append(convo.user(f"msg_{n:03d}", convo.text(f"u{n}", "Continue.")))
    steps.append(("compaction", copy.deepcopy(conv), copy.deepcopy(system), "compaction"))
    return steps


GARBAGE = [  # bytes that are not a request
    b"\xff\xff\xff\xff",  # an invalid tag
    b"\x0a\xff\xff\xff\xff\x0f",  # a length running past the end
    b"\x0a\x02\xff\xfe",  # field 1 (a string or a message in every request) holding neither
    b"GET / HTTP/1.1\r\n\r\n",
    bytes(range(256)),
]
