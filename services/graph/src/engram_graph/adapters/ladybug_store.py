"""`GraphStore` on ladybug, an embedded Cypher database (Kuzu's API) living in one file.

ladybug is synchronous, so every call runs on a thread: writes on ONE writer thread (one write
transaction at a time; batches commit once), reads on a small pool with a connection each. The
writer thread is a queue, not a lock: a caller that gives up (deadline, cancellation) cannot
let the next write start while its own is still running. One process owns the database file.

Updates hold buffer pool until a checkpoint (measured on ladybug 0.22): each committed
transaction that SETs a property of existing rows keeps, per column and per 2048-row vector it
touched, a chunk in the pool (16 KiB for a node column, 32 KiB for a relation's, stored both
ways) that only a checkpoint frees. ladybug checkpoints by itself when the WAL passes 16 MiB,
but an update's WAL record is a few hundred bytes: 18 000 one-edge updates (a graph rebuild)
filled a 1 GiB pool after 7 936 ("buffer pool is full"), 42 one-memory edits a 16 MiB one.
Inserts do not pin. So the store counts what its updates pin (`_Pins`) and checkpoints when
that passes a quarter of the pool. It also checkpoints on open: replaying the WAL pins too
(a 450 KiB WAL left by 10k memories and 18k edges held 57 MiB of a 128 MiB pool).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import math
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import ladybug

from engram_core.access import is_newer_access
from engram_core.errors import DeadlineExceeded, Internal, InvalidArgument, NotFound, Unavailable
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
    UpsertResult,
)
from engram_core.relations import ORIGIN_SYSTEM, ORIGIN_USER
from engram_core.tags import tag_prefixes
from engram_graph.adapters import ladybug_cypher as cypher
from engram_graph.adapters.codec import (
    NEVER,
    access_time,
    decode,
    encode,
    from_us,
    to_us,
    with_versions,
)
from engram_graph.adapters.edge_cache import EdgeCache, ReadCache
from engram_graph.adapters.walk import Walk
from engram_platform.paging import ScanRests

log = logging.getLogger(__name__)
R = TypeVar("R")
_Rows = list[list[Any]]


def memory_key(tenant: str, id_: str) -> str:
    return f"{tenant}/{id_}"


def entity_key(tenant: str, key: str) -> str:
    """``tenant/kind:slug`` — the tenant, the entity's kind and its slug."""
    return f"{tenant}/{key}"


def _check_tenant(tenant: str) -> None:
    # The tenant prefixes every primary key; a "/" in it could alias another tenant's keys.
    if not tenant or "/" in tenant:
        raise InvalidArgument("tenant", "must be non-empty and must not contain '/'")


def _rows(conn: ladybug.Connection, query: str, params: dict[str, Any] | None = None) -> _Rows:
    result = conn.execute(query, params or {})
    if isinstance(result, list):  # only a multi-statement string yields several results
        raise Internal("graph: one statement per query expected")
    try:
        return cast(_Rows, result.get_all())
    finally:
        result.close()


@contextmanager
def _transaction(conn: ladybug.Connection) -> Iterator[None]:
    _rows(conn, "BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        # A failed statement has already rolled the transaction back; ROLLBACK then fails.
        with suppress(RuntimeError):
            _rows(conn, "ROLLBACK")
        raise
    _rows(conn, "COMMIT")


@dataclass(frozen=True, slots=True)
class _State:
    """What a write needs to know of a stored memory node (live or tombstone)."""

    version: int
    tombstone: bool
    last_accessed: int
    access_count: int
    relevance: float  # NULL (a node from before the column): 0, what every upsert carried


# What one transaction's update of one column pins per 2048-row vector (see the docstring).
NODE_CHUNK = 16 * 1024
EDGE_CHUNK = 2 * NODE_CHUNK  # both directions
# A transaction touches at most this many vectors of a table (one node group of 131 072
# rows): a batch of updated rows counts as min(rows, this) vectors, an upper bound.
MAX_VECTORS = 64
MEMORY_COLUMNS = 14  # MERGE_MEMORIES sets every column but the key
EDGE_COLUMNS = 4  # UPDATE_EDGE


class _Pins:
    """The buffer pool held by updates committed since the last checkpoint (an estimate)."""

    def __init__(self) -> None:
        self.held = 0

    def add(self, chunk: int, columns: int, rows: int) -> None:
        """One transaction's update of ``columns`` on ``rows`` rows of one table."""
        self.held += chunk * columns * min(rows, MAX_VECTORS)


def _states(conn: ladybug.Connection, keys: list[str]) -> dict[str, _State]:
    """The memory nodes that exist among ``keys``."""
    rows = _rows(conn, cypher.STATES, {"keys": keys})
    return {
        k: _State(int(v), bool(d), int(at), int(n), float(r or 0.0)) for k, v, d, at, n, r in rows
    }


REPLAN_MIN_ROWS = 100  # below this many rows a table's plans are not worth renewing
COUNT_CACHE_TENANTS = 10_000  # tenants whose count of live memories is kept (least recent dropped)


class _Replan:
    """When reader connections must plan their statements again.

    A ladybug connection plans each statement once, from the table statistics of its first
    run, and keeps that plan for its life. `EDGES` (unhinted, see ladybug_cypher.py) planned
    while the relation table was empty stays a hash join over the whole table: 34 ms a key
    after 13k edges where a connection made then takes 0.45 ms. So the store counts what its
    writes add to each table and starts a new epoch whenever one has doubled since the last
    (from at least ``REPLAN_MIN_ROWS``): O(log n) epochs over a graph's life. A reader whose
    connection is of an older epoch replaces it before its next read.
    """

    def __init__(self, memories: int, edges: int) -> None:
        self.epoch = 0
        self._rows = {"memories": memories, "edges": edges}
        self._base = dict(self._rows)

    def grew(self, table: str, rows: int) -> None:
        """``rows`` written to ``table``: an estimate (updates count too, a write whose caller
        gave up does not), which is all a doubling needs."""
        self._rows[table] += rows
        if self._rows[table] >= 2 * max(self._base[table], REPLAN_MIN_ROWS):
            self._base = dict(self._rows)
            self.epoch += 1


@dataclass(slots=True)
class _Reader:
    conn: ladybug.Connection
    epoch: int


class LadybugGraphStore:
    """The graph in ``path`` (a file; its directory is created). Persisted across restarts."""

    def __init__(
        self,
        path: Path,
        *,
        query_timeout_ms: int = 5_000,
        write_timeout_ms: int = 60_000,
        readers: int = 2,
        buffer_pool_bytes: int = 256 * 1024 * 1024,
        threads_per_query: int = 1,
        edge_cache_keys: int = 50_000,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # ladybug's own default buffer pool is 80% of RAM: too much beside six other services.
        self._db = ladybug.Database(
            str(path), buffer_pool_size=buffer_pool_bytes, max_num_threads=threads_per_query
        )
        self._writer = ladybug.Connection(self._db, num_threads=threads_per_query)
        self._writer.set_query_timeout(write_timeout_ms)
        for statement in cypher.SCHEMA:
            _rows(self._writer, statement)
        self._pins = _Pins()
        self._pin_budget = buffer_pool_bytes // 4
        self._checkpoint()  # what replaying the WAL pinned (see the docstring)
        self._threads_per_query = threads_per_query
        self._query_timeout_ms = query_timeout_ms
        self._replan = _Replan(
            int(_rows(self._writer, cypher.MEMORY_COUNT)[0][0]),
            int(_rows(self._writer, cypher.EDGE_COUNT)[0][0]),
        )
        self._readers: queue.SimpleQueue[_Reader] = queue.SimpleQueue()
        self._reader_list: list[_Reader] = []  # every reader, for close()
        for _ in range(readers):
            reader = _Reader(self._reader_conn(), self._replan.epoch)
            self._reader_list.append(reader)
            self._readers.put(reader)
        self._scan_rests = ScanRests()
        self._edge_cache = EdgeCache(edge_cache_keys)
        self._counts: ReadCache[int] = ReadCache(COUNT_CACHE_TENANTS)  # tenant → live memories
        # tenant → edges agents made: with none, `relations(origin=user)` asks nothing.
        self._user_edges: ReadCache[int] = ReadCache(COUNT_CACHE_TENANTS)
        self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="graph-write")
        self._read_pool = ThreadPoolExecutor(readers, thread_name_prefix="graph-read")
        self._closed = False

    # -- threading and errors ------------------------------------------------------------------

    def _guard(self, fn: Callable[..., R], conn: ladybug.Connection, *args: Any) -> R:
        try:
            return fn(conn, *args)
        except RuntimeError as err:
            text = str(err)
            if "Interrupted" in text:
                raise DeadlineExceeded("graph query ran past its timeout") from err
            log.warning("ladybug error: %s", text)
            raise Unavailable(f"graph backend error: {text}") from err

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(conn, pins, *args)`` on the writer thread; it adds what its updates pin."""
        if self._closed:
            raise Unavailable("graph store is closed")
        loop = asyncio.get_running_loop()
        job = partial(self._guard, self._write_job, self._writer, fn, *args)
        return await loop.run_in_executor(self._write_pool, job)

    def _write_job(self, conn: ladybug.Connection, fn: Callable[..., R], *args: Any) -> R:
        result = fn(conn, self._pins, *args)
        # Not later: a checkpoint needs pool of its own (a full pool cannot checkpoint; on a
        # 16 MiB pool it already could not with 4 MiB pinned), hence the quarter.
        if self._pins.held >= self._pin_budget:
            self._checkpoint()
        return result

    def _checkpoint(self) -> bool:
        """On the writer thread. False when ladybug could not (it waits a while for readers
        to finish their transactions, then gives up): the next write tries again."""
        try:
            _rows(self._writer, "CHECKPOINT")
        except RuntimeError as err:
            log.warning("ladybug checkpoint failed: %s", err)
            return False
        self._pins.held = 0
        return True

    def _reader_conn(self) -> ladybug.Connection:
        conn = ladybug.Connection(self._db, num_threads=self._threads_per_query)
        conn.set_query_timeout(self._query_timeout_ms)
        return conn

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        if self._closed:
            raise Unavailable("graph store is closed")

        def job() -> R:
            reader = self._readers.get()
            try:
                if reader.epoch != self._replan.epoch:  # plans from smaller tables: renew
                    old, reader.conn = reader.conn, self._reader_conn()
                    reader.epoch = self._replan.epoch
                    old.close()
                return self._guard(fn, reader.conn, *args)
            finally:
                self._readers.put(reader)

        return await asyncio.get_running_loop().run_in_executor(self._read_pool, job)

    # -- writes --------------------------------------------------------------------------------

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        _check_tenant(tenant)
        if not items:
            return UpsertResult(0, 0)
        try:
            result: UpsertResult = await self._write(_upsert, tenant, list(items))
        finally:  # after the commit (or the failure), like the edge cache's
            self._counts.invalidate([tenant])
        self._replan.grew("memories", result.applied)
        return result

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        _check_tenant(tenant)
        if not ids:
            return 0
        try:
            return await self._write(_delete, tenant, list(dict.fromkeys(ids)), version)
        finally:
            # A delete takes the memory's edges, so its neighbours' lists change too.
            self._edge_cache.clear()
            self._counts.invalidate([tenant])
            self._user_edges.invalidate([tenant])

    async def delete_tenant(self, tenant: str) -> int:
        _check_tenant(tenant)
        try:
            return await self._write(_erase, tenant)
        finally:
            self._edge_cache.clear()
            self._counts.invalidate([tenant])
            self._user_edges.invalidate([tenant])

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        added = await self._write_edges(_add_relations, tenant, relations, version, versions)
        self._replan.grew("edges", added)
        return added

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        return await self._write_edges(_remove_relations, tenant, relations, version, versions)

    async def _write_edges(
        self,
        fn: Callable[[ladybug.Connection, _Pins, str, list[tuple[Relation, int]]], int],
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int],
    ) -> int:
        _check_tenant(tenant)
        if not relations:
            return 0
        try:
            return await self._write(fn, tenant, with_versions(relations, version, versions))
        finally:  # after the commit (or the failure): see edge_cache.py
            self._edge_cache.invalidate(
                memory_key(tenant, i) for r in relations for i in (r.source_id, r.target_id)
            )
            if any(r.origin != ORIGIN_SYSTEM for r in relations):
                self._user_edges.invalidate([tenant])

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        _check_tenant(tenant)
        if not updates:
            return 0
        return await self._write(_update_access, tenant, list(updates))

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        _check_tenant(tenant)
        latest = {u.id: u.relevance_score for u in updates}  # a repeated id: the last wins
        if not latest:
            return 0
        return await self._write(_update_relevance, tenant, latest)

    # -- reads ---------------------------------------------------------------------------------

    async def related(
        self, tenant: str, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[RelatedHit]:
        _check_tenant(tenant)
        return await self._read(_related, tenant, id, depth, list(types), limit)

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
    ) -> list[Hit]:
        _check_tenant(tenant)
        keys = sorted({entity_key(tenant, k) for k in entity_keys})
        # An empty keyword is a substring of every name: it would match everything.
        words = sorted({w.lower() for w in keywords if w})
        if (not keys and not words) or limit <= 0:
            return []
        statements = cypher.search(flt, keys, words)
        statements.params.update(tenant=tenant)
        return await self._read(_search, statements, limit, self._counts)

    async def relations(self, tenant: str, ids: Sequence[str], origin: str = "") -> list[Relation]:
        _check_tenant(tenant)
        if not ids:
            return []
        # Recall asks for agents' edges only, and most tenants have none: one cached count
        # (a pass over the tenant's edges, kept until an agent's edge is written) spares the
        # per-memory lookups, which grow with the tenant.
        if origin == ORIGIN_USER and not await self._read(
            _user_edge_count, tenant, self._user_edges
        ):
            return []
        keys = [memory_key(tenant, i) for i in dict.fromkeys(ids)]
        found, missing = self._edge_cache.get(keys)
        if missing:
            epoch = self._edge_cache.epoch()
            read = await self._read(_edges_of, missing)
            self._edge_cache.put(epoch, read)
            found.update(read)
        seen: dict[tuple[str, str, str], Relation] = {}
        for key in keys:
            for r in found[key]:
                if origin in ("", r.origin):
                    seen.setdefault((r.source_id, r.target_id, r.type), r)
        return list(seen.values())

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        _check_tenant(tenant)
        if not ids:
            return []
        return await self._read(_get, tenant, list(dict.fromkeys(ids)))

    async def count(self, tenant: str) -> int:
        _check_tenant(tenant)
        rows = await self._read(_rows, cypher.COUNT, {"tenant": tenant})
        return int(rows[0][0])

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        _check_tenant(tenant)
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        return await self._read(self._scan, tenant, cursor, limit)

    def _scan(
        self, conn: ladybug.Connection, tenant: str, cursor: str | None, limit: int
    ) -> ScanPage:
        """The cursor is the page's last id. Its rest comes from the previous page when it is
        still held, else from a walk of the table after the cursor ("" sorts first)."""
        rest = None if cursor is None else self._scan_rests.take(tenant, cursor)
        if rest is None:
            params = {"tenant": tenant, "after": cursor or ""}
            rest = [str(row[0]) for row in _rows(conn, cypher.LIVE_IDS, params)]
        page: list[Memory] = []
        taken = 0
        # Ids deleted since the walk are skipped; the page fills from what follows them.
        while len(page) < limit and taken < len(rest):
            keys = [memory_key(tenant, i) for i in rest[taken : taken + limit - len(page)]]
            taken += len(keys)
            found = _documents(conn, keys)
            page += [found[k] for k in keys if k in found]
        if taken >= len(rest):
            return ScanPage(page, None)
        self._scan_rests.keep(tenant, page[-1].id, rest[taken:])
        return ScanPage(page, page[-1].id)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        # Let queued writes finish, then close connections before the database (it checkpoints).
        self._write_pool.shutdown(wait=True)
        self._read_pool.shutdown(wait=True)
        for conn in [self._writer, *(r.conn for r in self._reader_list)]:
            conn.close()
        self._db.close()


# -- the work, on the writer thread ------------------------------------------------------------


def _memory_row(tenant: str, key: str, m: Memory, state: _State | None) -> dict[str, Any]:
    stored = replace(m, tenant=tenant)
    last_accessed = NEVER if m.last_accessed is None else to_us(m.last_accessed)
    access_count = m.access_count
    relevance = float(m.relevance_score)
    # An upsert carries content and, usually, older access statistics than the stored ones.
    if (
        state is not None
        and not state.tombstone
        and not is_newer_access(access_time(last_accessed), access_time(state.last_accessed))
    ):
        last_accessed, access_count = state.last_accessed, state.access_count
    # ... and a score up to now; the stored one stays when higher.
    if state is not None and not state.tombstone:
        relevance = max(relevance, state.relevance)
    return {
        "key": key,
        "tenant": tenant,
        "id": m.id,
        "type": m.type,
        "tags": list(m.tags),
        # The filter's reference derives prefixes when a writer left them out; so do we.
        "tag_prefixes": list(m.tag_prefixes or tag_prefixes(m.tags)),
        "ts": to_us(m.timestamp),
        "archived": m.archived,
        "version": m.version,
        "importance": float(m.importance),
        "last_accessed": last_accessed,
        "access_count": access_count,
        "doc": encode(stored),
        "relevance": relevance,
    }


def _entity_row(tenant: str, key: str, e: Entity) -> dict[str, Any]:
    return {
        "key": key,
        "tenant": tenant,
        "kind": e.kind,
        "slug": e.slug,
        "name": e.name,
        "lname": e.name.lower(),
    }


def _upsert(
    conn: ladybug.Connection,
    pins: _Pins,
    tenant: str,
    items: list[tuple[Memory, Sequence[Entity]]],
) -> UpsertResult:
    newest: dict[str, tuple[Memory, Sequence[Entity]]] = {}
    for m, entities in items:
        if m.id not in newest or m.version > newest[m.id][0].version:
            newest[m.id] = (m, entities)
    entity_rows: dict[str, dict[str, Any]] = {}
    memory_rows: list[dict[str, Any]] = []
    mentions: list[tuple[str, bool, list[str]]] = []  # memory key, drop the old set, new set
    updated = 0  # rows the MERGE finds (live or tombstone): updates, not inserts
    with _transaction(conn):
        states = _states(conn, [memory_key(tenant, id_) for id_ in newest])
        for m, entities in newest.values():
            key = memory_key(tenant, m.id)
            state = states.get(key)
            if state is not None and m.version <= state.version:
                continue
            wanted: dict[str, Entity] = {}
            for e in entities:
                wanted.setdefault(entity_key(tenant, e.key), e)
            for k, e in wanted.items():
                entity_rows.setdefault(k, _entity_row(tenant, k, e))
            memory_rows.append(_memory_row(tenant, key, m, state))
            updated += state is not None
            # A tombstone has no edges left; a live memory keeps an unchanged set untouched.
            had: set[str] = set()
            if state is not None and not state.tombstone:
                had = {r[0] for r in _rows(conn, cypher.MENTIONED, {"k": key})}
            if had != wanted.keys():
                mentions.append((key, bool(had), sorted(wanted)))
        if entity_rows:
            _rows(conn, cypher.MERGE_ENTITIES, {"rows": list(entity_rows.values())})
        if memory_rows:
            _rows(conn, cypher.MERGE_MEMORIES, {"rows": memory_rows})
        for key, drop, ekeys in mentions:
            if drop:
                _rows(conn, cypher.UNMENTION_ALL, {"k": key})
            if ekeys:
                _rows(conn, cypher.MENTION, {"k": key, "entities": ekeys})
    pins.add(NODE_CHUNK, MEMORY_COLUMNS, updated)
    return UpsertResult(applied=len(memory_rows), skipped=len(items) - len(memory_rows))


def _delete(
    conn: ladybug.Connection, pins: _Pins, tenant: str, ids: list[str], version: int
) -> int:
    deleted = bumped = 0
    with _transaction(conn):
        states = _states(conn, [memory_key(tenant, id_) for id_ in ids])
        for id_ in ids:
            key = memory_key(tenant, id_)
            state = states.get(key)
            if state is not None and version <= state.version:
                continue
            if state is not None and state.tombstone:
                _rows(conn, cypher.BUMP_TOMBSTONE, {"k": key, "version": version})
                bumped += 1
                continue
            if state is not None:
                _rows(conn, cypher.DETACH, {"k": key})
                deleted += 1
            params = {"k": key, "tenant": tenant, "id": id_, "version": version, "never": NEVER}
            _rows(conn, cypher.TOMBSTONE, params)
    pins.add(NODE_CHUNK, 1, bumped + deleted)  # a DETACH counted as one column, to be safe
    return deleted


def _erase(conn: ladybug.Connection, pins: _Pins, tenant: str) -> int:
    with _transaction(conn):
        live = int(_rows(conn, cypher.COUNT, {"tenant": tenant})[0][0])
        _rows(conn, cypher.ERASE_MEMORIES, {"tenant": tenant})
        _rows(conn, cypher.ERASE_ENTITIES, {"tenant": tenant})
    pins.add(NODE_CHUNK, 1, live)
    return live


def _edge_params(tenant: str, r: Relation) -> dict[str, Any]:
    return {
        "s": memory_key(tenant, r.source_id),
        "t": memory_key(tenant, r.target_id),
        "type": r.type,
    }


def _add_relations(
    conn: ladybug.Connection, pins: _Pins, tenant: str, rows: list[tuple[Relation, int]]
) -> int:
    # Every endpoint is checked before anything is written: a bad batch leaves no trace.
    endpoints = list(dict.fromkeys(i for r, _ in rows for i in (r.source_id, r.target_id)))
    states = _states(conn, [memory_key(tenant, id_) for id_ in endpoints])
    for id_ in endpoints:
        state = states.get(memory_key(tenant, id_))
        if state is None or state.tombstone:
            raise NotFound(f"memory {id_} not found")
    applied = updated = 0
    with _transaction(conn):
        # In turn, each seeing the ones before it: duplicates in a batch settle as if apart.
        for r, version in rows:
            params = _edge_params(tenant, r)
            existing = _rows(conn, cypher.EDGE, params)
            params.update(
                strength=float(r.strength),
                origin=r.origin,
                properties=json.dumps(dict(r.properties), ensure_ascii=False),
                version=version,
            )
            if existing:
                origin, stored_version = existing[0]
                if (
                    r.origin == ORIGIN_SYSTEM and origin == ORIGIN_USER
                ) or version < stored_version:
                    continue
                _rows(conn, cypher.UPDATE_EDGE, params)
                updated += 1
            else:
                _rows(conn, cypher.CREATE_EDGE, {**params, "created_at": to_us(r.created_at)})
            applied += 1
    pins.add(EDGE_CHUNK, EDGE_COLUMNS, updated)
    return applied


def _remove_relations(
    conn: ladybug.Connection, pins: _Pins, tenant: str, rows: list[tuple[Relation, int]]
) -> int:
    removed = 0
    with _transaction(conn):
        for r, version in rows:
            params = _edge_params(tenant, r)
            existing = _rows(conn, cypher.EDGE, params)
            if not existing:
                continue
            origin, stored_version = existing[0]
            if (r.origin == ORIGIN_SYSTEM and origin == ORIGIN_USER) or version < stored_version:
                continue
            _rows(conn, cypher.REMOVE_EDGE, params)
            removed += 1
    # A delete pins less than an update; counted as one column, to be safe.
    pins.add(EDGE_CHUNK, 1, removed)
    return removed


def _update_access(
    conn: ladybug.Connection, pins: _Pins, tenant: str, updates: list[AccessUpdate]
) -> int:
    updated = 0
    with _transaction(conn):
        for u in updates:
            params = {
                "k": memory_key(tenant, u.id),
                "at": to_us(u.last_accessed),
                "count": u.access_count,
            }
            updated += len(_rows(conn, cypher.TOUCH, params))
    pins.add(NODE_CHUNK, 2, updated)
    return updated


def _update_relevance(
    conn: ladybug.Connection, pins: _Pins, tenant: str, latest: dict[str, float]
) -> int:
    rows = [{"k": memory_key(tenant, i), "score": float(r)} for i, r in latest.items()]
    with _transaction(conn):
        updated = len(_rows(conn, cypher.SCORE, {"rows": rows}))
    pins.add(NODE_CHUNK, 1, updated)
    return updated


# -- the work, on a reader thread --------------------------------------------------------------


def _related(
    conn: ladybug.Connection, tenant: str, start: str, depth: int, types: list[str], limit: int
) -> list[RelatedHit]:
    """Breadth-first (`Walk`), one key lookup per expanded node."""
    state = _states(conn, [memory_key(tenant, start)]).get(memory_key(tenant, start))
    if state is None or state.tombstone:
        raise NotFound(f"memory {start} not found")
    query = cypher.neighbours(typed=bool(types))
    walk = Walk(start)
    for d in range(1, depth + 1):
        edges = [
            (node, other, type_, s)
            for node in sorted(walk.frontier)
            for other, type_, s in _rows(conn, query, _neighbour_params(tenant, node, types))
        ]
        if not walk.add_level(d, edges, limit):
            break
    return walk.result(limit)


def _neighbour_params(tenant: str, node: str, types: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {"k": memory_key(tenant, node), "tenant": tenant}
    if types:
        params["types"] = types
    return params


def _search(
    conn: ladybug.Connection, search: cypher.Search, limit: int, counts: ReadCache[int]
) -> list[Hit]:
    params = search.params
    entities = _rows(conn, search.entities, params)
    if not entities:
        return []
    total = float(_tenant_count(conn, params["tenant"], counts))
    scores: dict[str, float] = {}
    newest: dict[str, int] = {}  # key → ts; ties go newer first, then by key (= by id)
    for entity, df in entities:
        weight = math.log(1.0 + total / df)
        for key, ts in _rows(conn, search.mentions, {**params, "k": entity}):
            scores[key] = scores.get(key, 0.0) + weight
            newest[key] = ts
    ranked = heapq.nsmallest(limit, scores, key=lambda k: (-scores[k], -newest[k], k))
    docs = _documents(conn, ranked)
    return [
        Hit(id=memory.id, score=scores[key], memory=memory)
        for key in ranked
        if (memory := docs.get(key)) is not None
    ]


def _tenant_count(conn: ladybug.Connection, tenant: str, counts: ReadCache[int]) -> int:
    """The tenant's live memories: a pass over the memory table (the only index is the
    key's), so kept until this store's next upsert or delete of the tenant."""
    return _kept_count(conn, counts, tenant, cypher.COUNT, {"tenant": tenant})


def _user_edge_count(conn: ladybug.Connection, tenant: str, counts: ReadCache[int]) -> int:
    """The tenant's edges of origin user, kept until a write of such an edge or a delete."""
    params = {"tenant": tenant, "origin": ORIGIN_USER}
    return _kept_count(conn, counts, tenant, cypher.USER_EDGES, params)


def _kept_count(
    conn: ladybug.Connection,
    counts: ReadCache[int],
    tenant: str,
    statement: str,
    params: dict[str, Any],
) -> int:
    """``statement``'s count for ``tenant``, from ``counts`` or read and kept there."""
    cached, _ = counts.get([tenant])
    if tenant in cached:
        return cached[tenant]
    epoch = counts.epoch()
    total = int(_rows(conn, statement, params)[0][0])
    counts.put(epoch, {tenant: total})
    return total


def _documents(conn: ladybug.Connection, keys: list[str]) -> dict[str, Memory]:
    rows = _rows(conn, cypher.GET, {"keys": keys}) if keys else []
    return {k: decode(doc, at, count, r) for k, doc, at, count, r in rows}


def _edges_of(conn: ladybug.Connection, keys: list[str]) -> dict[str, tuple[Relation, ...]]:
    """Each memory key's relations, both directions (none for an unknown key)."""
    out: dict[str, tuple[Relation, ...]] = {}
    for key in keys:
        edges = []
        for a, b, a_internal, edge in _rows(conn, cypher.EDGES, {"k": key}):
            source, target = (a, b) if edge["_SRC"] == a_internal else (b, a)
            edges.append(
                Relation(
                    source_id=source,
                    target_id=target,
                    type=edge["type"],
                    strength=float(edge["strength"]),
                    properties=json.loads(edge["properties"]),
                    origin=edge["origin"],
                    created_at=from_us(edge["created_at"]),
                )
            )
        out[key] = tuple(edges)
    return out


def _get(conn: ladybug.Connection, tenant: str, ids: list[str]) -> list[Memory]:
    keys = [memory_key(tenant, id_) for id_ in ids]
    found = _documents(conn, keys)
    return [found[k] for k in keys if k in found]
