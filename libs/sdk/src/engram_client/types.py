"""What calls return: small frozen dataclasses, each with its proto message as ``.proto``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, gateway_pb2


def _when(message: Any, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    ts: Timestamp = getattr(message, name)
    return ts.ToDatetime(tzinfo=timezone.utc)  # noqa: UP017 - Python 3.10


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    type: str
    tags: tuple[str, ...]
    importance: float
    confidence: float
    metadata: dict[str, Any]
    timestamp: datetime | None
    updated_at: datetime | None
    archived: bool
    entities: tuple[str, ...]
    proto: common_pb2.Memory

    @classmethod
    def of(cls, m: common_pb2.Memory) -> Memory:
        return cls(
            id=m.id,
            content=m.content,
            type=m.type,
            tags=tuple(m.tags),
            importance=m.importance,
            confidence=m.confidence,
            metadata=MessageToDict(m.metadata),
            timestamp=_when(m, "timestamp"),
            updated_at=_when(m, "updated_at"),
            archived=m.archived,
            entities=tuple(m.entities),
            proto=m,
        )


@dataclass(frozen=True)
class Stored:
    """One stored memory (Store), or one item of a batch; ``code`` "" when stored."""

    id: str
    sequence: int
    duplicate: bool
    code: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.code

    @classmethod
    def of(cls, r: gateway_pb2.StoreResponse | gateway_pb2.StoreResult) -> Stored:
        if isinstance(r, gateway_pb2.StoreResult):
            return cls(r.id, r.sequence, r.duplicate, r.code, r.message)
        return cls(r.id, r.sequence, r.duplicate)


@dataclass(frozen=True)
class Batch:
    """A StoreBatch or StoreStream reply: one result per item, in order."""

    results: tuple[Stored, ...]
    failed: int
    sequence: int
    proto: gateway_pb2.StoreBatchResponse

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.results)

    @classmethod
    def of(cls, r: gateway_pb2.StoreBatchResponse) -> Batch:
        return cls(tuple(Stored.of(x) for x in r.results), r.failed, r.sequence, r)


@dataclass(frozen=True)
class Written:
    """An update, delete or association: the log position that wrote it."""

    id: str
    sequence: int
    proto: gateway_pb2.UpdateResponse | gateway_pb2.DeleteResponse | gateway_pb2.AssociateResponse

    @classmethod
    def of(
        cls,
        r: gateway_pb2.UpdateResponse | gateway_pb2.DeleteResponse | gateway_pb2.AssociateResponse,
    ) -> Written:
        return cls(getattr(r, "id", ""), r.sequence, r)


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float
    components: dict[str, float]
    expansion: str  # "" for a ranked result; relation | bridge | entity when expanded
    proto: common_pb2.ScoredMemory

    @property
    def content(self) -> str:
        return self.memory.content

    @property
    def id(self) -> str:
        return self.memory.id


@dataclass(frozen=True)
class Recalled:
    """A recall's results, best first (iterable); ``context`` with a token_budget."""

    results: tuple[Hit, ...]
    context: str
    degraded: tuple[str, ...]
    proto: gateway_pb2.RecallResponse

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @classmethod
    def of(cls, r: gateway_pb2.RecallResponse) -> Recalled:
        hits = tuple(
            Hit(Memory.of(s.memory), s.score, dict(s.components), s.expansion, s) for s in r.results
        )
        return cls(hits, r.context, tuple(r.degraded), r)


@dataclass(frozen=True)
class Related:
    memory: Memory
    type: str
    strength: float
    depth: int
    proto: gateway_pb2.RelatedMemory


@dataclass(frozen=True)
class Stats:
    tenant: str
    counts: dict[str, int]
    watermark: int
    last_sequence: int
    dead_letters: int
    proto: gateway_pb2.StatsResponse

    @classmethod
    def of(cls, r: gateway_pb2.StatsResponse) -> Stats:
        return cls(r.tenant, dict(r.counts), r.watermark, r.last_sequence, r.dead_letters, r)


@dataclass(frozen=True)
class DeadLetter:
    sequence: int
    event: str
    reason: str
    store: str
    memory_id: str
    dead_lettered_at: datetime | None
    proto: admin_pb2.DeadLetter

    @classmethod
    def of(cls, d: admin_pb2.DeadLetter) -> DeadLetter:
        at = _when(d, "dead_lettered_at")
        return cls(d.sequence, d.event, d.reason, d.store, d.memory_id, at, d)


@dataclass(frozen=True)
class Replayed:
    replayed: int
    failed: int
    remaining: int  # replaying all: letters not reached in the deadline (call again)
    proto: admin_pb2.ReplayDeadLettersResponse


@dataclass(frozen=True)
class Run:
    """A consolidation, sync or rebuild request in the log; dry runs carry their reports."""

    run_id: str
    proto: admin_pb2.ConsolidateResponse | admin_pb2.SyncResponse | admin_pb2.RebuildResponse


@dataclass(frozen=True)
class Relation:
    """A typed edge from one memory to another; origin "user" (Associate) or "system"."""

    source_id: str
    target_id: str
    type: str
    strength: float
    properties: dict[str, Any]
    origin: str
    created_at: datetime | None
    proto: common_pb2.Relation

    @classmethod
    def of(cls, r: common_pb2.Relation) -> Relation:
        props = MessageToDict(r.properties)
        at = _when(r, "created_at")
        return cls(r.source_id, r.target_id, r.type, r.strength, props, r.origin, at, r)


@dataclass(frozen=True)
class Page:
    """One message of a List: memories, the relations that start at them (with
    include_relations) and the cursor that resumes after it ("" after the last)."""

    memories: tuple[Memory, ...]
    relations: tuple[Relation, ...]
    cursor: str
    proto: gateway_pb2.ListResponse

    @classmethod
    def of(cls, r: gateway_pb2.ListResponse) -> Page:
        memories = tuple(Memory.of(m) for m in r.memories)
        return cls(memories, tuple(Relation.of(x) for x in r.relations), r.cursor, r)


_KIND = gateway_pb2.SubscribeResponse.Kind


@dataclass(frozen=True)
class Event:
    """One change of the tenant's memories, as the log holds it. ``kind``: "stored",
    "updated", "deleted", "relation_added", "relation_removed" or "tenant_deleted"."""

    sequence: int  # resume after it: subscribe(after_sequence=event.sequence)
    kind: str
    memory_id: str  # the memory, or a relation's source
    memory: Memory | None  # stored and updated: the memory as it now is
    relation: Relation | None  # relation added or removed
    proto: gateway_pb2.SubscribeResponse

    @classmethod
    def of(cls, r: gateway_pb2.SubscribeResponse) -> Event:
        kind = "" if r.kind == 0 else _KIND.Name(r.kind).lower().removeprefix("memory_")
        memory = Memory.of(r.memory) if r.HasField("memory") else None
        relation = Relation.of(r.relation) if r.HasField("relation") else None
        return cls(r.sequence, kind, r.memory_id, memory, relation, r)


@dataclass(frozen=True)
class TenantDeletion:
    """A DeleteTenant reply: the tombstone's sequence (0 on a dry run) and what each store
    held (a dry run: what would go)."""

    tenant: str
    dry_run: bool
    sequence: int
    counts: dict[str, int]
    proto: admin_pb2.DeleteTenantResponse

    @classmethod
    def of(cls, r: admin_pb2.DeleteTenantResponse) -> TenantDeletion:
        counts = {c.store: c.count for c in r.counts}
        return cls(r.tenant, r.dry_run, r.sequence, counts, r)


@dataclass(frozen=True)
class DeletionStatus:
    """Whether a tenant's deletion is applied everywhere, with what the stores hold now."""

    tenant: str
    sequence: int
    applied: bool
    counts: dict[str, int]
    proto: admin_pb2.DeleteTenantStatusResponse

    @classmethod
    def of(cls, r: admin_pb2.DeleteTenantStatusResponse) -> DeletionStatus:
        counts = {c.store: c.count for c in r.counts}
        return cls(r.tenant, r.sequence, r.applied, counts, r)
