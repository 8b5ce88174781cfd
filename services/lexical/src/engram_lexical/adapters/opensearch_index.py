"""`TextIndex` on OpenSearch through the async `opensearch-py` client (DESIGN §6, production).

Several replicas may write at once, so the version guard is the server's: every memory and
tombstone is written with ``version_type=external`` and the event's version, and OpenSearch
refuses (409) a write whose version is not above the stored one. Access statistics live in
documents of their own, versioned by their ``last_accessed`` time with ``external_gte``, so
they only move forward whoever writes them and never touch a memory's version; so does the
relevance_score once one is written (a document per memory, raised by upserts, set by
UpdateRelevance). Layout and queries: `opensearch_schema`. Those documents are children of
their memory (a ``join`` field), so `top` by relevance or access count is a few sorted queries
(`opensearch_schema.children_body` and the two after it) whatever the tenant's size, on an
index made with that layout; on one made before, it reads every memory passing the filter
until a rebuild (and says so in the log).

Every write asks for ``refresh`` (``wait_for`` by default): it returns once a search can see
it, which read-your-writes through the watermark relies on, and `top` by those values too. An
upsert with access or relevance documents to write waits once, on the second request. Reads
by id (`get`, the access join) are real-time gets and need no refresh.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import OpenSearchException, TransportError

from engram_core.access import is_newer_access
from engram_core.codec import memory_from_json
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
from engram_core.search_text import METADATA_FIELDS
from engram_lexical.adapters import opensearch_schema as schema

log = logging.getLogger(__name__)
R = TypeVar("R")
Refresh = Literal["wait_for", "true", "false"]
_TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
_CONFLICT = 409
# A scripted update of a relevance document retries this often when another write to the
# same document lands between its read and its write (a version conflict).
_RELEVANCE_RETRIES = 5
_DYNAMIC = ("number_of_replicas", "refresh_interval")
# Memories read per request by `top`'s pass over a tenant (relevance, access counts).
_TOP_PAGE = 1000


@dataclass(frozen=True, slots=True)
class OpenSearchOptions:
    index_prefix: str = "engram"
    number_of_shards: int = 1
    number_of_replicas: int = 1
    refresh_interval_s: float = 0.2
    refresh: Refresh = "wait_for"
    timeout_s: float = 10.0
    max_retries: int = 3
    retry_backoff_s: float = 0.2
    metadata_fields: tuple[str, ...] = METADATA_FIELDS  # indexed with the content


def opensearch_client(
    url: str,
    *,
    username: str | None = None,
    password: str | None = None,
    verify_certs: bool = True,
    ca_file: Path | None = None,
    timeout_s: float = 10.0,
    pool_size: int = 10,
) -> AsyncOpenSearch:
    """A client whose own retries are off: the adapter retries with backoff and knows which
    calls are safe to repeat (all of them: writes are versioned)."""
    hosts = [u.strip() for u in url.split(",") if u.strip()]
    return AsyncOpenSearch(
        hosts=hosts,
        http_auth=(username, password) if username else None,
        verify_certs=verify_certs,
        ca_certs=str(ca_file) if ca_file else None,
        timeout=timeout_s,
        max_retries=0,
        retry_on_timeout=False,
        maxsize=pool_size,
    )


@dataclass(frozen=True, slots=True)
class _Access:
    last_accessed: datetime
    access_count: int


@dataclass(frozen=True, slots=True)
class _Derived:
    """What a memory's own documents beside it hold: access statistics, relevance_score."""

    access: _Access | None
    relevance: float | None


@dataclass(frozen=True, slots=True)
class _Stored:
    """What the index holds for one id: a live memory or a tombstone, and its version."""

    version: int
    memory: Mapping[str, Any] | None


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, OSConnectionError):  # refused, reset, timed out
        return True
    return isinstance(exc, TransportError) and exc.status_code in _TRANSIENT_STATUS


def _reason(item: Mapping[str, Any]) -> str:
    error = item.get("error") or {}
    if isinstance(error, Mapping):
        return f"{error.get('type', 'error')}: {error.get('reason', '')}"
    return str(error)


class OpenSearchTextIndex:
    """engram_core.ports.TextIndex on an OpenSearch alias. Owns (and closes) the client.

    The index template, the versioned index and its alias are created on first use (or by
    `open`), idempotently: replicas starting together race harmlessly."""

    def __init__(
        self,
        client: AsyncOpenSearch,
        options: OpenSearchOptions | None = None,
        *,
        index: str | None = None,
        owns_client: bool = True,
    ) -> None:
        """``index``: address that concrete index (a store generation by name, made by
        `OpenSearchGenerations`) instead of the alias, and set nothing up. ``owns_client``:
        close the client with the adapter (generations share one and close it once)."""
        self._client = client
        self._o = options or OpenSearchOptions()
        self._alias = index or schema.alias_name(self._o.index_prefix)
        self._named = index is not None
        self._owns_client = owns_client
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._closed = False
        self._warned: set[str] = set()  # indices logged as still in an older layout

    @property
    def alias(self) -> str:
        return self._alias

    async def open(self) -> OpenSearchTextIndex:
        """Create what is missing now rather than on the first call (start-up checks)."""
        await self._ensure_ready()
        return self

    # -- port ---------------------------------------------------------------------------------

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        if not memories:
            return UpsertResult(applied=0, skipped=0)
        # One write per id, the highest version: the others would only be refused later.
        newest: dict[str, tuple[int, Memory]] = {}
        for i, m in enumerate(memories):
            if m.id not in newest or m.version > newest[m.id][1].version:
                newest[m.id] = (i, m)
        ops: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for _, m in newest.values():
            fresh = m if m.tenant == tenant else replace(m, tenant=tenant)
            meta = self._meta(schema.doc_id(tenant, m.id), tenant, m.version, "external")
            ops.append(
                ({"index": meta}, schema.memory_source(tenant, fresh, self._o.metadata_fields))
            )
        # With access or relevance documents to write after them, the memories need not wait
        # for a refresh: the second request's wait makes both searchable.
        derivable = any(_derives(m) for _, m in newest.values())
        items = await self._bulk(ops, refresh=not derivable)
        applied: list[Memory] = []
        for (i, m), item in zip(newest.values(), items, strict=True):
            status = int(item.get("status", 500))
            if status < 300:
                applied.append(m)
            elif status != _CONFLICT:
                self._item_error(item, f"memories[{i}]")
        # Statistics an upsert carries count like an UpdateAccess (the newer pair is kept), and
        # its score lifts the relevance document (a score of 0 would never change it).
        derived = [
            self._access_op(tenant, m.id, _Access(m.last_accessed, m.access_count))
            for m in applied
            if m.last_accessed is not None
        ]
        derived += [
            (
                {
                    "update": {
                        **self._meta(schema.relevance_id(tenant, m.id), tenant),
                        "retry_on_conflict": _RELEVANCE_RETRIES,
                    }
                },
                schema.raise_relevance(tenant, m.id, m.relevance_score),
            )
            for m in applied
            if m.relevance_score > 0
        ]
        if derived:
            for item in await self._bulk(derived, refresh=True):
                status = int(item.get("status", 500))
                if status >= 300 and status != _CONFLICT:
                    self._item_error(item, "memories")
        elif derivable and applied:
            await self._refresh()  # only memories applied, and they did not wait
        return UpsertResult(applied=len(applied), skipped=len(memories) - len(applied))

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        unique = list(dict.fromkeys(ids))
        if not unique:
            return 0
        # Read first only to count the live memories removed; the server guards the write.
        stored = await self._read(tenant, unique)
        ops = [
            (
                {"index": self._meta(schema.doc_id(tenant, i), tenant, version, "external")},
                schema.tombstone_source(tenant, i, version),
            )
            for i in unique
        ]
        items = await self._bulk(ops, refresh=True)
        removed: list[str] = []
        deleted = 0
        for i, item in zip(unique, items, strict=True):
            status = int(item.get("status", 500))
            if status == _CONFLICT:
                continue
            if status >= 300:
                self._item_error(item, "ids")
            removed.append(i)
            prior = stored.get(i)
            deleted += prior is not None and prior.memory is not None
        if removed:
            # A memory re-created later starts with its own statistics and score, as on tantivy.
            await self._bulk(
                [
                    ({"delete": self._meta(doc(tenant, i), tenant)}, None)
                    for i in removed
                    for doc in (schema.access_id, schema.relevance_id)
                ],
                refresh=False,
            )
        return deleted

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        latest: dict[str, AccessUpdate] = {}
        for u in updates:
            if u.id not in latest or is_newer_access(u.last_accessed, latest[u.id].last_accessed):
                latest[u.id] = u
        if not latest:
            return 0
        stored = await self._read(tenant, list(latest), with_derived=True)
        ops = []
        for id_, u in latest.items():
            prior = stored.get(id_)
            if prior is None or prior.memory is None:
                continue  # unknown or deleted
            seen = _effective_access(prior.memory)
            if not is_newer_access(u.last_accessed, seen):
                continue  # older than what the memory shows; the server would keep it anyway
            ops.append(self._access_op(tenant, id_, _Access(u.last_accessed, u.access_count)))
        if not ops:
            return 0
        items = await self._bulk(ops, refresh=True)  # `top` by access count sees it on return
        updated = 0
        for item in items:
            status = int(item.get("status", 500))
            if status < 300:
                updated += 1
            elif status != _CONFLICT:  # a conflict: a newer access landed meanwhile
                self._item_error(item, "updates")
        return updated

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        latest = {u.id: u.relevance_score for u in updates}  # a repeated id: the last wins
        if not latest:
            return 0
        # Read first: unknown and deleted ids get no relevance document. The write is a plain
        # index of that document (the last writer wins), never of the memory.
        stored = await self._read(tenant, list(latest))
        live = [i for i in latest if (s := stored.get(i)) is not None and s.memory is not None]
        if not live:
            return 0
        ops = [
            (
                {"index": self._meta(schema.relevance_id(tenant, i), tenant)},
                schema.relevance_source(tenant, i, latest[i]),
            )
            for i in live
        ]
        for item in await self._bulk(ops, refresh=True):  # `top` by relevance sees it on return
            if int(item.get("status", 500)) >= 300:
                self._item_error(item, "updates")
        return len(live)

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        # One more than the page: whether anything follows is known without another call.
        found = await self._hits(tenant, schema.scan_body(tenant, cursor, limit + 1))
        memories = await self._memories(tenant, found[:limit])
        return ScanPage(memories, memories[-1].id if len(found) > limit else None)

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        words = schema.query_words(query)
        if limit <= 0 or not words:
            return []
        found = await self._hits(tenant, schema.search_body(tenant, words, flt, limit, query))
        memories = await self._memories(tenant, found)
        return [
            Hit(id=m.id, score=float(h["_score"]), memory=m)
            for h, m in zip(found, memories, strict=True)
        ]

    async def top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        """Importance and recency: one search sorted by the memory documents' fields. Relevance
        and access counts live in the memories' child documents: `_top_by_children`, or on an
        index of an older layout `_top_by_pass`, which reads every memory passing ``flt``."""
        if limit <= 0:
            return []
        if sort in schema.DERIVED:
            if await self._layout() < schema.LAYOUT:
                return await self._top_by_pass(tenant, flt, sort, limit)
            return await self._top_by_children(tenant, flt, sort, limit)
        found = await self._hits(tenant, schema.top_body(tenant, flt, sort, limit))
        # Ordered again for what an index of layout 1 cannot tell apart: it sorts importance
        # as a 32-bit float, so importances differing only beyond that tie there.
        return ordered(await self._memories(tenant, found), sort, limit)

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        unique = list(dict.fromkeys(ids))
        if not unique:
            return []
        stored = await self._read(tenant, unique, with_derived=True)
        return [
            _decode(s.memory, None)
            for i in unique
            if (s := stored.get(i)) is not None and s.memory is not None
        ]

    async def count(self, tenant: str) -> int:
        body = schema.count_body(tenant)
        response = await self._call(
            lambda: self._client.count(index=self._alias, body=body, routing=tenant)
        )
        return int(response["count"])

    async def delete_tenant(self, tenant: str) -> int:
        live = await self.count(tenant)
        # Every document of the tenant carries its name: memories, tombstones, children.
        body = {"query": {"term": {"tenant": tenant}}}
        await self._call(
            lambda: self._client.delete_by_query(
                index=self._alias, body=body, routing=tenant, refresh=True, conflicts="proceed"
            )
        )
        return live

    async def count_all(self) -> int:
        """Live memories of every tenant (a generation's count)."""
        body = schema.count_all_body()
        response = await self._call(lambda: self._client.count(index=self._alias, body=body))
        return int(response["count"])

    async def request(self, call: Callable[[], Awaitable[R]]) -> R:
        """``call`` with this adapter's retries and error translation (no set-up first)."""
        return cast(R, await self._retrying(call))

    async def ensure_ready(self) -> None:
        """Template, index and alias created when missing (what the first call does)."""
        await self._ensure_ready()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns_client:
                await self._client.close()

    # -- reads ----------------------------------------------------------------------------------

    async def _read(
        self, tenant: str, ids: Sequence[str], *, with_derived: bool = False
    ) -> dict[str, _Stored]:
        """The stored document of each id (memory or tombstone) in one real-time mget; with
        ``with_derived`` each live memory carries its effective access statistics and score."""
        docs: list[dict[str, Any]] = [{"_id": schema.doc_id(tenant, i)} for i in ids]
        if with_derived:
            docs += _derived_docs(tenant, ids)
        response = await self._call(
            lambda: self._client.mget(index=self._alias, body={"docs": docs}, routing=tenant)
        )
        found = response["docs"]
        derived = _parse_derived(ids, found[len(ids) :]) if with_derived else {}
        out: dict[str, _Stored] = {}
        for k, id_ in enumerate(ids):
            doc = found[k]
            if not doc.get("found"):
                continue
            source = doc["_source"]
            memory = source.get("memory") if source.get("kind") == schema.MEMORY else None
            if memory is not None and with_derived:
                memory = _merged(memory, derived.get(id_))
            out[id_] = _Stored(version=int(doc["_version"]), memory=memory)
        return out

    async def _hits(self, tenant: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        response = await self._call(
            lambda: self._client.search(index=self._alias, body=body, routing=tenant)
        )
        return cast(list[dict[str, Any]], response["hits"]["hits"])

    async def _memories(self, tenant: str, hits: Sequence[Mapping[str, Any]]) -> list[Memory]:
        """The memories of search hits with their access statistics and score (one real-time
        mget of the derived documents)."""
        ids = [str(h["_source"]["memory"]["id"]) for h in hits]
        derived = await self._read_derived(tenant, ids) if ids else {}
        return [
            _decode(h["_source"]["memory"], derived.get(id_))
            for h, id_ in zip(hits, ids, strict=True)
        ]

    async def _top_by_children(
        self, tenant: str, flt: Filter, sort: Sort, limit: int
    ) -> list[Memory]:
        """`top` by a value of the child documents: the listings of
        `opensearch_schema.children_body` and the two after it, then one real-time read of the
        memories they name, put in order. Searches see the index as of its last refresh, which
        every write waits for."""
        children, childless = await asyncio.gather(
            self._hits(tenant, schema.children_body(tenant, flt, sort, limit)),
            self._hits(tenant, schema.childless_body(tenant, flt, sort, limit)),
        )
        named = children
        if len(children) == limit:  # the lowest value may be shared beyond: settle it
            lowest = children[-1]["sort"][0]
            tied = await self._hits(tenant, schema.tied_body(tenant, flt, sort, lowest, limit))
            named = [h for h in children if h["sort"][0] != lowest] + tied
        ids = list(dict.fromkeys(str(h["_source"]["id"]) for h in [*named, *childless]))
        stored = await self._read(tenant, ids, with_derived=True)
        memories = [_decode(s.memory, None) for s in stored.values() if s.memory is not None]
        return ordered(memories, sort, limit)

    async def _layout(self) -> int:
        """The layout of the index behind the alias now (a swap may change it at any time)."""
        response = await self._call(lambda: self._client.indices.get_mapping(index=self._alias))
        [(index, body)] = response.items()
        found = schema.layout(body["mappings"])
        if found < schema.LAYOUT and index not in self._warned:
            self._warned.add(index)
            log.warning(
                "index %s has layout %d, not %d: top by relevance or access count reads every "
                "memory passing the filter there until `engram rebuild lexical` copies it into "
                "a new generation",
                index,
                found,
                schema.LAYOUT,
            )
        return found

    async def _top_by_pass(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        """`top` by a value of the derived documents on an index of layout 1, whose older ones
        are no children: the memories passing ``flt`` read page by page in id order, merged
        with those documents, keeping the best ``limit`` so far. O(those memories) per call."""
        kept: list[Memory] = []
        after: str | None = None
        while True:
            found = await self._hits(tenant, schema.scan_body(tenant, after, _TOP_PAGE, flt))
            page = await self._memories(tenant, found)
            kept = ordered([*kept, *page], sort, limit)  # the query applied ``flt``
            if len(found) < _TOP_PAGE:
                return kept
            after = page[-1].id

    async def _read_derived(self, tenant: str, ids: Sequence[str]) -> dict[str, _Derived]:
        docs = _derived_docs(tenant, ids)
        response = await self._call(
            lambda: self._client.mget(index=self._alias, body={"docs": docs}, routing=tenant)
        )
        return _parse_derived(ids, response["docs"])

    # -- writes ---------------------------------------------------------------------------------

    @staticmethod
    def _meta(
        id_: str, tenant: str, version: int | None = None, version_type: str | None = None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"_id": id_, "routing": tenant}
        if version is not None:
            meta["version"] = version
            meta["version_type"] = version_type
        return meta

    def _access_op(
        self, tenant: str, id_: str, a: _Access
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        # external_gte: an access at the same instant replaces (the incoming wins a tie, as in
        # engram_core.access); an older one is refused by the server.
        version = schema.access_version(a.last_accessed)
        meta = self._meta(schema.access_id(tenant, id_), tenant, version, "external_gte")
        return {"index": meta}, schema.access_source(tenant, id_, a.last_accessed, a.access_count)

    async def _bulk(
        self, ops: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], *, refresh: bool
    ) -> list[dict[str, Any]]:
        """Run ``ops`` (action, source) and return each one's result item, in order. Items the
        server rejected as overloaded (429/503…) are sent again, up to ``max_retries`` times."""
        results: list[dict[str, Any] | None] = [None] * len(ops)
        pending = list(range(len(ops)))
        for attempt in range(self._o.max_retries + 1):
            body: list[dict[str, Any]] = []
            for k in pending:
                action, source = ops[k]
                body.append(action)
                if source is not None:
                    body.append(source)
            # Through the alias, require it: a write never creates an index by accident. A
            # named generation is addressed by its index (see `OpenSearchGenerations`).
            params: dict[str, Any] = {} if self._named else {"require_alias": True}
            if refresh:
                params["refresh"] = self._o.refresh
            response = await self._call(
                lambda body=body, params=params: self._client.bulk(  # type: ignore[misc]
                    body=body, index=self._alias, **params
                )
            )
            retry: list[int] = []
            for k, entry in zip(pending, response["items"], strict=True):
                item = next(iter(entry.values()))
                if int(item.get("status", 500)) in _TRANSIENT_STATUS:
                    retry.append(k)
                results[k] = item
            if not retry:
                break
            pending = retry
            if attempt < self._o.max_retries:
                await asyncio.sleep(self._backoff(attempt))
        else:
            first = results[pending[0]] or {}
            raise Unavailable(f"opensearch: bulk items still rejected: {_reason(first)}")
        return [r or {} for r in results]

    async def _refresh(self) -> None:
        """What a write with ``refresh`` would have waited for, when the write did not ask."""
        if self._o.refresh != "false":
            await self._call(lambda: self._client.indices.refresh(index=self._alias))

    @staticmethod
    def _item_error(item: Mapping[str, Any], field: str) -> None:
        status = int(item.get("status", 500))
        if status == 404:  # the alias vanished (index deleted under us)
            raise Unavailable(f"opensearch: {_reason(item)}")
        if status == 400 and field.startswith("memories["):
            raise InvalidArgument(field, f"rejected by OpenSearch: {_reason(item)}")
        raise Internal(f"opensearch: write failed ({status}) {_reason(item)}")

    # -- calls ----------------------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        # Full jitter: replicas retrying together spread out.
        return random.uniform(0, self._o.retry_backoff_s * 2**attempt)

    async def _call(self, request: Callable[[], Awaitable[Any]]) -> Any:
        await self._ensure_ready()
        return await self._retrying(request)

    async def _retrying(self, request: Callable[[], Awaitable[Any]]) -> Any:
        """``request`` with a deadline per attempt, retried on transient failures (connection,
        timeout, 429, 502-504) with backoff; then `Unavailable`. Other failures are `Internal`."""
        if self._closed:
            raise Unavailable("opensearch: the text index is closed")
        for attempt in range(self._o.max_retries + 1):
            try:
                async with asyncio.timeout(self._o.timeout_s):
                    return await request()
            except (TimeoutError, OpenSearchException) as exc:
                if _index_missing(exc):
                    # Deleted under us: set it up again on the next call.
                    self._ready = False
                    raise Unavailable(f"opensearch: index {self._alias} missing") from exc
                if not (isinstance(exc, TimeoutError) or _transient(exc)):
                    raise Internal(f"opensearch: {_describe(exc)}") from exc
                if attempt == self._o.max_retries:
                    raise Unavailable(f"opensearch: {_describe(exc)}") from exc
                log.warning("opensearch call failed (%s), retrying", _describe(exc))
                await asyncio.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    async def _ensure_ready(self) -> None:
        if self._ready:
            return
        async with self._ready_lock:
            if not self._ready:
                if not self._named:
                    await self._setup()
                # An index made before the join field gets it, so every write is the same.
                c = self._client
                await self._retrying(
                    lambda: c.indices.put_mapping(index=self._alias, body=schema.JOIN_MAPPING)
                )
                self._ready = True

    async def _setup(self) -> None:
        """Template, then the versioned index with its alias, each created only if missing.
        Replicas starting together: the template PUT is idempotent and a lost race to create
        the index ("already exists") is success."""
        o, c = self._o, self._client
        template = schema.index_template(
            o.index_prefix,
            shards=o.number_of_shards,
            replicas=o.number_of_replicas,
            refresh_interval_s=o.refresh_interval_s,
        )
        name = schema.template_name(o.index_prefix)
        await self._retrying(lambda: c.indices.put_index_template(name=name, body=template))
        if not await self._retrying(lambda: c.indices.exists_alias(name=self._alias)):
            concrete = schema.concrete_name(o.index_prefix)
            body = {"aliases": {self._alias: {"is_write_index": True}}}
            try:
                await self._retrying(lambda: c.indices.create(index=concrete, body=body))
            except Internal as exc:
                if "resource_already_exists" not in str(exc.__cause__):
                    raise
            if not await self._retrying(lambda: c.indices.exists_alias(name=self._alias)):
                # The index exists without its alias (created by hand?): give it back.
                await self._retrying(lambda: c.indices.put_alias(index=concrete, name=self._alias))
        # The dynamic settings follow the configuration on every start, not only at creation.
        dynamic = {k: template["template"]["settings"]["index"][k] for k in _DYNAMIC}
        await self._retrying(
            lambda: c.indices.put_settings(index=self._alias, body={"index": dynamic})
        )
        # Primaries allocated before the first write (a replica that lost the creation race
        # gets here while they may still be starting). Bounded by our own per-call deadline.
        await self._retrying(lambda: c.cluster.health(index=self._alias, wait_for_status="yellow"))
        log.info("opensearch text index ready behind alias %s", self._alias)


def _index_missing(exc: BaseException) -> bool:
    return (
        isinstance(exc, TransportError)
        and exc.status_code == 404
        and "index_not_found" in str(exc.error)
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, TransportError):
        return f"{exc.status_code} {exc.error}"
    return f"{type(exc).__name__}: {exc}"


def _parse_access(source: Mapping[str, Any]) -> _Access:
    return _Access(datetime.fromisoformat(source["last_accessed"]), int(source["access_count"]))


def _derives(m: Memory) -> bool:
    """Whether an applied upsert of ``m`` writes its access or relevance document."""
    return m.last_accessed is not None or m.relevance_score > 0


def _derived_docs(tenant: str, ids: Sequence[str]) -> list[dict[str, Any]]:
    """The access documents of ``ids``, then their relevance documents (one mget)."""
    return [
        {"_id": schema.access_id(tenant, i), "_source": ["last_accessed", "access_count"]}
        for i in ids
    ] + [{"_id": schema.relevance_id(tenant, i), "_source": ["relevance_score"]} for i in ids]


def _parse_derived(ids: Sequence[str], docs: Sequence[Mapping[str, Any]]) -> dict[str, _Derived]:
    """``docs`` as `_derived_docs` asked for them: access documents, then relevance ones."""
    out: dict[str, _Derived] = {}
    for k, id_ in enumerate(ids):
        access, scored = docs[k], docs[len(ids) + k]
        if access.get("found") or scored.get("found"):
            out[id_] = _Derived(
                access=_parse_access(access["_source"]) if access.get("found") else None,
                relevance=float(scored["_source"]["relevance_score"])
                if scored.get("found")
                else None,
            )
    return out


def _effective_access(memory: Mapping[str, Any]) -> datetime | None:
    value = memory.get("last_accessed")
    return None if value is None else datetime.fromisoformat(value)


def _merged(memory: Mapping[str, Any], derived: _Derived | None) -> Mapping[str, Any]:
    """The memory with the statistics of its access document when those are at least as
    recent as the ones it was written with (an upsert carries content, not access), and the
    score of its relevance document when there is one (upserts only ever raise it)."""
    if derived is None:
        return memory
    merged = dict(memory)
    access = derived.access
    if access is not None and is_newer_access(access.last_accessed, _effective_access(memory)):
        merged["last_accessed"] = access.last_accessed.isoformat()
        merged["access_count"] = access.access_count
    if derived.relevance is not None:
        merged["relevance_score"] = derived.relevance
    return merged


def _decode(memory: Mapping[str, Any], derived: _Derived | None) -> Memory:
    return memory_from_json(json.dumps(_merged(memory, derived)))
