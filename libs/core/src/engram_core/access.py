"""Access statistics only move forward: one rule for every store and fake.

``last_accessed``/``access_count`` are written by UpdateAccess, whose events may arrive out of
order, and carried (usually stale) by upserts. Whatever writes them keeps the newer pair; on a
tie the incoming one wins.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from engram_core.model import AccessUpdate, Memory


def is_newer_access(incoming: datetime | None, stored: datetime | None) -> bool:
    """True when statistics accessed at ``incoming`` may replace those from ``stored``
    (None: never accessed)."""
    return stored is None or (incoming is not None and incoming >= stored)


def keep_access(new: Memory, old: Memory) -> Memory:
    """``new`` (an upsert replacing ``old``) with ``old``'s access statistics when those are
    more recent: an upsert carries content, not access."""
    if is_newer_access(new.last_accessed, old.last_accessed):
        return new
    return replace(new, last_accessed=old.last_accessed, access_count=old.access_count)


def keep_derived(new: Memory, old: Memory) -> Memory:
    """``new`` (an upsert replacing the live ``old``) keeping the derived state ``old`` has
    more of: newer access statistics, a higher relevance_score (the rule of the ports)."""
    kept = keep_access(new, old)
    if old.relevance_score > kept.relevance_score:
        kept = replace(kept, relevance_score=old.relevance_score)
    return kept


def apply_access(m: Memory, update: AccessUpdate) -> Memory | None:
    """``m`` with the statistics of ``update``, or None when ``update`` is older than them."""
    if not is_newer_access(update.last_accessed, m.last_accessed):
        return None
    return replace(m, last_accessed=update.last_accessed, access_count=update.access_count)
