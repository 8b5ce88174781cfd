"""Store generations on OpenSearch: index ``<prefix>-memories-vN`` per generation, the alias
``<prefix>-memories`` on the live one. The index made before generations existed
(``<prefix>-memories-v1``) is generation v1 as it is.

A swap is one ``_aliases`` call (remove from the old index, add to the new one as the write
index), which OpenSearch applies atomically, so every replica's next request through the
alias reaches the new generation. New indices take the mappings of the index template
(pattern ``<prefix>-memories-v*``). Writes to a named generation address its index directly
(an alias cannot be required there); the registry is checked first, so only a write racing
its generation's drop could re-create that index empty — it would then show in the list, to
be dropped again. Replicas cache the list and re-read it on an unknown name or every
``refresh_s`` seconds.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from opensearchpy import AsyncOpenSearch

from engram_core.generations import NAME, GenerationRecord, Registry
from engram_core.model import Generation, utcnow
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_index import OpenSearchOptions, OpenSearchTextIndex


class OpenSearchGenerations:
    """`engram_core.ports.Generations` on OpenSearch, plus ``index(generation)``. Owns (and
    closes) the client. Nothing is sent before the first call (the service may start while
    OpenSearch is still coming up)."""

    def __init__(
        self, client: AsyncOpenSearch, options: OpenSearchOptions, *, refresh_s: float = 5.0
    ) -> None:
        self._client = client
        self._options = options
        self._alias = schema.alias_name(options.index_prefix)
        self._live = OpenSearchTextIndex(client, options, owns_client=False)
        self._indexes: dict[str, OpenSearchTextIndex] = {}
        self._refresh_s = refresh_s
        self._registry: Registry | None = None
        self._loaded_at = -float("inf")
        self._lock = asyncio.Lock()

    @property
    def alias(self) -> str:
        return self._alias

    def _index_name(self, name: str) -> str:
        return schema.generation_index(self._options.index_prefix, name)

    async def _load(self) -> Registry:
        await self._live.ensure_ready()
        c = self._client
        aliased = await self._live.request(lambda: c.indices.get_alias(name=self._alias))
        found = await self._live.request(
            lambda: c.indices.get(index=f"{self._alias}-v*", params={"filter_path": "*.settings"})
        )
        prefix = f"{self._alias}-"
        records = []
        for index, body in found.items():
            name = index[len(prefix) :]
            if not NAME.match(name):
                continue
            created_ms = int(body["settings"]["index"]["creation_date"])
            created = datetime.fromtimestamp(created_ms / 1000, UTC)
            records.append(GenerationRecord(name, "", 0, created))
        records.sort(key=lambda r: int(r.name[1:]))
        [live_index] = list(aliased)  # the alias points at one index
        registry = Registry(live=live_index[len(prefix) :], records=tuple(records))
        self._registry = registry
        self._loaded_at = time.monotonic()
        return registry

    async def _fresh(self, force: bool = False) -> Registry:
        if self._registry is None or force or time.monotonic() - self._loaded_at >= self._refresh_s:
            return await self._load()
        return self._registry

    async def record(self, generation: str = "", *, fresh: bool = False) -> GenerationRecord:
        registry = await self._fresh(force=fresh)
        if generation and registry.find(generation) is None:
            registry = await self._fresh(force=True)  # created by another replica meanwhile
        return registry.get(generation)

    async def index(self, generation: str = "") -> OpenSearchTextIndex:
        """The live generation through the alias, or a named one by its index."""
        if not generation:
            return self._live
        record = await self.record(generation)
        found = self._indexes.get(record.name)
        if found is None:
            found = OpenSearchTextIndex(
                self._client,
                self._options,
                index=self._index_name(record.name),
                owns_client=False,
            )
            self._indexes[record.name] = found
        return found

    async def _public(self, record: GenerationRecord, live: str) -> Generation:
        count = await (await self.index(record.name)).count_all()
        return record.public(live=record.name == live, count=count)

    async def create_generation(self, embedding_model: str) -> Generation:
        c = self._client
        async with self._lock:
            registry, record = (await self._fresh(force=True)).created("", 0, utcnow())
            name = self._index_name(record.name)
            await self._live.request(lambda: c.indices.create(index=name))
            await self._live.request(lambda: c.cluster.health(index=name, wait_for_status="yellow"))
            await self._load()
        return await self._public(record, registry.live)

    async def list_generations(self) -> list[Generation]:
        registry = await self._fresh(force=True)
        return [await self._public(r, registry.live) for r in registry.records]

    async def swap_generation(self, name: str) -> Generation:
        c = self._client
        async with self._lock:
            registry = await self._fresh(force=True)
            previous = registry.live_record
            target = registry.named(name)
            before = await self._public(previous, target.name)
            if target.name != previous.name:
                actions: list[dict[str, Any]] = [
                    {"remove": {"index": self._index_name(previous.name), "alias": self._alias}},
                    {
                        "add": {
                            "index": self._index_name(target.name),
                            "alias": self._alias,
                            "is_write_index": True,
                        }
                    },
                ]
                await self._live.request(
                    lambda: c.indices.update_aliases(body={"actions": actions})
                )
            await self._load()
        return before

    async def drop_generation(self, name: str) -> None:
        c = self._client
        async with self._lock:
            (await self._fresh(force=True)).dropped(name)  # NotFound / FailedPrecondition first
            index = self._index_name(name)
            await self._live.request(lambda: c.indices.delete(index=index))
            self._indexes.pop(name, None)
            await self._load()

    async def close(self) -> None:
        await self._live.close()
        await self._client.close()
