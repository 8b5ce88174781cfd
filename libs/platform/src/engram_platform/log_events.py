"""Log message (subject + protobuf payload) → log event, or the reason it is poison.

Shared by ingest and consolidate's state keeper, so both read the log alike. The subject
names the tenant and the event (``engram.<tenant>.<event>.v1``); the subject's tenant is
the one that counts — an envelope or memory naming another tenant is refused rather than
trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from google.protobuf.message import DecodeError

from engram.events.v1 import events_pb2
from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
)
from engram_core.model import Relation
from engram_core.relations import ORIGIN_USER
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_from_proto, relation_from_proto


@dataclass(frozen=True, slots=True)
class Decoded:
    tenant: str  # from the subject; "" when the subject is not an engram event subject
    event: Event | None = None
    problem: str = ""  # why the message is poison; set exactly when event is None
    trace_context: dict[str, str] = field(default_factory=dict)


def tenant_of(subject: str) -> str:
    parts = subject.split(".")
    ok = len(parts) == 4 and parts[0] == "engram" and parts[3] == "v1"
    return parts[1] if ok and jsm.TENANT_RE.match(parts[1]) else ""


def decode(subject: str, data: bytes, sequence: int) -> Decoded:
    tenant = tenant_of(subject)
    name = jsm.event_of(subject)
    if not tenant or name not in jsm.MEMORY_EVENTS:
        return Decoded(tenant, problem=f"not a memory event subject: {subject!r}")
    try:
        if name in (jsm.MEMORY_STORED, jsm.MEMORY_UPDATED):
            return _written(tenant, name, data, sequence)
        if name == jsm.MEMORY_DELETED:
            deleted = events_pb2.MemoryDeleted.FromString(data)
            return _checked(tenant, deleted.envelope, MemoryRemoved(tenant, deleted.id, sequence))
        if name == jsm.TENANT_DELETED:
            erased = events_pb2.TenantDeleted.FromString(data)
            return _checked(tenant, erased.envelope, TenantErased(tenant, sequence))
        if name == jsm.RELATION_REMOVED:
            return _removed(tenant, data, sequence)
        added = events_pb2.RelationAdded.FromString(data)
        if not added.HasField("relation"):
            return Decoded(tenant, problem="relation_added without a relation")
        event = RelationLinked(tenant, relation_from_proto(added.relation), sequence)
        return _checked(tenant, added.envelope, event)
    except (DecodeError, ValueError, OverflowError) as exc:  # bad bytes, bad timestamps
        return Decoded(tenant, problem=f"undecodable {name}: {exc}")


def _removed(tenant: str, data: bytes, sequence: int) -> Decoded:
    gone = events_pb2.RelationRemoved.FromString(data)
    relation = Relation(
        gone.source_id, gone.target_id, gone.type, strength=0.0, origin=gone.origin or ORIGIN_USER
    )
    return _checked(tenant, gone.envelope, RelationUnlinked(tenant, relation, sequence))


def _written(tenant: str, name: str, data: bytes, sequence: int) -> Decoded:
    msg: events_pb2.MemoryStored | events_pb2.MemoryUpdated
    if name == jsm.MEMORY_STORED:
        msg = events_pb2.MemoryStored.FromString(data)
    else:
        msg = events_pb2.MemoryUpdated.FromString(data)
    if not msg.HasField("memory"):
        return Decoded(tenant, problem=f"{name} without a memory")
    memory = memory_from_proto(msg.memory)
    if memory.tenant and memory.tenant != tenant:
        return Decoded(tenant, problem=f"memory of tenant {memory.tenant!r} on {tenant!r}")
    event = MemoryWritten(
        replace(memory, tenant=tenant),
        sequence,
        name == jsm.MEMORY_STORED,
        embedding=tuple(msg.embedding),
    )
    return _checked(tenant, msg.envelope, event)


def _checked(tenant: str, envelope: events_pb2.Envelope, event: Event) -> Decoded:
    if envelope.tenant and envelope.tenant != tenant:
        return Decoded(tenant, problem=f"envelope of tenant {envelope.tenant!r} on {tenant!r}")
    return Decoded(tenant, event=event, trace_context=dict(envelope.trace_context))
