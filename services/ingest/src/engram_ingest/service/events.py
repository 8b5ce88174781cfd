"""What the ingest service consumes (decoded log events) and what it says about each."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engram_core.model import Memory, Relation


@dataclass(frozen=True, slots=True)
class MemoryWritten:
    """MemoryStored or MemoryUpdated: the whole memory as it should now be."""

    memory: Memory
    sequence: int

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


Event = MemoryWritten | MemoryRemoved | RelationLinked


class Outcome(StrEnum):
    APPLIED = "applied"  # in all three stores (or already there): ack
    RETRY = "retry"  # a dependency failed; try again later: nak with backoff
    POISON = "poison"  # can never be applied: dead-letter and term


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""


APPLIED = Result(Outcome.APPLIED)
