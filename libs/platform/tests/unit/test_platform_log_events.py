"""Log message → ingest event: the subject's tenant rules, anything malformed is poison."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.events.v1 import events_pb2
from engram_core.log_events import (
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
)
from engram_core.model import Memory, Relation
from engram_platform.convert import memory_to_proto, relation_to_proto
from engram_platform.log_events import decode, tenant_of

T0 = datetime(2025, 3, 1, tzinfo=UTC)
ID = "0195a000-0000-7000-8000-00000000000a"


def stored(tenant: str = "t1", memory_tenant: str = "t1") -> bytes:
    return events_pb2.MemoryStored(
        envelope=events_pb2.Envelope(
            event_id="e1", tenant=tenant, trace_context={"traceparent": "00-abc-def-01"}
        ),
        memory=memory_to_proto(Memory(id=ID, tenant=memory_tenant, content="hi", timestamp=T0)),
    ).SerializeToString()


def test_memory_stored_becomes_memory_written_with_the_subject_tenant() -> None:
    d = decode("engram.t1.memory_stored.v1", stored(memory_tenant=""), 17)
    assert d.problem == ""
    assert isinstance(d.event, MemoryWritten)
    assert (d.event.memory.tenant, d.event.memory.id, d.event.sequence) == ("t1", ID, 17)
    assert d.event.memory.timestamp == T0
    assert d.event.created
    assert d.trace_context == {"traceparent": "00-abc-def-01"}


def test_the_client_s_own_vector_travels_on_stored_and_updated() -> None:
    memory = memory_to_proto(Memory(id=ID, tenant="t1", content="hi", timestamp=T0))
    for name, message in (
        ("memory_stored", events_pb2.MemoryStored(memory=memory, embedding=[0.5, -0.25])),
        ("memory_updated", events_pb2.MemoryUpdated(memory=memory, embedding=[0.5, -0.25])),
    ):
        d = decode(f"engram.t1.{name}.v1", message.SerializeToString(), 3)
        assert isinstance(d.event, MemoryWritten)
        assert d.event.embedding == (0.5, -0.25)
    d = decode("engram.t1.memory_stored.v1", stored(), 4)
    assert isinstance(d.event, MemoryWritten)
    assert d.event.embedding == ()


def test_memory_updated_deleted_and_relation_added() -> None:
    updated = events_pb2.MemoryUpdated(
        memory=memory_to_proto(Memory(id=ID, tenant="t1", content="new", timestamp=T0))
    ).SerializeToString()
    d = decode("engram.t1.memory_updated.v1", updated, 3)
    assert isinstance(d.event, MemoryWritten)
    assert d.event.memory.content == "new"
    assert not d.event.created  # an update is no new memory

    deleted = events_pb2.MemoryDeleted(id=ID).SerializeToString()
    assert decode("engram.t1.memory_deleted.v1", deleted, 4).event == MemoryRemoved("t1", ID, 4)

    rel = Relation(ID, "other", "RELATES_TO", strength=0.25, created_at=T0)
    added = events_pb2.RelationAdded(relation=relation_to_proto(rel)).SerializeToString()
    d = decode("engram.t1.relation_added.v1", added, 5)
    assert d.event == RelationLinked("t1", rel, 5)


def test_tenant_deleted_names_the_subjects_tenant_and_refuses_another_envelope() -> None:
    gone = events_pb2.TenantDeleted(envelope=events_pb2.Envelope(tenant="t1"))
    d = decode("engram.t1.tenant_deleted.v1", gone.SerializeToString(), 9)
    assert d.event == TenantErased("t1", 9)
    d = decode("engram.t2.tenant_deleted.v1", gone.SerializeToString(), 9)
    assert d.event is None
    assert "envelope of tenant 't1'" in d.problem


def test_relation_removed() -> None:
    removed = events_pb2.RelationRemoved(
        envelope=events_pb2.Envelope(tenant="t1"),
        source_id=ID,
        target_id="other",
        type="SIMILAR_TO",
        origin="system",
    ).SerializeToString()
    d = decode("engram.t1.relation_removed.v1", removed, 6)
    assert isinstance(d.event, RelationUnlinked)
    r = d.event.relation
    assert (d.event.tenant, d.event.sequence) == ("t1", 6)
    assert (r.source_id, r.target_id, r.type, r.origin) == (ID, "other", "SIMILAR_TO", "system")
    # No origin: a user removal (whatever edge is there).
    plain = events_pb2.RelationRemoved(source_id=ID, target_id="x", type="LEADS_TO")
    d = decode("engram.t1.relation_removed.v1", plain.SerializeToString(), 7)
    assert isinstance(d.event, RelationUnlinked)
    assert d.event.relation.origin == "user"
    other = events_pb2.RelationRemoved(envelope=events_pb2.Envelope(tenant="t2"), source_id=ID)
    d = decode("engram.t1.relation_removed.v1", other.SerializeToString(), 8)
    assert d.event is None
    assert "envelope of tenant 't2'" in d.problem


@pytest.mark.parametrize(
    ("subject", "payload", "problem"),
    [
        ("engram.t1.memory_stored.v1", b"\xff\xff\xff", "undecodable memory_stored"),
        ("engram.t1.memory_stored.v1", stored(tenant="t2"), "envelope of tenant 't2'"),
        ("engram.t1.memory_stored.v1", stored(memory_tenant="t2"), "memory of tenant 't2'"),
        ("engram.t1.memory_stored.v1", b"", "memory_stored without a memory"),
        ("engram.t1.relation_added.v1", b"", "relation_added without a relation"),
        ("engram.t1.memory_accessed.v1", stored(), "not a memory event subject"),
        ("other.t1.memory_stored.v1", stored(), "not a memory event subject"),
    ],
)
def test_malformed_messages_are_poison(subject: str, payload: bytes, problem: str) -> None:
    d = decode(subject, payload, 1)
    assert d.event is None
    assert problem in d.problem


def test_tenant_of_subject() -> None:
    assert tenant_of("engram.acme-1.memory_stored.v1") == "acme-1"
    assert tenant_of("engram.acme.memory_stored") == ""
    assert tenant_of("nats.acme.memory_stored.v1") == ""
