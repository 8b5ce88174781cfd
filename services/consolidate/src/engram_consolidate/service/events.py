"""What access tracking consumes (decoded MemoryAccessed events) and what it says about each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engram_core.outcomes import APPLIED, Outcome, Result


@dataclass(frozen=True, slots=True)
class Accessed:
    """Memories a recall returned to the tenant at accessed_at."""

    tenant: str
    ids: tuple[str, ...]
    accessed_at: datetime
    sequence: int


__all__ = ["APPLIED", "Outcome", "Result"]
