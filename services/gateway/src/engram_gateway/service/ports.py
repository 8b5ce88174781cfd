"""What the gateway needs from the internal services and from the log.

The engram_clients classes satisfy the three index ports as they are; scoring and the
log get thin adapters (they speak protos). Unit tests put fakes behind these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from engram_core.entities import EntityRules
from engram_core.log_events import Event
from engram_core.model import (
    Filter,
    Generation,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    ScanPage,
)
from engram_core.ordering import Sort
from engram_core.scoring import Candidate, Focus, Fusion, RecencyBias, ScoredCandidate


class VectorPort(Protocol):
    async def search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[Hit]: ...

    async def search_many(
        self,
        tenant: str,
        flts: Sequence[Filter],
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[list[Hit]]:
        """One hit list per filter, in order (one call: the context step's windows)."""
        ...

    async def get(
        self, tenant: str, ids: Sequence[str], timeout: float | None = None
    ) -> list[Memory]: ...

    async def count(self, tenant: str, timeout: float | None = None) -> int: ...

    async def list_generations(self, timeout: float | None = None) -> list[Generation]:
        """Every generation; the live one's ``dimension`` is what a client's vector needs."""
        ...

    async def scan_by_sequence(
        self, tenant: str, cursor: str | None, limit: int, timeout: float | None = None
    ) -> ScanPage:
        """Every live memory of the tenant (archived included) by the version that last
        wrote it, ties by id (List; `engram_core.ports.VectorIndex.scan_by_sequence`)."""
        ...


class LexicalPort(Protocol):
    async def search(
        self, tenant: str, query: str, flt: Filter, limit: int, timeout: float | None = None
    ) -> list[Hit]: ...

    async def top(
        self, tenant: str, flt: Filter, sort: Sort, limit: int, timeout: float | None = None
    ) -> list[Memory]:
        """Trending: the listing without text (`engram_core.ordering`)."""
        ...

    async def get(
        self, tenant: str, ids: Sequence[str], timeout: float | None = None
    ) -> list[Memory]: ...

    async def count(self, tenant: str, timeout: float | None = None) -> int: ...


class GraphPort(Protocol):
    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
        timeout: float | None = None,
    ) -> list[Hit]: ...

    async def relations(
        self, tenant: str, ids: Sequence[str], origin: str = "", timeout: float | None = None
    ) -> list[Relation]: ...

    async def related(
        self,
        tenant: str,
        id: str,
        depth: int,
        types: Sequence[str],
        limit: int,
        timeout: float | None = None,
    ) -> list[RelatedHit]: ...

    async def count(self, tenant: str, timeout: float | None = None) -> int: ...


class RankerPort(Protocol):
    async def rank(
        self,
        query: str,
        candidates: Sequence[Candidate],
        fusion: Fusion | None,
        limit: int,
        query_tags: Sequence[str],
        timeout: float | None = None,
        focus: Focus | None = None,
        recency_bias: RecencyBias | None = None,
        profile: str = "",  # "" = the scoring service's default profile
    ) -> list[ScoredCandidate]: ...


class QueryDecomposer(Protocol):
    """Splits a question into sub-queries run beside it (multi-query recall). The rule-based
    one (service/decompose.py) is the default; a model-backed one may replace it. [] = no
    split. The question itself always runs too, so it need not be among the answers.
    ``rules`` are the recall's profile's entity rules, for a decomposer that reads names."""

    async def decompose(self, query: str, rules: EntityRules) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Envelope:
    """Carried by every event; the log adapter adds the trace context."""

    event_id: str
    tenant: str
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class Ack:
    sequence: int
    duplicate: bool = False  # the log already held this event id (a retry)


class EventLog(Protocol):
    """Durable publish (returns only after the log's ack) and the applied watermark.

    A publish waits for its ack at most ``timeout`` seconds (None: the adapter's own cap),
    then fails with Unavailable; the log may hold the event all the same (ambiguous)."""

    async def stored(
        self,
        env: Envelope,
        memory: Memory,
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        """``embedding``: the client's own vector of the content, checked; () = none."""
        ...

    async def updated(
        self,
        env: Envelope,
        memory: Memory,
        mask: Sequence[str],
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack: ...

    async def deleted(self, env: Envelope, id: str, timeout: float | None = None) -> Ack: ...

    async def relation_added(
        self, env: Envelope, relation: Relation, timeout: float | None = None
    ) -> Ack: ...

    async def accessed(self, env: Envelope, ids: Sequence[str], at: datetime) -> Ack: ...

    async def tenant_deleted(self, env: Envelope, timeout: float | None = None) -> Ack:
        """The tenant's tombstone: every store drops the tenant when ingest reaches it."""
        ...

    async def stored_memory_id(self, sequence: int) -> str | None:
        """The memory id of the MemoryStored event at ``sequence`` (to answer a retry)."""
        ...

    async def watermark(self) -> int: ...

    async def tenant_decided_through(self, tenant: str, after: int, until: int) -> int:
        """How far from ``after`` (at most ``until``) ingest has decided every event of
        ``tenant``, whatever other tenants' events in that range wait for; a walk may stop
        short of the first undecided one after many events (ask again from there)."""
        ...

    async def tenant_last_sequence(self, tenant: str) -> int:
        """The sequence of the tenant's newest event (0: none), telling nothing of others'."""
        ...

    async def last_sequence(self) -> int: ...


class ChangeFeed(Protocol):
    def events(self, tenant: str, after: int | None) -> AsyncIterator[Event]:
        """The tenant's memory events in log order: those with a sequence above ``after``
        (None: only those published from now on), then live, without end. Closing the
        iterator releases what the reader holds on the log. Raises Unavailable when the
        log cannot be read."""
        ...


@dataclass(frozen=True, slots=True)
class RecallResult:
    results: tuple[ScoredCandidate, ...]
    streams: tuple[str, ...]  # retrieval streams that answered
    degraded: tuple[str, ...]  # streams or steps that failed or timed out
    query_ms: float = 0.0
    context: str = ""  # with a token budget: the results packed as text
    context_tokens: int = 0
    cut: Mapping[str, int] = field(default_factory=dict)  # post-ranking cuts by reason
    escalated: bool = False
    models: tuple[str, ...] = ()  # query-side models that ran (service/models.py)
    models_failed: tuple[str, ...] = ()  # asked for but failed or not configured


class RecallCodec(Protocol):
    """Bytes for the recall cache (the cache is shared, so no pickle)."""

    def encode(self, result: RecallResult) -> bytes: ...

    def decode(self, data: bytes) -> RecallResult: ...
