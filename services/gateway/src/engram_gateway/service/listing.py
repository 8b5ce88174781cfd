"""List: a tenant's memories page by page, straight off the vector store's scan by sequence.

The vector store holds whole memories (archived included), so its scan is the listing; the
filters are applied here with the reference semantics every index shares. The order is the
log sequence of the write that last touched each memory (ties by id), so a memory updated
during a listing moves to the end and is listed again, and resuming from a cursor also
brings what changed since. The cursor is the store's (version and id of the last memory
read, `engram_core.sequence_cursor`), checked here so a wrong one is named.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from engram_core import sequence_cursor
from engram_core import validation as v
from engram_core.errors import InvalidArgument
from engram_core.filters import matches
from engram_core.ids import normalise_id
from engram_core.model import Filter, Memory, Relation, TagMatch, TagMode
from engram_gateway.service.ports import GraphPort, VectorPort

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ListRequest:
    tags: tuple[str, ...] = ()
    tag_mode: TagMode = TagMode.ANY
    tag_match: TagMatch = TagMatch.EXACT
    exclude_tags: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()
    start: str = ""
    end: str = ""
    include_archived: bool = False
    cursor: str = ""
    page_size: int = 0  # 0: DEFAULT_PAGE_SIZE
    include_relations: bool = False


@dataclass(frozen=True, slots=True)
class ListPage:
    memories: tuple[Memory, ...]
    relations: tuple[Relation, ...]
    cursor: str  # "" = the last page


def _filter(req: ListRequest) -> Filter:
    start, end = v.check_time_range(req.start, req.end)
    return Filter(
        tags=req.tags,
        tag_mode=req.tag_mode,
        tag_match=req.tag_match,
        exclude_tags=req.exclude_tags,
        types=req.types,
        exclude_types=req.exclude_types,
        start=start,
        end=end,
        include_archived=req.include_archived,
    )


def _page_size(value: int) -> int:
    if value == 0:
        return DEFAULT_PAGE_SIZE
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise InvalidArgument("page_size", f"must be within 1..{MAX_PAGE_SIZE}, got {value}")
    return value


def _cursor(value: str) -> str | None:
    if not value:
        return None
    cursor = sequence_cursor.decode(value, "cursor")
    if cursor.id and normalise_id(cursor.id) != cursor.id:
        raise InvalidArgument("cursor", "not a cursor a listing returned")
    return value


class Lister:
    def __init__(self, vector: VectorPort, graph: GraphPort, backend_timeout_s: float) -> None:
        self._vector = vector
        self._graph = graph
        self._timeout = backend_timeout_s

    async def pages(self, tenant: str, req: ListRequest) -> AsyncIterator[ListPage]:
        """Pages in sequence order; a page the filters empty is skipped unless last.
        Every argument is checked before the first store call."""
        flt, size, cursor = _filter(req), _page_size(req.page_size), _cursor(req.cursor)
        while True:
            page = await self._vector.scan_by_sequence(tenant, cursor, size, self._timeout)
            kept = tuple(m for m in page.memories if matches(m, flt))
            cursor = page.next_cursor
            if kept or cursor is None:
                relations = await self._relations(tenant, kept) if req.include_relations else ()
                yield ListPage(kept, relations, cursor or "")
            if cursor is None:
                return

    async def _relations(self, tenant: str, memories: Sequence[Memory]) -> tuple[Relation, ...]:
        """Each edge once: the page's memories' outgoing edges."""
        if not memories:
            return ()
        ids = {m.id for m in memories}
        found = await self._graph.relations(tenant, sorted(ids), timeout=self._timeout)
        return tuple(r for r in found if r.source_id in ids)
