"""The metadata stream (issue #4): memories whose whitelisted metadata fields the query names.

Scoring's ``metadata`` component (weight 0.35) compares the query with a candidate's metadata,
but only for candidates another stream found: a memory whose topic is in its metadata and not
in its words was never a candidate. This stream makes it one.

No store indexes metadata values, so the stream keeps, per tenant, an inverted index of the
whitelisted fields (word → memories) built from one scan of the tenant (``scan``; only the
memories carrying such a field are kept). A recall then costs a few dictionary look-ups; the
index is rebuilt after ``ttl_s`` or after this gateway published a write that can change it
(``written``: a memory carrying a whitelisted field, an update, a delete, a store under a
client-given id — not a new memory without such a field, which no index can hold, nor a
relation), so a memory written through another replica may wait up to ``ttl_s``.
A hit's score is the share of the field value's words the query names (best field).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_core.filters import matches
from engram_core.model import Filter, Hit, Memory
from engram_core.scoring import tokens
from engram_gateway.service.query import keywords
from engram_gateway.service.scan import ScanPort, scan_memories

METADATA_STREAM = "metadata"


@dataclass(frozen=True, slots=True)
class MetadataConfig:
    fields: tuple[str, ...] = ("topic", "project", "source")  # () = the stream is off
    ttl_s: float = 30.0
    scan_max: int = 20_000  # memories read per rebuild
    max_tenants: int = 1_000  # tenants whose index is kept (least recently used dropped)


def field_words(memory: Memory, fields: Sequence[str]) -> dict[str, frozenset[str]]:
    """The word set of each whitelisted field the memory carries (strings, lists of them)."""
    out: dict[str, frozenset[str]] = {}
    for name in fields:
        words = tokens(" ".join(_strings(memory.metadata.get(name))))
        if words:
            out[name] = words
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [str(value)]
    return []


@dataclass(slots=True)
class _TenantIndex:
    built_at: float
    changes: int  # the tenant's count of index-changing writes when it was built
    sequence: int  # the log was applied at least up to here when it was built
    memories: dict[str, Memory] = field(default_factory=dict)
    words: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)  # id → field → words
    postings: dict[str, set[str]] = field(default_factory=dict)  # word → ids

    def add(self, memory: Memory, by_field: Mapping[str, frozenset[str]]) -> None:
        self.memories[memory.id] = memory
        self.words[memory.id] = dict(by_field)
        for words in by_field.values():
            for w in words:
                self.postings.setdefault(w, set()).add(memory.id)

    def search(self, query_words: frozenset[str], flt: Filter, limit: int) -> list[Hit]:
        ids = set().union(*(self.postings.get(w, set()) for w in query_words))
        hits = []
        for id_ in ids:
            memory = self.memories[id_]
            if not matches(memory, flt):
                continue
            share = max(len(query_words & ws) / len(ws) for ws in self.words[id_].values())
            hits.append(Hit(id_, share, memory))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:limit]


class MetadataStream:
    """Search by whitelisted metadata fields over a per-tenant index kept in this process."""

    def __init__(
        self,
        scan: ScanPort,
        config: MetadataConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scan = scan
        self._config = config
        self._changes: defaultdict[str, int] = defaultdict(int)
        self._clock = clock
        self._indexes: OrderedDict[str, _TenantIndex] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._config.fields)

    def written(self, tenant: str, new: Sequence[Memory] = (), changed: bool = False) -> None:
        """This gateway published a write for ``tenant``: ``new`` memories stored under ids the
        server assigned (in no index yet: only one carrying a whitelisted field changes it),
        ``changed`` for an update, a delete or a store under a client-given id (they may change
        or drop an indexed memory). A tenant's next recall after one that matters rebuilds."""
        if changed or any(field_words(m, self._config.fields) for m in new):
            self._changes[tenant] += 1

    async def search(
        self,
        tenant: str,
        text: str,
        flt: Filter,
        limit: int,
        timeout: float,
        min_sequence: int = 0,
        applied: int = 0,
    ) -> list[Hit]:
        """``min_sequence``: the recall's read-your-writes sequence; an index built before it
        is rebuilt. ``applied``: the watermark the recall saw (≥ ``min_sequence``), what an
        index built now is known to cover."""
        words = frozenset(keywords(text))
        if not self.enabled or not words or limit <= 0:
            return []
        index = await self._index(tenant, timeout, min_sequence, max(applied, min_sequence))
        return index.search(words, flt, limit)

    async def _index(
        self, tenant: str, timeout: float, min_sequence: int, applied: int
    ) -> _TenantIndex:
        index = self._fresh(tenant, min_sequence)
        if index is not None:
            return index
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        async with lock:  # concurrent recalls of one tenant share one rebuild
            index = self._fresh(tenant, min_sequence)
            if index is None:
                index = await self._build(tenant, timeout, applied)
                self._indexes[tenant] = index
                while len(self._indexes) > self._config.max_tenants:
                    old, _ = self._indexes.popitem(last=False)
                    self._locks.pop(old, None)
            return index

    def _fresh(self, tenant: str, min_sequence: int) -> _TenantIndex | None:
        index = self._indexes.get(tenant)
        if index is None:
            return None
        stale = self._clock() - index.built_at >= self._config.ttl_s
        if stale or index.changes != self._changes[tenant] or index.sequence < min_sequence:
            return None
        self._indexes.move_to_end(tenant)
        return index

    async def _build(self, tenant: str, timeout: float, applied: int) -> _TenantIndex:
        changes = self._changes[tenant]  # before the scan: a write during it makes it stale
        memories, _ = await scan_memories(self._scan, tenant, self._config.scan_max, timeout)
        index = _TenantIndex(built_at=self._clock(), changes=changes, sequence=applied)
        for m in memories:
            by_field = field_words(m, self._config.fields)
            if by_field:
                index.add(m, by_field)
        return index
