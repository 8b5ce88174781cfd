"""Generations on tantivy (directories + pointer file, through the bootstrap factory) pass the
generations contract; an index directory made before generations is v1 as it is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.bootstrap import build_generations
from engram_lexical.config import Settings
from engram_platform.generation_dirs import DirGenerations
from engram_testing.contracts.generations import Reopen, TextGenerationsContract
from engram_testing.contracts.lexical import T, mem


def _tantivy(data_dir: Path) -> DirGenerations[TantivyTextIndex]:
    store = build_generations(Settings(data_dir=data_dir, writer_heap_mb=16))
    assert isinstance(store, DirGenerations)
    return store


class TestTantivyGenerations(TextGenerationsContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[DirGenerations[TantivyTextIndex]]:
        store = _tantivy(tmp_path)
        yield store
        await store.close()

    @pytest.fixture
    async def reopen(
        self, store: DirGenerations[TantivyTextIndex], tmp_path: Path
    ) -> AsyncIterator[Reopen]:
        opened: list[DirGenerations[TantivyTextIndex]] = []

        async def again() -> DirGenerations[TantivyTextIndex]:
            await store.close()
            opened.append(_tantivy(tmp_path))
            return opened[-1]

        yield again
        for s in opened:
            await s.close()


async def test_a_tantivy_directory_from_before_generations_is_v1(tmp_path: Path) -> None:
    legacy = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=16_000_000)
    await legacy.upsert(T, [mem("old", "kept as it was")])
    await legacy.close()
    store = _tantivy(tmp_path)
    [v1] = await store.list_generations()
    assert (v1.name, v1.live, v1.count) == ("v1", True, 1)
    created = await store.create_generation("")
    assert (tmp_path / f"lexical-{created.name}" / "meta.json").is_file()
    await store.swap_generation(created.name)
    await store.drop_generation("v1")
    assert not (tmp_path / "lexical").exists()
    await store.close()
    again = _tantivy(tmp_path)  # v1 gone: the pointer file says so, nothing is re-created
    assert [g.name for g in await again.list_generations()] == [created.name]
    assert not (tmp_path / "lexical").exists()
    await again.close()
