"""A scan in sequence order on Qdrant, shared by the Edge and server adapters.

Qdrant orders a scroll by a payload field (``version``, range-indexed) but such a page has
no next-page pointer and leaves the order of equal values open, while one event (a
StoreBatch) writes many memories with one version. So a page is read in two steps: the rest
of the cursor's version in point-id order (the plain scroll, filtered to that version), then
the versions above it in version order; the last version of a full ordered page may be cut
short, so it is dropped there and read in point-id order by the next page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engram_core.model import Memory, ScanPage
from engram_core.sequence_cursor import SequenceCursor, decode, encode
from engram_vector.adapters import payload as pl


@dataclass(frozen=True, slots=True)
class Row:
    point_id: str
    memory: Memory


class SequenceReader(Protocol):
    async def of_version(self, version: int, after_point: str | None, limit: int) -> list[Row]:
        """Live memories of exactly ``version`` in point-id order, after ``after_point``."""
        ...

    async def above(self, version: int | None, limit: int) -> list[Row]:
        """The first ``limit`` live memories by version, versions above ``version``."""
        ...


async def scan_by_sequence(
    reader: SequenceReader, tenant: str, cursor: str | None, limit: int
) -> ScanPage:
    pl.scan_offset(None, limit)  # checks the limit
    after = decode(cursor) if cursor is not None else None
    rows: list[Row] = []
    if after is not None and after.id:
        rows = await reader.of_version(after.version, pl.point_id(tenant, after.id), limit)
        if len(rows) == limit:
            return _page(rows, more=True)
    wanted = limit - len(rows)
    ordered = await reader.above(after.version if after else None, wanted)
    if len(ordered) < wanted:
        return _page(rows + _sorted(ordered), more=False)
    last = ordered[-1].memory.version
    whole = _sorted([r for r in ordered if r.memory.version < last])
    if whole:
        return _page(rows + whole, more=True)
    # One version fills the page: read it in point-id order.
    tied = await reader.of_version(last, None, wanted)
    if rows or tied:
        return _page(rows + tied, more=True)
    # Rewritten meanwhile: nothing is left at that version.
    return ScanPage([], encode(SequenceCursor(last, "")))


def _sorted(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.memory.version, r.point_id))


def _page(rows: Sequence[Row], *, more: bool) -> ScanPage:
    if not more or not rows:
        return ScanPage([r.memory for r in rows], None)
    last = rows[-1].memory
    return ScanPage([r.memory for r in rows], encode(SequenceCursor(last.version, last.id)))


def after_point(rows: Sequence[Row], after: str | None, limit: int) -> list[Row]:
    """A scroll from ``after`` (Qdrant's offset is inclusive) without ``after`` itself."""
    if rows and rows[0].point_id == after:
        rows = rows[1:]
    return list(rows[:limit])
