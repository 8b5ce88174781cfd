"""The ladybug schema and every query the store runs, in one place.

Rules every query here follows (measured on ladybug 0.22 at 10k memories, see the README):
- values only ever arrive as ``$parameters``; the few clauses built in code (the filter, the
  keyword alternatives) name parameters, never splice values;
- everything starts from primary-key lookups (``{key: ...}``), never ``WHERE key IN $list``
  (a table scan);
- ``UNWIND $keys AS k MATCH (n:T {key: k})`` on a node ALONE uses the key index (100 keys in
  0.5 ms, also with 200k rows), and so does MERGE; but UNWIND followed by a relationship
  hop, or by a two-node pattern ``(a {key: p.a}), (b {key: p.b})``, is planned as a hash join
  over the whole table (50 ms for 20 keys at 10k, seconds at scale) — so every hop starts
  from ONE key per query, looped in Python;
- every hop from a key carries ``HINT (a JOIN r) JOIN b``: a connection caches each statement's
  plan, made from the table statistics of its first run, for its whole life. Unhinted, a hop
  planned while the relation table was (nearly) empty stays a hash join over the whole table:
  ``Relations`` of 100 ids went from 50 ms to 1.4 s after 3 000 single-edge writes and to
  5-20 s after 18 000 (a fresh connection: 50 ms again). The hinted plan extends from the
  key's adjacency list whatever the statistics were (0.3-0.5 ms per key from 0 to 40k edges
  at 100k memories, where the unhinted plan chosen for an edgeless table took 17-25 ms).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_core.model import Filter, TagMatch, TagMode
from engram_core.tags import normalise_tag
from engram_graph.adapters.codec import to_us

# Node tables need a primary key: the tenant is part of it, so no lookup can cross tenants.
SCHEMA = (
    "CREATE NODE TABLE IF NOT EXISTS Memory("
    "key STRING, tenant STRING, id STRING, type STRING, tags STRING[], tag_prefixes STRING[], "
    "ts INT64, archived BOOLEAN, version INT64, deleted BOOLEAN, importance DOUBLE, "
    "last_accessed INT64, access_count INT64, doc STRING, relevance DOUBLE, PRIMARY KEY(key))",
    # Databases made before the column existed get it (NULL: the score in the doc counts).
    "ALTER TABLE Memory ADD IF NOT EXISTS relevance DOUBLE",
    "CREATE NODE TABLE IF NOT EXISTS Entity("
    "key STRING, tenant STRING, kind STRING, slug STRING, name STRING, lname STRING, "
    "PRIMARY KEY(key))",
    "CREATE REL TABLE IF NOT EXISTS MENTIONS(FROM Memory TO Entity)",
    # One table for every memory->memory type: within 10-20% of a table per type (measured),
    # and one MERGE key (source, target, type) instead of a label spliced into the query.
    "CREATE REL TABLE IF NOT EXISTS RELATION(FROM Memory TO Memory, type STRING, "
    "strength DOUBLE, origin STRING, properties STRING, created_at INT64, version INT64)",
)

STATES = (
    "UNWIND $keys AS k MATCH (m:Memory {key: k}) "
    "RETURN k, m.version, m.deleted, m.last_accessed, m.access_count, m.relevance"
)
MENTIONED = (
    "MATCH (m:Memory {key: $k})-[x:MENTIONS]->(e:Entity) HINT (m JOIN x) JOIN e RETURN e.key"
)
MERGE_ENTITIES = (
    "UNWIND $rows AS r MERGE (e:Entity {key: r.key}) "
    "ON CREATE SET e.tenant = r.tenant, e.kind = r.kind, e.slug = r.slug, e.name = r.name, "
    "e.lname = r.lname"
)
MERGE_MEMORIES = (
    "UNWIND $rows AS r MERGE (m:Memory {key: r.key}) "
    "SET m.tenant = r.tenant, m.id = r.id, m.type = r.type, m.tags = r.tags, "
    "m.tag_prefixes = r.tag_prefixes, m.ts = r.ts, m.archived = r.archived, "
    "m.version = r.version, m.deleted = false, m.importance = r.importance, "
    "m.last_accessed = r.last_accessed, m.access_count = r.access_count, m.doc = r.doc, "
    "m.relevance = r.relevance"
)
# Replacing a changed set wholesale: one DELETE per memory costs less than one per edge.
UNMENTION_ALL = (
    "MATCH (m:Memory {key: $k})-[x:MENTIONS]->(e:Entity) HINT (m JOIN x) JOIN e DELETE x"
)
MENTION = (
    "MATCH (m:Memory {key: $k}) UNWIND $entities AS ek MATCH (e:Entity {key: ek}) "
    "CREATE (m)-[:MENTIONS]->(e)"
)
# DETACH takes the MENTIONS and RELATION edges with the node; the tombstone is a fresh node.
DETACH = "MATCH (m:Memory {key: $k}) DETACH DELETE m"
TOMBSTONE = (
    "CREATE (:Memory {key: $k, tenant: $tenant, id: $id, type: '', tags: [], "
    "tag_prefixes: [], ts: 0, archived: false, version: $version, deleted: true, "
    "importance: 0.0, last_accessed: $never, access_count: 0, doc: '', relevance: 0.0})"
)
BUMP_TOMBSTONE = "MATCH (m:Memory {key: $k}) SET m.version = $version"
EDGE = (
    "MATCH (s:Memory {key: $s})-[r:RELATION {type: $type}]->(t:Memory {key: $t}) "
    "HINT (s JOIN r) JOIN t RETURN r.origin, r.version"
)
UPDATE_EDGE = (
    "MATCH (s:Memory {key: $s})-[r:RELATION {type: $type}]->(t:Memory {key: $t}) "
    "HINT (s JOIN r) JOIN t SET r.strength = $strength, r.origin = $origin, "
    "r.properties = $properties, r.version = $version"
)
REMOVE_EDGE = (
    "MATCH (s:Memory {key: $s})-[r:RELATION {type: $type}]->(t:Memory {key: $t}) "
    "HINT (s JOIN r) JOIN t DELETE r"
)
CREATE_EDGE = (
    "MATCH (s:Memory {key: $s}), (t:Memory {key: $t}) "
    "CREATE (s)-[:RELATION {type: $type, strength: $strength, origin: $origin, "
    "properties: $properties, created_at: $created_at, version: $version}]->(t)"
)
# Both directions in one query. The direction is in the edge value (`_SRC` is its source's
# internal id); start_node() would not do: it follows the pattern, not the stored direction.
# Unhinted, the hottest read (recall asks it for 50 ids): planned from current statistics it
# is a key lookup, the key's adjacency list and a key lookup per neighbour (0.45 ms a key at
# 10k memories and 13k edges, where the hint's hash join on `b` took 0.6-1.2 ms). Its plan
# can only go stale on a reader connection made before the graph doubled, and the store
# replaces those (`_Replan` in ladybug_store.py).
EDGES = "MATCH (a:Memory {key: $k})-[r:RELATION]-(b:Memory) RETURN a.id, b.id, id(a), r"
# A tenant's edges of one origin: a pass over the relation table (~22 ms for 240k edges).
USER_EDGES = (
    "MATCH (a:Memory)-[r:RELATION]->(b:Memory) WHERE r.origin = $origin AND a.tenant = $tenant "
    "RETURN count(*)"
)
MEMORY_COUNT = "MATCH (m:Memory) RETURN count(m)"
EDGE_COUNT = "MATCH (:Memory)-[r:RELATION]->(:Memory) RETURN count(r)"
GET = (
    "UNWIND $keys AS k MATCH (m:Memory {key: k}) WHERE m.deleted = false "
    "RETURN k, m.doc, m.last_accessed, m.access_count, m.relevance"
)
# The tenant's live ids after one, in order: what a scan pages through. The only index is
# the key's hash index, so this reads the whole table (every tenant): a scan runs it once
# and keeps the rest between pages, whose memories are then got by key.
LIVE_IDS = (
    "MATCH (m:Memory) WHERE m.tenant = $tenant AND m.deleted = false AND m.id > $after "
    "RETURN m.id ORDER BY m.id"
)
TOUCH = (
    "MATCH (m:Memory {key: $k}) WHERE m.deleted = false AND m.last_accessed <= $at "
    "SET m.last_accessed = $at, m.access_count = $count RETURN m.id"
)
# A batch of scores in one statement: UNWIND over keys alone keeps the key-index lookups.
SCORE = (
    "UNWIND $rows AS r MATCH (m:Memory {key: r.k}) WHERE m.deleted = false "
    "SET m.relevance = r.score RETURN m.id"
)
COUNT = "MATCH (m:Memory) WHERE m.tenant = $tenant AND m.deleted = false RETURN count(*)"
# A tenant's deletion: its memories (tombstones included) with their edges, then its entities.
ERASE_MEMORIES = "MATCH (m:Memory) WHERE m.tenant = $tenant DETACH DELETE m"
ERASE_ENTITIES = "MATCH (e:Entity) WHERE e.tenant = $tenant DETACH DELETE e"


def neighbours(typed: bool) -> str:
    """One hop in both directions from a live memory, to live memories of the same tenant."""
    where = "b.deleted = false AND b.tenant = $tenant"
    if typed:
        where += " AND r.type IN $types"
    return (
        f"MATCH (a:Memory {{key: $k}})-[r:RELATION]-(b:Memory) WHERE {where} "
        "HINT (a JOIN r) JOIN b "
        "RETURN b.id, r.type, r.strength"
    )


def filter_clause(flt: Filter, params: dict[str, Any]) -> str:
    """``engram_core.filters.matches`` as a Cypher condition on ``m``; adds its parameters."""
    parts = ["m.deleted = false"]
    if not flt.include_archived:
        parts.append("m.archived = false")
    if flt.types:
        params["f_types"] = list(flt.types)
        parts.append("m.type IN $f_types")
    if flt.exclude_types:
        params["f_exclude_types"] = list(flt.exclude_types)
        parts.append("NOT m.type IN $f_exclude_types")
    if flt.start is not None:
        params["f_start"] = to_us(flt.start)
        parts.append("m.ts >= $f_start")
    if flt.end is not None:
        params["f_end"] = to_us(flt.end)
        parts.append("m.ts <= $f_end")
    if flt.exclude_tags:
        params["f_exclude_tags"] = [normalise_tag(t) for t in flt.exclude_tags]
        parts.append("NOT list_has_any(m.tag_prefixes, $f_exclude_tags)")
    if flt.tags:
        params["f_tags"] = [normalise_tag(t) for t in flt.tags]
        column = "m.tag_prefixes" if flt.tag_match is TagMatch.PREFIX else "m.tags"
        fn = "list_has_all" if flt.tag_mode is TagMode.ALL else "list_has_any"
        parts.append(f"{fn}({column}, $f_tags)")
    return " AND ".join(parts)


@dataclass(frozen=True, slots=True)
class Search:
    """The graph stream's two statements (see `search`) and their parameters."""

    entities: str  # → (entity key, df) of each matching entity
    mentions: str  # $k an entity key → (memory key, ts) of each live mention the filter keeps
    params: dict[str, Any]


def search(flt: Filter, entity_keys: list[str], keywords: list[str]) -> Search:
    """Memories MENTIONing matching entities, each scored by the sum of its matching
    entities' IDF, ``ln(1 + n / df)`` (``n`` the tenant's live memories, ``df`` those
    mentioning the entity): a rare entity counts more than a common one.

    Callers pass entity keys already prefixed with the tenant and lower-cased keywords; at least
    one of the two is non-empty. One ``CONTAINS`` per keyword: ``any(k IN $list WHERE ...)`` was
    ten times slower (measured). df counts every mention (tombstones have none; archived
    memories count, as in n).

    Two statements, the second run once per matching entity and summed by the caller: one
    statement that carried the entities into a second MATCH over MENTIONS was planned as a
    scan of the memory table, 120-160 ms on a 100k-memory tenant even when no entity matched,
    where the lookup from one entity's key takes 4-5 ms for 1 583 mentions (measured). The
    caller's sum counts each mention row once, which is right because the store never
    writes the same MENTIONS edge twice (a changed set is replaced wholesale); it then
    fetches only the top documents by key.
    """
    params: dict[str, Any] = {}
    seeds = []
    if entity_keys:
        params["entity_keys"] = entity_keys
        seeds.append("e.key IN $entity_keys")
    for i, word in enumerate(keywords):
        params[f"kw{i}"] = word
        seeds.append(f"e.lname CONTAINS $kw{i}")
    entities = (
        f"MATCH (e:Entity) WHERE e.tenant = $tenant AND ({' OR '.join(seeds)}) "
        "MATCH (e)<-[:MENTIONS]-(x:Memory) RETURN e.key, count(x)"
    )
    mentions = (
        "MATCH (e:Entity {key: $k})<-[:MENTIONS]-(m:Memory) "
        f"WITH m WHERE m.tenant = $tenant AND {filter_clause(flt, params)} "
        "RETURN m.key, m.ts"
    )
    return Search(entities, mentions, params)
