"""Domain types (DESIGN §2). Frozen dataclasses; times are aware UTC datetimes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

DEFAULT_TYPE = "Memory"
DEFAULT_IMPORTANCE = 0.5
DEFAULT_CONFIDENCE = 0.9
META_PATTERN = "MetaPattern"
MEMORY_TYPES: frozenset[str] = frozenset(
    {
        "Decision",
        "Pattern",
        "Preference",
        "Style",
        "Habit",
        "Insight",
        "Context",
        "Memory",
        META_PATTERN,
    }
)
ENTITY_KINDS: frozenset[str] = frozenset(
    {"people", "tools", "projects", "concepts", "organizations", "places"}
)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    tenant: str
    content: str
    type: str = DEFAULT_TYPE
    tags: tuple[str, ...] = ()
    tag_prefixes: tuple[str, ...] = ()
    importance: float = DEFAULT_IMPORTANCE
    confidence: float = DEFAULT_CONFIDENCE
    metadata: Mapping[str, Any] = field(default_factory=dict)
    timestamp: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    last_accessed: datetime | None = None
    access_count: int = 0
    t_valid: datetime | None = None
    t_invalid: datetime | None = None
    relevance_score: float = 0.0
    archived: bool = False
    embedding_model: str = ""
    version: int = 0
    entities: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Entity:
    kind: str
    slug: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.slug}"

    @property
    def tag(self) -> str:
        return f"entity:{self.kind}:{self.slug}"


@dataclass(frozen=True, slots=True)
class Relation:
    source_id: str
    target_id: str
    type: str
    strength: float = 0.5
    properties: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "user"
    created_at: datetime = field(default_factory=utcnow)


class TagMode(Enum):
    ANY = "any"
    ALL = "all"


class TagMatch(Enum):
    EXACT = "exact"
    PREFIX = "prefix"


@dataclass(frozen=True, slots=True)
class Filter:
    """What every index filters on, with the same semantics in every adapter.

    Tags are normalised (lower-case, ``/`` → ``:``). With ``TagMatch.PREFIX`` a tag
    ``a:b`` matches memories tagged ``a:b`` or ``a:b:c`` (via ``tag_prefixes``).
    ``exclude_tags`` always excludes by prefix (which includes the exact tag).
    ``start``/``end`` bound ``timestamp`` inclusively. Archived memories are hidden
    unless ``include_archived``.
    """

    tags: tuple[str, ...] = ()
    tag_mode: TagMode = TagMode.ANY
    tag_match: TagMatch = TagMatch.EXACT
    exclude_tags: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    include_archived: bool = False


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    memory: Memory | None = None


@dataclass(frozen=True, slots=True)
class AccessUpdate:
    id: str
    last_accessed: datetime
    access_count: int


@dataclass(frozen=True, slots=True)
class RelevanceUpdate:
    """A ``relevance_score`` the decay pass computed for one memory."""

    id: str
    relevance_score: float


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of a store's scan; ``next_cursor`` None means there is nothing after it."""

    memories: list[Memory]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Generation:
    """One index generation of a store (vector, lexical). The live one serves reads and
    writes that name no generation; another is filled beside it (a rebuild), then swapped in.
    ``embedding_model`` is what its vectors come from ("" on lexical); ``count`` its live
    memories over every tenant."""

    name: str
    live: bool
    embedding_model: str
    count: int
    created_at: datetime
    dimension: int = 0  # the size of its vectors (0 on lexical)


@dataclass(frozen=True, slots=True)
class RelatedHit:
    id: str
    type: str
    strength: float
    depth: int


@dataclass(frozen=True, slots=True)
class UpsertResult:
    applied: int
    skipped: int
