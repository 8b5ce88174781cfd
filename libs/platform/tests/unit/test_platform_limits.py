"""What the gateway accepts every store accepts: the event and each store's upsert request
decode, and the stores' request checks pass, for the inputs at the edges of the limits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.message import DecodeError, Message

from engram.events.v1 import events_pb2
from engram.graph.v1 import graph_pb2
from engram.lexical.v1 import lexical_pb2
from engram.vector.v1 import vector_pb2
from engram_core.enrich import enrich
from engram_core.errors import InvalidArgument
from engram_core.limits import MAX_METADATA_DEPTH, MAX_TAGS
from engram_core.model import Memory
from engram_core.validation import Limits, MemoryInput, new_memory
from engram_platform.convert import entity_to_proto, memory_to_proto
from engram_platform.log_events import decode
from engram_platform.request_checks import check_memory

NOW = datetime(2025, 6, 1, tzinfo=UTC)
ID = "0195a000-0000-7000-8000-00000000000a"
FIRST = ("Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas")
LAST = ("Smith", "Jones", "Brown", "Okafor", "Khan", "Novak", "Rossi", "Tanaka")


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def store_requests(memory: Memory) -> list[Message]:
    """The event the gateway publishes and each store's upsert of the enriched memory."""
    enriched, entities = enrich(memory, 7, "m")
    stored = memory_to_proto(enriched)
    return [
        events_pb2.MemoryStored(memory=memory_to_proto(memory)),
        events_pb2.MemoryState(memory=stored),
        vector_pb2.UpsertRequest(tenant="t1", points=[vector_pb2.Point(memory=stored)]),
        lexical_pb2.UpsertRequest(tenant="t1", memories=[stored]),
        graph_pb2.UpsertRequest(
            tenant="t1",
            memories=[
                graph_pb2.GraphMemory(memory=stored, entities=map(entity_to_proto, entities))
            ],
        ),
    ]


def assert_every_store_accepts(memory: Memory) -> None:
    for request in store_requests(memory):
        decoded = type(request).FromString(request.SerializeToString())
        for field, m in _memories(decoded):
            check_memory(field, m, "t1")
    event = events_pb2.MemoryStored(memory=memory_to_proto(memory)).SerializeToString()
    assert decode("engram.t1.memory_stored.v1", event, 7).problem == ""


def _memories(request: Any) -> list[tuple[str, Any]]:
    if isinstance(request, vector_pb2.UpsertRequest):
        return [(f"points[{i}].memory", p.memory) for i, p in enumerate(request.points)]
    if isinstance(request, graph_pb2.UpsertRequest):
        return [(f"memories[{i}].memory", g.memory) for i, g in enumerate(request.memories)]
    if isinstance(request, lexical_pb2.UpsertRequest):
        return [(f"memories[{i}]", m) for i, m in enumerate(request.memories)]
    return [("memory", request.memory)]


def accepted(inp: MemoryInput) -> Memory:
    m = new_memory(inp, tenant="t1", prefix="memory", now=NOW, limits=Limits())
    return Memory(**{**{f: getattr(m, f) for f in m.__dataclass_fields__}, "id": ID})


@pytest.mark.parametrize(
    "inp",
    [
        MemoryInput(content="Lunch with Sarah.", tags=tuple(f"t{i}" for i in range(MAX_TAGS))),
        MemoryInput(content="We met " + ", ".join(f"{a} {b}" for a in FIRST for b in LAST)),
        MemoryInput(content="Lunch with Sarah, who pasted Q" + "x" * 125 + " into it."),
        MemoryInput(content="deep", metadata=nested(MAX_METADATA_DEPTH)),
    ],
    ids=["full-tags-and-a-person", "eighty-people", "long-token", "deepest-metadata"],
)
def test_what_the_gateway_accepts_every_store_accepts(inp: MemoryInput) -> None:
    assert_every_store_accepts(accepted(inp))


def _round_trips(depth: int) -> bool:
    memory = Memory(id=ID, tenant="t1", content="x", timestamp=NOW, metadata=nested(depth))
    try:
        for request in store_requests(memory):
            type(request).FromString(request.SerializeToString())
    except DecodeError:
        return False
    return True


def test_the_metadata_depth_limit_keeps_a_wide_margin_below_protobufs() -> None:
    # The deepest metadata the deepest request still decodes; protobuf stops at 100 levels.
    depth = MAX_METADATA_DEPTH
    while _round_trips(depth + 1):
        depth += 1
    assert depth - MAX_METADATA_DEPTH >= 10


def test_metadata_a_store_could_not_decode_is_refused_by_the_gateway() -> None:
    assert not _round_trips(33)  # the event decodes; vector's and graph's upserts do not
    with pytest.raises(InvalidArgument) as info:
        accepted(MemoryInput(content="x", metadata=nested(33)))
    assert info.value.field == "memory.metadata"
