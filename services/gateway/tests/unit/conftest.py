"""Fakes behind the gateway's ports, and an in-process gateway on port 0 wired with them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from nats.js import JetStreamContext

from engram.gateway.v1 import gateway_pb2_grpc
from engram_core import scoring
from engram_core.entities import extract_entities
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.filters import matches
from engram_core.model import (
    Entity,
    Filter,
    Generation,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    ScanPage,
)
from engram_core.ordering import Sort, best
from engram_core.profiles import DEFAULT, profile_named
from engram_core.tags import tag_prefixes
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import Backends, build_gateway
from engram_gateway.config import Settings
from engram_gateway.service import Deadline, Gateway, RecallRequest
from engram_gateway.service.ports import Ack, Envelope, RecallResult
from engram_platform import jetstream
from engram_platform.cache import MemoryCache
from engram_platform.errors import FIELD_KEY
from engram_platform.settings import NatsSettings
from engram_testing.fakes.common import sequence_page
from engram_testing.fakes.graph import FakeGraphStore
from engram_testing.nats_server import NatsServer, start_nats

TENANT = "acme"
TOKENS = "w-token=acme:write;r-token=acme:read;rw-token=acme:read+write;other=globex:read+write"
_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3}


def memory(id: str, content: str, tenant: str = TENANT, **kw: Any) -> Memory:
    tags = tuple(kw.pop("tags", ()))
    return Memory(
        id=id,
        tenant=tenant,
        content=content,
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        timestamp=kw.pop("timestamp", datetime(2025, 5, 1, tzinfo=UTC)),
        **kw,
    )


@dataclass
class World:
    """What the three stores hold (as if ingest had applied every event)."""

    memories: dict[tuple[str, str], Memory] = field(default_factory=dict)
    relations: list[tuple[str, Relation]] = field(default_factory=list)

    def put(self, *ms: Memory) -> None:
        for m in ms:
            self.memories[(m.tenant, m.id)] = m

    def of(self, tenant: str) -> list[Memory]:
        return [m for (t, _), m in sorted(self.memories.items()) if t == tenant]


MAX_LIMIT = 1000  # the largest limit the services take by default
DEFAULT_LIMIT = 10  # what a limit of 0 takes (graph, lexical)
MAX_DEPTH = 3  # the graph service's deepest walk


def check_limit(limit: int, least: int = 1) -> None:
    """What the services refuse (the port contracts pin it)."""
    if not least <= limit <= MAX_LIMIT:
        raise InvalidArgument("limit", f"must be within {least}..{MAX_LIMIT}, got {limit}")


class FakeBackend:
    """Shared behaviour: injectable failure and delay, a call log."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.fail: Exception | None = None
        self.delay = 0.0
        self.calls: list[tuple[str, Any]] = []
        self.behind: set[str] = set()  # ids of the world this store has not applied yet

    async def _enter(self, op: str, arg: Any = None) -> None:
        self.calls.append((op, arg))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail

    def _search(self, tenant: str, query_words: set[str], flt: Filter, limit: int) -> list[Hit]:
        hits = []
        for m in self.world.of(tenant):
            overlap = len(query_words & words(m.content))
            if overlap and matches(m, flt):
                hits.append(Hit(m.id, overlap / max(1, len(query_words)), m))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:limit]

    async def get(
        self, tenant: str, ids: Sequence[str], timeout: float | None = None
    ) -> list[Memory]:
        await self._enter("get", list(ids))
        held = [(tenant, i) for i in ids if i not in self.behind]
        return [self.world.memories[k] for k in held if k in self.world.memories]

    async def count(self, tenant: str, timeout: float | None = None) -> int:
        await self._enter("count")
        return len(self.world.of(tenant))


FAKE_DIMENSION = 3


class FakeVector(FakeBackend):
    """Answers only memories sharing a word with the query, and none for a client's own
    vector; the vector service answers the nearest ``limit`` whatever their distance. The
    unit tests' expectations lean on the narrower answer (the port contract pins the rest)."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.dimension = FAKE_DIMENSION  # the size of a vector the live model takes
        self.vectors: list[tuple[float, ...]] = []  # each explicit query vector searched by
        # A time-window search (the timeline reads) answers with every memory in the window,
        # as a real store does when the window holds fewer than the limit; off, it matches
        # words like any search.
        self.whole_windows = False

    async def list_generations(self, timeout: float | None = None) -> list[Generation]:
        await self._enter("list_generations")
        return [Generation("v1", True, "fake-model", 0, datetime.now(UTC), self.dimension)]

    async def search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[Hit]:
        await self._enter("search", (query, flt, limit, timeout))
        check_limit(limit)
        if vector:  # like the vector service: the live model fixes the size
            if len(vector) != self.dimension:
                raise InvalidArgument("vector", f"{len(vector)} values; the model has 3")
            self.vectors.append(tuple(vector))
        elif not query.strip():
            raise InvalidArgument("query", "give a query text or a vector")
        if self.whole_windows and flt.start is not None:
            return [Hit(m.id, 0.1, m) for m in self.world.of(tenant) if matches(m, flt)][:limit]
        return self._search(tenant, words(query), flt, limit)

    async def search_many(
        self,
        tenant: str,
        flts: Sequence[Filter],
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[list[Hit]]:
        """Like the vector service: each filter searched as ``search`` would (one call)."""
        self.calls.append(("search_many", len(flts)))
        searches = (self.search(tenant, f, limit, query, vector, timeout) for f in flts)
        return list(await asyncio.gather(*searches))

    async def scan_by_sequence(
        self, tenant: str, cursor: str | None, limit: int, timeout: float | None = None
    ) -> ScanPage:
        """Like the vector store: by (version, id), resumed after the cursor's place."""
        await self._enter("scan_by_sequence", (cursor, limit))
        return sequence_page(self.world.of(tenant), cursor, limit)


class FakeLexical(FakeBackend):
    async def top(
        self, tenant: str, flt: Filter, sort: Sort, limit: int, timeout: float | None = None
    ) -> list[Memory]:
        await self._enter("top", (flt, sort, limit))
        if limit <= 0:  # the client's own answer; the service takes 1..max
            return []
        check_limit(limit)
        return best(self.world.of(tenant), flt, sort, limit)

    async def search(
        self, tenant: str, query: str, flt: Filter, limit: int, timeout: float | None = None
    ) -> list[Hit]:
        await self._enter("search", (query, flt, limit, timeout))
        check_limit(limit, least=0)
        # BM25-like: unbounded scores, unlike the vector stream's cosine.
        hits = self._search(tenant, words(query), flt, limit)
        return [replace(h, score=h.score * 7.5) for h in hits]


class FakeGraph(FakeBackend):
    """Searches and walks as the graph service does, on a snapshot of the world taken per
    call into engram_testing's graph store (which passes the store contract)."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.origins: list[str] = []  # the origin each relations call asked for

    async def _store(self, tenant: str) -> FakeGraphStore:
        """The tenant as the graph holds it: each memory with the entities ingest extracts
        (and those it names), the edges between memories it holds."""
        store = FakeGraphStore()
        held = [m for m in self.world.of(tenant) if m.id not in self.behind]
        await store.upsert(tenant, [(m, _mentions(m)) for m in held])
        ids = {m.id for m in held}
        edges = [
            r
            for t, r in self.world.relations
            if t == tenant and r.source_id in ids and r.target_id in ids
        ]
        if edges:
            await store.add_relations(tenant, edges, version=1)
        return store

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
        timeout: float | None = None,
    ) -> list[Hit]:
        await self._enter("search", (tuple(entity_keys), tuple(keywords), flt, limit))
        check_limit(limit, least=0)
        if not entity_keys and not keywords:
            return []
        store = await self._store(tenant)
        hits = await store.search(tenant, entity_keys, keywords, flt, limit or DEFAULT_LIMIT)
        # Graph hits carry no memory here, so the gateway has to fetch it.
        return [Hit(h.id, h.score) for h in hits]

    async def relations(
        self, tenant: str, ids: Sequence[str], origin: str = "", timeout: float | None = None
    ) -> list[Relation]:
        await self._enter("relations", list(ids))
        self.origins.append(origin)
        wanted = set(ids)
        return [
            r
            for t, r in self.world.relations
            if t == tenant
            and (r.source_id in wanted or r.target_id in wanted)
            and origin in ("", r.origin)
        ]

    async def related(
        self,
        tenant: str,
        id: str,
        depth: int,
        types: Sequence[str],
        limit: int,
        timeout: float | None = None,
    ) -> list[RelatedHit]:
        await self._enter("related", (id, depth, tuple(types), limit))
        check_limit(limit, least=0)
        if not 1 <= depth <= MAX_DEPTH:
            raise InvalidArgument("depth", f"must be within 1..{MAX_DEPTH}, got {depth}")
        store = await self._store(tenant)
        return await store.related(tenant, id, depth, types, limit or DEFAULT_LIMIT)


def _mentions(m: Memory) -> list[Entity]:
    """The entities ingest would write for ``m``, and any the memory names besides."""
    found = {e.key: e for e in extract_entities(m.content)}
    for key in m.entities:
        kind, _, slug = key.partition(":")
        found.setdefault(key, Entity(kind, slug, slug.replace("-", " ")))
    return list(found.values())


class FakeRanker:
    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.calls: list[dict[str, Any]] = []
        # The scoring service's default (its settings' profile); the ranker contract checks.
        self.default_profile = DEFAULT

    async def rank(
        self,
        query: str,
        candidates: Sequence[scoring.Candidate],
        fusion: scoring.Fusion | None,
        limit: int,
        query_tags: Sequence[str],
        timeout: float | None = None,
        focus: scoring.Focus | None = None,
        recency_bias: scoring.RecencyBias | None = None,
        profile: str = "",
    ) -> list[scoring.ScoredCandidate]:
        self.calls.append(
            {
                "query": query,
                "candidates": list(candidates),
                "fusion": fusion,
                "limit": limit,
                "focus": focus,
                "recency_bias": recency_bias,
                "profile": profile,
            }
        )
        if self.fail is not None:
            raise self.fail
        check_limit(limit, least=0)
        check_candidates(candidates)
        return scoring.rank(
            candidates,
            scoring.Query(
                now=datetime(2025, 6, 1, tzinfo=UTC),
                text=query,
                tags=tuple(query_tags),
                focus=focus or scoring.Focus(),
                recency_bias=recency_bias,
            ),
            scoring.Params(
                fusion=fusion or scoring.Fusion.WEIGHTED,
                limit=limit,
                # As the scoring service does: the profile's weights over the defaults.
                weights=scoring.Weights().with_overrides(
                    profile_named(profile or self.default_profile).weight_overrides
                ),
            ),
        )


def check_candidates(candidates: Sequence[scoring.Candidate]) -> None:
    """The scoring service takes each memory once (the gateway merges the streams' hits)."""
    seen: set[str] = set()
    for i, c in enumerate(candidates):
        if c.memory.id in seen:
            raise InvalidArgument(f"candidates[{i}].memory.id", f"duplicate id {c.memory.id!r}")
        seen.add(c.memory.id)


@dataclass
class Published:
    event: str
    env: Envelope
    sequence: int
    payload: Any
    embedding: tuple[float, ...] = ()  # the client's own vector the event carries


class FakeLog:
    """A log with JetStream's duplicate detection; optionally applies events to the world."""

    def __init__(self, world: World, apply: bool = True) -> None:
        self.world = world
        self.apply = apply
        self.events: list[Published] = []
        self.by_event_id: dict[str, int] = {}
        self.applied = 0  # the watermark
        self.decided: set[int] = set()  # sequences ingest decided above the watermark
        self.auto_watermark = True
        self.fail: Exception | None = None
        # Per publish: the error to fail it with (event, payload), None to take it.
        self.refuse: Callable[[str, Any], Exception | None] | None = None
        self.publish_delay = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.timeouts: list[float | None] = []  # each publish's wait for its ack
        # Per publish: True keeps the event but fails the call (the ack was lost: ambiguous).
        self.lose_ack: Callable[[str, Any], bool] | None = None
        self.hung: asyncio.Event | None = None  # every call waits for it: a log that hangs

    @property
    def last(self) -> int:
        """The memory stream's last sequence (access events are a stream of their own)."""
        return max((p.sequence for p in self.events if p.event != "accessed"), default=0)

    def of(self, event: str) -> list[Published]:
        return [p for p in self.events if p.event == event]

    async def _publish(
        self,
        event: str,
        env: Envelope,
        payload: Any,
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        self.timeouts.append(timeout)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._hang()
            if self.publish_delay:
                await asyncio.sleep(self.publish_delay)
            if self.fail is not None:
                raise self.fail
            refused = self.refuse(event, payload) if self.refuse else None
            if refused is not None:
                raise refused
        finally:
            self.in_flight -= 1
        if env.event_id in self.by_event_id:
            return Ack(self.by_event_id[env.event_id], duplicate=True)
        access = event == "accessed"
        seq = 1 + sum(1 for p in self.events if (p.event == "accessed") == access)
        self.events.append(Published(event, env, seq, payload, tuple(embedding)))
        self.by_event_id[env.event_id] = seq
        if self.apply:
            self._apply(event, env, seq, payload)
        if self.auto_watermark and not access:
            self.applied = seq
        if self.lose_ack and self.lose_ack(event, payload):
            raise Unavailable("log publish not acknowledged in time")
        return Ack(seq)

    def _apply(self, event: str, env: Envelope, seq: int, payload: Any) -> None:
        if event in ("stored", "updated"):
            self.world.put(replace(payload[0], version=seq))
        elif event == "deleted":
            self.world.memories.pop((env.tenant, payload), None)
        elif event == "relation":
            self.world.relations.append((env.tenant, payload))
        elif event == "tenant_deleted":
            self.world.memories = {
                k: m for k, m in self.world.memories.items() if k[0] != env.tenant
            }
            self.world.relations = [r for r in self.world.relations if r[0] != env.tenant]

    async def stored(
        self,
        env: Envelope,
        memory: Memory,
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        return await self._publish("stored", env, (memory,), timeout, embedding)

    async def updated(
        self,
        env: Envelope,
        memory: Memory,
        mask: Sequence[str],
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        return await self._publish("updated", env, (memory, tuple(mask)), timeout, embedding)

    async def deleted(self, env: Envelope, id: str, timeout: float | None = None) -> Ack:
        return await self._publish("deleted", env, id, timeout)

    async def relation_added(
        self, env: Envelope, relation: Relation, timeout: float | None = None
    ) -> Ack:
        return await self._publish("relation", env, relation, timeout)

    async def accessed(self, env: Envelope, ids: Sequence[str], at: datetime) -> Ack:
        return await self._publish("accessed", env, tuple(ids))

    async def tenant_deleted(self, env: Envelope, timeout: float | None = None) -> Ack:
        return await self._publish("tenant_deleted", env, None, timeout)

    async def stored_memory_id(self, sequence: int) -> str | None:
        for p in self._memory_events():
            if p.sequence == sequence:
                return str(p.payload[0].id) if p.event == "stored" else None
        return None

    def _memory_events(self) -> list[Published]:
        return [p for p in self.events if p.event != "accessed"]

    async def _hang(self) -> None:
        if self.hung is not None:
            await self.hung.wait()

    async def watermark(self) -> int:
        await self._hang()
        if self.fail is not None:
            raise Unavailable("log down")
        return self.applied

    async def tenant_decided_through(self, tenant: str, after: int, until: int) -> int:
        await self._hang()
        if self.fail is not None:
            raise Unavailable("log down")
        undecided = (
            p.sequence
            for p in self._memory_events()
            if p.env.tenant == tenant
            and after < p.sequence <= until
            and p.sequence > self.applied
            and p.sequence not in self.decided
        )
        return next(undecided, until + 1) - 1

    async def tenant_last_sequence(self, tenant: str) -> int:
        await self._hang()
        if self.fail is not None:
            raise Unavailable("log down")
        own = [p.sequence for p in self._memory_events() if p.env.tenant == tenant]
        return max(own, default=0)

    async def last_sequence(self) -> int:
        await self._hang()
        if self.fail is not None:
            raise Unavailable("log down")
        return self.last


class FakeTenantLog:
    """What the log holds per tenant, read off a FakeLog (access events are another
    stream); no dead letters (tests/unit/test_gateway_dead_letters.py has real ones)."""

    def __init__(self, log: FakeLog) -> None:
        self.log = log

    async def last_sequence(self, tenant: str) -> int:
        return await self.log.tenant_last_sequence(tenant)

    async def dead_letters(self, tenant: str) -> int:
        return 0


@dataclass
class Harness:
    """Everything behind one gateway; tests reach helpers through it (importlib mode
    lets a test module import nothing from this conftest)."""

    world: World
    vector: FakeVector
    lexical: FakeLexical
    graph: FakeGraph
    ranker: FakeRanker
    log: FakeLog
    cache: MemoryCache
    settings: Settings
    gateway: Gateway
    tenant_log: FakeTenantLog
    tenant: str = TENANT
    memory = staticmethod(memory)
    settings_with = staticmethod(lambda **kw: make_settings(**kw))

    async def recall(self, query: str, **kw: Any) -> RecallResult:
        """A recall through the gateway's reader, as this harness's tenant, within 5 s."""
        result: RecallResult = await self.gateway.reader.recall(
            self.tenant, RecallRequest(query=query, **kw), Deadline.within(5.0)
        )
        return result


def make_settings(**kw: Any) -> Settings:
    unknown = sorted(set(kw) - set(Settings.model_fields))
    assert not unknown, f"not gateway settings (the settings ignore them): {unknown}"
    base: dict[str, Any] = {"port": 0, "tokens": TOKENS, "watermark_cache_ms": 0.0}
    base.update(kw)
    return Settings(**base)


def make_harness(settings: Settings | None = None, ids: Callable[[], str] | None = None) -> Harness:
    world = World()
    settings = settings or make_settings()
    vector = FakeVector(world, "vector")
    lexical = FakeLexical(world, "lexical")
    graph = FakeGraph(world, "graph")
    ranker = FakeRanker()
    log = FakeLog(world)
    cache = MemoryCache()
    tenant_log = FakeTenantLog(log)
    extra: dict[str, Any] = {"ids": ids} if ids else {}
    gateway = build_gateway(
        settings,
        Backends(vector, lexical, graph, ranker),
        log,
        cache,
        tenant_log=tenant_log,
        **extra,
    )
    return Harness(world, vector, lexical, graph, ranker, log, cache, settings, gateway, tenant_log)


@pytest.fixture
def harness() -> Harness:
    return make_harness()


@pytest.fixture
def new_harness() -> Callable[..., Harness]:
    """A harness with other settings: ``new_harness(recall_cache_ttl_s=0)``."""
    return lambda **kw: make_harness(make_settings(**kw))


@dataclass
class Client:
    stub: gateway_pb2_grpc.MemoryServiceStub
    harness: Harness

    @staticmethod
    def auth(token: str = "rw-token") -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"),)

    @staticmethod
    def field_of(err: grpc.aio.AioRpcError) -> str:
        """The field an INVALID_ARGUMENT names (trailing metadata set by the platform)."""
        for key, value in err.trailing_metadata() or ():
            if key == FIELD_KEY:
                return str(value)
        return ""


async def _serve(harness: Harness) -> AsyncIterator[Client]:
    auth = Authenticator.from_sources(harness.settings.tokens.get_secret_value())
    running = await server.start(harness.settings, harness.gateway, auth)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Client(gateway_pb2_grpc.MemoryServiceStub(channel), harness)
    finally:
        await channel.close()
        await harness.gateway.access.drain()
        await running.stop(None)


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[Client]:
    async for c in _serve(harness):
        yield c


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A local nats-server with JetStream on disk, for the tests of the log adapters."""
    srv = start_nats(tmp_path / "nats")
    yield srv
    srv.stop()


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    """A JetStream context on ``nats_server`` with the engram streams in place."""
    settings = NatsSettings(url=nats_server.url)
    nc, ctx = await jetstream.connect(settings, "gateway-test")
    await jetstream.ensure_streams(ctx, settings)
    yield ctx
    await nc.close()
