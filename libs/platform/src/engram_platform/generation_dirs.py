"""Store generations of an embedded backend (Qdrant Edge, tantivy) as directories.

Generation v1 is ``root`` itself, so a data directory made before generations existed keeps
working as v1 without a migration step; generation vN lives in the sibling ``<root>-vN``.
The registry (which generations exist, their model and dimension, which is live) is the
pointer file ``<root>-generations.json`` beside them, replaced atomically; without it the
store is v1 alone. One process owns the directories (each backend locks its own), so the
swap is that file plus an in-memory switch. With ``root`` None everything stays in memory.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from engram_core.errors import InvalidArgument
from engram_core.generations import FIRST, NAME, GenerationRecord, Registry
from engram_core.model import Generation, utcnow

REGISTRY_SUFFIX = "-generations.json"


class GenerationIndex(Protocol):
    async def count_all(self) -> int: ...

    async def close(self) -> None: ...


I = TypeVar("I", bound=GenerationIndex)  # noqa: E741 - the index type
OpenIndex = Callable[[Path | None, GenerationRecord], Awaitable[I]]


def generation_dir(root: Path, name: str) -> Path:
    return root if name == FIRST else root.with_name(f"{root.name}-{name}")


def registry_path(root: Path) -> Path:
    return root.with_name(f"{root.name}{REGISTRY_SUFFIX}")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _orphans(root: Path, registry: Registry) -> list[Path]:
    """Sibling generation directories the registry does not name: left by a crash between
    creating one and recording it, or between recording a drop and deleting it."""
    known = {generation_dir(root, r.name) for r in registry.records}
    prefix = f"{root.name}-"
    return [
        p
        for p in root.parent.glob(f"{prefix}v*")
        if p.is_dir() and NAME.match(p.name[len(prefix) :]) and p not in known
    ]


def model_of(
    models: Mapping[str, int] | None, requested: str, live: GenerationRecord
) -> tuple[str, int]:
    """The (model, dimension) a new generation gets. ``models`` None: a store without
    vectors, which ignores the model. Unknown model → InvalidArgument naming it."""
    if models is None:
        return "", 0
    model = requested or live.embedding_model
    if model not in models:
        known = ", ".join(sorted(models)) or "none"
        raise InvalidArgument(
            "embedding_model", f"this service cannot embed with {model!r} (it has: {known})"
        )
    return model, models[model]


class DirGenerations(Generic[I]):
    """`engram_core.ports.Generations` over directories, plus ``index(generation)``."""

    def __init__(
        self,
        root: Path | None,
        first: GenerationRecord,
        open_index: OpenIndex[I],
        models: Mapping[str, int] | None = None,
    ) -> None:
        """``first`` describes v1 when there is no registry yet; ``open_index(path, record)``
        opens (creating when empty) the index of a generation; ``models`` as in `model_of`."""
        self._root = root
        self._open_index = open_index
        self._models = None if models is None else dict(models)
        path = None if root is None else registry_path(root)
        self._registry_file = path
        if path is not None and path.exists():
            self._registry = Registry.from_json(path.read_text(encoding="utf-8"))
        else:
            self._registry = Registry.initial(first)
        self._indexes: dict[str, I] = {}
        self._lock = asyncio.Lock()

    @property
    def registry(self) -> Registry:
        return self._registry

    @property
    def recorded(self) -> bool:
        """False while a store on disk has no registry yet (v1 alone, described by ``first``)."""
        return self._registry_file is None or self._registry_file.exists()

    async def record_first(self, embedding_model: str) -> None:
        """Write the registry of a store that has none: v1, made with ``embedding_model``.
        From then on the store names its model itself, and a service configured with
        another one is stopped at start instead of mixing vectors of two models."""
        if self.recorded:
            return
        async with self._lock:
            first = replace(self._registry.live_record, embedding_model=embedding_model)
            await self._save(Registry.initial(first))

    async def record(self, generation: str = "", *, fresh: bool = False) -> GenerationRecord:
        """The record of a generation ("" = the live one); unknown → NotFound.
        One process owns the directories: ``fresh`` (re-read the backend) changes nothing."""
        return self._registry.get(generation)

    def _dir(self, name: str) -> Path | None:
        return None if self._root is None else generation_dir(self._root, name)

    def live_dir(self) -> Path | None:
        return self._dir(self._registry.live)

    def adopt_live(self, index: I) -> None:
        """The live generation's index, opened by the caller (a synchronous start-up that
        wants a locked directory to fail the start, not the first call)."""
        self._indexes[self._registry.live] = index

    async def index(self, generation: str = "") -> I:
        """The index of a generation ("" = the live one), opened on first use."""
        record = self._registry.get(generation)
        found = self._indexes.get(record.name)
        if found is not None:
            return found
        async with self._lock:
            record = self._registry.get(generation)
            if record.name not in self._indexes:
                self._indexes[record.name] = await self._open_index(self._dir(record.name), record)
            return self._indexes[record.name]

    async def _public(self, record: GenerationRecord) -> Generation:
        count = await (await self.index(record.name)).count_all()
        return record.public(live=record.name == self._registry.live, count=count)

    async def _save(self, registry: Registry) -> None:
        if self._registry_file is not None:
            await asyncio.to_thread(_write_atomically, self._registry_file, registry.to_json())
        self._registry = registry

    async def create_generation(self, embedding_model: str) -> Generation:
        model, dimension = model_of(self._models, embedding_model, self._registry.live_record)
        async with self._lock:
            registry, record = self._registry.created(model, dimension, utcnow())
            path = self._dir(record.name)
            if path is not None:
                await asyncio.to_thread(shutil.rmtree, path, True)  # an orphan of a crash
            self._indexes[record.name] = await self._open_index(path, record)
            await self._save(registry)
        return await self._public(record)

    async def list_generations(self) -> list[Generation]:
        return [await self._public(r) for r in self._registry.records]

    async def swap_generation(self, name: str) -> Generation:
        async with self._lock:
            previous = self._registry.live_record
            registry = self._registry.swapped(name)
            if name not in self._indexes:  # open before switching: a broken one stays out
                self._indexes[name] = await self._open_index(self._dir(name), registry.get(name))
            await self._save(registry)
        return await self._public(previous)

    async def drop_generation(self, name: str) -> None:
        async with self._lock:
            await self._save(self._registry.dropped(name))
            index = self._indexes.pop(name, None)
            if index is not None:
                await index.close()
            path = self._dir(name)
            if path is not None:
                await asyncio.to_thread(shutil.rmtree, path, True)

    async def remove_orphans(self) -> list[Path]:
        """Delete generation directories the registry does not name; returns them."""
        if self._root is None:
            return []
        found = await asyncio.to_thread(_orphans, self._root, self._registry)
        for path in found:
            await asyncio.to_thread(shutil.rmtree, path, True)
        return found

    async def close(self) -> None:
        async with self._lock:
            indexes, self._indexes = list(self._indexes.values()), {}
        for index in indexes:
            await index.close()
