"""Opening a tantivy index directory written with an older schema: its documents are copied
into the current schema, then the copy takes the directory's place.

tantivy refuses to open an index whose schema differs from the one asked for, and every
document keeps what a copy needs: live memories their `engram_core.codec` JSON, tombstones
their id and version (the tenant comes from the ``key`` term, which only the index holds). The
copy is built in ``<dir>.upgrade``; the swap renames ``<dir>`` to ``<dir>.old`` and the copy
to ``<dir>``, then deletes the old one. A crash at any step leaves a state the next open
finishes or starts again (`_finish_interrupted`); nothing is lost, tombstones included.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import tantivy

from engram_core.codec import memory_from_json
from engram_lexical.adapters.tantivy_schema import key_parts, memory_document, tombstone_document

log = logging.getLogger(__name__)

_PROGRESS = 10_000  # documents between progress lines (and commits)
_MISMATCH = "schema does not match"


def open_index(
    schema: tantivy.Schema, path: Path, metadata_fields: Sequence[str], heap_bytes: int
) -> tantivy.Index:
    """The index in ``path`` with ``schema``, created when empty, upgraded when older."""
    path.mkdir(parents=True, exist_ok=True)
    _finish_interrupted(path)
    try:
        return tantivy.Index(schema, path=str(path), reuse=True)
    except ValueError as exc:
        if _MISMATCH not in str(exc):
            raise
    _upgrade(schema, path, metadata_fields, heap_bytes)
    return tantivy.Index(schema, path=str(path), reuse=True)


def _siblings(path: Path) -> tuple[Path, Path]:
    return path.with_name(f"{path.name}.upgrade"), path.with_name(f"{path.name}.old")


def _finish_interrupted(path: Path) -> None:
    copy, old = _siblings(path)
    if old.exists() and not any(path.iterdir()):
        # Crashed between the two renames (``path`` was re-created empty by mkdir).
        path.rmdir()
        if copy.exists():
            os.replace(copy, path)  # the copy was complete: it was about to take the place
        else:
            os.replace(old, path)
    shutil.rmtree(copy, ignore_errors=True)  # a copy left half-built: started again
    shutil.rmtree(old, ignore_errors=True)  # the swap was done, the delete was not


def _keys(searcher: tantivy.Searcher) -> list[str]:
    """Every ``key`` held by a document (live memory or tombstone)."""
    terms = searcher.terms_with_prefix("key", "", filter_query=tantivy.Query.all_query())
    return [str(term) for term, count in terms if count > 0]


def _documents(
    old: tantivy.Index, keys: list[str], metadata_fields: Sequence[str]
) -> Iterator[tantivy.Document]:
    """The current schema's document for each key (one term query each: ~40 us)."""
    searcher = old.searcher()
    for key in keys:
        query = tantivy.Query.term_query(old.schema, "key", key)
        for _, address in searcher.search(query, 1, count=False).hits:
            doc = searcher.doc(address)
            tenant, id_ = key_parts(key)
            raw = doc.get_first("memory")
            if doc.get_first("deleted") or raw is None:
                yield tombstone_document(tenant, id_, int(doc.get_first("version") or 0))
            else:
                memory = memory_from_json(bytes(raw))
                yield memory_document(tenant, memory, bytes(raw), metadata_fields)


def _upgrade(
    schema: tantivy.Schema, path: Path, metadata_fields: Sequence[str], heap_bytes: int
) -> None:
    copy, old_dir = _siblings(path)
    old = tantivy.Index.open(str(path))
    # The old index's writer lock, held while copying: a process still writing there (a
    # second service on the same directory) fails this start instead of losing its writes.
    lock = old.writer(15_000_000, 1)
    keys = _keys(old.searcher())
    log.warning("text index at %s has an older schema: copying %d documents", path, len(keys))
    copy.mkdir()
    fresh = tantivy.Index(schema, path=str(copy))
    writer = fresh.writer(heap_bytes, 1)
    done = 0
    for doc in _documents(old, keys, metadata_fields):
        writer.add_document(doc)
        done += 1
        if done % _PROGRESS == 0:
            writer.commit()
            log.warning("text index upgrade: %d of %d documents copied", done, len(keys))
    writer.commit()
    writer.wait_merging_threads()
    lock.rollback()
    lock.wait_merging_threads()  # releases the lock
    del writer, fresh, lock, old
    os.replace(path, old_dir)
    os.replace(copy, path)
    shutil.rmtree(old_dir)
    log.warning("text index at %s upgraded: %d documents", path, done)
