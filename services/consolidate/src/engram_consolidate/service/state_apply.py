"""Reading the latest-state log, and applying its records to a store (Sync and Rebuild).

A memory is applied as ingest applies it: entities extracted again and the tags made to
agree (``enrich``), the version = the log sequence that wrote it, embedded for vector;
a tombstone is a delete at its version. The stores' version guard makes every application
idempotent: an older state than the store's is skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from engram_consolidate.service.state import MemoryRecord, RelationRecord, StateRecord
from engram_core.enrich import enrich
from engram_core.entities import EntityRules
from engram_core.errors import DeadlineExceeded, Internal
from engram_core.model import (
    AccessUpdate,
    Entity,
    Memory,
    Relation,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ports import Embedder

T = TypeVar("T")

MEMORIES = "memory"
RELATIONS = "relation"


@dataclass(frozen=True, slots=True)
class Positioned:
    """A state record and its sequence in ENGRAM_STATE (the cursor of a replay)."""

    sequence: int
    record: StateRecord


class StateLog(Protocol):
    """ENGRAM_STATE for readers, and the positions Sync and Rebuild wait on."""

    async def last_sequence(self) -> int:
        """The newest message's sequence in ENGRAM_STATE (0: empty)."""
        ...

    async def size(self, tenant: str | None, kind: str) -> int:
        """How many records of ``kind`` (MEMORIES, RELATIONS) there are, of one tenant or
        of all (None); an estimate is fine (progress)."""
        ...

    def records(
        self, tenant: str | None, kind: str, after: int, until: int, batch: int
    ) -> AsyncIterator[list[Positioned]]:
        """Records of ``kind`` (one tenant, or all: None) with after < sequence <= until,
        in stream order, ``batch`` at a time."""
        ...

    async def memory_states(self, tenant: str, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        """The latest state of each id that has one."""
        ...

    async def keeper_sequence(self) -> int:
        """Every memory event up to here has its state in ENGRAM_STATE."""
        ...

    async def log_sequence(self) -> int:
        """The newest event's sequence in ENGRAM_MEMORY."""
        ...

    async def applied_sequence(self) -> int:
        """Ingest's watermark: every memory event up to here is in all stores."""
        ...


# --- the stores as Sync and Rebuild see them -------------------------------------------------


class Scannable(Protocol):
    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def count(self, tenant: str) -> int: ...


class Readable(Scannable, Protocol):
    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...


class ScanBacked:
    """``get`` for a store that has none (graph): the tenant's (id, version) pairs read by
    one scan on first use and kept for the object's life (one sync run). Good for what
    Sync asks: which ids the store holds, at which version."""

    def __init__(self, store: Scannable, page_size: int = 1000) -> None:
        self._store = store
        self._page = page_size
        self._versions: dict[str, dict[str, int]] = {}

    async def _load(self, tenant: str) -> dict[str, int]:
        if tenant not in self._versions:
            held: dict[str, int] = {}
            at: str | None = None
            while True:
                page = await self._store.scan(tenant, at, self._page)
                held.update((m.id, m.version) for m in page.memories)
                if page.next_cursor is None or page.next_cursor == at:
                    break
                at = page.next_cursor
            self._versions[tenant] = held
        return self._versions[tenant]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        held = await self._load(tenant)
        return [Memory(id=i, tenant=tenant, content="", version=held[i]) for i in ids if i in held]

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        return await self._store.scan(tenant, cursor, limit)

    async def count(self, tenant: str) -> int:
        return await self._store.count(tenant)


class Writable(Protocol):
    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...


class VectorIndexLike(Readable, Writable, Protocol):
    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult: ...


class TextIndexLike(Readable, Writable, Protocol):
    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult: ...


class GraphLike(Scannable, Writable, Protocol):
    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult: ...

    async def add_relations(
        self, tenant: str, relations: Sequence[Relation], version: int
    ) -> int: ...

    async def relations(self, tenant: str, ids: Sequence[str]) -> list[Relation]: ...


class Target(Protocol):
    """One store as Sync and Rebuild use it: read, and apply log states."""

    @property
    def name(self) -> str: ...

    @property
    def store(self) -> Readable: ...

    @property
    def writer(self) -> Writable: ...

    @property
    def apply_timeout_s(self) -> float:
        """Deadline of one ``apply`` (vector: embedding included)."""
        ...

    async def apply(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        """Upsert live memories from their states (enriched; embedded for vector)."""
        ...


async def bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError as exc:
        raise DeadlineExceeded(f"{what} took longer than {timeout_s}s") from exc


def restored(
    memories: Sequence[Memory], rules: EntityRules | None = None
) -> list[tuple[Memory, list[Entity]]]:
    """Memories from their states as ingest applies them: entities and tags again (with
    ingest's rules), the version the state's, the model name the state carries (vector
    re-embeds instead)."""
    return [enrich(m, m.version, m.embedding_model, rules) for m in memories]


class IndexTarget:
    """Vector and lexical: Sync reads and writes the same index."""

    __slots__ = ()
    index: VectorIndexLike | TextIndexLike

    @property
    def store(self) -> Readable:
        return self.index

    @property
    def writer(self) -> Writable:
        return self.index


@dataclass(frozen=True, slots=True)
class VectorTarget(IndexTarget):
    index: VectorIndexLike
    # The embedder of the model the target generation holds (built on first use: a worker
    # may never need one).
    embedder: Callable[[], Awaitable[Embedder]]
    name: str = "vector"
    write_timeout_s: float = 10.0
    embed_timeout_s: float = 60.0
    rules: EntityRules | None = None  # entity extraction; None: the conversation profile's

    @property
    def apply_timeout_s(self) -> float:
        return 2 * self.write_timeout_s + self.embed_timeout_s

    async def apply(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        # Embedding is the cost: memories the index holds at this version or newer (a page
        # redone after a crash, a final replay) would be skipped anyway, so are not embedded.
        held = {m.id: m.version for m in await self.index.get(tenant, [m.id for m in memories])}
        todo = [m for m in memories if held.get(m.id, 0) < m.version]
        if not todo:
            return UpsertResult(0, len(memories))
        embedder = await self.embedder()
        ready = [enrich(m, m.version, embedder.model_name, self.rules)[0] for m in todo]
        vectors = await embedder.embed([m.content for m in ready])
        if len(vectors) != len(ready):
            raise Internal(f"embedder returned {len(vectors)} vectors for {len(ready)} texts")
        done = await self.index.upsert(tenant, list(zip(ready, vectors, strict=True)))
        return UpsertResult(done.applied, done.skipped + len(memories) - len(todo))


@dataclass(frozen=True, slots=True)
class LexicalTarget(IndexTarget):
    index: TextIndexLike
    name: str = "lexical"
    apply_timeout_s: float = 10.0
    rules: EntityRules | None = None

    async def apply(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        if not memories:
            return UpsertResult(0, 0)
        return await self.index.upsert(tenant, [m for m, _ in restored(memories, self.rules)])


@dataclass(frozen=True, slots=True)
class GraphTarget:
    graph: GraphLike
    name: str = "graph"
    apply_timeout_s: float = 10.0
    reader: ScanBacked | None = None  # the graph has no get: see ScanBacked
    rules: EntityRules | None = None

    @property
    def store(self) -> Readable:
        return self.reader if self.reader is not None else ScanBacked(self.graph)

    @property
    def writer(self) -> Writable:
        return self.graph

    async def apply(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        if not memories:
            return UpsertResult(0, 0)
        return await self.graph.upsert(tenant, restored(memories, self.rules))


async def tombstones(writer: Writable, tenant: str, records: Sequence[MemoryRecord]) -> int:
    """Deletes at each tombstone's version (one call per version: a delete carries one)."""
    by_version: dict[int, list[str]] = {}
    for r in records:
        by_version.setdefault(r.version, []).append(r.id)
    deleted = 0
    for version, ids in sorted(by_version.items()):
        deleted += await writer.delete(tenant, ids, version)
    return deleted


def by_tenant(records: Sequence[Positioned]) -> dict[str, list[StateRecord]]:
    out: dict[str, list[StateRecord]] = {}
    for p in records:
        out.setdefault(p.record.tenant, []).append(p.record)
    return out


def split(
    records: Sequence[StateRecord],
) -> tuple[list[Memory], list[MemoryRecord], list[RelationRecord]]:
    """Live memories, tombstones, relations."""
    live: list[Memory] = []
    dead: list[MemoryRecord] = []
    rels: list[RelationRecord] = []
    for r in records:
        if isinstance(r, RelationRecord):
            rels.append(r)
        elif r.memory is None:
            dead.append(r)
        else:
            live.append(r.memory)
    return live, dead, rels
