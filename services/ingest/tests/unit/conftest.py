"""Fakes of the three store writers and a counting embedder, shared by the ingest tests.

The stores keep the version guard and tombstones of the real ones (a write not newer
than what is held, or than a delete, changes nothing), run the real request checks on
what they are sent, log every call, and raise queued failures on demand (or refuse any
write holding one of ``refused_ids``, as a store refuses an invalid memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engram_core.errors import InvalidArgument, NotFound, Unavailable
from engram_core.model import Entity, Memory, Relation, UpsertResult
from engram_core.ports import Embedder
from engram_core.relations import relation_versions
from engram_embed.hashing import HashingEmbedder
from engram_ingest.bootstrap import build
from engram_ingest.config import Settings
from engram_ingest.service import Applier, VectorWriter
from engram_platform.convert import memory_to_proto
from engram_platform.request_checks import check_memory
from engram_testing.nats_server import NatsServer, start_nats


@dataclass
class Call:
    method: str
    tenant: str
    ids: tuple[str, ...]
    version: int = 0


class FakeStore:
    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: dict[tuple[str, str], tuple[int, Memory | None]] = {}
        self.calls: list[Call] = []
        self.fail_next: list[BaseException] = []
        self.delay_s = 0.0
        self.barrier: asyncio.Barrier | None = None  # every store must enter before any leaves
        self.down_for: set[str] = set()  # tenants whose writes fail as unavailable
        self.refused_ids: set[str] = set()

    async def _enter(self, method: str, tenant: str, ids: Sequence[str], version: int = 0) -> None:
        self.calls.append(Call(method, tenant, tuple(ids), version))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.barrier is not None:
            await self.barrier.wait()
        if self.fail_next:
            raise self.fail_next.pop(0)
        if tenant in self.down_for:
            raise Unavailable(f"{self.name} is down for {tenant}")
        for i, id_ in enumerate(ids if method == "upsert" else ()):
            if id_ in self.refused_ids:
                raise InvalidArgument(f"memories[{i}].id", "refused")

    def _checked(self, tenant: str, memories: Sequence[Memory]) -> None:
        """What the store's server checks of each memory before its service sees it."""
        for i, m in enumerate(memories):
            check_memory(f"memories[{i}]", memory_to_proto(m), tenant)

    def _put(self, tenant: str, memory: Memory) -> bool:
        held = self.rows.get((tenant, memory.id))
        if held is not None and memory.version <= held[0]:
            return False
        self.rows[(tenant, memory.id)] = (memory.version, memory)
        return True

    def memory(self, tenant: str, id_: str) -> Memory | None:
        held = self.rows.get((tenant, id_))
        return held[1] if held else None

    def live(self, tenant: str) -> dict[str, Memory]:
        return {i: m for (t, i), (_, m) in self.rows.items() if t == tenant and m is not None}

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        await self._enter("get", tenant, ids)
        return [m for i in ids if (m := self.memory(tenant, i)) is not None]

    def writes(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        await self._enter("delete", tenant, ids, version)
        deleted = 0
        for id_ in ids:
            held = self.rows.get((tenant, id_))
            if held is not None and version <= held[0]:
                continue
            deleted += held is not None and held[1] is not None
            self.rows[(tenant, id_)] = (version, None)
        return deleted

    async def delete_tenant(self, tenant: str) -> int:
        await self._enter("delete_tenant", tenant, ())
        live = len(self.live(tenant))
        self.rows = {k: v for k, v in self.rows.items() if k[0] != tenant}
        self._forget_tenant(tenant)
        return live

    def _forget_tenant(self, tenant: str) -> None:
        """Drop what the subclass keeps of the tenant besides its rows."""

    def _upserted(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        applied = sum(self._put(tenant, m) for m in memories)
        return UpsertResult(applied=applied, skipped=len(memories) - applied)


class FakeVector(FakeStore):
    def __init__(self) -> None:
        super().__init__("vector")
        self.vectors: dict[tuple[str, str], list[float]] = {}

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        await self._enter("upsert", tenant, [m.id for m, _ in items])
        self._checked(tenant, [m for m, _ in items])
        applied = 0
        for m, v in items:
            if self._put(tenant, m):
                self.vectors[(tenant, m.id)] = list(v)
                applied += 1
        return UpsertResult(applied=applied, skipped=len(items) - applied)


class FakeLexical(FakeStore):
    def __init__(self) -> None:
        super().__init__("lexical")

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        await self._enter("upsert", tenant, [m.id for m in memories])
        self._checked(tenant, memories)
        return self._upserted(tenant, memories)


def _with_versions(
    relations: Sequence[Relation], version: int, versions: Sequence[int]
) -> list[tuple[Relation, int]]:
    return list(zip(relations, relation_versions(len(relations), version, versions), strict=True))


class FakeGraph(FakeStore):
    def __init__(self) -> None:
        super().__init__("graph")
        self.mentions: dict[tuple[str, str], tuple[Entity, ...]] = {}
        self.relations: dict[tuple[str, str, str, str], tuple[Relation, int]] = {}
        self.check_ends = False  # as the real graph: NotFound for an end it holds no node of

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        await self._enter("upsert", tenant, [m.id for m, _ in items])
        self._checked(tenant, [m for m, _ in items])
        applied = 0
        for m, entities in items:
            if self._put(tenant, m):
                self.mentions[(tenant, m.id)] = tuple(entities)
                applied += 1
        return UpsertResult(applied=applied, skipped=len(items) - applied)

    def _forget_tenant(self, tenant: str) -> None:
        self.mentions = {k: v for k, v in self.mentions.items() if k[0] != tenant}
        self.relations = {k: v for k, v in self.relations.items() if k[0] != tenant}

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        await self._enter("add_relations", tenant, [r.source_id for r in relations], version)
        ends = (i for r in relations for i in (r.source_id, r.target_id))
        if self.check_ends and (gone := [i for i in ends if self.memory(tenant, i) is None]):
            raise NotFound(f"memory {gone[0]} not found")
        for r, v in _with_versions(relations, version, versions):
            self.relations[(tenant, r.source_id, r.target_id, r.type)] = (r, v)
        return len(relations)

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        await self._enter("remove_relations", tenant, [r.source_id for r in relations], version)
        removed = 0
        for r, v in _with_versions(relations, version, versions):
            held = self.relations.get((tenant, r.source_id, r.target_id, r.type))
            if held is not None and held[1] <= v:
                del self.relations[(tenant, r.source_id, r.target_id, r.type)]
                removed += 1
        return removed


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dimension: int = 32) -> None:
        super().__init__(dimension)
        self.calls: list[list[str]] = []
        self.fail_next: list[BaseException] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail_next:
            raise self.fail_next.pop(0)
        return await super().embed(texts)


@dataclass
class Stores:
    vector: FakeVector = field(default_factory=FakeVector)
    lexical: FakeLexical = field(default_factory=FakeLexical)
    graph: FakeGraph = field(default_factory=FakeGraph)
    embedder: CountingEmbedder = field(default_factory=CountingEmbedder)

    def all(self) -> tuple[FakeStore, FakeStore, FakeStore]:
        return (self.vector, self.lexical, self.graph)

    def applier(
        self,
        settings: Settings,
        *,
        vector: VectorWriter | None = None,
        embedder: Embedder | None = None,
        next_embedder: Embedder | None = None,
    ) -> Applier:
        """The applier `build` wires from ``settings`` over these fakes (``vector`` and the
        embedders replaced when given)."""
        return build(
            settings,
            embedder=embedder or self.embedder,
            next_embedder=next_embedder,
            vector=vector or self.vector,
            lexical=self.lexical,
            graph=self.graph,
        ).applier


@pytest.fixture
def stores() -> Stores:
    return Stores()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()
