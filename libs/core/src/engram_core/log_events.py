"""The memory log's events as its readers see them, and which of them can never be applied.

Ingest (which applies them to the stores) and consolidate's state keeper (which keeps the
state they leave) read the same log; one definition keeps their idea of a valid event the
same. Decoding from the wire lives in ``engram_platform.log_events``.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_core.model import Memory, Relation
from engram_core.relations import MEMORY_EDGE_TYPES, parse_relation_type


@dataclass(frozen=True, slots=True)
class MemoryWritten:
    """MemoryStored or MemoryUpdated: the whole memory as it should now be."""

    memory: Memory
    sequence: int
    created: bool = False  # MemoryStored (a new memory), not MemoryUpdated
    # The client's own vector of the content (checked by the gateway); () = embed it.
    embedding: tuple[float, ...] = ()

    @property
    def tenant(self) -> str:
        return self.memory.tenant


@dataclass(frozen=True, slots=True)
class MemoryRemoved:
    tenant: str
    id: str
    sequence: int


@dataclass(frozen=True, slots=True)
class RelationLinked:
    tenant: str
    relation: Relation
    sequence: int


@dataclass(frozen=True, slots=True)
class RelationUnlinked:
    """RelationRemoved: the edge (source, target, type) is gone; the relation's origin says
    who removed it (a system removal leaves a user edge alone)."""

    tenant: str
    relation: Relation
    sequence: int


@dataclass(frozen=True, slots=True)
class TenantErased:
    """TenantDeleted: everything of the tenant written before ``sequence`` is gone."""

    tenant: str
    sequence: int


Event = MemoryWritten | MemoryRemoved | RelationLinked | RelationUnlinked | TenantErased


def invalid(event: Event) -> str:
    """Why an event can never be applied, or "" when it can (decided from the event alone)."""
    if not event.tenant:
        return "missing tenant"
    if event.sequence <= 0:
        return "missing log sequence"
    if isinstance(event, MemoryWritten):
        if not event.memory.id:
            return "missing memory id"
        if not event.memory.content.strip():
            return "empty content"
    elif isinstance(event, MemoryRemoved):
        if not event.id:
            return "missing memory id"
    elif isinstance(event, TenantErased):
        return ""
    else:
        relation = event.relation
        if not relation.source_id or not relation.target_id:
            return "relation without source or target"
        rel_type = parse_relation_type(relation.type)
        if rel_type is None or rel_type.value not in MEMORY_EDGE_TYPES:
            return f"unknown relation type {relation.type!r}"
        if relation.source_id == relation.target_id:
            return "relation of a memory to itself"
    return ""
