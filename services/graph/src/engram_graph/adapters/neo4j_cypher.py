"""The Neo4j schema and every statement the Neo4j store runs, in one place.

Every statement is made of constant strings: values only ever arrive as ``$parameters``. The
search filter is the one statement assembled per call, and only from the constant fragments
of `FILTER_PARTS` (which parts a filter uses, never what it holds).
The one thing Cypher cannot take as a parameter is a relationship type in a pattern; the
MERGE of a typed relation is therefore one constant statement per type, built here at import
from the registry (`engram_core.relations`), and looked up by the registry's value — no text
from a request is ever part of a query.

Concurrency (several graph replicas write at once): MERGE on a uniqueness constraint gives
one node per key; a read-then-write guard (the version guard, the access guard, the edge
guard) first takes the node's write lock with ``SET n._lock = true REMOVE n._lock`` (the
documented Neo4j idiom against lost updates), so what it reads next is the latest committed
value and nobody can change it before this transaction commits.
"""

from __future__ import annotations

from functools import cache

from engram_core.relations import MEMORY_EDGE_TYPES

# Community edition: composite property uniqueness (5.x) is there, node keys and property
# existence constraints are Enterprise only. The uniqueness constraint's range index serves
# every (tenant, id) / (tenant, key) lookup, MERGE included.
SCHEMA = (
    "CREATE CONSTRAINT engram_memory_key IF NOT EXISTS "
    "FOR (m:Memory) REQUIRE (m.tenant, m.id) IS UNIQUE",
    "CREATE CONSTRAINT engram_entity_key IF NOT EXISTS "
    "FOR (e:Entity) REQUIRE (e.tenant, e.key) IS UNIQUE",
    # Keyword search is `lname CONTAINS $word`: a text index answers that without a scan.
    "CREATE TEXT INDEX engram_entity_lname IF NOT EXISTS FOR (e:Entity) ON (e.lname)",
    # Count: live memories of a tenant without touching the node store.
    "CREATE INDEX engram_memory_live IF NOT EXISTS FOR (m:Memory) ON (m.tenant, m.deleted)",
)
AWAIT_INDEXES = "CALL db.awaitIndexes($seconds)"

# -- writes -------------------------------------------------------------------------------------

# $rows: {id, version, type, tags, tag_prefixes, timestamp, archived, doc, last_accessed,
# access_count, entities: [{key, kind, slug, name, lname}]}, one row per distinct id.
# A stored node (live or tombstone) at the same or a newer version is left as it is.
# Stored access statistics newer than the incoming ones stay, so does a stored relevance
# above the incoming one (not on a tombstone: a memory re-created after a delete starts from
# what it is given). A node from before `relevance` existed has none: the 0 every upsert
# carried then. MENTIONS are replaced wholesale.
UPSERT = """
UNWIND $rows AS row
MERGE (m:Memory {tenant: $tenant, id: row.id})
SET m._lock = true
REMOVE m._lock
WITH m, row
WHERE m.version IS NULL OR m.version < row.version
WITH m, row,
     coalesce(m.deleted, true) OR m.last_accessed IS NULL
       OR (row.last_accessed IS NOT NULL AND row.last_accessed >= m.last_accessed) AS fresh,
     CASE WHEN coalesce(m.deleted, true) OR coalesce(m.relevance, 0.0) <= row.relevance
          THEN row.relevance ELSE m.relevance END AS relevance
SET m.version = row.version, m.deleted = false, m.type = row.type, m.tags = row.tags,
    m.tag_prefixes = row.tag_prefixes, m.timestamp = row.timestamp, m.archived = row.archived,
    m.doc = row.doc, m.relevance = relevance,
    m.last_accessed = CASE WHEN fresh THEN row.last_accessed ELSE m.last_accessed END,
    m.access_count = CASE WHEN fresh THEN row.access_count ELSE m.access_count END
WITH m, row
CALL (m) {
  MATCH (m)-[x:MENTIONS]->(:Entity)
  DELETE x
}
CALL (m, row) {
  UNWIND row.entities AS ent
  MERGE (e:Entity {tenant: $tenant, key: ent.key})
    ON CREATE SET e.kind = ent.kind, e.slug = ent.slug, e.name = ent.name, e.lname = ent.lname
  CREATE (m)-[:MENTIONS]->(e)
}
RETURN count(m) AS applied
"""

# The node stays (with the Memory label, under the same uniqueness constraint, so a
# concurrent upsert MERGEs onto it) holding only its key, the version and deleted = true.
DELETE = """
UNWIND $ids AS id
MERGE (m:Memory {tenant: $tenant, id: id})
SET m._lock = true
REMOVE m._lock
WITH m, id
WHERE m.version IS NULL OR m.version < $version
WITH m, id, coalesce(m.deleted = false, false) AS live
CALL (m) {
  MATCH (m)-[x]-()
  DELETE x
}
SET m = {tenant: $tenant, id: id, version: $version, deleted: true}
RETURN count(CASE WHEN live THEN 1 END) AS deleted
"""

# Locks every endpoint (in the order given) and says which are live: a concurrent delete
# waits for this transaction, so an endpoint found live stays live until the edges exist.
LOCK_ENDPOINTS = """
UNWIND $ids AS id
MATCH (m:Memory {tenant: $tenant, id: id})
SET m._lock = true
REMOVE m._lock
WITH id, m
WHERE m.deleted = false
RETURN collect(id) AS live
"""


def _merge_edge(rel_type: str) -> str:
    # Runs after LOCK_ENDPOINTS in the same transaction: both ends are locked, so the edge's
    # origin and version read here cannot change before commit. Applied unless a system edge
    # would replace a user one, or the stored edge is newer; created_at is set once.
    return f"""
UNWIND $rows AS row
MATCH (s:Memory {{tenant: $tenant, id: row.source}})
MATCH (t:Memory {{tenant: $tenant, id: row.target}})
MERGE (s)-[r:{rel_type}]->(t)
  ON CREATE SET r.created_at = row.created_at
WITH r, row
WHERE NOT (row.origin = 'system' AND coalesce(r.origin, '') = 'user')
  AND coalesce(r.version, row.version) <= row.version
SET r.strength = row.strength, r.origin = row.origin, r.properties = row.properties,
    r.version = row.version
RETURN count(r) AS applied
"""


def _remove_edge(rel_type: str) -> str:
    # The edge is locked before its origin and version are read (the node idiom, on the
    # relationship), so a concurrent re-add either commits first and is seen, or waits.
    return f"""
UNWIND $rows AS row
MATCH (s:Memory {{tenant: $tenant, id: row.source}})-[r:{rel_type}]->
      (t:Memory {{tenant: $tenant, id: row.target}})
SET r._lock = true
REMOVE r._lock
WITH r, row
WHERE NOT (row.origin = 'system' AND coalesce(r.origin, '') = 'user')
  AND coalesce(r.version, 0) <= row.version
DELETE r
RETURN count(*) AS removed
"""


# Relationship type (a registry value) -> its MERGE statement. Built from the registry only.
MERGE_EDGE: dict[str, str] = {t: _merge_edge(t) for t in sorted(MEMORY_EDGE_TYPES)}
REMOVE_EDGE: dict[str, str] = {t: _remove_edge(t) for t in sorted(MEMORY_EDGE_TYPES)}

# $rows: {id, last_accessed, access_count}, one per distinct id.
TOUCH = """
UNWIND $rows AS row
MATCH (m:Memory {tenant: $tenant, id: row.id})
WHERE m.deleted = false
SET m._lock = true
REMOVE m._lock
WITH m, row
WHERE m.deleted = false
  AND (m.last_accessed IS NULL OR m.last_accessed <= row.last_accessed)
SET m.last_accessed = row.last_accessed, m.access_count = row.access_count
RETURN count(m) AS updated
"""

# $rows: {id, relevance}, one per distinct id. The score only: version, doc and access stay.
SCORE = """
UNWIND $rows AS row
MATCH (m:Memory {tenant: $tenant, id: row.id})
WHERE m.deleted = false
SET m._lock = true
REMOVE m._lock
WITH m, row
WHERE m.deleted = false
SET m.relevance = row.relevance
RETURN count(m) AS updated
"""

# -- reads --------------------------------------------------------------------------------------

# Reads answer with ONE record holding a list (collect): the async driver pays per record
# (relations of 200 ids, ~800 edges: 246 ms as rows, 32 ms as one list, measured), and
# temporal values come back as epoch microseconds, which decode far cheaper than DateTime.

GET = """
UNWIND $ids AS id
MATCH (m:Memory {tenant: $tenant, id: id})
WHERE m.deleted = false
RETURN collect([m.id, m.doc, m.last_accessed.epochSeconds * 1000000 + m.last_accessed.microsecond,
                m.access_count, m.relevance]) AS found
"""

# A page of a scan: the tenant's live memories after an id, in id order. The (tenant, id)
# uniqueness constraint's range index serves the seek and the order: ordered by both its
# properties the plan is seek → filter → limit; by the id alone the planner sorted every
# remaining memory of the tenant for each page. $limit is one more than the page, to tell
# whether anything follows.
SCAN = """
MATCH (m:Memory)
WHERE m.tenant = $tenant AND m.id > $after AND m.deleted = false
WITH m
ORDER BY m.tenant, m.id
LIMIT $limit
RETURN collect([m.id, m.doc, m.last_accessed.epochSeconds * 1000000 + m.last_accessed.microsecond,
                m.access_count, m.relevance]) AS found
"""

COUNT = """
MATCH (m:Memory {tenant: $tenant, deleted: false})
RETURN count(m) AS n
"""

# A tenant's deletion: its memories (tombstones included) with their edges, then its
# entities; the live memories removed.
ERASE = """
OPTIONAL MATCH (m:Memory {tenant: $tenant})
WITH collect(m) AS ms, count(CASE WHEN m.deleted = false THEN 1 END) AS live
FOREACH (x IN ms | DETACH DELETE x)
WITH live
OPTIONAL MATCH (e:Entity {tenant: $tenant})
WITH live, collect(e) AS es
FOREACH (x IN es | DETACH DELETE x)
RETURN live
"""

# Traversals expand from the nodes looked up by key through pattern comprehensions, which
# always start from their bound node: as MATCH patterns, the (tenant, deleted) index on the
# far end tempted the planner into reading every live memory of the tenant and joining.

# Memory-to-memory edges only: MENTIONS ends at an Entity, never at a Memory. Edges never
# cross tenants (both endpoints are matched in the tenant when written); the tenant check on
# the far end is a second fence. Each edge once, however many of its ends were asked for.
RELATIONS = """
UNWIND $ids AS id
MATCH (m:Memory {tenant: $tenant, id: id})
UNWIND [(m)-[r]-(o:Memory) WHERE o.tenant = m.tenant AND $origin IN ['', r.origin] | r] AS r
WITH DISTINCT r
RETURN collect([startNode(r).id, endNode(r).id, type(r), r.strength, r.properties, r.origin,
                r.created_at.epochSeconds * 1000000 + r.created_at.microsecond]) AS edges
"""

# One level of a walk: for each live frontier node, its edges to live memories not seen yet
# ($types empty = every type), as [frontier id, [[far id, type, strength], ...]]. The first
# level asks for the start alone: an empty list then means it is not a live memory.
RELATED = """
UNWIND $frontier AS f
MATCH (a:Memory {tenant: $tenant, id: f})
WITH f, a
WHERE a.deleted = false
RETURN collect([f,
       [(a)-[r]-(b:Memory)
          WHERE b.tenant = a.tenant AND NOT b.deleted
            AND (size($types) = 0 OR type(r) IN $types) AND NOT b.id IN $seen
        | [b.id, type(r), r.strength]]]) AS levels
"""

# Memories MENTIONing a seed entity (by key, or by a keyword in its lower-cased name), scored
# by how many distinct seeds each mentions, ties to the newer timestamp, then the id. The
# UNION gives each entity once; each (memory, entity) MENTIONS edge exists once, so count(e)
# counts distinct entities. No `deleted` check: a tombstone has no MENTIONS (the statement
# that makes it removes them). The tenant check on m is a second fence (seeds are tenant
# keyed and MENTIONS never cross tenants).
# Scored by the sum of the matching entities' IDF, ln(1 + n / df): n the tenant's live
# memories (the engram_memory_live index), df the memories mentioning the entity (its degree).
_SEARCH_SEEDS = """
CALL () {
  MATCH (c:Memory {tenant: $tenant, deleted: false})
  RETURN toFloat(count(c)) AS n
}
CALL () {
  UNWIND $keys AS k
  MATCH (e:Entity {tenant: $tenant, key: k})
  RETURN e
  UNION
  UNWIND $words AS w
  MATCH (e:Entity)
  WHERE e.lname CONTAINS w AND e.tenant = $tenant
  RETURN e
}
WITH n, e, COUNT { (e)<-[:MENTIONS]-(:Memory) } AS df
MATCH (m:Memory)-[:MENTIONS]->(e)
WHERE """
_SEARCH_RANK = """
WITH m, sum(log(1.0 + n / df)) AS score
ORDER BY score DESC, m.timestamp DESC, m.id
LIMIT $limit
RETURN collect([m.id, score, m.doc,
                m.last_accessed.epochSeconds * 1000000 + m.last_accessed.microsecond,
                m.access_count, m.relevance]) AS hits
"""

# `engram_core.filters.matches` as Cypher conditions on m, one constant fragment per part of
# the filter, each naming its parameter. Only the parts a filter uses go into the statement:
# a condition switched off by a parameter (`size($types) = 0 OR ...`) still reads the
# property on every row, and the filter runs on every mention of every seed (2 keywords
# matching 13% of the entities at 10k memories: 35 ms server time with every part, 12-16 ms
# with the used ones, measured). Tags arrive normalised (lower-case, ':'); exclusion is by prefix.
FILTER_PARTS: dict[str, str] = {
    "tenant": "m.tenant = $tenant",
    "live": "m.archived = false",
    "types": "m.type IN $types",
    "exclude_types": "NOT m.type IN $exclude_types",
    "start": "m.timestamp >= $start",
    "end": "m.timestamp <= $end",
    "exclude_tags": "none(t IN $exclude_tags WHERE t IN m.tag_prefixes)",
    "tags_any": "any(t IN $tags WHERE t IN m.tags)",
    "tags_all": "all(t IN $tags WHERE t IN m.tags)",
    "prefixes_any": "any(t IN $tags WHERE t IN m.tag_prefixes)",
    "prefixes_all": "all(t IN $tags WHERE t IN m.tag_prefixes)",
}


@cache
def search(parts: tuple[str, ...]) -> str:
    """The search statement with the filter ``parts`` (names of `FILTER_PARTS`): text made
    of constants only, one statement (and one cached plan) per combination in use."""
    return _SEARCH_SEEDS + "\n  AND ".join(FILTER_PARTS[p] for p in parts) + _SEARCH_RANK
