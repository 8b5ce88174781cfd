"""The committed API lock matches the generated code, and the check names breaking changes."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor

from engram_testing import proto_surface


def _file(fields: list[tuple[str, int, int]], rpc_stream: bool = False) -> FileDescriptor:
    proto = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t", syntax="proto3")
    message = proto.message_type.add(name="Req")
    for name, number, kind in fields:
        message.field.add(name=name, number=number, type=kind, label=1)
    service = proto.service.add(name="S")
    service.method.add(
        name="Call", input_type=".t.Req", output_type=".t.Req", server_streaming=rpc_stream
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool.FindFileByName("t.proto")


STRING, INT64 = 9, 3


def test_the_committed_lock_is_the_generated_api() -> None:
    locked, current = proto_surface.read_lock(), proto_surface.surface()
    assert proto_surface.breaking(locked, current) == []
    assert proto_surface.additions(locked, current) == []


def test_the_surface_names_each_field_by_number_with_its_type() -> None:
    found = proto_surface.surface(iter([_file([("query", 1, STRING), ("limit", 2, INT64)])]))
    assert found["messages"] == {
        "t.Req.1": "query string singular",
        "t.Req.2": "limit int64 singular",
    }
    assert found["services"] == {"t.S.Call": "t.Req -> t.Req"}


def test_a_renumbered_retyped_or_dropped_field_is_breaking() -> None:
    old = proto_surface.surface(iter([_file([("query", 1, STRING), ("limit", 2, INT64)])]))
    for fields in (
        [("query", 1, STRING), ("limit", 3, INT64)],
        [("query", 1, STRING), ("limit", 2, STRING)],
        [("query", 1, STRING), ("max", 2, INT64)],
        [("query", 1, STRING)],
    ):
        new = proto_surface.surface(iter([_file(fields)]))
        assert [c.element for c in proto_surface.breaking(old, new)] == ["t.Req.2"], fields


def test_a_streaming_change_is_breaking_and_an_added_field_is_only_an_addition() -> None:
    old = proto_surface.surface(iter([_file([("query", 1, STRING)])]))
    streamed = proto_surface.surface(iter([_file([("query", 1, STRING)], rpc_stream=True)]))
    assert [c.element for c in proto_surface.breaking(old, streamed)] == ["t.S.Call"]
    grown = proto_surface.surface(iter([_file([("query", 1, STRING), ("limit", 2, INT64)])]))
    assert proto_surface.breaking(old, grown) == []
    assert proto_surface.additions(old, grown) == ["messages t.Req.2"]
