"""The bookkeeping every in-memory store fake shares: per-tenant keys, the version guard,
tombstones, get/count/update_access/scan/update_relevance and a switch that makes every call
fail."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from engram_core.access import apply_access, keep_derived
from engram_core.errors import EngramError, InvalidArgument
from engram_core.model import AccessUpdate, Memory, RelevanceUpdate, ScanPage
from engram_core.sequence_cursor import SequenceCursor, decode, encode

P = TypeVar("P")  # what a store keeps beside each memory (a unit vector, the mentions)
_Key = tuple[str, str]  # tenant, id


class FakeStore(Generic[P]):
    """Holds everything in dicts. Set ``failure`` to make every call raise it (a backend down).

    ``_versions`` holds the version of the last write that applied to a key, a delete
    included: what remains of a deleted memory is that version, its tombstone.
    """

    def __init__(self) -> None:
        self._stored: dict[_Key, tuple[Memory, P]] = {}
        self._versions: dict[_Key, int] = {}
        self.failure: EngramError | None = None

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _live(self, tenant: str, id_: str) -> tuple[Memory, P] | None:
        return self._stored.get((tenant, id_))

    def _all_live(self, tenant: str) -> Iterator[tuple[Memory, P]]:
        return (entry for (t, _), entry in self._stored.items() if t == tenant)

    def _write(self, tenant: str, items: Sequence[tuple[Memory, P]]) -> list[tuple[Memory, P]]:
        """Apply the newest item per id where its version is newer than the stored one and
        any tombstone; returns what was applied."""
        newest: dict[str, tuple[Memory, P]] = {}
        for m, payload in items:
            if m.id not in newest or m.version > newest[m.id][0].version:
                newest[m.id] = (m, payload)
        applied = []
        for m, payload in newest.values():
            key = (tenant, m.id)
            if key in self._versions and m.version <= self._versions[key]:
                continue
            stored = replace(m, tenant=tenant)
            if (old := self._stored.get(key)) is not None:
                stored = keep_derived(stored, old[0])
            self._stored[key] = (stored, payload)
            self._versions[key] = m.version
            applied.append((stored, payload))
        return applied

    def _forget(self, tenant: str, id_: str) -> None:
        """Called for every id a delete applies to, live or not: drop what hangs off it."""

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        self._check()
        deleted = 0
        for id_ in dict.fromkeys(ids):
            key = (tenant, id_)
            if key in self._versions and version <= self._versions[key]:
                continue
            if self._stored.pop(key, None) is not None:
                deleted += 1
            self._forget(tenant, id_)
            self._versions[key] = version
        return deleted

    async def delete_tenant(self, tenant: str) -> int:
        self._check()
        deleted = sum(1 for key in self._stored if key[0] == tenant)
        self._stored = {k: v for k, v in self._stored.items() if k[0] != tenant}
        self._versions = {k: v for k, v in self._versions.items() if k[0] != tenant}
        self._forget_tenant(tenant)
        return deleted

    def _forget_tenant(self, tenant: str) -> None:
        """Drop what hangs off the tenant's memories (a subclass's own dicts)."""

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._check()
        found = (self._live(tenant, i) for i in dict.fromkeys(ids))
        return [entry[0] for entry in found if entry is not None]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._check()
        updated = 0
        for u in updates:
            entry = self._live(tenant, u.id)
            if entry is None or (changed := apply_access(entry[0], u)) is None:
                continue
            self._stored[(tenant, u.id)] = (changed, entry[1])
            updated += 1
        return updated

    async def count(self, tenant: str) -> int:
        self._check()
        return sum(1 for _ in self._all_live(tenant))

    async def count_all(self) -> int:
        """Live memories of every tenant (what a generation reports as its count)."""
        self._check()
        return len(self._stored)

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        """By id; the cursor is the last id a page returned."""
        self._check()
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        after = sorted(m.id for m, _ in self._all_live(tenant) if cursor is None or m.id > cursor)
        page = [self._stored[(tenant, i)][0] for i in after[:limit]]
        more = len(after) > len(page)
        return ScanPage(memories=page, next_cursor=page[-1].id if more else None)

    async def scan_by_sequence(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        """By (version, id): `engram_core.sequence_cursor`'s order."""
        self._check()
        return sequence_page([m for m, _ in self._all_live(tenant)], cursor, limit)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        self._check()
        changed: set[str] = set()
        for u in updates:
            entry = self._live(tenant, u.id)
            if entry is None:
                continue
            self._stored[(tenant, u.id)] = (
                replace(entry[0], relevance_score=u.relevance_score),
                entry[1],
            )
            changed.add(u.id)
        return len(changed)

    async def close(self) -> None:
        return None


def sequence_page(memories: Iterable[Memory], cursor: str | None, limit: int) -> ScanPage:
    """A page of a scan by sequence over ``memories`` (any order): those after ``cursor`` by
    (version, id), the first ``limit``; an id-less cursor skips its whole version."""
    if limit < 1:
        raise InvalidArgument("limit", f"must be >= 1, got {limit}")
    after = None if cursor is None else decode(cursor)
    rest = sorted(
        (m for m in memories if after is None or _after(m, after)),
        key=lambda m: (m.version, m.id),
    )
    page = rest[:limit]
    if len(rest) <= limit:
        return ScanPage(page, None)
    return ScanPage(page, encode(SequenceCursor(page[-1].version, page[-1].id)))


def _after(m: Memory, cursor: SequenceCursor) -> bool:
    if m.version != cursor.version:
        return m.version > cursor.version
    return bool(cursor.id) and m.id > cursor.id
