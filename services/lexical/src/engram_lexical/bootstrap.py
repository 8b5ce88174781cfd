"""Builds the lexical service from settings: the only module that picks an adapter."""

from __future__ import annotations

from engram_core.ports import TextIndex
from engram_lexical.adapters.opensearch_index import (
    OpenSearchOptions,
    OpenSearchTextIndex,
    opensearch_client,
)
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.config import OpenSearchSettings, Settings
from engram_lexical.service import LexicalService, Limits


def opensearch_options(o: OpenSearchSettings) -> OpenSearchOptions:
    return OpenSearchOptions(
        index_prefix=o.index_prefix,
        number_of_shards=o.number_of_shards,
        number_of_replicas=o.number_of_replicas,
        refresh_interval_s=o.refresh_interval_s,
        refresh=o.refresh,
        timeout_s=o.timeout_s,
        max_retries=o.max_retries,
        retry_backoff_s=o.retry_backoff_s,
    )


def build_opensearch(o: OpenSearchSettings) -> OpenSearchTextIndex:
    """The adapter and its client. Nothing is sent yet: the index is set up on first use, so
    the service starts while OpenSearch is still coming up (calls answer UNAVAILABLE)."""
    password = o.password_file.read_text(encoding="utf-8").strip() if o.password_file else None
    client = opensearch_client(
        o.url,
        username=o.username,
        password=password,
        verify_certs=o.verify_certs,
        ca_file=o.ca_file,
        timeout_s=o.timeout_s,
        pool_size=o.pool_size,
    )
    return OpenSearchTextIndex(client, opensearch_options(o))


def build_index(settings: Settings) -> TextIndex:
    if settings.backend == "opensearch":
        return build_opensearch(settings.opensearch)
    return TantivyTextIndex(
        settings.resolved_index_dir(),
        writer_heap_bytes=settings.writer_heap_mb * 1_000_000,
        writer_threads=settings.writer_threads,
    )


def build_service(settings: Settings, index: TextIndex | None = None) -> LexicalService:
    """The service over ``index``, or over the backend the settings name."""
    limits = Limits(
        max_batch=settings.max_batch,
        default_limit=settings.default_limit,
        max_limit=settings.max_limit,
        max_query_chars=settings.max_query_chars,
    )
    return LexicalService(index if index is not None else build_index(settings), limits)
