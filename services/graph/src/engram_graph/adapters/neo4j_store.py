"""`GraphStore` on a Neo4j 5 server through the official async driver.

Every call is one managed transaction (``execute_read`` / ``execute_write``): the driver
retries it on transient failures (deadlocks between replicas, a leader switch, a dropped
connection) for up to ``max_retry_time_s``, then the last error becomes ``Unavailable``
naming neo4j. The server bounds each transaction (``query_timeout_ms`` for reads,
``write_timeout_ms`` for writes → ``DeadlineExceeded``); an asyncio timeout above it bounds
the whole call, retries included. Writes are batched: one UNWIND statement per batch (per
relation type for relations), never a statement per item. The statements live in
`neo4j_cypher`; the version guard runs inside them, so replicas writing at once stay correct.

Constraints and indexes are created on the first call (idempotent, once per process), so a
Neo4j that is down at start-up makes calls UNAVAILABLE instead of stopping the service.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from neo4j import (
    AsyncGraphDatabase,
    AsyncManagedTransaction,
    unit_of_work,
)
from neo4j.exceptions import (
    ClientError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
    TransientError,
)

from engram_core.codec import memory_from_json, memory_to_json
from engram_core.errors import (
    DeadlineExceeded,
    EngramError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    RelevanceUpdate,
    ScanPage,
    TagMatch,
    TagMode,
    UpsertResult,
)
from engram_core.relations import ORIGIN_SYSTEM, ORIGIN_USER
from engram_core.tags import normalise_tag, tag_prefixes
from engram_graph.adapters import neo4j_cypher as cypher
from engram_graph.adapters.codec import from_us, with_versions
from engram_graph.adapters.walk import Walk

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
_Rows = list[list[Any]]
BACKEND = "neo4j"


def _check_tenant(tenant: str) -> None:
    if not tenant:
        raise InvalidArgument("tenant", "must not be empty")


def _utc(value: datetime) -> datetime:
    """Aware UTC (naive datetimes are taken as UTC, as everywhere else in the stores)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _translate(err: Exception) -> EngramError:
    """A driver or server error as a catalog error naming the backend."""
    code = getattr(err, "code", None) or ""
    if "TransactionTimedOut" in code:
        return DeadlineExceeded(f"{BACKEND} transaction ran past its timeout")
    if isinstance(err, (ServiceUnavailable, SessionExpired, TransientError)):
        return Unavailable(f"{BACKEND} unavailable: {err}")
    if code.startswith(("Neo.ClientError.Security.", "Neo.ClientError.Database.")):
        # Credentials refused, database missing or stopped: the backend is not usable as
        # configured; callers see an outage, the log says which.
        log.error("%s refused the session: %s", BACKEND, err)
        return Unavailable(f"{BACKEND} refused the session ({code})")
    if isinstance(err, ClientError):
        # Our statement was refused: a bug here, not a caller's mistake or an outage.
        log.error("%s refused a statement: %s", BACKEND, err)
        return Internal(f"{BACKEND} refused a statement ({code})")
    return Unavailable(f"{BACKEND} error: {err}")


async def _collected(tx: AsyncManagedTransaction, /, query: str, **params: Any) -> _Rows:
    """The list a read statement collects into its one record (see `neo4j_cypher`)."""
    result = await tx.run(query, params)
    record = await result.single(strict=True)
    return list(record[0])


class Neo4jGraphStore:
    """The graph in one Neo4j database. Tenants share it; every key and query holds the
    tenant."""

    def __init__(
        self,
        uri: str,
        *,
        auth: tuple[str, str] | None = None,
        database: str = "neo4j",
        query_timeout_ms: int = 5_000,
        write_timeout_ms: int = 60_000,
        connect_timeout_s: float = 5.0,
        acquire_timeout_s: float = 5.0,
        max_retry_time_s: float = 5.0,
        pool_size: int = 32,
        schema_wait_s: float = 60.0,
    ) -> None:
        self._driver = AsyncGraphDatabase.driver(
            uri,
            auth=auth,
            max_connection_pool_size=pool_size,
            connection_timeout=connect_timeout_s,
            connection_acquisition_timeout=acquire_timeout_s,
            max_transaction_retry_time=max_retry_time_s,
            user_agent="engram-graph",
        )
        # Sessions share bookmarks, so on a cluster a read waits for this process's writes.
        self._bookmarks = AsyncGraphDatabase.bookmark_manager()
        self._database = database
        self._read_s = query_timeout_ms / 1000
        self._write_s = write_timeout_ms / 1000
        # Above the server's own limit: the retries and the wait for a pooled connection.
        self._slack_s = max_retry_time_s + acquire_timeout_s + connect_timeout_s
        self._schema_wait_s = schema_wait_s
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()
        self._closed = False

    # -- plumbing ------------------------------------------------------------------------------

    async def ensure_schema(self) -> None:
        """Create the constraints and indexes (idempotent) and wait until they are online."""
        if self._schema_ready:
            return
        async with self._schema_lock:
            if self._schema_ready:
                return
            try:
                async with asyncio.timeout(self._schema_wait_s + self._slack_s):
                    await self._create_schema()
            except TimeoutError as err:
                raise Unavailable(f"{BACKEND}: schema not online in time") from err
            except (Neo4jError, DriverError) as err:
                raise _translate(err) from err
            self._schema_ready = True

    async def _create_schema(self) -> None:
        async with self._driver.session(database=self._database) as session:
            for statement in cypher.SCHEMA:
                try:
                    await session.execute_write(_schema_statement, statement)
                except ClientError as err:
                    # Two replicas starting at once: the other one created it first.
                    if not (err.code or "").endswith("AlreadyExists"):
                        raise
            await session.execute_read(_await_indexes, self._schema_wait_s)

    async def _run(
        self,
        mode: Literal["read", "write"],
        work: Callable[Concatenate[AsyncManagedTransaction, P], Awaitable[R]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        if self._closed:
            raise Unavailable("graph store is closed")
        await self.ensure_schema()
        seconds = self._read_s if mode == "read" else self._write_s
        fn = unit_of_work(timeout=seconds)(work)
        try:
            async with (
                asyncio.timeout(seconds + self._slack_s),
                self._driver.session(
                    database=self._database, bookmark_manager=self._bookmarks
                ) as session,
            ):
                if mode == "read":
                    return await session.execute_read(fn, *args, **kwargs)
                return await session.execute_write(fn, *args, **kwargs)
        except TimeoutError as err:
            raise DeadlineExceeded(f"{BACKEND} call ran past {seconds + self._slack_s}s") from err
        except (Neo4jError, DriverError) as err:
            raise _translate(err) from err

    # -- writes --------------------------------------------------------------------------------

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        _check_tenant(tenant)
        if not items:
            return UpsertResult(0, 0)
        newest: dict[str, tuple[Memory, Sequence[Entity]]] = {}
        for m, entities in items:
            if m.id not in newest or m.version > newest[m.id][0].version:
                newest[m.id] = (m, entities)
        # Sorted: concurrent batches lock nodes in one order (fewer deadlocks to retry).
        rows = [_memory_row(tenant, m, entities) for _, (m, entities) in sorted(newest.items())]
        applied = await self._run("write", _single, cypher.UPSERT, tenant=tenant, rows=rows)
        return UpsertResult(applied=applied, skipped=len(items) - applied)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        _check_tenant(tenant)
        if not ids:
            return 0
        unique = sorted(set(ids))
        return await self._run(
            "write", _single, cypher.DELETE, tenant=tenant, ids=unique, version=version
        )

    async def delete_tenant(self, tenant: str) -> int:
        _check_tenant(tenant)
        return await self._run("write", _single, cypher.ERASE, tenant=tenant)

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        _check_tenant(tenant)
        if not relations:
            return 0
        _check_types(relations)
        endpoints = list(dict.fromkeys(i for r in relations for i in (r.source_id, r.target_id)))
        by_type: dict[str, list[dict[str, Any]]] = {}
        for r, v in _fold(with_versions(relations, version, versions)):
            by_type.setdefault(r.type, []).append(_edge_row(r, v))
        return await self._run("write", _add_relations, tenant, endpoints, by_type)

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        _check_tenant(tenant)
        if not relations:
            return 0
        _check_types(relations)
        # One row per edge: the newest removal of it (one statement reads each edge once).
        newest: dict[tuple[str, str, str], tuple[Relation, int]] = {}
        for r, v in with_versions(relations, version, versions):
            key = (r.source_id, r.target_id, r.type)
            if key not in newest or v >= newest[key][1]:
                newest[key] = (r, v)
        by_type: dict[str, list[dict[str, Any]]] = {}
        for (source, target, type_), (r, v) in sorted(newest.items()):
            row = {"source": source, "target": target, "origin": r.origin, "version": v}
            by_type.setdefault(type_, []).append(row)
        return await self._run("write", _remove_relations, tenant, by_type)

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        _check_tenant(tenant)
        if not updates:
            return 0
        # One statement sees the stored value once per row: duplicates are settled here, the
        # newest access winning (ties: the later one), as applying them in turn would.
        latest: dict[str, AccessUpdate] = {}
        for u in updates:
            held = latest.get(u.id)
            if held is None or _utc(u.last_accessed) >= _utc(held.last_accessed):
                latest[u.id] = u
        rows = [
            {"id": u.id, "last_accessed": _utc(u.last_accessed), "access_count": u.access_count}
            for _, u in sorted(latest.items())
        ]
        return await self._run("write", _single, cypher.TOUCH, tenant=tenant, rows=rows)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        _check_tenant(tenant)
        latest = {u.id: u.relevance_score for u in updates}  # a repeated id: the last wins
        if not latest:
            return 0
        # Sorted: concurrent batches lock nodes in one order (fewer deadlocks to retry).
        rows = [{"id": i, "relevance": float(r)} for i, r in sorted(latest.items())]
        return await self._run("write", _single, cypher.SCORE, tenant=tenant, rows=rows)

    # -- reads ---------------------------------------------------------------------------------

    async def related(
        self, tenant: str, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[RelatedHit]:
        _check_tenant(tenant)
        return await self._run("read", _related, tenant, id, depth, list(types), limit)

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
    ) -> list[Hit]:
        _check_tenant(tenant)
        keys = sorted(set(entity_keys))
        # An empty keyword is a substring of every name: it would match everything.
        words = sorted({w.lower() for w in keywords if w})
        if (not keys and not words) or limit <= 0:
            return []
        parts, params = _filter(flt)
        params.update(tenant=tenant, keys=keys, words=words, limit=limit)
        rows = await self._run("read", _collected, cypher.search(parts), **params)
        return [
            Hit(id=id_, score=float(score), memory=_decode(doc, at, count, r))
            for id_, score, doc, at, count, r in rows
        ]

    async def relations(self, tenant: str, ids: Sequence[str], origin: str = "") -> list[Relation]:
        _check_tenant(tenant)
        if not ids:
            return []
        wanted = list(dict.fromkeys(ids))
        rows = await self._run(
            "read", _collected, cypher.RELATIONS, tenant=tenant, ids=wanted, origin=origin
        )
        return [
            Relation(
                source_id=source,
                target_id=target,
                type=type_,
                strength=float(strength),
                properties=json.loads(properties),
                origin=origin,
                created_at=from_us(created_at),
            )
            for source, target, type_, strength, properties, origin, created_at in rows
        ]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        _check_tenant(tenant)
        if not ids:
            return []
        wanted = list(dict.fromkeys(ids))
        rows = await self._run("read", _collected, cypher.GET, tenant=tenant, ids=wanted)
        found = {id_: _decode(doc, at, count, r) for id_, doc, at, count, r in rows}
        return [found[i] for i in wanted if i in found]

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        _check_tenant(tenant)
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        # The cursor is the last id of the page before; "" sorts before every id.
        rows = await self._run(
            "read", _collected, cypher.SCAN, tenant=tenant, after=cursor or "", limit=limit + 1
        )
        page = [_decode(doc, at, count, r) for _, doc, at, count, r in rows[:limit]]
        return ScanPage(page, page[-1].id if len(rows) > limit else None)

    async def count(self, tenant: str) -> int:
        _check_tenant(tenant)
        return await self._run("read", _single, cypher.COUNT, tenant=tenant)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._driver.close()


# -- rows ---------------------------------------------------------------------------------------


def _memory_row(tenant: str, m: Memory, entities: Sequence[Entity]) -> dict[str, Any]:
    wanted: dict[str, Entity] = {}
    for e in entities:
        wanted.setdefault(e.key, e)
    return {
        "id": m.id,
        "version": m.version,
        "type": m.type,
        "tags": list(m.tags),
        # The filter's reference derives prefixes when a writer left them out; so do we.
        "tag_prefixes": list(m.tag_prefixes or tag_prefixes(m.tags)),
        "timestamp": _utc(m.timestamp),
        "archived": m.archived,
        # Access statistics live in properties of their own (UpdateAccess leaves the doc be).
        "doc": memory_to_json(replace(m, tenant=tenant), access=False),
        "relevance": float(m.relevance_score),
        "last_accessed": None if m.last_accessed is None else _utc(m.last_accessed),
        "access_count": m.access_count,
        "entities": [
            {"key": k, "kind": e.kind, "slug": e.slug, "name": e.name, "lname": e.name.lower()}
            for k, e in sorted(wanted.items())
        ],
    }


def _check_types(relations: Sequence[Relation]) -> None:
    for i, r in enumerate(relations):
        if r.type not in cypher.MERGE_EDGE:
            raise InvalidArgument(f"relations[{i}].type", "not a memory relation type")


def _fold(rows: list[tuple[Relation, int]]) -> list[tuple[Relation, int]]:
    """One write per (source, target, type), as applying the batch in order would leave it:
    a later duplicate replaces an earlier one (keeping its created_at) unless a system edge
    would replace a user one or it is older."""
    out: dict[tuple[str, str, str], tuple[Relation, int]] = {}
    for r, v in rows:
        key = (r.source_id, r.target_id, r.type)
        held = out.get(key)
        if held is None:
            out[key] = (r, v)
        elif not (r.origin == ORIGIN_SYSTEM and held[0].origin == ORIGIN_USER) and v >= held[1]:
            out[key] = (replace(r, created_at=held[0].created_at), v)
    return list(out.values())


def _edge_row(r: Relation, version: int) -> dict[str, Any]:
    return {
        "version": version,
        "source": r.source_id,
        "target": r.target_id,
        "strength": float(r.strength),
        "origin": r.origin,
        "properties": json.dumps(dict(r.properties), ensure_ascii=False),
        "created_at": _utc(r.created_at),
    }


def _decode(
    doc: str, last_accessed_us: int | None, access_count: int | None, relevance: float | None
) -> Memory:
    """The node's document with its access statistics and, once one was written (a node from
    before that keeps the document's), its relevance_score."""
    at = None if last_accessed_us is None else from_us(last_accessed_us)
    m = memory_from_json(doc, last_accessed=at, access_count=int(access_count or 0))
    return m if relevance is None else replace(m, relevance_score=float(relevance))


def _filter(flt: Filter) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The parts of `neo4j_cypher.FILTER_PARTS` that ``flt`` uses, and their parameters:
    `engram_core.filters.matches` (the contract checks they agree)."""
    parts = ["tenant"]
    params: dict[str, Any] = {}
    if not flt.include_archived:
        parts.append("live")
    if flt.types:
        parts.append("types")
        params["types"] = sorted(set(flt.types))
    if flt.exclude_types:
        parts.append("exclude_types")
        params["exclude_types"] = sorted(set(flt.exclude_types))
    if flt.start is not None:
        parts.append("start")
        params["start"] = _utc(flt.start)
    if flt.end is not None:
        parts.append("end")
        params["end"] = _utc(flt.end)
    if flt.exclude_tags:
        parts.append("exclude_tags")
        params["exclude_tags"] = sorted({normalise_tag(t) for t in flt.exclude_tags})
    if flt.tags:
        column = "prefixes" if flt.tag_match is TagMatch.PREFIX else "tags"
        parts.append(f"{column}_{'all' if flt.tag_mode is TagMode.ALL else 'any'}")
        params["tags"] = sorted({normalise_tag(t) for t in flt.tags})
    return tuple(parts), params


# -- transaction functions (the driver may run each more than once: no side effects outside) --


async def _schema_statement(tx: AsyncManagedTransaction, /, statement: str) -> None:
    result = await tx.run(statement)
    await result.consume()


async def _await_indexes(tx: AsyncManagedTransaction, /, seconds: float) -> None:
    result = await tx.run(cypher.AWAIT_INDEXES, {"seconds": int(seconds)})
    await result.consume()


async def _single(tx: AsyncManagedTransaction, /, query: str, **params: Any) -> int:
    """The one integer a statement returns (a count)."""
    result = await tx.run(query, params)
    record = await result.single(strict=True)
    return int(record[0])


async def _add_relations(
    tx: AsyncManagedTransaction,
    /,
    tenant: str,
    endpoints: list[str],
    by_type: dict[str, list[dict[str, Any]]],
) -> int:
    # Endpoints are locked (sorted: one lock order for every writer) and checked before any
    # edge is written; NotFound rolls the transaction back, so a bad batch leaves no trace.
    result = await tx.run(cypher.LOCK_ENDPOINTS, {"tenant": tenant, "ids": sorted(endpoints)})
    record = await result.single(strict=True)
    live = set(record["live"])
    for id_ in endpoints:
        if id_ not in live:
            raise NotFound(f"memory {id_} not found")
    applied = 0
    for rel_type, rows in sorted(by_type.items()):
        applied += await _single(tx, cypher.MERGE_EDGE[rel_type], tenant=tenant, rows=rows)
    return applied


async def _remove_relations(
    tx: AsyncManagedTransaction, /, tenant: str, by_type: dict[str, list[dict[str, Any]]]
) -> int:
    removed = 0
    for rel_type, rows in sorted(by_type.items()):
        removed += await _single(tx, cypher.REMOVE_EDGE[rel_type], tenant=tenant, rows=rows)
    return removed


async def _related(
    tx: AsyncManagedTransaction,
    /,
    tenant: str,
    start: str,
    depth: int,
    types: list[str],
    limit: int,
) -> list[RelatedHit]:
    """Breadth-first (`Walk`), one statement per level: at most ``depth`` round trips."""
    walk = Walk(start)
    for d in range(1, depth + 1):
        rows = await _collected(
            tx,
            cypher.RELATED,
            tenant=tenant,
            frontier=sorted(walk.frontier),
            types=types,
            seen=sorted(walk.seen),
        )
        if d == 1 and not rows:
            raise NotFound(f"memory {start} not found")
        edges = [(source, other, t, s) for source, out in rows for other, t, s in out]
        if not walk.add_level(d, edges, limit):
            break
    return walk.result(limit)
