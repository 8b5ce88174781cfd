"""Associations: which edges the consolidation worker proposes, and which of
those it may write. Pure: neighbours, candidates, existing edges and ``now`` come in.

Rules, each edge with ``origin = "system"`` and a strength in [0, 1]:

* **SIMILAR_TO** from a memory's nearest neighbours (the vector service's answer, not a
  loop over the tenant): cosine at or above ``similar_min_cosine``, at most
  ``similar_max_per_memory`` per memory searched, strength = the cosine. Similarity is
  symmetric, so each pair is one edge, stored from the smaller id to the larger; an
  edge already held the other way round is that same edge (``edge_key``).
* **PRECEDED_BY** from a memory to its predecessors in the same session/source — the
  key given by ``sequence_key`` (``tag:<prefix>``, ``metadata:<key>`` or a bare name:
  metadata key, else tag prefix; the same spec as recall's ``diversify_by``) — that lie
  at most ``preceded_window_hours`` before the memory's own ``timestamp`` (ties on the
  timestamp are ordered by id: UUIDv7 ids follow arrival). The nearest
  ``preceded_max`` only; strength falls linearly from 1 (same instant) to
  ``preceded_min_strength`` (the window's edge).
* **Typed links** (CONTRADICTS, EXEMPLIFIES, INVALIDATED_BY…): none. No rule available
  without a language model is clear enough: "uses X" and "no longer uses X" are near
  neighbours in embedding space, so similarity cannot tell a contradiction from a
  paraphrase, and recall acts on these types (INVALIDATED_BY and EVOLVED_INTO hide
  memories, CONTRADICTS is shown to agents) — a wrong one does more harm than a missing
  one. Clients still author them; ``reconcile`` handles any type should a rule come.

``reconcile`` turns proposals into writes: never over an edge someone else authored
(any origin other than ``system`` counts as a user's), nothing for a system edge whose
strength moved by at most ``strength_epsilon``, an update (in the stored direction)
otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from engram_core.model import META_PATTERN, Memory, Relation
from engram_core.relations import ORIGIN_SYSTEM, RelationType
from engram_core.tags import normalise_tag

SYMMETRIC_TYPES: frozenset[str] = frozenset({RelationType.SIMILAR_TO.value})
"""Types whose edge means the same either way round: one edge per unordered pair."""

RULE_SIMILARITY = "similarity"
RULE_SEQUENCE = "sequence"


@dataclass(frozen=True, slots=True)
class SequenceKey:
    """Where a memory's session/source key comes from: a tag prefix, a metadata key, or
    either (metadata first)."""

    name: str
    tag: bool = True
    metadata: bool = True

    @classmethod
    def parse(cls, spec: str) -> SequenceKey:
        """``tag:<prefix>``, ``metadata:<key>`` (dots read nested objects) or ``<name>``."""
        text = spec.strip()
        source, sep, name = text.partition(":")
        if sep and source.lower() == "tag":
            key = cls(name, metadata=False)
        elif sep and source.lower() in ("metadata", "meta"):
            key = cls(name, tag=False)
        else:
            key = cls(text)
        if not key.name or any(c.isspace() for c in key.name):
            raise ValueError(f"sequence key {spec!r}: expected tag:<p>, metadata:<k> or <name>")
        return key

    def of(self, memory: Memory) -> str | None:
        """The key of ``memory``, or None when it has none (it then has no predecessors)."""
        if self.metadata:
            value = _metadata_value(memory.metadata, self.name)
            if value is not None:
                return f"metadata:{self.name}={value}"
        if self.tag:
            prefix = normalise_tag(self.name) + ":"
            found = sorted(t for t in memory.tags if t.startswith(prefix))
            if found:
                # The segment right under the prefix: "session:3:turn:7" → "session:3".
                return prefix + found[0][len(prefix) :].split(":", 1)[0]
        return None


def _metadata_value(metadata: Any, path: str) -> str | None:
    value = metadata
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass(frozen=True, slots=True)
class AssociationSettings:
    similar_min_cosine: float = field(
        default=0.92,
        metadata={
            "description": "Least cosine for a SIMILAR_TO edge. Depends on the embedding "
            "model: 0.92 for bge-small-en-v1.5 (the default), 0.85 for all-MiniLM-L6-v2."
        },
    )
    similar_max_per_memory: int = field(
        default=5, metadata={"description": "Most SIMILAR_TO edges proposed per memory searched."}
    )
    sequence_key: str = field(
        default="session",
        metadata={
            "description": "Session/source of a memory for PRECEDED_BY: tag:<prefix>, "
            "metadata:<key> or <name> (metadata key, else tag prefix)."
        },
    )
    preceded_window_hours: float = field(
        default=24.0,
        metadata={"description": "Predecessors lie at most this long before the memory."},
    )
    preceded_max: int = field(
        default=1, metadata={"description": "Most PRECEDED_BY edges per memory, nearest first."}
    )
    preceded_min_strength: float = field(
        default=0.5,
        metadata={"description": "Strength of a PRECEDED_BY edge at the window's edge (1 at 0)."},
    )
    strength_epsilon: float = field(
        default=0.02,
        metadata={"description": "A system edge is rewritten only if its strength moves more."},
    )

    def __post_init__(self) -> None:
        for name in ("similar_min_cosine", "preceded_min_strength"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if not (math.isfinite(self.preceded_window_hours) and self.preceded_window_hours > 0):
            raise ValueError("preceded_window_hours must be > 0")
        if self.similar_max_per_memory < 0 or self.preceded_max < 0:
            raise ValueError("similar_max_per_memory and preceded_max must be >= 0")
        if not (math.isfinite(self.strength_epsilon) and self.strength_epsilon >= 0):
            raise ValueError("strength_epsilon must be finite and >= 0")
        SequenceKey.parse(self.sequence_key)

    @property
    def key(self) -> SequenceKey:
        return SequenceKey.parse(self.sequence_key)


_DEFAULTS = AssociationSettings()  # built once: the checks in __post_init__ are not free


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One hit of the vector search for ``id``: ``neighbour_id`` at cosine ``cosine``."""

    id: str
    neighbour_id: str
    cosine: float


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


def similar_to(
    neighbours: Iterable[Neighbour], now: datetime, settings: AssociationSettings | None = None
) -> list[Relation]:
    """SIMILAR_TO proposals, one per unordered pair (the highest cosine seen), sorted."""
    s = settings or _DEFAULTS
    per_memory: dict[str, list[Neighbour]] = {}
    for n in neighbours:
        if n.id != n.neighbour_id and math.isfinite(n.cosine) and n.cosine >= s.similar_min_cosine:
            per_memory.setdefault(n.id, []).append(n)
    best: dict[tuple[str, str], float] = {}
    for hits in per_memory.values():
        hits.sort(key=lambda n: (-n.cosine, n.neighbour_id))
        for n in hits[: s.similar_max_per_memory]:
            pair = (min(n.id, n.neighbour_id), max(n.id, n.neighbour_id))
            best[pair] = max(best.get(pair, -1.0), n.cosine)
    return [
        Relation(
            source_id=a,
            target_id=b,
            type=RelationType.SIMILAR_TO.value,
            strength=_unit(cosine),
            properties={"rule": RULE_SIMILARITY, "cosine": round(cosine, 4)},
            origin=ORIGIN_SYSTEM,
            created_at=now,
        )
        for (a, b), cosine in sorted(best.items())
    ]


def preceded_by(
    memory: Memory,
    candidates: Iterable[Memory],
    now: datetime,
    settings: AssociationSettings | None = None,
) -> list[Relation]:
    """PRECEDED_BY proposals from ``memory`` to its nearest predecessors among
    ``candidates`` (the caller's fetch of the same key and window; others are ignored)."""
    s = settings or _DEFAULTS
    spec = s.key
    key = spec.of(memory)
    if key is None or memory.type == META_PATTERN or s.preceded_max == 0:
        return []
    window = timedelta(hours=s.preceded_window_hours)
    here = (memory.timestamp, memory.id)
    found = {
        c.id: c
        for c in candidates
        if c.type != META_PATTERN
        and (c.timestamp, c.id) < here
        and memory.timestamp - c.timestamp <= window
        and spec.of(c) == key
    }
    nearest = sorted(found.values(), key=lambda c: (c.timestamp, c.id), reverse=True)
    out = []
    for c in nearest[: s.preceded_max]:
        gap = memory.timestamp - c.timestamp
        strength = 1.0 - (1.0 - s.preceded_min_strength) * (gap / window)
        out.append(
            Relation(
                source_id=memory.id,
                target_id=c.id,
                type=RelationType.PRECEDED_BY.value,
                strength=_unit(strength),
                properties={"rule": RULE_SEQUENCE, "key": key, "gap_s": gap.total_seconds()},
                origin=ORIGIN_SYSTEM,
                created_at=now,
            )
        )
    return out


# --- reconciling proposals with what the graph holds --------------------------------------


def edge_key(r: Relation) -> tuple[str, str, str]:
    """What identifies an edge in the graph: (source, target, type), with the ends of a
    symmetric type in sorted order."""
    if r.type in SYMMETRIC_TYPES and r.target_id < r.source_id:
        return (r.target_id, r.source_id, r.type)
    return (r.source_id, r.target_id, r.type)


class Change(StrEnum):
    CREATE = "create"
    UPDATE = "update"


@dataclass(frozen=True, slots=True)
class EdgeWrite:
    relation: Relation
    change: Change
    previous_strength: float | None = None  # the stored edge's, for an update


@dataclass(frozen=True, slots=True)
class EdgePlan:
    writes: tuple[EdgeWrite, ...]
    unchanged: int  # system edges already there with (about) the same strength
    user_owned: tuple[Relation, ...]  # proposals dropped: an edge of another origin holds the key


def reconcile(
    proposals: Iterable[Relation],
    existing: Iterable[Relation],
    settings: AssociationSettings | None = None,
) -> EdgePlan:
    """The writes that carry ``proposals`` into a graph holding ``existing`` (the stored
    edges touching the proposals' memories), never overwriting another origin's edge.

    Proposals with the same key collapse to the strongest. An update keeps the stored
    edge's direction and ``created_at``, so it rewrites that edge rather than adding a
    mirror of it.
    """
    s = settings or _DEFAULTS
    held: dict[tuple[str, str, str], list[Relation]] = {}
    for r in existing:
        held.setdefault(edge_key(r), []).append(r)
    wanted: dict[tuple[str, str, str], Relation] = {}
    for p in proposals:
        key = edge_key(p)
        if key not in wanted or p.strength > wanted[key].strength:
            wanted[key] = p
    writes: list[EdgeWrite] = []
    unchanged = 0
    user_owned: list[Relation] = []
    for key in sorted(wanted):
        proposal = replace(wanted[key], origin=ORIGIN_SYSTEM)
        stored = held.get(key, [])
        if any(r.origin != ORIGIN_SYSTEM for r in stored):
            user_owned.append(proposal)
        elif not stored:
            writes.append(EdgeWrite(proposal, Change.CREATE))
        elif all(abs(r.strength - proposal.strength) <= s.strength_epsilon for r in stored):
            unchanged += 1
        else:
            first = min(stored, key=lambda r: (r.source_id, r.target_id))
            update = replace(
                proposal,
                source_id=first.source_id,
                target_id=first.target_id,
                created_at=first.created_at,
            )
            writes.append(EdgeWrite(update, Change.UPDATE, first.strength))
    return EdgePlan(tuple(writes), unchanged, tuple(user_owned))
