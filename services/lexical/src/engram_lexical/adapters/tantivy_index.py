"""`TextIndex` on tantivy, in-process and persisted (DESIGN §6, the embedded text backend).

Writes go through one drain task, the index's only writer. It takes every write queued since
its last commit, plans each in turn against the committed index plus the uncommitted writes
planned before it (so the version guard sees them), and commits once. A commit with its fsyncs
costs 40-130 ms on this machine's disk, so concurrent callers share one instead of queueing for
one each. Reads use the last committed snapshot. Blocking calls run in worker threads.

Access statistics wait for their commit: a commit costs ~35 ms of CPU whatever it holds (10k
memories: 36 ms with one document, 47 with 10, 59 with 70; merges and the searcher reload
included), and recall sends one access update per answer, so committing each at once made
them most of the service's CPU under load. A drain holding only access updates starts at
least ``access_commit_interval_s`` after the previous commit; any other write (content,
delete, relevance) arriving meanwhile ends the wait, and the access updates go in its commit.

A scan pages by id. tantivy has no range query on text, so the tenant's live ids come from a
walk of the ``key`` terms (``terms_with_prefix``, filtered to live documents, ~3 us a term);
what follows a page is kept for the next call with its cursor (`ScanRests`), so a scan
walks once, not once per page. A cursor met without its rest (another process, a
restart, an evicted or reused cursor) walks again from the cursor: same pages, same order.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, cast

import tantivy

from engram_core.access import apply_access, is_newer_access, keep_derived
from engram_core.codec import memory_from_json, memory_to_json
from engram_core.errors import Internal, InvalidArgument, Unavailable
from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ordering import Sort, ordered
from engram_core.search_text import METADATA_FIELDS, QUERY_STOPWORDS, word_pairs
from engram_lexical.adapters.tantivy_schema import (
    MAX_QUERY_TERMS,
    SORT_FIELDS,
    TIE_CAP,
    TIMESTAMP,
    Queries,
    build_schema,
    doc_key,
    memory_document,
    query_analyzer,
    tombstone_document,
)
from engram_lexical.adapters.tantivy_upgrade import open_index
from engram_platform.paging import ScanRests

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Stored:
    """What the index holds for one id: a live memory (raw JSON) or a tombstone."""

    version: int
    deleted: bool
    raw: bytes | None


@dataclass(frozen=True, slots=True)
class _Write:
    key: str
    stored: _Stored
    doc: tantivy.Document


@dataclass(frozen=True, slots=True)
class _Erase:
    """Every document of the tenant, tombstones included, goes (a tenant's deletion)."""

    tenant: str


_Reader = Callable[[str, Sequence[str]], dict[str, _Stored]]
_Plan = Callable[[_Reader], tuple[Any, Sequence[_Write | _Erase]]]
_Outcome = tuple[Any, BaseException | None]


async def _in_thread(fn: Callable[..., R], *args: Any) -> R:
    try:
        return await asyncio.to_thread(fn, *args)
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as exc:  # a Rust panic arrives as a BaseException; report, don't crash
        raise Internal(f"text index failure: {exc}") from exc


class TantivyTextIndex:
    """A tantivy index in ``path`` (in memory when None); one instance per directory."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        writer_heap_bytes: int = 64_000_000,
        writer_threads: int = 1,
        access_commit_interval_s: float = 0.0,
        metadata_fields: Sequence[str] = METADATA_FIELDS,
    ) -> None:
        self._schema = build_schema()
        self._metadata_fields = tuple(metadata_fields)
        try:
            if path is None:
                self._index = tantivy.Index(self._schema)
            else:
                self._index = open_index(
                    self._schema, path, self._metadata_fields, writer_heap_bytes
                )
            # Only this object writes, and it reloads after each of its commits.
            self._index.config_reader("manual")
            self._writer: tantivy.IndexWriter | None = self._index.writer(
                writer_heap_bytes, writer_threads
            )
        except ValueError as exc:
            raise Unavailable(f"cannot open the text index at {path}: {exc}") from exc
        self._queries = Queries(self._schema)
        self._analyzer = query_analyzer()
        self._keywords = query_analyzer(QUERY_STOPWORDS)
        self._scan_rests = ScanRests()
        # Each queued write, its caller's future, and whether it may wait (access updates).
        self._pending: list[tuple[_Plan, asyncio.Future[Any], bool]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._closed = False
        self._access_interval_s = access_commit_interval_s
        self._last_commit = 0.0  # event loop time of the last commit
        self._urgent = asyncio.Event()  # a write that must not wait was queued

    # -- port ---------------------------------------------------------------------------------

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        batch = list(memories)
        if not batch:
            return UpsertResult(applied=0, skipped=0)
        return await self._write(lambda read: self._plan_upsert(read, tenant, batch))

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        unique = list(dict.fromkeys(ids))
        if not unique:
            return 0
        return await self._write(lambda read: self._plan_delete(read, tenant, unique, version))

    async def delete_tenant(self, tenant: str) -> int:
        live = await self.count(tenant)
        await self._write(lambda read: (live, [_Erase(tenant)]))
        return live

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        batch = list(updates)
        if not batch:
            return 0
        return await self._write(lambda read: self._plan_access(read, tenant, batch), wait=True)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        latest = {u.id: u.relevance_score for u in updates}  # a repeated id: the last wins
        if not latest:
            return 0
        return await self._write(lambda read: self._plan_relevance(read, tenant, latest))

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        return await _in_thread(self._scan, tenant, cursor, limit)

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        terms = self.terms(query)
        if limit <= 0 or not terms:
            return []
        return await _in_thread(self._search, tenant, terms, self.phrases(query), flt, limit)

    async def top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        if limit <= 0:
            return []
        return await _in_thread(self._top, tenant, flt, sort, limit)

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        unique = list(dict.fromkeys(ids))
        if not unique:
            return []
        return await _in_thread(self._get, tenant, unique)

    async def count(self, tenant: str) -> int:
        return await _in_thread(self._count, tenant)

    async def count_all(self) -> int:
        """Live memories of every tenant (a generation's count)."""
        return await _in_thread(self._count_all)

    async def close(self) -> None:
        self._closed = True
        self._urgent.set()  # what waits is written now
        if self._drainer is not None:
            await self._drainer
        writer, self._writer = self._writer, None
        if writer is not None:
            # Finishes background merges and releases the directory lock.
            await _in_thread(writer.wait_merging_threads)

    def terms(self, query: str) -> list[str]:
        """The distinct index terms of a query, without stopwords unless it has nothing else.
        User syntax is never parsed, so nothing raises."""
        terms = self._keywords.analyze(query) or self._analyzer.analyze(query)
        return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]

    def phrases(self, query: str) -> list[tuple[str, str]]:
        """The query's adjacent word pairs (`word_pairs`), each word as its index term."""
        out = []
        for a, b in word_pairs(query):
            ta, tb = self._analyzer.analyze(a), self._analyzer.analyze(b)
            if len(ta) == 1 and len(tb) == 1:  # a word the analyzer splits or drops: no phrase
                out.append((ta[0], tb[0]))
        return list(dict.fromkeys(out))

    # -- the single writer ----------------------------------------------------------------------

    async def _write(
        self, plan: Callable[[_Reader], tuple[R, Sequence[_Write | _Erase]]], *, wait: bool = False
    ) -> R:
        """Queue a write for the drain; ``wait``: it may wait for the access interval."""
        if self._closed:
            raise Unavailable("the text index is closed")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((plan, done, wait))
        if not wait:
            self._urgent.set()
        if self._drainer is None or self._drainer.done():
            # A task of its own: a caller that is cancelled must not strand the others' writes.
            self._drainer = asyncio.create_task(self._drain())
        return cast(R, await done)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            await self._hold_access(loop)
            batch, self._pending = self._pending, []
            self._urgent.clear()
            try:
                outcomes = await _in_thread(self._apply, [plan for plan, _, _ in batch])
            except Exception as exc:
                outcomes = [(None, exc)] * len(batch)
            self._last_commit = loop.time()
            for (_, done, _), (value, error) in zip(batch, outcomes, strict=True):
                if done.done():  # the caller gave up waiting
                    continue
                if error is None:
                    done.set_result(value)
                else:
                    done.set_exception(error)

    async def _hold_access(self, loop: asyncio.AbstractEventLoop) -> None:
        """When only access updates are queued, wait out the interval since the last commit
        (or until another write is queued)."""
        if not all(wait for _, _, wait in self._pending) or self._closed:
            return
        left = self._last_commit + self._access_interval_s - loop.time()
        if left <= 0:
            return
        self._urgent.clear()
        try:
            async with asyncio.timeout(left):
                await self._urgent.wait()
        except TimeoutError:
            pass

    def _apply(self, plans: list[_Plan]) -> list[_Outcome]:
        """Plan every write in order, then apply them all in one commit."""
        writer = self._writer
        if writer is None:
            return [(None, Unavailable("the text index is closed"))] * len(plans)
        searcher = self._index.searcher()
        planned: dict[str, _Stored] = {}
        erased: set[str] = set()  # tenants whose committed documents this commit deletes

        def read(tenant: str, ids: Sequence[str]) -> dict[str, _Stored]:
            out = {i: s for i in ids if (s := planned.get(doc_key(tenant, i))) is not None}
            missing = [i for i in ids if i not in out]
            if missing and tenant not in erased:
                out.update(self._read(searcher, tenant, missing))
            return out

        outcomes: list[_Outcome] = []
        writes: list[_Write | _Erase] = []
        for plan in plans:
            try:
                value, mine = plan(read)
            except Exception as exc:  # fails this caller alone; nothing of it was written
                outcomes.append((None, exc))
                continue
            for w in mine:
                if isinstance(w, _Erase):
                    erased.add(w.tenant)
                    for key in [k for k in planned if k.startswith(doc_key(w.tenant, ""))]:
                        del planned[key]
                else:
                    planned[w.key] = w.stored
            writes.extend(mine)
            outcomes.append((value, None))
        if writes:
            try:
                for w in writes:
                    if isinstance(w, _Erase):
                        # Deletes what was added before it in this commit too, nothing after.
                        writer.delete_documents_by_term("tenant", w.tenant)
                        continue
                    writer.delete_documents_by_term("key", w.key)
                    writer.add_document(w.doc)
                writer.commit()
            except Exception as exc:
                writer.rollback()
                return [(None, error or exc) for _, error in outcomes]
            self._index.reload()
        return outcomes

    def _read(
        self, searcher: tantivy.Searcher, tenant: str, ids: Sequence[str]
    ) -> dict[str, _Stored]:
        out: dict[str, _Stored] = {}
        # One document per key: a replacement deletes and adds in the same commit.
        for _, address in searcher.search(self._queries.keys(tenant, ids), len(ids)).hits:
            doc = searcher.doc(address)
            out[str(doc.get_first("id"))] = _Stored(
                version=int(doc.get_first("version") or 0),
                deleted=bool(doc.get_first("deleted")),
                raw=doc.get_first("memory"),
            )
        return out

    def _live_write(self, tenant: str, m: Memory) -> _Write:
        raw = memory_to_json(m).encode()
        stored = _Stored(version=m.version, deleted=False, raw=raw)
        doc = memory_document(tenant, m, raw, self._metadata_fields)
        return _Write(doc_key(tenant, m.id), stored, doc)

    # -- plans (worker thread, inside the drain) ------------------------------------------------

    def _plan_upsert(
        self, read: _Reader, tenant: str, memories: list[Memory]
    ) -> tuple[UpsertResult, list[_Write]]:
        newest: dict[str, Memory] = {}
        for m in memories:
            if m.id not in newest or m.version > newest[m.id].version:
                newest[m.id] = m
        stored = read(tenant, list(newest))
        writes: list[_Write] = []
        for id_, m in newest.items():
            prior = stored.get(id_)
            if prior is not None and m.version <= prior.version:
                continue
            fresh = m if m.tenant == tenant else replace(m, tenant=tenant)
            if prior is not None and prior.raw is not None:
                fresh = keep_derived(fresh, memory_from_json(prior.raw))
            writes.append(self._live_write(tenant, fresh))
        return UpsertResult(applied=len(writes), skipped=len(memories) - len(writes)), writes

    def _plan_delete(
        self, read: _Reader, tenant: str, ids: list[str], version: int
    ) -> tuple[int, list[_Write]]:
        stored = read(tenant, ids)
        deleted = 0
        writes: list[_Write] = []
        for id_ in ids:
            prior = stored.get(id_)
            if prior is not None and version <= prior.version:
                continue
            if prior is not None and not prior.deleted:
                deleted += 1
            tomb = _Stored(version=version, deleted=True, raw=None)
            writes.append(
                _Write(doc_key(tenant, id_), tomb, tombstone_document(tenant, id_, version))
            )
        return deleted, writes

    def _plan_access(
        self, read: _Reader, tenant: str, updates: list[AccessUpdate]
    ) -> tuple[int, list[_Write]]:
        latest: dict[str, AccessUpdate] = {}
        for u in updates:
            if u.id not in latest or is_newer_access(u.last_accessed, latest[u.id].last_accessed):
                latest[u.id] = u
        stored = read(tenant, list(latest))
        writes: list[_Write] = []
        for id_, u in latest.items():
            prior = stored.get(id_)
            if prior is None or prior.raw is None:
                continue
            # Out-of-order delivery must not move access statistics backwards.
            seen = apply_access(memory_from_json(prior.raw), u)
            if seen is not None:
                writes.append(self._live_write(tenant, seen))
        return len(writes), writes

    def _plan_relevance(
        self, read: _Reader, tenant: str, latest: dict[str, float]
    ) -> tuple[int, list[_Write]]:
        stored = read(tenant, list(latest))
        writes: list[_Write] = []
        for id_, score in latest.items():
            prior = stored.get(id_)
            if prior is not None and prior.raw is not None:
                scored = replace(memory_from_json(prior.raw), relevance_score=score)
                writes.append(self._live_write(tenant, scored))
        return len(writes), writes

    # -- reads (worker thread) -------------------------------------------------------------------

    def _scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        searcher = self._index.searcher()
        rest = None if cursor is None else self._scan_rests.take(tenant, cursor)
        if rest is None:
            rest = self._live_ids(searcher, tenant)
            if cursor is not None:
                rest = rest[bisect.bisect_right(rest, cursor) :]
        page: list[Memory] = []
        taken = 0
        # Ids deleted since the walk are skipped; the page fills from what follows them.
        while len(page) < limit and taken < len(rest):
            chunk = rest[taken : taken + limit - len(page)]
            taken += len(chunk)
            stored = self._read(searcher, tenant, chunk)
            page += [memory_from_json(s.raw) for i in chunk if (s := stored.get(i)) and s.raw]
        if taken >= len(rest):
            return ScanPage(page, None)
        next_cursor = page[-1].id
        self._scan_rests.keep(tenant, next_cursor, rest[taken:])
        return ScanPage(page, next_cursor)

    def _live_ids(self, searcher: tantivy.Searcher, tenant: str) -> list[str]:
        """The tenant's live ids in order: its ``key`` terms held by a live document."""
        prefix = doc_key(tenant, "")
        terms = searcher.terms_with_prefix("key", prefix, filter_query=self._queries.live(tenant))
        return sorted(str(term)[len(prefix) :] for term, count in terms if count > 0)

    def _search(
        self,
        tenant: str,
        terms: list[str],
        phrases: list[tuple[str, str]],
        flt: Filter,
        limit: int,
    ) -> list[Hit]:
        searcher = self._index.searcher()
        hits: list[Hit] = []
        query = self._queries.search(tenant, terms, flt, phrases)
        for score, address in searcher.search(query, limit).hits:
            m = memory_from_json(bytes(searcher.doc(address).get_first("memory") or b""))
            hits.append(Hit(id=m.id, score=float(score), memory=m))
        return hits

    def _top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        """tantivy orders by one fast field; the order's ties (newer, then id) are settled on
        the memories that share the last place's value: the newest of them by a second query,
        and every one sharing that place's timestamp too by a third (at most `TIE_CAP`)."""
        searcher = self._index.searcher()
        base = self._queries.filter(tenant, flt)
        field = SORT_FIELDS[sort]
        found = self._by_field(searcher, base, field, limit)
        if len(found) < limit:  # every match
            return ordered((m for _, m in found), sort, limit)
        bound = found[-1][0]
        listed = {m.id: m for value, m in found if value > bound}  # all rank before the bound
        tied = self._queries.equal(base, field, bound)
        if field != TIMESTAMP:
            newest = self._by_field(searcher, tied, TIMESTAMP, limit - len(listed))
            listed.update((m.id, m) for _, m in newest)
            tied = self._queries.equal(tied, TIMESTAMP, newest[-1][0])
        listed.update((m.id, m) for _, m in self._by_field(searcher, tied, TIMESTAMP, TIE_CAP))
        return ordered(listed.values(), sort, limit)

    def _by_field(
        self, searcher: tantivy.Searcher, query: tantivy.Query, field: str, limit: int
    ) -> list[tuple[float, Memory]]:
        """The first ``limit`` matches of ``query`` by ``field``, highest first, with it."""
        found = searcher.search(query, limit, count=False, order_by_field=field).hits
        out: list[tuple[float, Memory]] = []
        for value, address in found:
            raw = bytes(searcher.doc(address).get_first("memory") or b"")
            out.append((float(value), memory_from_json(raw)))
        return out

    def _get(self, tenant: str, ids: list[str]) -> list[Memory]:
        stored = self._read(self._index.searcher(), tenant, ids)
        return [memory_from_json(s.raw) for i in ids if (s := stored.get(i)) is not None and s.raw]

    def _count_all(self) -> int:
        result = self._index.searcher().search(self._queries.live_all(), 1, count=True)
        return int(cast(Any, result).count)

    def _count(self, tenant: str) -> int:
        result = self._index.searcher().search(self._queries.live(tenant), 1, count=True)
        return int(cast(Any, result).count)  # present at run time, missing from the stub
