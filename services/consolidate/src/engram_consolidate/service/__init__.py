"""Consolidation logic over ports (this issue: access tracking; decay and the rest are #5)."""

from engram_consolidate.service.access import AccessStats, AccessTracker
from engram_consolidate.service.events import Accessed, Outcome, Result
from engram_consolidate.service.ports import AccessStore, AccessWriter

__all__ = [
    "AccessStats",
    "AccessStore",
    "AccessTracker",
    "AccessWriter",
    "Accessed",
    "Outcome",
    "Result",
]
