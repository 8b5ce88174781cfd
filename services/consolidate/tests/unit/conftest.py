"""Fakes for the worker: access-tracking stores that record every write; for the passes,
the engram_testing store fakes behind spies, an in-memory log, checkpoints and tenants."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from engram_consolidate.service import FenceLost, Key, PassRunner, RunnerConfig, RunRecord
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import AccessUpdate, Hit, Memory, Relation, RelevanceUpdate, ScanPage
from engram_core.ports import Lease
from engram_platform.coordination import MemoryLease
from engram_testing.fakes.graph import FakeGraphStore
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex
from engram_testing.nats_server import NatsServer, start_nats


class FakeAccessStore:
    def __init__(self, name: str) -> None:
        self.name = name
        self.memories: dict[tuple[str, str], Memory] = {}
        self.updates: list[tuple[str, AccessUpdate]] = []  # every update written, in order
        self.calls: list[str] = []
        self.fail_next: list[BaseException] = []
        self.max_batch = 1000  # as the stores' handlers: more updates in one call → refused

    def hold(self, *memories: Memory) -> None:
        for m in memories:
            self.memories[(m.tenant, m.id)] = m

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._enter("get")
        return [self.memories[(tenant, i)] for i in ids if (tenant, i) in self.memories]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._enter("update_access")
        if len(updates) > self.max_batch:
            raise InvalidArgument("updates", f"at most {self.max_batch} per request")
        done = 0
        for u in updates:
            self.updates.append((tenant, u))
            m = self.memories.get((tenant, u.id))
            if m is None:
                continue
            self.memories[(tenant, u.id)] = replace(
                m, last_accessed=u.last_accessed, access_count=u.access_count
            )
            done += 1
        return done


@dataclass
class Stores:
    vector: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("vector"))
    lexical: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("lexical"))
    graph: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("graph"))

    def all(self) -> tuple[FakeAccessStore, FakeAccessStore, FakeAccessStore]:
        return (self.vector, self.lexical, self.graph)

    def hold(self, *memories: Memory) -> None:
        for store in self.all():
            store.hold(*memories)

    def plumbing(self) -> dict[str, Any]:
        """What bootstrap.build needs beside the stores (the passes' log, checkpoints and
        tenants), for tests of access tracking alone."""
        return {"events": MemoryLog(), "checkpoints": MemoryCheckpoints(), "tenants": Tenants()}


@pytest.fixture
def stores() -> Stores:
    return Stores()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()


# --- the passes: the engram_testing fakes, an in-memory log, checkpoints -----------------


class MemoryCheckpoints:
    """The Checkpoints port in a dict, compare-and-set on a global revision counter.
    After ``crash_after`` puts, a put raises Crash (the process dies: nothing catches it,
    its message is "the process died")."""

    def __init__(self) -> None:
        self.records: dict[Key, tuple[RunRecord, int]] = {}
        self.revision = 0
        self.puts = 0
        self.crash_after: int | None = None

    async def get(self, key: Key) -> tuple[RunRecord, int] | None:
        return self.records.get(key)

    async def put(self, record: RunRecord, revision: int | None) -> int:
        current = self.records.get(record.key)
        if (current[1] if current else None) != revision:
            raise FenceLost(f"{record.key}: {revision} is not {current and current[1]}")
        if self.crash_after is not None and self.puts >= self.crash_after:
            raise Crash("the process died")
        self.puts += 1
        self.revision += 1
        self.records[record.key] = (record, self.revision)
        return self.revision

    async def keys(self) -> set[Key]:
        return set(self.records)

    def record(self, key: Key) -> RunRecord:
        return self.records[key][0]

    def runner(self, now: datetime, lease: Lease | None = None, holder: str = "h1") -> PassRunner:
        """The real runner over these checkpoints: retries at once, 10 samples."""
        config = RunnerConfig(lease_ttl_s=30.0, retry_base_s=0.001, samples=10)
        return PassRunner(self, lease or MemoryLease(), holder, config, lambda: now)


class Crash(BaseException):
    """A process dying mid-run: not an Exception, so no handler of the worker sees it."""


@dataclass
class Published:
    kind: str
    tenant: str
    event_id: str
    payload: Any
    mask: tuple[str, ...] = ()


class MemoryLog:
    """The EventSink: every event kept in order; an event id seen before is a duplicate
    (the log's Nats-Msg-Id window)."""

    def __init__(self) -> None:
        self.events: list[Published] = []
        self.ids: set[str] = set()
        self.duplicates = 0

    def _add(self, p: Published) -> bool:
        if p.event_id in self.ids:
            self.duplicates += 1
            return False
        self.ids.add(p.event_id)
        self.events.append(p)
        return True

    async def stored(self, tenant: str, memory: Memory, event_id: str) -> bool:
        return self._add(Published("stored", tenant, event_id, memory))

    async def updated(
        self, tenant: str, memory: Memory, mask: Sequence[str], event_id: str
    ) -> bool:
        return self._add(Published("updated", tenant, event_id, memory, tuple(mask)))

    async def deleted(self, tenant: str, id: str, event_id: str) -> bool:
        return self._add(Published("deleted", tenant, event_id, id))

    async def relation_added(self, tenant: str, relation: Relation, event_id: str) -> bool:
        return self._add(Published("relation_added", tenant, event_id, relation))

    async def relation_removed(self, tenant: str, relation: Relation, event_id: str) -> bool:
        return self._add(Published("relation_removed", tenant, event_id, relation))

    def of(self, kind: str) -> list[Published]:
        return [e for e in self.events if e.kind == kind]


class Tenants:
    def __init__(self, *names: str) -> None:
        self.names = set(names)

    async def tenants(self) -> set[str]:
        return set(self.names)


class Spy:
    """Delegates to a store, recording the relevance writes and scans it gets."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.relevance: list[list[RelevanceUpdate]] = []
        self.scans: list[str | None] = []
        self.neighbour_queries: list[list[str]] = []  # the ids of each neighbours call
        self.fail_scan_at: int | None = None  # the n-th scan (0-based) raises Unavailable

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        self.relevance.append(list(updates))
        return int(await self._store.update_relevance(tenant, updates))

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        n = len(self.scans)
        self.scans.append(cursor)
        if self.fail_scan_at is not None and n == self.fail_scan_at:
            raise Unavailable("vector down")
        page: ScanPage = await self._store.scan(tenant, cursor, limit)
        return page

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        self.neighbour_queries.append(list(ids))
        found: dict[str, list[Hit]] = await self._store.neighbours(tenant, ids, limit, min_score)
        return found

    @property
    def written(self) -> dict[str, float]:
        return {u.id: u.relevance_score for batch in self.relevance for u in batch}


@dataclass
class World:
    """Three fake stores as ingest left them, the log the passes publish to, checkpoints."""

    tenant: str = "t1"
    vector: Spy = field(default_factory=lambda: Spy(FakeVectorIndex(dimension=4)))
    lexical: Spy = field(default_factory=lambda: Spy(FakeTextIndex()))
    graph: Spy = field(default_factory=lambda: Spy(FakeGraphStore()))
    log: MemoryLog = field(default_factory=MemoryLog)
    checkpoints: MemoryCheckpoints = field(default_factory=MemoryCheckpoints)
    version: int = 0
    writes: list[tuple[int, str]] = field(default_factory=list)  # (version, id) of each put

    def stores(self) -> tuple[Spy, Spy, Spy]:
        return (self.vector, self.lexical, self.graph)

    def tenants(self, *others: str) -> Tenants:
        """The Tenants port listing this world's tenant (and ``others``)."""
        return Tenants(self.tenant, *others)

    async def put(self, memory: Memory, vector: Sequence[float] = (1.0, 0.0, 0.0, 0.0)) -> None:
        self.version += 1
        self.writes.append((self.version, memory.id))
        m = replace(memory, version=self.version)
        await self.vector.upsert(self.tenant, [(m, list(vector))])
        await self.lexical.upsert(self.tenant, [m])
        await self.graph.upsert(self.tenant, [(m, [])])

    async def relate(self, *relations: Relation) -> None:
        self.version += 1
        await self.graph.add_relations(self.tenant, list(relations), self.version)

    async def apply_log(self) -> None:
        """What ingest would do with the events published so far (then forgets them)."""
        vectors = {m.id: v for m, v in self.vector._store._all_live(self.tenant)}
        for e in self.log.events:
            if e.kind == "relation_added":
                await self.relate(e.payload)
            elif e.kind == "relation_removed":
                self.version += 1
                await self.graph.remove_relations(self.tenant, [e.payload], self.version)
            elif e.kind in ("stored", "updated"):
                await self.put(e.payload, vectors.get(e.payload.id, (0.0, 0.0, 0.0, 1.0)))
            elif e.kind == "deleted":
                self.version += 1
                for store in self.stores():
                    await store.delete(self.tenant, [e.payload], self.version)
        self.log.events.clear()

    async def memory(self, id_: str) -> Memory:
        return (await self.vector.get(self.tenant, [id_]))[0]


@pytest.fixture
def world() -> World:
    return World()
