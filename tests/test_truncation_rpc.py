"""TruncateToolOutput and ReadTruncated over loopback."""
from __future__ import annotations

import os

import grpc
import pytest

from contextsvc.v1 import context_pb2 as pb
from contextsvc.v1 import context_pb2_grpc as pb_grpc


def lines(n, width=10):
    return "".join(f"{i:0{width}d}\n" for i in range(n))


def test_under_the_limits_nothing_is_stored(stub, server):
    text = lines(2000, width=20)  # 2000 lines, 42,000 bytes
    r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=10)
    assert not r.truncated and r.content == text and r.output_id == ""


def test_one_line_over_stores_and_reads_back(stub):
    text = lines(2001)
    r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=10)
    assert r.truncated and r.cut_by == "lines" and r.removed_lines == 1
    assert "...1 lines truncated..." in r.content and r.output_id in r.content
    assert r.content.startswith(lines(2000).rstrip("\n"))
    back = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=r.output_id, limit=10_000), timeout=10)
    assert back.total_lines == 2001 and back.eof
    assert back.text == text.rstrip("\n")
    page = stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=r.output_id, offset=1990, limit=5), timeout=10)
    assert page.text.split("\n") == [f"{i:010d}" for i in range(1990, 1995)] and not page.eof


def test_tail_keeps_the_end_and_the_hint_names_the_task_tool(stub):
    text = "x" * 60_000 + "\n" + "last line 😀\n"
    r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(
        text=text, direction=pb.TRUNCATE_DIRECTION_TAIL, has_task_tool=True), timeout=10)
    assert r.truncated and r.content.rstrip("\n").endswith("last line 😀")
    assert r.content.startswith("...")
    assert "explore" in r.content.lower()
    r2 = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text, max_bytes=1000), timeout=10)
    assert r2.cut_by == "bytes" and "bytes truncated" in r2.content
    assert len(r2.content.split("\n\n")[0].encode()) <= 1000


def test_the_hint_names_the_agents_tools_per_request_and_by_config():
    from helpers.server import start_server

    text = lines(3000)
    s = start_server(truncation_overrides={"hint": "Cut. fetch_output(\"{output_id}\") pages through it."})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.port}") as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text), timeout=10)
            assert r.content.endswith(f'Cut. fetch_output("{r.output_id}") pages through it.')
            task = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text, has_task_tool=True), timeout=10)
            assert "Task tool" in task.content and "ReadTruncated" not in task.content  # the default
            own = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(
                text=text, has_task_tool=True, hint="Ask the scout agent about {output_id} {not a field}."),
                timeout=10)
            assert own.content.endswith(f"Ask the scout agent about {own.output_id} {{not a field}}.")
            with pytest.raises(grpc.RpcError) as e:
                stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=text, hint="Read it with fetch."),
                                        timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith("hint")
    finally:
        s.stop(grace=1)


@pytest.mark.parametrize("output_id,code", [
    ("../../etc/passwd", grpc.StatusCode.INVALID_ARGUMENT),
    ("tool_/../../x", grpc.StatusCode.INVALID_ARGUMENT),
    ("/etc/passwd", grpc.StatusCode.INVALID_ARGUMENT),
    ("", grpc.StatusCode.INVALID_ARGUMENT),
])
def test_bad_ids(stub, output_id, code):
    with pytest.raises(grpc.RpcError) as e:
        stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=output_id), timeout=10)
    assert e.value.code() == code, e.value.details()
    assert "output_id" in e.value.details() or "id" in e.value.details()


def test_unknown_well_formed_id_is_not_found(stub):
    r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=lines(3000)), timeout=10)
    other = r.output_id[:-1] + ("0" if r.output_id[-1] != "0" else "1")
    with pytest.raises(grpc.RpcError) as e:
        stub.ReadTruncated(pb.ReadTruncatedRequest(output_id=other), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_negative_arguments(stub):
    for req, field in ((pb.TruncateToolOutputRequest(text="a", max_lines=-1), "max_lines"),
                       (pb.TruncateToolOutputRequest(text="a", max_bytes=-1), "max_bytes"),
                       (pb.TruncateToolOutputRequest(text="a", direction=9), "direction")):
        with pytest.raises(grpc.RpcError) as e:
            stub.TruncateToolOutput(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()


def test_stored_files_stay_inside_the_store(stub, server):
    r = stub.TruncateToolOutput(pb.TruncateToolOutputRequest(text=lines(2500)), timeout=10)
    names = os.listdir(server.cfg.truncation.directory)
    assert any(r.output_id in n for n in names)
