"""What access tracking consumes (decoded MemoryAccessed events) and what it says about each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Accessed:
    """Memories a recall returned to the tenant at accessed_at."""

    tenant: str
    ids: tuple[str, ...]
    accessed_at: datetime
    sequence: int


class Outcome(StrEnum):
    APPLIED = "applied"  # counted in all three stores (or the memory is gone): ack
    RETRY = "retry"  # a store failed; try again later: nak with backoff
    POISON = "poison"  # can never be applied: dead-letter and term


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""


APPLIED = Result(Outcome.APPLIED)
