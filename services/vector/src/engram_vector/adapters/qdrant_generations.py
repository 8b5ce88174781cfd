"""Store generations on a Qdrant server: collection ``<name>-vN`` per generation, and the
collection alias ``<name>`` (the configured collection name) on the live one.

A swap is one ``update_collection_aliases`` call (delete the alias, create it on the new
collection), which Qdrant applies atomically, so every replica's next request through the
alias reaches the new generation. Each collection records its generation's embedding model
and creation time in its metadata (Qdrant >= 1.16); its dimension is its vector size.
Replicas cache the registry read back from the server and re-read it every ``refresh_s``
seconds, on an unknown name, and when asked (``record(fresh=True)``).

A collection named ``<name>`` itself, made before generations, is generation v1 as it is.
Qdrant cannot put an alias on a name a collection holds, so leaving it needs that collection
deleted first: a swap away from it answers FailedPrecondition unless ``replace_legacy`` is on,
in which case it deletes the legacy collection and then creates the alias (not atomic: calls
in between fail UNAVAILABLE and are retried; the old generation is gone, not kept).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from engram_core.errors import FailedPrecondition
from engram_core.generations import FIRST, NAME, GenerationRecord, Registry
from engram_core.model import Generation, utcnow
from engram_platform.generation_dirs import model_of
from engram_vector.adapters import payload as pl
from engram_vector.adapters.qdrant_server import QdrantOptions, QdrantVectorIndex, _translated

_MODEL_KEY = "engram_embedding_model"
_CREATED_KEY = "engram_created_at"
_LEGACY_CREATED = datetime.fromtimestamp(0, UTC)


class QdrantGenerations:
    """`engram_core.ports.Generations` on a Qdrant server, plus ``index(generation)``.
    Owns (and closes) the client."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        options: QdrantOptions,
        models: Mapping[str, int],
        default_model: str,
        *,
        refresh_s: float = 5.0,
        replace_legacy: bool = False,
    ) -> None:
        self._client = client
        self._options = options
        self._alias = options.collection
        self._models = dict(models)
        self._default_model = default_model
        self._refresh_s = refresh_s
        self._replace_legacy = replace_legacy
        self._registry = Registry.initial(
            GenerationRecord(FIRST, default_model, options.dimension, utcnow())
        )
        self._legacy = False
        self._loaded_at = -float("inf")
        self._indexes: dict[str, QdrantVectorIndex] = {}
        self._live: QdrantVectorIndex | None = None
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        client: AsyncQdrantClient,
        options: QdrantOptions,
        models: Mapping[str, int],
        default_model: str,
        *,
        refresh_s: float = 5.0,
        replace_legacy: bool = False,
    ) -> QdrantGenerations:
        """Read the generations back; on an empty server create v1 and the alias on it."""
        store = cls(
            client,
            options,
            models,
            default_model,
            refresh_s=refresh_s,
            replace_legacy=replace_legacy,
        )
        await store._load()
        if not store._registry.records:
            async with store._lock:
                await store._create(store._first_record())
                await store._point_alias(f"{store._alias}-{FIRST}", None)
            await store._load()
        return store

    def _first_record(self) -> GenerationRecord:
        return GenerationRecord(FIRST, self._default_model, self._options.dimension, utcnow())

    def collection(self, name: str) -> str:
        return self._alias if self._legacy and name == FIRST else f"{self._alias}-{name}"

    # -- reading the registry back from the server ---------------------------------------------

    async def _load(self) -> None:
        async with _translated():
            aliases = {
                a.alias_name: a.collection_name for a in (await self._client.get_aliases()).aliases
            }
            names = [c.name for c in (await self._client.get_collections()).collections]
        prefix = f"{self._alias}-"
        records: list[GenerationRecord] = []
        self._legacy = self._alias in names
        if self._legacy:
            model = await self._stored_model(self._alias) or self._default_model
            records.append(GenerationRecord(FIRST, model, self._options.dimension, _LEGACY_CREATED))
        for collection in names:
            name = collection[len(prefix) :] if collection.startswith(prefix) else ""
            if NAME.match(name) and not (self._legacy and name == FIRST):
                records.append(await self._read_record(collection, name))
        records.sort(key=lambda r: int(r.name[1:]))
        target = aliases.get(self._alias)
        live = FIRST if self._legacy else (target or "")[len(prefix) :]
        self._registry = Registry(live=live, records=tuple(records))
        self._loaded_at = time.monotonic()

    async def _read_record(self, collection: str, name: str) -> GenerationRecord:
        async with _translated():
            info = await self._client.get_collection(collection)
        meta: dict[str, Any] = dict(info.config.metadata or {})
        vectors = info.config.params.vectors
        size = vectors[pl.VECTOR_NAME].size if isinstance(vectors, dict) else 0
        created = meta.get(_CREATED_KEY)
        model = meta.get(_MODEL_KEY) or await self._stored_model(collection)
        return GenerationRecord(
            name=name,
            embedding_model=str(model or self._default_model),
            dimension=int(size),
            created_at=datetime.fromisoformat(created) if created else _LEGACY_CREATED,
        )

    async def _stored_model(self, collection: str) -> str | None:
        """A collection made before collections recorded their model: its memories name it."""
        async with _translated():
            records, _ = await self._client.scroll(
                collection, limit=1, with_payload=[pl.MEMORY], with_vectors=False
            )
        return pl.stored_model(records)

    async def _fresh(self, force: bool = False) -> Registry:
        if force or time.monotonic() - self._loaded_at >= self._refresh_s:
            await self._load()
        return self._registry

    # -- the store's side ---------------------------------------------------------------------

    async def record(self, generation: str = "", *, fresh: bool = False) -> GenerationRecord:
        registry = await self._fresh(force=fresh)
        if generation and registry.find(generation) is None:
            registry = await self._fresh(force=True)  # created by another replica meanwhile
        return registry.get(generation)

    async def index(self, generation: str = "") -> QdrantVectorIndex:
        """The live generation through the alias (a swap elsewhere redirects it at once), or a
        named one by its collection."""
        record = await self.record(generation)
        if not generation:
            live = self._live
            if live is None or live.dimension != record.dimension:
                options = replace(self._options, collection=self._alias, dimension=record.dimension)
                live = self._live = QdrantVectorIndex(self._client, options, owns_client=False)
            return live
        found = self._indexes.get(record.name)
        if found is None or found.dimension != record.dimension:
            options = replace(
                self._options, collection=self.collection(record.name), dimension=record.dimension
            )
            found = self._indexes[record.name] = QdrantVectorIndex(
                self._client, options, owns_client=False
            )
        return found

    async def _create(self, record: GenerationRecord) -> None:
        options = replace(
            self._options,
            collection=self.collection(record.name),
            dimension=record.dimension,
            metadata={
                _MODEL_KEY: record.embedding_model,
                _CREATED_KEY: record.created_at.isoformat(),
            },
        )
        self._indexes[record.name] = await QdrantVectorIndex.open(
            self._client, options, owns_client=False
        )

    async def _point_alias(self, collection: str, previous: str | None) -> None:
        operations: list[Any] = []
        if previous is not None:
            operations.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self._alias))
            )
        operations.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=collection, alias_name=self._alias)
            )
        )
        async with _translated():
            await self._client.update_collection_aliases(change_aliases_operations=operations)

    async def _public(self, record: GenerationRecord, live: str) -> Generation:
        count = await (await self.index(record.name)).count_all()
        return record.public(live=record.name == live, count=count)

    async def create_generation(self, embedding_model: str) -> Generation:
        async with self._lock:
            registry = await self._fresh(force=True)
            model, dimension = model_of(self._models, embedding_model, registry.live_record)
            _, record = registry.created(model, dimension, utcnow())
            await self._create(record)
            await self._load()
        return await self._public(record, self._registry.live)

    async def list_generations(self) -> list[Generation]:
        registry = await self._fresh(force=True)
        return [await self._public(r, registry.live) for r in registry.records]

    async def swap_generation(self, name: str) -> Generation:
        async with self._lock:
            registry = await self._fresh(force=True)
            previous = registry.live_record
            target = registry.named(name)
            before = await self._public(previous, target.name)
            if target.name != previous.name:
                if self._legacy:
                    if not self._replace_legacy:
                        raise FailedPrecondition(
                            "name",
                            f"the live generation is the plain collection {self._alias} (made "
                            "before generations); an alias cannot take its name until it is "
                            "deleted: turn qdrant.replace_legacy_collection on to do that",
                        )
                    async with _translated():
                        await self._client.delete_collection(self._alias)
                    await self._point_alias(self.collection(target.name), None)
                else:
                    await self._point_alias(self.collection(target.name), previous.name)
            await self._load()
        return before

    async def drop_generation(self, name: str) -> None:
        async with self._lock:
            registry = await self._fresh(force=True)
            registry.dropped(name)  # NotFound / FailedPrecondition before anything is deleted
            async with _translated():
                await self._client.delete_collection(self.collection(name))
            self._indexes.pop(name, None)
            await self._load()

    async def close(self) -> None:
        await self._client.close()
