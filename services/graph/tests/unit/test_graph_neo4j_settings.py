"""Neo4j backend: settings, bootstrap and the adapter's pure parts (no server needed here;
the adapter's contract runs against a real server in tests/integration/contracts/)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import Filter, TagMatch, TagMode
from engram_core.relations import MEMORY_EDGE_TYPES
from engram_graph.adapters import neo4j_cypher as cypher
from engram_graph.adapters.codec import with_versions
from engram_graph.adapters.neo4j_store import Neo4jGraphStore, _filter, _fold
from engram_graph.bootstrap import build_store, neo4j_auth
from engram_graph.config import Neo4jSettings, Settings
from engram_testing.contracts.graph import BASE, T, rel


def test_neo4j_settings_come_from_nested_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "neo4j-password"
    secret.write_text("s3cret\n", encoding="utf-8")
    monkeypatch.setenv("ENGRAM_GRAPH_BACKEND", "neo4j")
    monkeypatch.setenv("ENGRAM_GRAPH_NEO4J__URI", "neo4j://graph-db:7687")
    monkeypatch.setenv("ENGRAM_GRAPH_NEO4J__PASSWORD_FILE", str(secret))
    monkeypatch.setenv("ENGRAM_GRAPH_NEO4J__POOL_SIZE", "8")
    settings = Settings()
    assert settings.backend == "neo4j"
    assert settings.neo4j.uri == "neo4j://graph-db:7687"
    assert settings.neo4j.pool_size == 8
    assert settings.neo4j.database == "neo4j"
    assert neo4j_auth(settings.neo4j) == ("neo4j", "s3cret")


def test_the_default_is_ladybug_and_no_auth() -> None:
    assert Settings().backend == "ladybug"
    assert neo4j_auth(Neo4jSettings()) is None
    # There is no field a password could be written into: secrets come from a file.
    with pytest.raises(ValidationError):
        Neo4jSettings(password="literal")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Settings(backend="postgres")  # type: ignore[arg-type]


async def test_bootstrap_builds_the_neo4j_store_without_connecting() -> None:
    settings = Settings(backend="neo4j", neo4j=Neo4jSettings(uri="bolt://127.0.0.1:1"))
    store = build_store(settings)
    try:
        assert isinstance(store, Neo4jGraphStore)
    finally:
        await store.close()


async def test_a_server_that_is_down_is_unavailable_naming_neo4j() -> None:
    # Nothing listens on port 1: every attempt is refused, the retries stop after 0.3 s.
    store = Neo4jGraphStore("bolt://127.0.0.1:1", max_retry_time_s=0.3, connect_timeout_s=0.5)
    try:
        with pytest.raises(Unavailable) as err:
            await store.count(T)
        assert "neo4j" in err.value.message
        with pytest.raises(InvalidArgument):
            await store.count("")
    finally:
        await store.close()
    with pytest.raises(Unavailable, match="closed"):
        await store.count(T)


def test_typed_edge_statements_come_from_the_registry_only() -> None:
    assert set(cypher.MERGE_EDGE) == set(MEMORY_EDGE_TYPES)
    assert "MENTIONS" not in cypher.MERGE_EDGE
    for rel_type, statement in cypher.MERGE_EDGE.items():
        assert f"MERGE (s)-[r:{rel_type}]->(t)" in statement


async def test_an_unknown_relation_type_never_reaches_a_query() -> None:
    store = Neo4jGraphStore("bolt://127.0.0.1:1", max_retry_time_s=0.1)
    try:
        with pytest.raises(InvalidArgument) as err:
            await store.add_relations(T, [rel("a", "b"), rel("a", "b", "X]->() DELETE s //")], 1)
        assert err.value.field == "relations[1].type"
    finally:
        await store.close()


def test_duplicate_edges_in_a_batch_fold_as_applied_in_turn() -> None:
    first = rel("a", "b", strength=0.2, minutes=1)
    later = rel("a", "b", strength=0.7, minutes=5)
    system = rel("a", "b", strength=0.1, origin="system", minutes=9)
    other = rel("b", "a", strength=0.3)
    folded = _fold(with_versions([first, later, system, other], 1, ()))
    assert len(folded) == 2
    [(ab, version)] = [(r, v) for r, v in folded if r.source_id == "a"]
    # The later user edge replaced the first (created_at stays); the system one did not.
    assert (ab.strength, ab.origin, ab.created_at) == (0.7, "user", BASE + timedelta(minutes=1))
    # With per-relation versions an older duplicate does not replace a newer one.
    [(ab, version)] = [
        (r, v)
        for r, v in _fold(with_versions([first, later, other], 0, [6, 5, 1]))
        if r.source_id == "a"
    ]
    assert (ab.strength, version) == (0.2, 6)


def test_the_filter_uses_only_its_parts_normalised_like_the_reference() -> None:
    flt = Filter(
        tags=("Project/Alpha", "project:alpha"),
        tag_mode=TagMode.ALL,
        tag_match=TagMatch.PREFIX,
        exclude_tags=("Lang/Python",),
        start=BASE.replace(tzinfo=None),  # a naive bound is taken as UTC, as every store does
    )
    parts, params = _filter(flt)
    assert parts == ("tenant", "live", "start", "exclude_tags", "prefixes_all")
    assert params == {"start": BASE, "exclude_tags": ["lang:python"], "tags": ["project:alpha"]}
    statement = cypher.search(parts)
    for part in parts:
        assert cypher.FILTER_PARTS[part] in statement
    # Only names of parameters in the text, never the values.
    assert "alpha" not in statement
    assert "python" not in statement
    assert _filter(Filter(include_archived=True)) == (("tenant",), {})
    assert _filter(Filter(types=("Decision",), exclude_types=("Context",)))[0] == (
        "tenant",
        "live",
        "types",
        "exclude_types",
    )
