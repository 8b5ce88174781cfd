"""VectorIndex on a Qdrant server through `AsyncQdrantClient` (production backend).

Same point layout as the Edge adapter (see `payload`). All tenants share one
collection; ``tenant`` is a keyword index with ``is_tenant`` so Qdrant co-locates
each tenant's points, and by default HNSW is built per tenant (``m=0``, ``payload_m``)
because every query filters on one tenant.

Several replicas may write at once, so the version guard is enforced by Qdrant
itself: every upsert carries ``update_filter: version < incoming``, which leaves a
newer point (or tombstone) untouched. The read before the write only counts what
was applied and skipped.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import grpc
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from engram_core.access import apply_access, keep_derived
from engram_core.codec import memory_from_json, memory_to_json
from engram_core.errors import Internal, Unavailable
from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_vector.adapters import by_sequence as bs
from engram_vector.adapters import payload as pl


@dataclass(frozen=True, slots=True)
class QdrantOptions:
    collection: str = "engram_memories"
    dimension: int = 384
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    hnsw_ef: int | None = None
    per_tenant_hnsw: bool = True
    quantization: Literal["none", "scalar"] = "none"
    on_disk: bool = False
    shard_number: int | None = None
    replication_factor: int | None = None
    metadata: Mapping[str, Any] | None = None  # recorded on a collection it creates


def _condition(c: pl.Condition) -> models.FieldCondition:
    if isinstance(c, pl.Match):
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if isinstance(c, pl.MatchAnyOf):
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=list(c.values)))
    return models.FieldCondition(key=c.key, range=models.Range(gte=c.gte, lte=c.lte))


def qdrant_filter(conds: pl.Conditions) -> models.Filter:
    return models.Filter(
        must=[_condition(c) for c in conds.must],
        must_not=[_condition(c) for c in conds.must_not] or None,
    )


def _older_than(version: int) -> models.Filter:
    return models.Filter(
        must=[models.FieldCondition(key=pl.VERSION, range=models.Range(lt=version))]
    )


_RETRIABLE_GRPC = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
}


@contextlib.asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    """Qdrant down, slow or overloaded -> Unavailable (callers retry or degrade)."""
    try:
        yield
    except (ResponseHandlingException, ConnectionError, TimeoutError) as exc:
        raise Unavailable(f"qdrant: {exc}") from exc
    except UnexpectedResponse as exc:
        status = exc.status_code or 0
        cls = Unavailable if status >= 500 or status == 429 else Internal
        raise cls(f"qdrant: HTTP {status} {exc.reason_phrase}") from exc
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError | grpc.Call) else None
        cls = Unavailable if code in _RETRIABLE_GRPC else Internal
        raise cls(f"qdrant: {code}") from exc


class QdrantVectorIndex:
    """engram_core.ports.VectorIndex on a Qdrant collection. Owns (and closes) the client."""

    def __init__(
        self, client: AsyncQdrantClient, options: QdrantOptions, *, owns_client: bool = True
    ) -> None:
        self._client = client
        self._owns_client = owns_client  # generations share one client and close it once
        self._options = options
        self._collection = options.collection
        self._search_params = (
            models.SearchParams(hnsw_ef=options.hnsw_ef) if options.hnsw_ef is not None else None
        )

    @classmethod
    async def open(
        cls,
        client: AsyncQdrantClient,
        options: QdrantOptions | None = None,
        *,
        owns_client: bool = True,
    ) -> QdrantVectorIndex:
        """Create the collection and its payload indexes when missing; check the dimension."""
        index = cls(client, options or QdrantOptions(), owns_client=owns_client)
        async with _translated():
            await index._ensure_collection()
        return index

    @property
    def dimension(self) -> int:
        return self._options.dimension

    async def _ensure_collection(self) -> None:
        if await self._client.collection_exists(self._collection):
            await self._check_dimension()
            return
        o = self._options
        hnsw = (
            models.HnswConfigDiff(m=0, payload_m=o.hnsw_m, ef_construct=o.hnsw_ef_construct)
            if o.per_tenant_hnsw
            else models.HnswConfigDiff(m=o.hnsw_m, ef_construct=o.hnsw_ef_construct)
        )
        quantization = (
            models.ScalarQuantization(
                scalar=models.ScalarQuantizationConfig(
                    type=models.ScalarType.INT8, quantile=0.99, always_ram=True
                )
            )
            if o.quantization == "scalar"
            else None
        )
        try:
            await self._client.create_collection(
                self._collection,
                vectors_config={
                    pl.VECTOR_NAME: models.VectorParams(
                        size=o.dimension, distance=models.Distance.COSINE, on_disk=o.on_disk
                    )
                },
                hnsw_config=hnsw,
                quantization_config=quantization,
                shard_number=o.shard_number,
                replication_factor=o.replication_factor,
                metadata=dict(o.metadata) if o.metadata is not None else None,
            )
        except (UnexpectedResponse, grpc.RpcError):
            # Another replica created it first: fine, as long as it now exists.
            if not await self._client.collection_exists(self._collection):
                raise
        await self._index_payload()

    async def _check_dimension(self) -> None:
        """An existing collection must hold vectors of the model's size."""
        info = await self._client.get_collection(self._collection)
        vectors = info.config.params.vectors
        size = vectors[pl.VECTOR_NAME].size if isinstance(vectors, dict) else None
        if size != self._options.dimension:
            raise Unavailable(
                f"collection {self._collection} holds {size}-d vectors, "
                f"settings say {self._options.dimension}"
            )

    async def _index_payload(self) -> None:
        """The payload indexes the filters use; the tenant's partitions the collection."""
        schemas: dict[str, Any] = {
            pl.TENANT: models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, is_tenant=True
            ),
            pl.TAGS: models.PayloadSchemaType.KEYWORD,
            pl.TAG_PREFIXES: models.PayloadSchemaType.KEYWORD,
            pl.TYPE: models.PayloadSchemaType.KEYWORD,
            pl.TS: models.PayloadSchemaType.INTEGER,
            pl.ARCHIVED: models.PayloadSchemaType.INTEGER,
            pl.DELETED: models.PayloadSchemaType.INTEGER,
            pl.VERSION: models.PayloadSchemaType.INTEGER,
        }
        with warnings.catch_warnings():
            # Local mode (unit tests) warns that payload indexes do nothing there.
            warnings.simplefilter("ignore", UserWarning)
            for name, schema in schemas.items():
                await self._client.create_payload_index(self._collection, name, schema)

    async def _stored(self, tenant: str, ids: Sequence[str]) -> dict[str, pl.Stored]:
        async with _translated():
            records = await self._client.retrieve(
                self._collection,
                [pl.point_id(tenant, i) for i in ids],
                with_payload=True,
                with_vectors=False,
            )
        out: dict[str, pl.Stored] = {}
        for rec in records:
            st = pl.stored_from_payload(rec.payload)
            if st is not None and (rec.payload or {}).get(pl.TENANT) == tenant:
                out[str(rec.id)] = st
        return out

    async def _upsert_guarded(self, points: Sequence[tuple[models.PointStruct, int]]) -> None:
        by_version: dict[int, list[models.PointStruct]] = defaultdict(list)
        for point, version in points:
            by_version[version].append(point)
        operations: list[Any] = [
            models.UpsertOperation(
                upsert=models.PointsList(points=group, update_filter=_older_than(version))
            )
            for version, group in by_version.items()
        ]
        async with _translated():
            await self._client.batch_update_points(self._collection, operations, wait=True)

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        for _, vector in items:
            pl.check_vector(vector, self.dimension)
        if not items:
            return UpsertResult(applied=0, skipped=0)
        newest = pl.newest_per_id(items)
        current = await self._stored(tenant, list(newest))
        points = []
        for memory, vector in newest.values():
            pid = pl.point_id(tenant, memory.id)
            st = current.get(pid)
            if st is not None and memory.version <= st.version:
                continue
            if st is not None and st.memory is not None:
                # From the read above: statistics or a score written between that read and
                # this write are overwritten (the version guard itself is the server's).
                memory = keep_derived(memory, st.memory)
            point = models.PointStruct(
                id=pid,
                vector={pl.VECTOR_NAME: [float(x) for x in vector]},
                payload=pl.memory_payload(tenant, memory),
            )
            points.append((point, memory.version))
        if points:
            await self._upsert_guarded(points)
        return UpsertResult(applied=len(points), skipped=len(items) - len(points))

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        current = await self._stored(tenant, wanted)
        planned, deleted = pl.plan_tombstones(tenant, wanted, version, current)
        tombstones = [
            (models.PointStruct(id=pid, vector={}, payload=payload), version)
            for pid, payload in planned
        ]
        if tombstones:
            await self._upsert_guarded(tombstones)
        return deleted

    async def search(
        self, tenant: str, vector: Sequence[float], flt: Filter, limit: int
    ) -> list[Hit]:
        return (await self.search_batch(tenant, vector, [flt], limit))[0]

    async def search_batch(
        self, tenant: str, vector: Sequence[float], flts: Sequence[Filter], limit: int
    ) -> list[list[Hit]]:
        query = pl.check_vector(vector, self.dimension)
        if not flts:
            return []
        requests = [
            models.QueryRequest(
                query=query,
                using=pl.VECTOR_NAME,
                filter=qdrant_filter(pl.filter_conditions(tenant, flt)),
                params=self._search_params,
                limit=limit,
                with_payload=[pl.MEMORY],
            )
            for flt in flts
        ]
        async with _translated():  # one round trip for every filter
            responses = await self._client.query_batch_points(self._collection, requests)
        return [[pl.hit_from_payload(p.payload, p.score) for p in r.points] for r in responses]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        stored = await self._stored(tenant, wanted)
        return pl.live_in_order(stored, tenant, wanted)

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        if not updates:
            return 0
        current = await self._stored(tenant, list(dict.fromkeys(u.id for u in updates)))
        changed: dict[str, tuple[Memory, int]] = {}
        updated = 0
        for u in updates:
            pid = pl.point_id(tenant, u.id)
            st = current.get(pid)
            if st is None or st.memory is None:
                continue
            memory = changed[pid][0] if pid in changed else st.memory
            after = apply_access(memory, u)
            if after is None:
                continue
            changed[pid] = (after, st.version)
            updated += 1
        await self._set_memories(changed)
        return updated

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        latest = {u.id: u.relevance_score for u in updates}  # a repeated id: the last wins
        if not latest:
            return 0
        current = await self._stored(tenant, list(latest))
        changed: dict[str, tuple[Memory, int]] = {}
        for id_, score in latest.items():
            pid = pl.point_id(tenant, id_)
            st = current.get(pid)
            if st is not None and st.memory is not None:
                changed[pid] = (replace(st.memory, relevance_score=score), st.version)
        await self._set_memories(changed)
        return len(changed)

    async def _set_memories(self, changed: Mapping[str, tuple[Memory, int]]) -> None:
        """Rewrite the memory JSON of points (vector and ``version`` untouched), each only if
        it still holds the version read: a concurrent newer upsert or delete wins."""
        if not changed:
            return
        operations: list[Any] = [
            models.SetPayloadOperation(
                set_payload=models.SetPayload(
                    payload={pl.MEMORY: memory_to_json(memory)},
                    filter=models.Filter(
                        must=[
                            models.HasIdCondition(has_id=[pid]),
                            models.FieldCondition(
                                key=pl.VERSION, match=models.MatchValue(value=version)
                            ),
                            models.FieldCondition(key=pl.DELETED, match=models.MatchValue(value=0)),
                        ]
                    ),
                )
            )
            for pid, (memory, version) in changed.items()
        ]
        async with _translated():
            await self._client.batch_update_points(self._collection, operations, wait=True)

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        # Scroll pages by point id (uuid5 of tenant and id): writes never move a point.
        offset = pl.scan_offset(cursor, limit)
        conds = pl.Conditions(tuple(pl.live_conditions(tenant)), ())
        async with _translated():
            records, next_offset = await self._client.scroll(
                self._collection,
                scroll_filter=qdrant_filter(conds),
                limit=limit,
                offset=offset,
                with_payload=[pl.MEMORY],
                with_vectors=False,
            )
        memories = [memory_from_json((r.payload or {})[pl.MEMORY]) for r in records]
        return ScanPage(memories, None if next_offset is None else str(next_offset))

    async def scan_by_sequence(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        return await bs.scan_by_sequence(_QdrantSequence(self, tenant), tenant, cursor, limit)

    async def _rows(
        self, conds: pl.Conditions, limit: int, offset: str | None, ordered: bool
    ) -> list[bs.Row]:
        order = models.OrderBy(key=pl.VERSION, direction=models.Direction.ASC)
        async with _translated():
            records, _ = await self._client.scroll(
                self._collection,
                scroll_filter=qdrant_filter(conds),
                limit=limit,
                offset=offset,
                order_by=order if ordered else None,
                with_payload=[pl.MEMORY],
                with_vectors=False,
            )
        return [bs.Row(str(r.id), memory_from_json((r.payload or {})[pl.MEMORY])) for r in records]

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        """One batch of queries by point id: Qdrant searches with the vector it holds, so no
        vector crosses the wire. Querying a point that has no vector fails the whole batch,
        so the live ids are read first; one deleted in between makes the batch fail, and it
        is read and tried once more."""
        pl.check_neighbour_limit(limit)
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        for attempt in (1, 2):
            current = await self._stored(tenant, wanted)
            live = [
                (i, pid)
                for i in wanted
                if (st := current.get(pid := pl.point_id(tenant, i))) and st.memory is not None
            ]
            if not live:
                return {}
            requests = [
                models.QueryRequest(
                    query=pid,
                    using=pl.VECTOR_NAME,
                    filter=models.Filter(
                        must=[
                            models.FieldCondition(
                                key=pl.TENANT, match=models.MatchValue(value=tenant)
                            )
                        ],
                        must_not=[models.HasIdCondition(has_id=[pid])],
                    ),
                    score_threshold=min_score,
                    limit=limit,
                    params=self._search_params,
                    with_payload=[pl.ID],
                )
                for _, pid in live
            ]
            try:
                async with _translated():
                    answers = await self._client.query_batch_points(self._collection, requests)
            except Internal:
                if attempt == 2:
                    raise
                continue
            return {
                id_: [
                    Hit(id=str((p.payload or {})[pl.ID]), score=float(p.score))
                    for p in answer.points
                ]
                for (id_, _), answer in zip(live, answers, strict=True)
            }
        raise AssertionError("unreachable")

    async def count(self, tenant: str) -> int:
        conds = pl.Conditions(tuple(pl.live_conditions(tenant)), ())
        async with _translated():
            result = await self._client.count(
                self._collection, count_filter=qdrant_filter(conds), exact=True
            )
        return int(result.count)

    async def delete_tenant(self, tenant: str) -> int:
        live = await self.count(tenant)
        everything = qdrant_filter(pl.Conditions((pl.Match(pl.TENANT, tenant),), ()))
        async with _translated():
            await self._client.delete(
                self._collection,
                points_selector=models.FilterSelector(filter=everything),
                wait=True,
            )
        return live

    async def count_all(self) -> int:
        """Live memories of every tenant (a generation's count)."""
        conds = pl.Conditions((pl.Match(pl.DELETED, 0),), ())
        async with _translated():
            result = await self._client.count(
                self._collection, count_filter=qdrant_filter(conds), exact=True
            )
        return int(result.count)

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()


@dataclass(frozen=True, slots=True)
class _QdrantSequence:
    """`by_sequence.SequenceReader` on the collection for one tenant."""

    index: QdrantVectorIndex
    tenant: str

    async def of_version(self, version: int, after_point: str | None, limit: int) -> list[bs.Row]:
        conds = (*pl.live_conditions(self.tenant), pl.Range(pl.VERSION, version, version))
        rows = await self.index._rows(pl.Conditions(conds, ()), limit + 1, after_point, False)
        return bs.after_point(rows, after_point, limit)

    async def above(self, version: int | None, limit: int) -> list[bs.Row]:
        floor = None if version is None else version + 1
        conds = (*pl.live_conditions(self.tenant), pl.Range(pl.VERSION, floor, None))
        return await self.index._rows(pl.Conditions(conds, ()), limit, None, True)
