"""The text BM25 sees for a memory, in every text index alike (tantivy, OpenSearch, the fake).

One analysed field holds the content, each tag as words (``project:alpha`` → "project alpha",
so "project alpha" finds the tag) and the values of the whitelisted metadata fields (a memory
whose topic sits in ``metadata.topic`` and not in its words is still found by it). One field
keeps a query at one clause per term (half the cost of two fields).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from engram_core.model import Memory

# Fields whose values are indexed with the content unless a deployment names others.
METADATA_FIELDS: tuple[str, ...] = ("topic", "project", "source")
_SEPARATORS = re.compile(r"[\W_]+")


def document_text(memory: Memory, metadata_fields: Sequence[str]) -> list[str]:
    """The memory's content, then its tags as words, then its whitelisted metadata values
    (strings, numbers, and lists of them; nested objects are not read)."""
    tags = [w for t in memory.tags if (w := _SEPARATORS.sub(" ", t).strip())]
    meta = [s for name in metadata_fields for s in _values(memory.metadata.get(name))]
    return [memory.content, *tags, *meta]


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, bool):
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _values(v)
