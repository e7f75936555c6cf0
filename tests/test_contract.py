"""The installed stubs were generated from this repository's proto: no drift possible."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2

from contextsvc.v1 import context_pb2 as pb

PROTO = Path(__file__).resolve().parent.parent / "proto" / "contextsvc" / "v1" / "context.proto"


def test_installed_descriptor_matches_the_proto(tmp_path):
    from grpc_tools import protoc  # in the test extras

    out = tmp_path / "fds.bin"
    assert protoc.main(["protoc", f"-I{PROTO.parent.parent.parent}", f"--descriptor_set_out={out}",
                        str(PROTO)]) == 0
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    installed = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(installed)
    for d in (installed, fresh):  # json_name is filled in by some runtimes only
        for msg in d.message_type:
            _clear_json_names(msg)
    assert installed == fresh


def _clear_json_names(msg):
    for f in msg.field:
        f.ClearField("json_name")
    for nested in msg.nested_type:
        _clear_json_names(nested)


def test_options_for_other_languages():
    opts = pb.DESCRIPTOR.GetOptions()
    assert opts.go_package.endswith(";contextsvcv1")
    assert opts.java_package == "dev.contextsvc.v1" and opts.java_multiple_files


def test_every_part_kind_is_in_the_oneof():
    kinds = {f.name for f in pb.Part.DESCRIPTOR.oneofs_by_name["kind"].fields}
    assert kinds == {"text", "reasoning", "file", "tool", "step_start", "step_finish", "compaction",
                     "subtask", "agent", "retry", "snapshot", "patch", "provider_compaction"}
