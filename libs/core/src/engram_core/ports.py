"""Ports: what the services need from each store. Every adapter implements one
and passes the shared contract suite in engram_testing.

Writes are idempotent on (id, version): a write carrying a version that is not
newer than what the store holds — or than a tombstone left by a delete — changes
nothing. Every method is scoped to one tenant; no call can reach another's data.

What the three memory stores share beyond that (the consolidation passes rely on it):

- ``scan(tenant, cursor, limit)`` pages through every live memory of the tenant, archived
  ones included, tombstones never, at most ``limit`` a page, in the order of the store's
  key for each memory (the id, or a key made of tenant and id), so writes never move a
  memory. ``cursor`` is opaque: None starts, a page's ``next_cursor`` continues, None there
  means done. A memory written during a scan may or may not appear;
  none appears twice.
- ``update_relevance(tenant, updates)`` sets ``relevance_score`` of live memories and nothing
  else: ``version`` stays, so the next upsert (version + 1) still applies. Unknown and deleted
  ids are skipped; a repeated id counts once (its last score wins). Returns how many memories
  it set.
- An applied upsert keeps the derived state the store holds when the incoming memory carries
  less: access statistics newer than its own (`engram_core.access`) and a ``relevance_score``
  above its own. A memory re-created after a delete starts from what it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Generation,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ordering import Sort


class VectorIndex(Protocol):
    """Dense vectors with the memory as payload."""

    @property
    def dimension(self) -> int: ...

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def search(
        self, tenant: str, vector: Sequence[float], flt: Filter, limit: int
    ) -> list[Hit]: ...

    async def search_batch(
        self, tenant: str, vector: Sequence[float], flts: Sequence[Filter], limit: int
    ) -> list[list[Hit]]:
        """One hit list per filter, in order, each as ``search`` answers it, run as one
        batch (the gateway's timeline windows: one planned pass, not one search each)."""
        ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...

    async def count(self, tenant: str) -> int: ...

    async def delete_tenant(self, tenant: str) -> int:
        """Remove everything of the tenant, tombstones included; the live memories removed."""
        ...

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def scan_by_sequence(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        """Every live memory (archived included) at most ``limit`` a page, ordered by the
        version of the write that last touched it, ties by id (`engram_core.sequence_cursor`).
        A memory written between pages moves to the end and is met again; a page may hold
        fewer than ``limit`` while more follow (``next_cursor`` None only when done)."""
        ...

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        """For each id that is a live memory, its ``limit`` nearest other live memories
        (archived included) with cosine >= ``min_score``, nearest first. Hits carry the id and
        the cosine, no memory. Ids that are not live memories are absent from the answer."""
        ...

    async def close(self) -> None: ...


class TextIndex(Protocol):
    """BM25 over content and tags, with the memory stored alongside."""

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]: ...

    async def top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        """The live memories passing ``flt``, the first ``limit`` in `engram_core.ordering`'s
        order (a listing without text: trending)."""
        ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...

    async def count(self, tenant: str) -> int: ...

    async def delete_tenant(self, tenant: str) -> int:
        """Remove everything of the tenant, tombstones included; the live memories removed."""
        ...

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...

    async def close(self) -> None: ...


class GraphStore(Protocol):
    """Memory nodes, entity nodes, MENTIONS edges and typed relations."""

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        """``versions``: one per relation (the log sequence of the event that carried it),
        so one call applies a batch of events; empty = ``version`` for every relation."""
        ...

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        """Remove each (source_id, target_id, type) edge stored with an older version than
        the removal's (``versions`` as in ``add_relations``); a removal whose ``origin`` is
        ``system`` never removes a user edge. Absent edges or endpoints are skipped.
        Returns the number of edges removed."""
        ...

    async def related(
        self, tenant: str, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[RelatedHit]: ...

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
    ) -> list[Hit]: ...

    async def relations(self, tenant: str, ids: Sequence[str], origin: str = "") -> list[Relation]:
        """Every relation touching any of ``ids``; with ``origin``, only those of it."""
        ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...

    async def count(self, tenant: str) -> int: ...

    async def delete_tenant(self, tenant: str) -> int:
        """Remove everything of the tenant, tombstones included; the live memories removed."""
        ...

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...

    async def close(self) -> None: ...


class Generations(Protocol):
    """Index generations of a store (vector, lexical), implemented by their adapters and
    clients. A rebuild creates an empty generation beside the live one, fills it (a client
    bound with ``in_generation(name)``), swaps it in, and drops the old one later."""

    async def create_generation(self, embedding_model: str) -> Generation:
        """A new EMPTY generation, named by the store ("v2", "v3"…); ``embedding_model`` ""
        means the live one's (lexical ignores it). A model the store cannot embed with →
        InvalidArgument naming ``embedding_model``."""
        ...

    async def list_generations(self) -> list[Generation]:
        """Every generation, the live one included, oldest first."""
        ...

    async def swap_generation(self, name: str) -> Generation:
        """Make ``name`` live atomically (alias swap, or pointer file + in-memory switch) and
        return the previous live one, which is kept until dropped. Unknown → NotFound."""
        ...

    async def drop_generation(self, name: str) -> None:
        """Delete a generation and its data. The live one → FailedPrecondition; unknown →
        NotFound."""
        ...


class Cache(Protocol):
    """Bytes by key with a TTL. A cache that is down behaves as a miss."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        """Store when absent and return None; else return the value already there."""
        ...

    async def set_max(self, key: str, value: int, ttl_s: float) -> int:
        """Keep the larger of ``value`` and the integer held (none or unreadable: store
        ``value``); return the one kept. Atomic, so concurrent writers leave the largest.
        A raise restarts the TTL; otherwise the TTL is only ever lengthened."""
        ...

    async def delete_prefix(self, prefix: str) -> None: ...

    async def close(self) -> None: ...


class Lease(Protocol):
    """A named lock with a TTL, e.g. the consolidation leader of one tenant's pass.

    At most one holder at a time; a holder that stops renewing loses it once its TTL has
    passed, and another may then take it. A lease store that cannot be reached grants
    nothing (try_acquire and renew return False): two leaders are worse than none.
    """

    async def try_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take the lease if free (or already ours: then its TTL restarts); True if held."""
        ...

    async def renew(self, name: str, holder: str, ttl_s: float) -> bool:
        """Restart the TTL if `holder` still holds it; False means stop: it was lost."""
        ...

    async def release(self, name: str, holder: str) -> None:
        """Give it up if `holder` holds it; a lease held by another is left alone."""
        ...

    async def holder(self, name: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: float = 0.0  # when refused: time until the window lets a request in


class RateLimiter(Protocol):
    """Counts hits per key in windows of `window_s`. A limiter that is down allows."""

    async def hit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateDecision:
        """Count `cost` hits; allowed while at most `limit` hits fell in the current window."""
        ...


class Embedder(Protocol):
    """Turns texts into unit-length vectors. Raises Unavailable when it cannot."""

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def query_instruction(self) -> str:
        """Put before a search query when it is embedded ("" for symmetric models)."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
