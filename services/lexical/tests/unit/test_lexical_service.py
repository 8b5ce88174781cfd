"""LexicalService over the fake index, wired through bootstrap, and the settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engram_core.model import Filter
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.bootstrap import build_generations, build_service
from engram_lexical.config import Settings
from engram_lexical.service import Limits
from engram_testing.contracts.lexical import mem
from engram_testing.fakes.generations import fake_text_generations


async def test_upsert_stamps_the_tenant_and_derives_tag_prefixes(tmp_path: Path) -> None:
    generations = fake_text_generations()
    fake = await generations.index()
    service = build_service(Settings(data_dir=tmp_path), generations)
    m = replace(mem("a", "hello", tags=("entity:people:sarah",)), tag_prefixes=(), tenant="")
    assert (await service.upsert("t1", [m])).applied == 1
    [got] = await service.get("t1", ["a"])
    assert got.tenant == "t1"
    assert got.tag_prefixes == ("entity", "entity:people", "entity:people:sarah")
    assert await fake.count("t1") == 1


async def test_search_limit_zero_uses_the_default(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, default_limit=2)
    service = build_service(settings, fake_text_generations())
    await service.upsert("t", [mem(f"m{i}", "same words", tenant="t") for i in range(5)])
    assert len(await service.search("t", "words", Filter(), 0)) == 2
    assert len(await service.search("t", "words", Filter(), 4)) == 4
    assert service.limits == Limits(max_batch=1000, default_limit=2, max_limit=1000)


def test_settings_read_the_lexical_env_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGRAM_LEXICAL_MAX_LIMIT", "77")
    monkeypatch.setenv("ENGRAM_LEXICAL_DATA_DIR", str(tmp_path))
    settings = Settings()
    assert settings.max_limit == 77
    assert settings.backend == "tantivy"
    assert settings.resolved_index_dir() == tmp_path / "lexical"
    monkeypatch.setenv("ENGRAM_LEXICAL_BACKEND", "elasticsearch")
    with pytest.raises(ValueError, match="backend"):
        Settings()


async def test_bootstrap_builds_tantivy_under_the_data_dir(tmp_path: Path) -> None:
    generations = build_generations(Settings(data_dir=tmp_path, writer_heap_mb=20))
    index = await generations.index()
    assert isinstance(index, TantivyTextIndex)
    assert (tmp_path / "lexical" / "meta.json").exists()
    await generations.close()


async def test_metadata_fields_setting_names_what_is_indexed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGRAM_LEXICAL_METADATA_FIELDS", '["owner"]')
    service = build_service(Settings(data_dir=tmp_path, writer_heap_mb=20))
    await service.upsert(
        "t",
        [
            replace(mem("a", "lunch plans"), metadata={"owner": "zephyrine"}),
            replace(mem("b", "the launch slipped"), metadata={"project": "apollo"}),
        ],
    )
    try:
        assert [h.id for h in await service.search("t", "zephyrine", Filter(), 5)] == ["a"]
        # project is on the default list, not on this deployment's.
        assert await service.search("t", "apollo", Filter(), 5) == []
    finally:
        await service.close()
    monkeypatch.setenv("ENGRAM_LEXICAL_METADATA_FIELDS", '[""]')
    with pytest.raises(ValueError, match="metadata_fields"):
        Settings()


async def test_delete_tenant_reaches_every_generation(tmp_path: Path) -> None:
    generations = fake_text_generations()
    service = build_service(Settings(data_dir=tmp_path), generations)
    building = await service.create_generation("")  # a rebuild's, beside the live one
    for generation in ("", building.name):
        await service.upsert("t1", [mem("a", tenant="t1")], generation)
        await service.upsert("t2", [mem("a", tenant="t2")], generation)
    assert await service.delete_tenant("t1") == 1
    for generation in ("", building.name):
        assert await service.count("t1", generation) == 0
        assert await service.count("t2", generation) == 1
