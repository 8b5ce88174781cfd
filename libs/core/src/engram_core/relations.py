"""The one registry of relation types (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from engram_core.errors import InvalidArgument


class RelationType(StrEnum):
    RELATES_TO = "RELATES_TO"
    LEADS_TO = "LEADS_TO"
    OCCURRED_BEFORE = "OCCURRED_BEFORE"
    PREFERS_OVER = "PREFERS_OVER"
    EXEMPLIFIES = "EXEMPLIFIES"
    CONTRADICTS = "CONTRADICTS"
    REINFORCES = "REINFORCES"
    INVALIDATED_BY = "INVALIDATED_BY"
    EVOLVED_INTO = "EVOLVED_INTO"
    DERIVED_FROM = "DERIVED_FROM"
    PART_OF = "PART_OF"
    # System edges: written by workers, not by clients.
    SIMILAR_TO = "SIMILAR_TO"
    PRECEDED_BY = "PRECEDED_BY"
    MENTIONS = "MENTIONS"
    SUMMARIZES = "SUMMARIZES"


SYSTEM_TYPES: frozenset[RelationType] = frozenset(
    {
        RelationType.SIMILAR_TO,
        RelationType.PRECEDED_BY,
        RelationType.MENTIONS,
        RelationType.SUMMARIZES,
    }
)
USER_TYPES: frozenset[RelationType] = frozenset(RelationType) - SYSTEM_TYPES
# Edges between two memories (MENTIONS ends at an entity).
MEMORY_EDGE_TYPES: frozenset[str] = frozenset(t.value for t in RelationType) - {"MENTIONS"}
DEFAULT_STRENGTH = 0.5
# Who made an edge: an agent through the API, or a worker (consolidation's passes).
ORIGIN_USER = "user"
ORIGIN_SYSTEM = "system"
ORIGINS: tuple[str, ...] = (ORIGIN_USER, ORIGIN_SYSTEM)


def parse_relation_type(value: str) -> RelationType | None:
    try:
        return RelationType(value.strip().upper())
    except ValueError:
        return None


def relation_versions(count: int, version: int, versions: Sequence[int]) -> list[int]:
    """The version of each of ``count`` relations: ``versions`` (one each) or ``version`` for all.

    Ingest batches the edges of several events in one call, each with its own event's version,
    so the version guard stays per edge."""
    if versions and len(versions) != count:
        raise InvalidArgument(
            "versions", f"one per relation ({count}) or none, got {len(versions)}"
        )
    return list(versions) or [version] * count
