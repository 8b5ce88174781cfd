"""What the ingest service consumes (decoded log events) and what it says about each."""

from __future__ import annotations

from dataclasses import dataclass

from engram_core.model import Memory, Relation
from engram_core.outcomes import APPLIED, Outcome, Result


@dataclass(frozen=True, slots=True)
class MemoryWritten:
    """MemoryStored or MemoryUpdated: the whole memory as it should now be."""

    memory: Memory
    sequence: int
    created: bool = False  # MemoryStored (a new memory), not MemoryUpdated

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


Event = MemoryWritten | MemoryRemoved | RelationLinked | RelationUnlinked

__all__ = ["APPLIED", "Outcome", "Result"]
