"""Builds the lexical service from settings: the only module that picks an adapter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engram_core.generations import FIRST, GenerationRecord
from engram_core.model import utcnow
from engram_lexical.adapters.opensearch_generations import OpenSearchGenerations
from engram_lexical.adapters.opensearch_index import OpenSearchOptions, opensearch_client
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.config import OpenSearchSettings, Settings
from engram_lexical.service import LexicalService, Limits
from engram_lexical.service.lexical import TextGenerations
from engram_platform.generation_dirs import DirGenerations


def opensearch_options(o: OpenSearchSettings, metadata_fields: Sequence[str]) -> OpenSearchOptions:
    return OpenSearchOptions(
        index_prefix=o.index_prefix,
        number_of_shards=o.number_of_shards,
        number_of_replicas=o.number_of_replicas,
        refresh_interval_s=o.refresh_interval_s,
        refresh=o.refresh,
        timeout_s=o.timeout_s,
        max_retries=o.max_retries,
        retry_backoff_s=o.retry_backoff_s,
        metadata_fields=tuple(metadata_fields),
    )


def build_opensearch(
    o: OpenSearchSettings, metadata_fields: Sequence[str]
) -> OpenSearchGenerations:
    """The generations and their client. Nothing is sent yet: the index is set up on first
    use, so the service starts while OpenSearch is still coming up (calls answer UNAVAILABLE)."""
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
    return OpenSearchGenerations(
        client, opensearch_options(o, metadata_fields), refresh_s=o.generations_refresh_s
    )


def build_generations(settings: Settings) -> TextGenerations:
    """The configured backend's generations: OpenSearch indices behind an alias, or tantivy
    directories (v1 = the index directory itself) with a pointer file beside them."""
    if settings.backend == "opensearch":
        return build_opensearch(settings.opensearch, settings.metadata_fields)

    def tantivy(path: Path | None) -> TantivyTextIndex:
        return TantivyTextIndex(
            path,
            writer_heap_bytes=settings.writer_heap_mb * 1_000_000,
            writer_threads=settings.writer_threads,
            access_commit_interval_s=settings.access_commit_interval_s,
            metadata_fields=settings.metadata_fields,
        )

    async def open_index(path: Path | None, record: GenerationRecord) -> TantivyTextIndex:
        return tantivy(path)

    first = GenerationRecord(FIRST, "", 0, utcnow())
    generations = DirGenerations(settings.resolved_index_dir(), first, open_index)
    generations.adopt_live(tantivy(generations.live_dir()))  # a locked directory fails the start
    return generations


def build_service(settings: Settings, generations: TextGenerations | None = None) -> LexicalService:
    """The service over ``generations``, or over the backend the settings name."""
    limits = Limits(
        max_batch=settings.max_batch,
        default_limit=settings.default_limit,
        max_limit=settings.max_limit,
        max_query_chars=settings.max_query_chars,
    )
    return LexicalService(
        generations if generations is not None else build_generations(settings), limits
    )
