"""The Neo4j graph adapter against a real Neo4j 5 server (``neo4j_url``).

Neo4j Community holds one database, shared with later suites in the same pytest process: each
test starts from an emptied database (``MATCH (n) DETACH DELETE n``; the constraints and
indexes stay, they are the adapter's own) and gets a fresh adapter.

Beyond the contract: Cypher in content, tags, names and ids stays text; replicas writing the
same ids at once (random races, and one made certain with a transaction held open) keep the
newest version; the schema is created once; a transaction past its timeout is
DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from neo4j import AsyncGraphDatabase

from engram_core.errors import DeadlineExceeded
from engram_core.model import Entity, Filter, TagMatch, UpsertResult
from engram_core.tags import normalise_tag
from engram_graph.adapters import neo4j_cypher as cypher
from engram_graph.adapters.neo4j_store import Neo4jGraphStore, _collected, _memory_row
from engram_testing.contracts.graph import (
    ALL,
    BOB,
    SARAH,
    GraphStoreContract,
    T,
    ids,
    mem,
    rel,
)

CYPHER = "'}) MATCH (n) DETACH DELETE n //"
# A tag as the service stores it (normalised: lower-case, ':' for '/').
CYPHER_TAG = normalise_tag("x'}),(n)-[r]-()_DETACH_DELETE_n,r//")


async def _wipe(url: str) -> None:
    async with AsyncGraphDatabase.driver(url, auth=None) as driver:
        await driver.execute_query("MATCH (n) DETACH DELETE n", database_="neo4j")


async def _node_count(url: str) -> int:
    async with AsyncGraphDatabase.driver(url, auth=None) as driver:
        records, _, _ = await driver.execute_query(
            "MATCH (n) RETURN count(n) AS n", database_="neo4j"
        )
        return int(records[0]["n"])


@pytest.fixture
async def neo4j_store(neo4j_url: str) -> AsyncIterator[Neo4jGraphStore]:
    await _wipe(neo4j_url)
    store = Neo4jGraphStore(neo4j_url, max_retry_time_s=5.0)
    yield store
    await store.close()


class TestNeo4jGraphStore(GraphStoreContract):
    @pytest.fixture
    async def store(self, neo4j_store: Neo4jGraphStore) -> Neo4jGraphStore:
        return neo4j_store


async def test_cypher_in_content_and_tags_stays_text(
    neo4j_store: Neo4jGraphStore, neo4j_url: str
) -> None:
    store = neo4j_store
    evil = mem("evil", CYPHER, tags=(CYPHER_TAG, "note:x"))
    evil_entity = Entity("concepts", "evil", CYPHER)
    await store.upsert(T, [(evil, [evil_entity]), (mem("b"), [SARAH])])
    await store.add_relations(T, [rel("evil", "b", properties={CYPHER: CYPHER})], 1)
    assert await _node_count(neo4j_url) == 4  # two memories, two entities

    assert await store.get(T, ["evil"]) == [evil]
    # The tag filters as the text it is, exactly and by prefix.
    for flt in (
        Filter(tags=(CYPHER_TAG,)),
        Filter(tags=(CYPHER_TAG.split(":")[0],), tag_match=TagMatch.PREFIX),
    ):
        assert ids(await store.search(T, [], ["detach delete"], flt, 10)) == ["evil"]
    assert await store.search(T, ["people:sarah"], [], Filter(exclude_tags=(CYPHER_TAG,)), 10) != []
    assert ids(await store.search(T, [], [CYPHER], ALL, 10)) == ["evil"]
    assert ids(await store.search(T, ["people:sarah", CYPHER], [], ALL, 10)) == ["b"]
    [edge] = await store.relations(T, ["b"])
    assert dict(edge.properties) == {CYPHER: CYPHER}
    assert [h.id for h in await store.related(T, "evil", 1, [CYPHER, "RELATES_TO"], 10)] == ["b"]
    # An id that is Cypher is a key like any other.
    assert await store.upsert(T, [(mem(CYPHER, CYPHER, version=2), [evil_entity])]) == (
        UpsertResult(1, 0)
    )
    assert await store.delete(T, [CYPHER], version=3) == 1
    assert await store.get(T, [CYPHER]) == []

    # Nothing was deleted or added but what the calls asked for: 2 memories, 2 entities and
    # the tombstone of the Cypher-named memory.
    assert await _node_count(neo4j_url) == 5
    assert await store.count(T) == 2
    assert [m.content for m in await store.get(T, ["evil", "b"])] == [CYPHER, "memory b"]


async def test_concurrent_upserts_keep_the_newest(neo4j_url: str) -> None:
    """Two replicas upsert the same ids at once with different versions: the newest wins,
    content and mentions alike, whichever transaction commits last."""
    await _wipe(neo4j_url)
    replicas = [Neo4jGraphStore(neo4j_url, max_retry_time_s=15.0) for _ in range(2)]
    rng = random.Random(7)
    names = [f"m{i:02d}" for i in range(40)]
    entity_of = (SARAH, BOB)
    try:
        for round_ in range(6):
            base = 1000 * (round_ + 1)
            versions = {n: rng.sample(range(base, base + 999), 2) for n in names}
            batches = []
            for who in (0, 1):
                batch = [
                    (mem(n, f"{who}:{v[who]}", version=v[who]), [entity_of[who]])
                    for n, v in versions.items()
                ]
                rng.shuffle(batch)
                batches.append(batch)
            results = await asyncio.gather(
                *(
                    replica.upsert(T, batch)
                    for replica, batch in zip(replicas, batches, strict=True)
                )
            )
            # Every id applied by one of them at least (the first to commit), at most both.
            assert all(r.applied + r.skipped == len(names) for r in results)
            assert len(names) <= sum(r.applied for r in results) <= 2 * len(names)
            got = {m.id: m for m in await replicas[0].get(T, names)}
            for n, (va, vb) in versions.items():
                winner = 0 if va > vb else 1
                assert (got[n].version, got[n].content) == (max(va, vb), f"{winner}:{max(va, vb)}")
            sarah = set(ids(await replicas[1].search(T, ["people:sarah"], [], ALL, 100)))
            bob = set(ids(await replicas[1].search(T, ["people:bob"], [], ALL, 100)))
            assert sarah == {n for n, (va, vb) in versions.items() if va > vb}
            assert bob == set(names) - sarah
        assert await replicas[0].count(T) == len(names)
    finally:
        for replica in replicas:
            await replica.close()


async def test_concurrent_delete_and_upsert_respect_versions(neo4j_url: str) -> None:
    """A delete racing upserts: an upsert older than the delete never resurrects the memory,
    a newer one always re-creates it, in whichever order the transactions commit."""
    await _wipe(neo4j_url)
    replicas = [Neo4jGraphStore(neo4j_url, max_retry_time_s=15.0) for _ in range(2)]
    alive: set[str] = set()
    try:
        for round_ in range(5):
            names = [f"d{round_}-{i:02d}" for i in range(40)]
            await replicas[0].upsert(T, [(mem(n, version=1), [SARAH]) for n in names])
            older, newer = names[::2], names[1::2]
            upserts = [(mem(n, "older", version=4), [BOB]) for n in older]
            upserts += [(mem(n, "newer", version=6), [BOB]) for n in newer]
            await asyncio.gather(
                replicas[0].delete(T, names, version=5), replicas[1].upsert(T, upserts)
            )
            assert await replicas[0].get(T, older) == []
            assert [m.content for m in await replicas[0].get(T, newer)] == ["newer"] * len(newer)
            alive.update(newer)
            bob = set(ids(await replicas[1].search(T, ["people:bob"], [], ALL, 1000)))
            assert bob == alive
            sarah = ids(await replicas[1].search(T, ["people:sarah"], [], ALL, 1000))
            assert sarah == []
        assert await replicas[0].count(T) == len(alive)
    finally:
        for replica in replicas:
            await replica.close()


async def test_a_write_waits_for_the_lock_and_reads_the_committed_version(
    neo4j_store: Neo4jGraphStore, neo4j_url: str
) -> None:
    """The race the random tests above may or may not hit, made certain: another replica's
    transaction has written version 10 and not committed yet; version 5 (an upsert, then a
    delete) waits for it and, once it commits, sees 10 and changes nothing. Without the lock
    taken before the guard reads, both would apply over the stale version 1."""
    store = neo4j_store
    await store.upsert(T, [(mem("race", "v1", version=1), [SARAH])])
    async with (
        AsyncGraphDatabase.driver(neo4j_url, auth=None) as driver,
        driver.session(database="neo4j") as session,
    ):
        for late in (
            lambda: store.upsert(T, [(mem("race", "v5", version=5), [SARAH])]),
            lambda: store.delete(T, ["race"], version=5),
        ):
            tx = await session.begin_transaction()
            row = _memory_row(T, mem("race", "v10", version=10), [BOB])
            result = await tx.run(cypher.UPSERT, tenant=T, rows=[row])
            assert (await result.single(strict=True))[0] in (0, 1)
            waiting = asyncio.create_task(late())
            await asyncio.sleep(0.5)
            assert not waiting.done()  # blocked on the node's lock
            await tx.commit()
            assert await waiting in (UpsertResult(0, 1), 0)
            assert [(m.content, m.version) for m in await store.get(T, ["race"])] == [("v10", 10)]
    assert ids(await store.search(T, ["people:bob"], [], ALL, 10)) == ["race"]
    assert await store.search(T, ["people:sarah"], [], ALL, 10) == []


async def test_constraints_and_indexes_are_created_once(
    neo4j_store: Neo4jGraphStore, neo4j_url: str
) -> None:
    await neo4j_store.ensure_schema()
    again = Neo4jGraphStore(neo4j_url)
    try:
        await again.ensure_schema()  # idempotent: the second start changes nothing
    finally:
        await again.close()
    async with AsyncGraphDatabase.driver(neo4j_url, auth=None) as driver:
        records, _, _ = await driver.execute_query(
            "SHOW CONSTRAINTS YIELD name, type, labelsOrTypes, properties "
            "WHERE name STARTS WITH 'engram_' RETURN name, type, labelsOrTypes, properties",
            database_="neo4j",
        )
        constraints = {r["name"]: (r["type"], r["labelsOrTypes"], r["properties"]) for r in records}
        records, _, _ = await driver.execute_query(
            "SHOW INDEXES YIELD name, type, state WHERE name STARTS WITH 'engram_' "
            "RETURN name, type, state",
            database_="neo4j",
        )
        indexes = {r["name"]: (r["type"], r["state"]) for r in records}
    assert constraints == {
        "engram_memory_key": ("UNIQUENESS", ["Memory"], ["tenant", "id"]),
        "engram_entity_key": ("UNIQUENESS", ["Entity"], ["tenant", "key"]),
    }
    assert indexes == {
        "engram_memory_key": ("RANGE", "ONLINE"),
        "engram_entity_key": ("RANGE", "ONLINE"),
        "engram_entity_lname": ("TEXT", "ONLINE"),
        "engram_memory_live": ("RANGE", "ONLINE"),
    }


async def test_a_transaction_past_its_timeout_is_deadline_exceeded(neo4j_url: str) -> None:
    store = Neo4jGraphStore(neo4j_url, query_timeout_ms=200)
    try:
        await store.ensure_schema()
        slow = "UNWIND range(1, 1000000000) AS x WITH x WHERE x < 0 RETURN count(x)"
        with pytest.raises(DeadlineExceeded):
            await store._run("read", _collected, slow)
        assert await store.count(T) >= 0  # the store is still usable
    finally:
        await store.close()
