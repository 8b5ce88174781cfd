"""The tantivy schema of the text index, its documents, and the queries over them.

One document per (tenant, id), addressed by ``key``: the live memory, or its tombstone
(``deleted``) that keeps the version of the delete. Filters become zero-scored boolean clauses
of the query itself, never a pass over a truncated top-k.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import tantivy

from engram_core.model import Filter, Memory, TagMatch, TagMode
from engram_core.ordering import Sort
from engram_core.search_text import PHRASE_BOOST, document_text
from engram_core.tags import normalise_tag, tag_prefixes

# Bounds the cost of one search; a query with more distinct words is prose, not keywords.
MAX_QUERY_TERMS = 64
TIMESTAMP = "timestamp"
# The fast field each listing order sorts by (`engram_core.ordering`).
SORT_FIELDS: dict[Sort, str] = {
    Sort.IMPORTANCE: "importance",
    Sort.RECENCY: TIMESTAMP,
    Sort.RELEVANCE: "relevance",
    Sort.ACCESS_COUNT: "access_count",
}
_FIELD_TYPES: dict[str, tantivy.FieldType] = {
    "importance": tantivy.FieldType.Float,
    "relevance": tantivy.FieldType.Float,
    "access_count": tantivy.FieldType.Integer,
    TIMESTAMP: tantivy.FieldType.Integer,
}
# Most memories sharing one value and one timestamp that a listing orders by id.
TIE_CAP = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_Occur = tantivy.Occur
_Clause = tuple[tantivy.Occur, tantivy.Query]


def doc_key(tenant: str, id_: str) -> str:
    # The length prefix keeps (tenant, id) pairs apart whatever characters they hold.
    return f"{len(tenant)}:{tenant}:{id_}"


def key_parts(key: str) -> tuple[str, str]:
    """(tenant, id) of a `doc_key`."""
    size, rest = key.split(":", 1)
    return rest[: int(size)], rest[int(size) + 1 :]


def micros(dt: datetime) -> int:
    # Integer microseconds: tantivy's date fields truncate to seconds, which would break
    # inclusive bounds on timestamps that differ below a second.
    return (dt - _EPOCH) // _MICROSECOND


def build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    for name in ("key", "tenant", "tags", "tag_prefixes", "type"):
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    # engram_core.search_text: content, tag words and whitelisted metadata values.
    sb.add_text_field("content", tokenizer_name="en_stem")
    sb.add_integer_field(TIMESTAMP, indexed=True, fast=True)
    # The values a listing without text sorts by (`engram_core.ordering`), as fast fields.
    sb.add_float_field("importance", indexed=True, fast=True)
    sb.add_float_field("relevance", indexed=True, fast=True)
    sb.add_integer_field("access_count", indexed=True, fast=True)
    sb.add_boolean_field("archived", indexed=True)
    sb.add_integer_field("version", stored=True, indexed=True, fast=True)
    sb.add_boolean_field("deleted", stored=True, indexed=True)
    sb.add_bytes_field("memory", stored=True)
    return sb.build()


def query_analyzer(stopwords: Sequence[str] = ()) -> tantivy.TextAnalyzer:
    """The chain of tantivy's built-in ``en_stem`` (which indexed the content), so query words
    become index terms; ``stopwords`` are dropped before stemming."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
    )
    if stopwords:
        builder = builder.filter(tantivy.Filter.custom_stopword(list(stopwords)))
    return builder.filter(tantivy.Filter.stemmer("english")).build()


def memory_document(
    tenant: str, m: Memory, raw: bytes, metadata_fields: Sequence[str]
) -> tantivy.Document:
    """The indexed form of a memory; ``raw`` is its `engram_core.codec` JSON, stored for reads;
    ``metadata_fields`` are the deployment's (the index's)."""
    doc = tantivy.Document()
    doc.add_text("key", doc_key(tenant, m.id))
    doc.add_text("tenant", tenant)
    doc.add_text("id", m.id)
    doc.add_text("type", m.type)
    for text in document_text(m, metadata_fields):
        doc.add_text("content", text)
    for tag in m.tags:
        doc.add_text("tags", tag)
    for prefix in m.tag_prefixes or tag_prefixes(m.tags):
        doc.add_text("tag_prefixes", prefix)
    doc.add_integer("timestamp", micros(m.timestamp))
    doc.add_float("importance", m.importance)
    doc.add_float("relevance", m.relevance_score)
    doc.add_integer("access_count", m.access_count)
    doc.add_boolean("archived", m.archived)
    doc.add_integer("version", m.version)
    doc.add_boolean("deleted", False)
    doc.add_bytes("memory", raw)
    return doc


def tombstone_document(tenant: str, id_: str, version: int) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("key", doc_key(tenant, id_))
    doc.add_text("tenant", tenant)
    doc.add_text("id", id_)
    doc.add_integer("version", version)
    doc.add_boolean("deleted", True)
    return doc


class Queries:
    """Builds the queries of one schema."""

    def __init__(self, schema: tantivy.Schema) -> None:
        self._schema = schema

    def term(self, field: str, value: Any, index_option: str = "position") -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value, index_option=index_option)

    def term_set(self, field: str, values: Sequence[str]) -> tantivy.Query:
        return tantivy.Query.term_set_query(self._schema, field, list(values))

    def keys(self, tenant: str, ids: Sequence[str]) -> tantivy.Query:
        return self.term_set("key", [doc_key(tenant, i) for i in ids])

    def live(self, tenant: str) -> tantivy.Query:
        return tantivy.Query.boolean_query(self._live(tenant))

    def live_all(self) -> tantivy.Query:
        """Live memories of every tenant (a generation's count)."""
        return tantivy.Query.boolean_query(
            [(_Occur.Must, tantivy.Query.all_query()), (_Occur.MustNot, self.term("deleted", True))]
        )

    def _live(self, tenant: str) -> list[_Clause]:
        return [
            (_Occur.Must, self.term("tenant", tenant)),
            (_Occur.MustNot, self.term("deleted", True)),
        ]

    def search(
        self,
        tenant: str,
        terms: Sequence[str],
        flt: Filter,
        phrases: Sequence[tuple[str, str]] = (),
    ) -> tantivy.Query:
        """BM25 of the terms over content and tags, plus `PHRASE_BOOST` × the BM25 of each
        analysed word pair found as a phrase; the filter adds no score."""
        clauses = [(_Occur.Should, self.term("content", t, index_option="freq")) for t in terms]
        clauses += [
            (
                _Occur.Should,
                tantivy.Query.boost_query(
                    tantivy.Query.phrase_query(self._schema, "content", list(pair)), PHRASE_BOOST
                ),
            )
            for pair in phrases
        ]
        text = tantivy.Query.boolean_query(clauses)
        only = tantivy.Query.const_score_query(self.filter(tenant, flt), 0.0)
        return tantivy.Query.boolean_query([(_Occur.Must, text), (_Occur.Must, only)])

    def equal(self, query: tantivy.Query, field: str, value: float) -> tantivy.Query:
        """``query`` restricted to documents whose numeric ``field`` holds ``value``."""
        number = int(value) if _FIELD_TYPES[field] is tantivy.FieldType.Integer else value
        same = tantivy.Query.range_query(
            self._schema, field, _FIELD_TYPES[field], number, number, True, True
        )
        return tantivy.Query.boolean_query([(_Occur.Must, query), (_Occur.Must, same)])

    def filter(self, tenant: str, flt: Filter) -> tantivy.Query:
        """`engram_core.filters.matches` as a tantivy query, scoped to the tenant's live docs."""
        clauses = self._live(tenant)
        if not flt.include_archived:
            clauses.append((_Occur.MustNot, self.term("archived", True)))
        if flt.types:
            clauses.append((_Occur.Must, self.term_set("type", flt.types)))
        if flt.exclude_types:
            clauses.append((_Occur.MustNot, self.term_set("type", flt.exclude_types)))
        if flt.tags:
            field = "tag_prefixes" if flt.tag_match is TagMatch.PREFIX else "tags"
            wanted = sorted({normalise_tag(t) for t in flt.tags})
            if flt.tag_mode is TagMode.ALL:
                clauses.extend((_Occur.Must, self.term(field, t)) for t in wanted)
            else:
                clauses.append((_Occur.Must, self.term_set(field, wanted)))
        if flt.exclude_tags:
            excluded = sorted({normalise_tag(t) for t in flt.exclude_tags})
            clauses.append((_Occur.MustNot, self.term_set("tag_prefixes", excluded)))
        if flt.start is not None or flt.end is not None:
            window = tantivy.Query.range_query(
                self._schema,
                "timestamp",
                tantivy.FieldType.Integer,
                None if flt.start is None else micros(flt.start),
                None if flt.end is None else micros(flt.end),
                include_lower=True,
                include_upper=True,
            )
            clauses.append((_Occur.Must, window))
        return tantivy.Query.boolean_query(clauses)
