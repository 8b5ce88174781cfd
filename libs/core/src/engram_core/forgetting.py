"""Forgetting: keep, archive or delete one memory, and why. Pure.

Rules, first match wins (with ``archive_below`` unset — the default — every memory is
kept, reason ``off``):

1. **Protected** → keep. In this order, so the reason names the strongest protection:
   the protection flag (a tag in ``protect_tags`` — prefix match, so ``pinned:legal``
   counts — or a metadata key in ``protect_metadata_keys`` set to ``true``; ``Memory``
   has no flag field of its own), a type in ``protected_types``, importance at or above
   ``protect_importance``, younger than ``protect_younger_than_days`` (by ``timestamp``),
   written within ``protect_updated_within_days`` (by ``updated_at``).
2. Score not a finite number → keep (never act on a broken input).
3. **Delete**: ``delete_below`` is set, the memory is *already archived*, and its score is
   below ``delete_below``. A memory is archived first and deleted on a later pass, never
   in one step, so an archived memory stays restorable for at least the
   ``protect_updated_within_days`` window (the archive write sets ``updated_at``).
4. **Archive**: ``archive_below`` is set, the memory is not archived, and its score is
   below ``archive_below``.
5. Otherwise keep (reason: thresholds off, already archived, or at/above the threshold).
   An archived memory whose score has risen is *not* restored automatically: archiving
   is visible to users, so only a user restores.

Both thresholds are off by default. ``score`` is the caller's: pass the one the decay
formula gives at the pass's ``now`` (``relevance.compute``), not a stored value that may
be stale or never written (0.0 for a memory no decay pass has seen).

Restore: an ``Update`` of the memory with ``archived = false`` (update mask
``archived``) through the gateway, like any edit. It sets ``updated_at``, so rule 1
protects the restored memory for ``protect_updated_within_days``; after that it decays
like any other and, still unused, is archived again. To keep a memory for good, give it
a protection tag. Writes of the consolidation worker itself must not touch
``updated_at`` except when archiving: a decay write that did would protect everything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from engram_core.model import META_PATTERN, Memory
from engram_core.tags import normalise_tag, tag_prefixes


@dataclass(frozen=True, slots=True)
class ForgetSettings:
    archive_below: float | None = field(
        default=None,
        metadata={"description": "Archive unprotected memories scoring below this (None: off)."},
    )
    delete_below: float | None = field(
        default=None,
        metadata={
            "description": "Delete archived unprotected memories scoring below this "
            "(None: off); requires archive_below and must not exceed it."
        },
    )
    protect_tags: tuple[str, ...] = field(
        default=("pinned", "protected"),
        metadata={"description": "A memory with one of these tags (or a sub-tag) is protected."},
    )
    protect_metadata_keys: tuple[str, ...] = field(
        default=("pinned", "protected"),
        metadata={"description": "A memory whose metadata has one of these keys = true is kept."},
    )
    protected_types: frozenset[str] = field(
        default=frozenset({"Decision", "Insight", META_PATTERN}),
        metadata={
            "description": "Types never forgotten. MetaPattern: the cluster pass owns those."
        },
    )
    protect_importance: float = field(
        default=0.7,
        metadata={"description": "Importance at or above this protects a memory."},
    )
    protect_younger_than_days: float = field(
        default=30.0,
        metadata={"description": "Memories younger than this (by timestamp) are protected."},
    )
    protect_updated_within_days: float = field(
        default=30.0,
        metadata={
            "description": "Memories written within this many days (updated_at: edits, "
            "restores, archiving) are protected; also the least time between archive "
            "and delete."
        },
    )

    def __post_init__(self) -> None:
        for name in ("archive_below", "delete_below"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if self.delete_below is not None:
            if self.archive_below is None:
                raise ValueError("delete_below needs archive_below: memories are archived first")
            if self.delete_below > self.archive_below:
                raise ValueError("delete_below must not exceed archive_below")
        for name in ("protect_importance", "protect_younger_than_days"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not (
            math.isfinite(self.protect_updated_within_days)
            and self.protect_updated_within_days >= 0
        ):
            raise ValueError("protect_updated_within_days must be finite and >= 0")


_DEFAULTS = ForgetSettings()  # built once: the checks in __post_init__ are not free


class Action(StrEnum):
    KEEP = "keep"
    ARCHIVE = "archive"
    DELETE = "delete"


class Reason(StrEnum):
    PROTECTED_FLAG = "protected_flag"
    PROTECTED_TYPE = "protected_type"
    IMPORTANT = "important"
    YOUNG = "young"
    RECENTLY_UPDATED = "recently_updated"
    BAD_SCORE = "bad_score"
    BELOW_DELETE = "below_delete"
    BELOW_ARCHIVE = "below_archive"
    OFF = "off"  # the threshold that would apply is not set
    ALREADY_ARCHIVED = "already_archived"  # archived, not (yet) deletable
    ABOVE_THRESHOLD = "above_threshold"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason

    @property
    def changes(self) -> bool:
        return self.action is not Action.KEEP


def _flagged(memory: Memory, s: ForgetSettings) -> bool:
    if s.protect_tags:
        have = set(memory.tag_prefixes) or set(tag_prefixes(memory.tags))
        if any(normalise_tag(t) in have for t in s.protect_tags):
            return True
    # Strictly the JSON value true: "false" or 1 are not a deliberate flag.
    return any(memory.metadata.get(k) is True for k in s.protect_metadata_keys)


def protection(memory: Memory, now: datetime, settings: ForgetSettings) -> Reason | None:
    """Why ``memory`` may not be forgotten at ``now``, or None."""
    s = settings
    if _flagged(memory, s):
        return Reason.PROTECTED_FLAG
    if memory.type in s.protected_types:
        return Reason.PROTECTED_TYPE
    if memory.importance >= s.protect_importance:
        return Reason.IMPORTANT
    if now - memory.timestamp < timedelta(days=s.protect_younger_than_days):
        return Reason.YOUNG
    if now - memory.updated_at < timedelta(days=s.protect_updated_within_days):
        return Reason.RECENTLY_UPDATED
    return None


def decide(
    memory: Memory, score: float, now: datetime, settings: ForgetSettings | None = None
) -> Decision:
    """What forgetting does with ``memory`` whose relevance at ``now`` is ``score``."""
    s = settings or _DEFAULTS
    if s.archive_below is None:  # delete_below needs it (checked by the settings)
        return Decision(Action.KEEP, Reason.OFF)
    protected = protection(memory, now, s)
    if protected is not None:
        return Decision(Action.KEEP, protected)
    if not math.isfinite(score):
        return Decision(Action.KEEP, Reason.BAD_SCORE)
    if memory.archived:
        if s.delete_below is None:
            return Decision(Action.KEEP, Reason.OFF)
        if score < s.delete_below:
            return Decision(Action.DELETE, Reason.BELOW_DELETE)
        return Decision(Action.KEEP, Reason.ALREADY_ARCHIVED)
    if s.archive_below is not None and score < s.archive_below:
        return Decision(Action.ARCHIVE, Reason.BELOW_ARCHIVE)
    return Decision(Action.KEEP, Reason.ABOVE_THRESHOLD)
