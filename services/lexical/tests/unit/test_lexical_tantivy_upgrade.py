"""An index directory written with the previous schema (before the listing's sort fields) is
copied into the current one on open: live memories, tombstones and tenants survive, and a
crash at any step of the swap is finished or started again on the next open."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import tantivy

from engram_core.codec import memory_to_json
from engram_core.errors import Unavailable
from engram_core.model import Filter, Memory, UpsertResult
from engram_core.ordering import Sort
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.adapters.tantivy_schema import build_schema, doc_key, micros
from engram_lexical.adapters.tantivy_upgrade import open_index
from engram_testing.contracts.lexical import OTHER, T, full_memory, mem

HEAP = 20_000_000


def _previous_schema() -> tantivy.Schema:
    """The layout before importance, relevance and access_count became fast fields."""
    sb = tantivy.SchemaBuilder()
    for name in ("key", "tenant", "tags", "tag_prefixes", "type"):
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("content", tokenizer_name="en_stem")
    sb.add_integer_field("timestamp", indexed=True, fast=True)
    sb.add_boolean_field("archived", indexed=True)
    sb.add_integer_field("version", stored=True, indexed=True, fast=True)
    sb.add_boolean_field("deleted", stored=True, indexed=True)
    sb.add_bytes_field("memory", stored=True)
    return sb.build()


def _write_previous(path: Path, live: list[Memory], tombstones: list[tuple[str, str, int]]) -> None:
    path.mkdir(parents=True)
    index = tantivy.Index(_previous_schema(), path=str(path))
    writer = index.writer(HEAP, 1)
    for m in live:
        doc = tantivy.Document()
        for name, value in (("key", doc_key(m.tenant, m.id)), ("tenant", m.tenant), ("id", m.id)):
            doc.add_text(name, value)
        doc.add_text("type", m.type)
        doc.add_text("content", m.content)
        doc.add_integer("timestamp", micros(m.timestamp))
        doc.add_boolean("archived", m.archived)
        doc.add_integer("version", m.version)
        doc.add_boolean("deleted", False)
        doc.add_bytes("memory", memory_to_json(m).encode())
        writer.add_document(doc)
    for tenant, id_, version in tombstones:
        doc = tantivy.Document()
        for name, value in (("key", doc_key(tenant, id_)), ("tenant", tenant), ("id", id_)):
            doc.add_text(name, value)
        doc.add_integer("version", version)
        doc.add_boolean("deleted", True)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


LIVE = [
    replace(full_memory(), archived=False, importance=0.2),
    replace(mem("high", "the most important note"), importance=0.9),
    replace(mem("same", "a memory of the other tenant", tenant=OTHER), importance=0.4),
    replace(mem("same", "a memory of this tenant", minutes=5), importance=0.4),
]
TOMBSTONES = [(T, "gone", 7), ("x:y", "gone", 3)]  # a tenant with the key's separator in it


async def _check_upgraded(path: Path) -> None:
    index = TantivyTextIndex(path, writer_heap_bytes=HEAP)
    try:
        assert await index.get(T, [m.id for m in LIVE if m.tenant == T]) == [
            m for m in LIVE if m.tenant == T
        ]
        assert await index.get(OTHER, ["same"]) == [LIVE[2]]
        assert [m.id for m in await index.top(T, Filter(), Sort.IMPORTANCE, 10)] == [
            "high",
            "same",
            LIVE[0].id,
        ]
        assert [h.id for h in await index.search(T, "important", Filter(), 5)] == ["high"]
        # The tombstones kept their versions and tenants.
        assert await index.upsert(T, [mem("gone", version=7)]) == UpsertResult(0, 1)
        assert await index.upsert("x:y", [mem("gone", tenant="x:y", version=3)]) == UpsertResult(
            0, 1
        )
    finally:
        await index.close()
    assert _names(path.parent) == [path.name]


async def test_an_index_of_the_previous_schema_is_upgraded_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lexical"
    _write_previous(path, LIVE, TOMBSTONES)
    with pytest.raises(ValueError, match="schema does not match"):  # what tantivy alone does
        tantivy.Index(build_schema(), path=str(path), reuse=True)
    await _check_upgraded(path)
    caplog.clear()
    again = TantivyTextIndex(path, writer_heap_bytes=HEAP)  # opening again: nothing to copy
    assert "older schema" not in caplog.text
    assert await again.upsert("x:y", [mem("gone", tenant="x:y", version=4)]) == UpsertResult(1, 0)
    await again.close()


async def test_a_crash_between_the_renames_is_finished(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    _write_previous(path, LIVE, TOMBSTONES)
    copy = tmp_path / "done"
    shutil.copytree(path, copy)
    # Build the finished copy, then leave the state of a crash after the first rename.
    open_index(build_schema(), copy, (), HEAP)
    copy.rename(tmp_path / "lexical.upgrade")
    path.rename(tmp_path / "lexical.old")
    await _check_upgraded(path)


async def test_a_half_built_copy_is_started_again(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    _write_previous(path, LIVE, TOMBSTONES)
    half = tmp_path / "lexical.upgrade"
    half.mkdir()
    (half / "meta.json").write_text("{ half written", encoding="utf-8")
    await _check_upgraded(path)


async def test_an_index_another_writer_holds_is_not_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    _write_previous(path, LIVE, TOMBSTONES)
    holder = tantivy.Index.open(str(path)).writer(HEAP, 1)  # a second service, still writing
    with pytest.raises(Unavailable):
        TantivyTextIndex(path, writer_heap_bytes=HEAP)
    assert _names(tmp_path) == ["lexical"]
    holder.rollback()
    holder.wait_merging_threads()
    del holder
    await _check_upgraded(path)
