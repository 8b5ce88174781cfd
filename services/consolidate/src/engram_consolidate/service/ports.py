"""The slices of the store ports the worker needs, and its own ports (the log it publishes
to, the checkpoint store, where tenants come from). engram_clients satisfy the store ones;
the method names and signatures are the stores' (engram_core.ports)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engram_consolidate.service.records import Key, RunRecord
from engram_core.model import AccessUpdate, Hit, Memory, Relation, RelevanceUpdate, ScanPage


class AccessWriter(Protocol):
    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...


class AccessStore(AccessWriter, Protocol):
    """The store whose access_count is read back: vector holds every memory's payload."""

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...


class RelevanceWriter(Protocol):
    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...


class MemorySource(Protocol):
    """Pages through a tenant's live memories (archived included), in a stable order."""

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...

    async def count(self, tenant: str) -> int: ...


class VectorStore(MemorySource, RelevanceWriter, Protocol):
    """The store the passes read (it holds the whole memory) and search for neighbours."""

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]: ...


class GraphStore(RelevanceWriter, Protocol):
    async def relations(self, tenant: str, ids: Sequence[str]) -> list[Relation]: ...


class EventSink(Protocol):
    """Publishes the same events the gateway does, so ingest applies them with versions,
    tombstones and every store converging. ``event_id`` is also the log's dedupe key
    (Nats-Msg-Id): deterministic ids make a republished event a no-op. Each returns False
    when the log already held the event (a duplicate)."""

    async def stored(self, tenant: str, memory: Memory, event_id: str) -> bool: ...

    async def updated(
        self, tenant: str, memory: Memory, mask: Sequence[str], event_id: str
    ) -> bool: ...

    async def deleted(self, tenant: str, id: str, event_id: str) -> bool: ...

    async def relation_added(self, tenant: str, relation: Relation, event_id: str) -> bool: ...

    async def relation_removed(self, tenant: str, relation: Relation, event_id: str) -> bool:
        """RelationRemoved of (source, target, type) with the relation's origin."""
        ...


class FenceLost(Exception):
    """A checkpoint write found another revision: another runner has the record."""


class Checkpoints(Protocol):
    """Run records by key with compare-and-set on the revision."""

    async def get(self, key: Key) -> tuple[RunRecord, int] | None:
        """The record and its revision, or None when there is none."""
        ...

    async def put(self, record: RunRecord, revision: int | None) -> int:
        """Write if the stored revision is still ``revision`` (None: if there is no record);
        return the new revision. Raises FenceLost otherwise."""
        ...

    async def keys(self) -> set[Key]:
        """Every key that has a record."""
        ...


class TenantSource(Protocol):
    async def tenants(self) -> set[str]:
        """Every tenant that has stored a memory."""
        ...


class ChangeMarks(Protocol):
    async def applied_mark(self, tenant: str) -> int:
        """The log sequence of the tenant's newest memory or relation event once ingest
        has applied it to every store; 0 when the tenant has none or it is not applied yet
        (the passes then cannot tell the tenant is unchanged)."""
        ...

    async def written_ids(self, tenant: str, after: int, upto: int, limit: int) -> list[str] | None:
        """Ids of the tenant's memories stored or updated by the log's events in
        (``after``, ``upto``], each once, in log order; None when there are more than
        ``limit`` events (a full pass is then the cheaper read) or the log no longer holds
        them all (purged by a retention limit)."""
        ...
