"""``relevance_score``: the decay pass's formula. Pure: ``now`` is an argument.

Per memory, with ``age_days`` from ``timestamp`` and ``idle_days`` from the last access
(a memory never accessed counts as touched at its ``timestamp``)::

    decay  = exp(-rate · age_days)
    access = 1                               if idle_days <= recent_access_days
             exp(-access_rate · idle_days)   otherwise
    rel    = 1 + relation_weight · ln(1 + relations)
    raw    = decay · (base + access_weight · access) · rel
             · (importance_offset + importance)
             · (confidence_base + confidence_weight · confidence)
    score  = min(ceiling, max(floor_per_importance · importance, raw))

The floor keeps an important memory findable however old it gets; the ceiling keeps the
score a [0, 1] component for recall. Importance and confidence are the memory's own
(clamped to [0, 1]); ``relations`` is the caller's count of memory-to-memory edges
touching it (``relation_counts``).

A daily pass moves most scores a little. ``needs_write`` says whether a fresh score
differs from the stored one by more than ``epsilon``, so the pass writes only those;
since the comparison is with what is *stored*, skipped changes add up and are written
once they exceed ``epsilon``: a stored score is never further than ``epsilon`` from the
truth as of the last pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING

from engram_core.model import Memory, Relation
from engram_core.relations import RelationType

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class DecaySettings:
    """Every constant of the formula. Field metadata carries the description a service's
    pydantic settings reuse (``descriptions()``)."""

    rate: float = field(
        default=0.01,
        metadata={"description": "Decay per day of age: decay = exp(-rate * age_days)."},
    )
    recent_access_days: float = field(
        default=1.0,
        metadata={"description": "Accessed within this many days: the access term is 1."},
    )
    access_rate: float = field(
        default=0.05,
        metadata={
            "description": "Otherwise the access term is exp(-access_rate * days_since_access)."
        },
    )
    relation_weight: float = field(
        default=0.3,
        metadata={"description": "rel = 1 + relation_weight * ln(1 + relations)."},
    )
    base: float = field(
        default=0.3,
        metadata={"description": "Part of the score an unused memory keeps: (base + ...)."},
    )
    access_weight: float = field(
        default=0.3,
        metadata={"description": "Weight of the access term: (base + access_weight * access)."},
    )
    importance_offset: float = field(
        default=0.5,
        metadata={"description": "Importance factor is (importance_offset + importance)."},
    )
    confidence_base: float = field(
        default=0.7,
        metadata={"description": "Confidence factor is (confidence_base + confidence_weight * c)."},
    )
    confidence_weight: float = field(
        default=0.3,
        metadata={"description": "Weight of confidence in its factor (see confidence_base)."},
    )
    floor_per_importance: float = field(
        default=0.3,
        metadata={"description": "Lower clamp of the score: floor_per_importance * importance."},
    )
    ceiling: float = field(default=1.0, metadata={"description": "Upper clamp of the score."})
    epsilon: float = field(
        default=0.005,
        metadata={
            "description": "A fresh score is written only when it differs from the stored "
            "one by more than this (a daily pass then rewrites few memories)."
        },
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{f.name} must be finite and >= 0, got {value!r}")
        if not 0 < self.ceiling <= 1:
            raise ValueError(f"ceiling must be in (0, 1], got {self.ceiling!r}")
        if self.floor_per_importance > self.ceiling:
            raise ValueError("floor_per_importance must not exceed ceiling")


_DEFAULTS = DecaySettings()  # built once: the checks in __post_init__ are not free


def descriptions(settings_type: type[DataclassInstance]) -> Mapping[str, str]:
    """Field name → description of a consolidation settings dataclass (``DecaySettings``,
    ``ForgetSettings``, ``AssociationSettings``, ``ClusterSettings``), for the worker's
    pydantic settings to reuse."""
    return {f.name: str(f.metadata.get("description", "")) for f in fields(settings_type)}


@dataclass(frozen=True, slots=True)
class Relevance:
    """The score with the factors it came from (for dry-run reports and tests)."""

    score: float
    raw: float
    decay: float
    access: float
    rel: float
    age_days: float
    idle_days: float


def _days(later: datetime, earlier: datetime) -> float:
    # A timestamp in the future (client clock skew) counts as now, not as negative age.
    return max(0.0, (later - earlier).total_seconds() / _SECONDS_PER_DAY)


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x)) if math.isfinite(x) else 0.0


def compute(
    memory: Memory, relations: int, now: datetime, settings: DecaySettings | None = None
) -> Relevance:
    """The relevance of ``memory`` at ``now`` with ``relations`` edges to other memories."""
    s = settings or _DEFAULTS
    age_days = _days(now, memory.timestamp)
    touched = memory.last_accessed if memory.last_accessed is not None else memory.timestamp
    idle_days = _days(now, touched)
    importance = _unit(memory.importance)
    confidence = _unit(memory.confidence)

    decay = math.exp(-s.rate * age_days)
    access = 1.0 if idle_days <= s.recent_access_days else math.exp(-s.access_rate * idle_days)
    rel = 1.0 + s.relation_weight * math.log1p(max(0, relations))
    raw = (
        decay
        * (s.base + s.access_weight * access)
        * rel
        * (s.importance_offset + importance)
        * (s.confidence_base + s.confidence_weight * confidence)
    )
    score = min(s.ceiling, max(s.floor_per_importance * importance, raw))
    return Relevance(score, raw, decay, access, rel, age_days, idle_days)


def relevance_score(
    memory: Memory, relations: int, now: datetime, settings: DecaySettings | None = None
) -> float:
    return compute(memory, relations, now, settings).score


def needs_write(stored: float, fresh: float, settings: DecaySettings | None = None) -> bool:
    """True when ``fresh`` should replace ``stored``: they differ by more than epsilon (a
    stored value that is not a finite number is always replaced)."""
    s = settings or _DEFAULTS
    return not math.isfinite(stored) or abs(fresh - stored) > s.epsilon


def relation_counts(ids: Iterable[str], relations: Iterable[Relation]) -> dict[str, int]:
    """Edges to other memories touching each of ``ids``, either direction, each edge once.

    MENTIONS (memory → entity) and self-loops do not count: the term measures how
    connected a memory is to other memories.
    """
    counts = dict.fromkeys(ids, 0)
    seen: set[tuple[str, str, str]] = set()
    for r in relations:
        key = (r.source_id, r.target_id, r.type)
        if r.type == RelationType.MENTIONS or r.source_id == r.target_id or key in seen:
            continue
        seen.add(key)
        for end in (r.source_id, r.target_id):
            if end in counts:
                counts[end] += 1
    return counts
