"""Builds the lexical service from settings: the only module that picks an adapter."""

from __future__ import annotations

from engram_core.ports import TextIndex
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.config import Settings
from engram_lexical.service import LexicalService, Limits


def build_index(settings: Settings) -> TextIndex:
    # `backend` has one value until OpenSearch arrives; the Literal type rejects any other.
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
