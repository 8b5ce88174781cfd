"""The OpenSearch layout of the text index: names, index template, documents and queries.

One index (behind an alias) holds four kinds of documents, all routed by tenant:

- ``memory``: one per live (tenant, id), its ``_version`` (external) the memory's version;
  the indexed fields plus the whole memory as ``engram_core.codec`` JSON under ``memory``.
- ``tombstone``: replaces a memory on delete, with the delete's version, so an older upsert
  cannot resurrect it (same ``_id`` as the memory, so the server's version check sees it).
- ``access``: the access statistics of (tenant, id), their ``_version`` the ``last_accessed``
  instant in microseconds, so the server itself keeps the newest (``external_gte``).
- ``relevance``: the relevance_score of (tenant, id) once one was written (by UpdateRelevance,
  or by an upsert carrying a score above zero), kept beside the memory like ``access`` so
  writing it never touches the memory's version. An upsert raises it to its own score by a
  script (``RAISE_RELEVANCE``), never lowers it.

The ``join`` field makes each access and relevance document a child of its memory (same
routing, so the same shard), which is what lets `top` sort by their values with queries
(`derived_top_bodies`) instead of reading every memory. Indices made with ``LAYOUT`` 2 have it
on every document; an index made before (layout 1, no ``_meta.layout``) gets the field added in
place (`JOIN_MAPPING`) so every write is the same, but its older documents lack it: `top` by
those values must read every memory there until a rebuild copies it into a new generation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from engram_core import search_text
from engram_core.codec import memory_to_json
from engram_core.model import Filter, Memory, TagMatch, TagMode
from engram_core.ordering import Sort
from engram_core.search_text import PHRASE_BOOST, document_text, word_pairs
from engram_core.tags import normalise_tag, tag_prefixes
from engram_lexical.adapters.tantivy_schema import MAX_QUERY_TERMS

MEMORY, TOMBSTONE, ACCESS, RELEVANCE = "memory", "tombstone", "access", "relevance"
# Bumped when the template's mappings change; a new concrete index gets the new number.
TEMPLATE_VERSION = 2
INDEX_GENERATION = 1
# What an index's documents hold, in its mappings' `_meta` (none: 1). 2: every document has
# its `join` (children: access and relevance documents), importance and scores are doubles.
LAYOUT = 2
JOIN = "join"
# Global ordinals of the join field built by the first join query after a refresh rather than
# by every refresh: trending by these sorts is far rarer than the writes that refresh.
JOIN_MAPPING: dict[str, Any] = {
    "properties": {
        JOIN: {
            "type": "join",
            "relations": {MEMORY: [ACCESS, RELEVANCE]},
            "eager_global_ordinals": False,
        }
    }
}
# OpenSearch refuses an _id longer than 512 bytes; longer keys are hashed (kept unique).
_MAX_ID_BYTES = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The origin of access versions: external versions must be >= 0, and access times may be old.
_ACCESS_ORIGIN = datetime(1, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# What the standard tokenizer keeps as one word, near enough to dedupe and cap a query.


def alias_name(prefix: str) -> str:
    return f"{prefix}-memories"


def concrete_name(prefix: str, generation: int = INDEX_GENERATION) -> str:
    return generation_index(prefix, f"v{generation}")


def generation_index(prefix: str, name: str) -> str:
    """The concrete index of store generation ``name`` ("v1" is the one made first)."""
    return f"{alias_name(prefix)}-{name}"


def template_name(prefix: str) -> str:
    return alias_name(prefix)


def doc_id(tenant: str, id_: str) -> str:
    """The ``_id`` of (tenant, id): ids are unique per tenant only. The length prefix keeps
    pairs apart whatever characters they hold; it starts with a digit, unlike `access_id`."""
    key = f"{len(tenant)}:{tenant}:{id_}"
    if len(key.encode()) > _MAX_ID_BYTES:
        return "#" + hashlib.sha256(key.encode()).hexdigest()
    return key


def access_id(tenant: str, id_: str) -> str:
    return "a" + doc_id(tenant, id_)


def relevance_id(tenant: str, id_: str) -> str:
    return "r" + doc_id(tenant, id_)


def layout(mappings: Mapping[str, Any]) -> int:
    """The layout of an index from its mappings (`LAYOUT`; 1 when it has none)."""
    return int(mappings.get("_meta", {}).get("layout", 1))


def micros(dt: datetime) -> int:
    # Exact to the microsecond like the reference filter; `date` fields keep milliseconds.
    return (dt - _EPOCH) // _MICROSECOND


def access_version(dt: datetime) -> int:
    return (dt - _ACCESS_ORIGIN) // _MICROSECOND


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.isoformat()


def index_template(
    prefix: str, *, shards: int, replicas: int, refresh_interval_s: float
) -> dict[str, Any]:
    keyword = {"type": "keyword"}
    date = {"type": "date", "format": "strict_date_optional_time||epoch_millis"}
    # Doubles where `top` sorts, so the index tells apart what `engram_core.ordering` does.
    double = {"type": "double"}
    return {
        "index_patterns": [f"{alias_name(prefix)}-v*"],
        "priority": 200,
        "version": TEMPLATE_VERSION,
        "_meta": {"owner": "engram-lexical"},
        "template": {
            "settings": {
                "index": {
                    "number_of_shards": shards,
                    "number_of_replicas": replicas,
                    "refresh_interval": f"{round(refresh_interval_s * 1000)}ms",
                }
            },
            "mappings": {
                "dynamic": "strict",
                "_meta": {"layout": LAYOUT},
                # Every write and read carries the tenant as routing; one without is a bug.
                "_routing": {"required": True},
                "properties": {
                    "kind": keyword,
                    "tenant": keyword,
                    "id": keyword,
                    "type": keyword,
                    "tags": keyword,
                    "tag_prefixes": keyword,
                    "embedding_model": keyword,
                    # engram_core.search_text: content, tag words, whitelisted metadata.
                    "content": {
                        "type": "text",
                        "analyzer": "english",
                        "fields": {"std": {"type": "text", "analyzer": "standard"}},
                    },
                    "timestamp": date,
                    "timestamp_us": {"type": "long"},
                    "updated_at": date,
                    "t_valid": date,
                    "t_invalid": date,
                    "last_accessed": date,
                    "access_count": {"type": "long"},
                    "importance": double,
                    "confidence": {"type": "float"},
                    "relevance_score": double,
                    "archived": {"type": "boolean"},
                    "version": {"type": "long"},
                    # The whole memory for reads; kept in _source, never indexed.
                    "memory": {"type": "object", "enabled": False},
                    **JOIN_MAPPING["properties"],
                },
            },
        },
    }


def memory_source(tenant: str, m: Memory, metadata_fields: Sequence[str]) -> dict[str, Any]:
    """The indexed form of ``m`` (its tenant already the request's); ``metadata_fields``
    are the deployment's (`OpenSearchOptions`)."""
    return {
        "kind": MEMORY,
        "tenant": tenant,
        "id": m.id,
        "type": m.type,
        "tags": list(m.tags),
        "tag_prefixes": list(m.tag_prefixes or tag_prefixes(m.tags)),
        "embedding_model": m.embedding_model,
        "content": document_text(m, metadata_fields),
        "timestamp": _iso(m.timestamp),
        "timestamp_us": micros(m.timestamp),
        "updated_at": _iso(m.updated_at),
        "t_valid": _iso(m.t_valid),
        "t_invalid": _iso(m.t_invalid),
        "importance": m.importance,
        "confidence": m.confidence,
        # What `top` ranks a memory by while it has no access or relevance document.
        "relevance_score": m.relevance_score,
        "access_count": m.access_count,
        "archived": m.archived,
        "version": m.version,
        "memory": json.loads(memory_to_json(m)),
        JOIN: MEMORY,
    }


def tombstone_source(tenant: str, id_: str, version: int) -> dict[str, Any]:
    return {"kind": TOMBSTONE, "tenant": tenant, "id": id_, "version": version}


def _child(kind: str, tenant: str, id_: str) -> dict[str, Any]:
    return {"name": kind, "parent": doc_id(tenant, id_)}


def access_source(tenant: str, id_: str, last_accessed: datetime, count: int) -> dict[str, Any]:
    return {
        "kind": ACCESS,
        "tenant": tenant,
        "id": id_,
        "last_accessed": last_accessed.isoformat(),
        "access_count": count,
        JOIN: _child(ACCESS, tenant, id_),
    }


def relevance_source(tenant: str, id_: str, score: float) -> dict[str, Any]:
    return {
        "kind": RELEVANCE,
        "tenant": tenant,
        "id": id_,
        "relevance_score": score,
        JOIN: _child(RELEVANCE, tenant, id_),
    }


# An upsert's score replaces the stored one only when higher (ports: derived state survives).
RAISE_RELEVANCE = (
    "if (ctx._source.relevance_score == null"
    " || params.score > ctx._source.relevance_score) {"
    " ctx._source.relevance_score = params.score } else { ctx.op = 'noop' }"
)


def raise_relevance(tenant: str, id_: str, score: float) -> dict[str, Any]:
    """The body of a bulk ``update`` that lifts the relevance document to ``score``, creating
    it when missing."""
    return {
        "script": {"source": RAISE_RELEVANCE, "lang": "painless", "params": {"score": score}},
        "upsert": relevance_source(tenant, id_, score),
    }


def query_words(query: str) -> list[str]:
    """The distinct words of a query, lower-cased, without function words unless it has
    nothing else, at most `MAX_QUERY_TERMS` (the tantivy adapter's rules). Never parsed as
    query syntax, so nothing raises; the server's analyzers stem and drop what is left."""
    words = list(dict.fromkeys(search_text.query_words(query)))
    keywords = [w for w in words if w not in search_text.QUERY_STOPWORD_SET]
    return (keywords or words)[:MAX_QUERY_TERMS]


# Weight of the exact-form subfield against the stemmed field. Every mix from 0.01 to 1
# and best_fields scored within noise of each other; 0.3 keeps the stemmed field in the
# lead, as on tantivy, and exact forms as a secondary signal.
STD_WEIGHT = 0.3


def text_query(words: Sequence[str]) -> dict[str, Any]:
    """BM25 of the words over the English-analysed content (stems, English stopwords out) plus
    its standard-analysed subfield (exact forms; the only match for a query of stopwords such
    as "to be"), the two scores summed (most_fields)."""
    return {
        "multi_match": {
            "query": " ".join(words),
            "fields": ["content", f"content.std^{STD_WEIGHT}"],
            "type": "most_fields",
        }
    }


def live(tenant: str) -> list[dict[str, Any]]:
    return [{"term": {"tenant": tenant}}, {"term": {"kind": MEMORY}}]


def filter_query(tenant: str, flt: Filter) -> dict[str, Any]:
    """`engram_core.filters.matches` as a bool query scoped to the tenant's live memories."""
    must: list[dict[str, Any]] = live(tenant)
    must_not: list[dict[str, Any]] = []
    if not flt.include_archived:
        must_not.append({"term": {"archived": True}})
    if flt.types:
        must.append({"terms": {"type": list(flt.types)}})
    if flt.exclude_types:
        must_not.append({"terms": {"type": list(flt.exclude_types)}})
    if flt.tags:
        field = "tag_prefixes" if flt.tag_match is TagMatch.PREFIX else "tags"
        wanted = sorted({normalise_tag(t) for t in flt.tags})
        if flt.tag_mode is TagMode.ALL:
            must.extend({"term": {field: t}} for t in wanted)
        else:
            must.append({"terms": {field: wanted}})
    if flt.exclude_tags:
        excluded = sorted({normalise_tag(t) for t in flt.exclude_tags})
        must_not.append({"terms": {"tag_prefixes": excluded}})
    if flt.start is not None or flt.end is not None:
        window: dict[str, int] = {}
        if flt.start is not None:
            window["gte"] = micros(flt.start)
        if flt.end is not None:
            window["lte"] = micros(flt.end)
        must.append({"range": {"timestamp_us": window}})
    return {"bool": {"filter": must, "must_not": must_not}}


def phrase_queries(query: str) -> list[dict[str, Any]]:
    """The query's adjacent word pairs (`word_pairs`) as phrases of the English-analysed
    content, each weighted `PHRASE_BOOST`, as tantivy weighs them."""
    return [
        {"match_phrase": {"content": {"query": f"{a} {b}", "boost": PHRASE_BOOST}}}
        for a, b in word_pairs(query)
    ]


def search_body(
    tenant: str, words: Sequence[str], flt: Filter, limit: int, query: str = ""
) -> dict[str, Any]:
    """Top-``limit`` by BM25 (plus the phrase boost of ``query``'s word pairs); the filter is a
    non-scoring clause of the same query."""
    text: dict[str, Any] = text_query(words)
    phrases = phrase_queries(query)
    if phrases:
        text = {"bool": {"must": [text], "should": phrases}}
    return {
        "size": limit,
        "track_total_hits": False,
        "_source": ["memory"],
        "query": {"bool": {"must": [text], "filter": [filter_query(tenant, flt)]}},
    }


def count_all_body() -> dict[str, Any]:
    """Live memories of every tenant (a generation's count)."""
    return {"query": {"bool": {"filter": [{"term": {"kind": MEMORY}}]}}}


def count_body(tenant: str) -> dict[str, Any]:
    return {"query": {"bool": {"filter": live(tenant)}}}


# `engram_core.ordering`'s order as sort keys, for the sorts whose value the memory document
# holds.
TOP_KEYS: dict[Sort, list[dict[str, str]]] = {
    Sort.IMPORTANCE: [{"importance": "desc"}, {"timestamp_us": "desc"}, {"id": "asc"}],
    Sort.RECENCY: [{"timestamp_us": "desc"}, {"id": "asc"}],
}
# The sorts whose value lives in a child document: (its kind, its field). A memory without
# that child is ranked by the same field of its own document, as reads show it.
DERIVED: dict[Sort, tuple[str, str]] = {
    Sort.RELEVANCE: (RELEVANCE, "relevance_score"),
    Sort.ACCESS_COUNT: (ACCESS, "access_count"),
}


def top_body(tenant: str, flt: Filter, sort: Sort, limit: int) -> dict[str, Any]:
    """The first ``limit`` memories passing ``flt`` in the listing order of ``sort`` (one of
    `TOP_KEYS`)."""
    return _listing(filter_query(tenant, flt), TOP_KEYS[sort], limit, ["memory"])


def _listing(
    query: dict[str, Any], sort: list[dict[str, str]], limit: int, source: list[str]
) -> dict[str, Any]:
    return {
        "size": limit,
        "track_total_hits": False,
        "_source": source,
        "sort": sort,
        "query": query,
    }


# `top` by a child's value on a `LAYOUT` 2 index, exact in `engram_core.ordering`'s order, is
# the first ``limit`` of the union of three listings of at most ``limit`` each:
# - `children_body`: the highest values among the children whose memory passes the filter;
# - `childless_body`: the memories passing it without such a child, by their own value;
# - `tied_body`, when `children_body` came back full: the memories passing it whose child holds
#   the lowest value it returned, newer first then by id. That settles the ties at that value;
#   every higher one is in `children_body` already.


def children_body(tenant: str, flt: Filter, sort: Sort, limit: int) -> dict[str, Any]:
    """The ``limit`` highest values among the children of ``sort``'s kind whose memory passes
    ``flt`` (a plain sort on the child's field; equal values in no particular order)."""
    kind, field = DERIVED[sort]
    parent = {"has_parent": {"parent_type": MEMORY, "query": filter_query(tenant, flt)}}
    query = {"bool": {"filter": [{"term": {"tenant": tenant}}, {"term": {"kind": kind}}, parent]}}
    return _listing(query, [{field: "desc"}], limit, ["id"])


def childless_body(tenant: str, flt: Filter, sort: Sort, limit: int) -> dict[str, Any]:
    """The first ``limit`` memories passing ``flt`` that have no child of ``sort``'s kind, by
    the value of their own document."""
    kind, field = DERIVED[sort]
    query = filter_query(tenant, flt)
    query["bool"]["must_not"].append({"has_child": {"type": kind, "query": {"match_all": {}}}})
    return _listing(query, [{field: "desc"}, *TOP_KEYS[Sort.RECENCY]], limit, ["id"])


def tied_body(tenant: str, flt: Filter, sort: Sort, value: float, limit: int) -> dict[str, Any]:
    """The first ``limit`` memories passing ``flt`` whose child of ``sort``'s kind holds
    exactly ``value``, newer first then by id."""
    kind, field = DERIVED[sort]
    query = filter_query(tenant, flt)
    child = {"has_child": {"type": kind, "query": {"term": {field: value}}}}
    query["bool"]["filter"].append(child)
    return _listing(query, TOP_KEYS[Sort.RECENCY], limit, ["id"])


def scan_body(
    tenant: str, after: str | None, size: int, flt: Filter | None = None
) -> dict[str, Any]:
    """The tenant's live memories (those passing ``flt`` when given) in id order after
    ``after`` (keyword sort + search_after: each page is a fresh query from where the last one
    ended, nothing held on the server)."""
    body: dict[str, Any] = {
        "size": size,
        "track_total_hits": False,
        "_source": ["memory"],
        "sort": [{"id": "asc"}],
        "query": {"bool": {"filter": live(tenant)}} if flt is None else filter_query(tenant, flt),
    }
    if after is not None:
        body["search_after"] = [after]
    return body
