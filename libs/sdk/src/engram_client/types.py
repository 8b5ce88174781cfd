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
    """A consolidation or sync request in the log; dry runs carry their reports."""

    run_id: str
    proto: admin_pb2.ConsolidateResponse | admin_pb2.SyncResponse
