"""The metadata stream (issue #4): memories whose whitelisted metadata fields the query names.

Scoring's ``metadata`` component (weight 0.35) compares the query with a candidate's metadata,
but only for candidates another stream found: a memory whose topic is in its metadata and not
in its words was never a candidate. This stream makes it one.

No store indexes metadata values, so the stream keeps, per tenant, an inverted index of the
whitelisted fields (word → memories) built from one scan of the tenant (``scan``; only the
memories carrying such a field are kept). A recall then costs a few dictionary look-ups.
An index older than ``ttl_s`` keeps answering while a background task rebuilds it (one per
tenant at a time, never cancelled by a recall's deadline: under load a scan that outlived
each recall's budget was restarted by every next recall). A recall waits for a build only
when no index may serve it: none yet, or one older than this gateway's last write that can
change it (``written``: a memory carrying a whitelisted field, an update, a delete, a store
under a client-given id — not a new memory without such a field, which no index can hold,
nor a relation), or than its read-your-writes sequence. A memory written through another
replica may wait up to ``ttl_s`` plus one scan.
A hit's score is the share of the field value's words the query names (best field).
"""

from __future__ import annotations

import asyncio
import logging
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

log = logging.getLogger(__name__)
METADATA_STREAM = "metadata"


@dataclass(frozen=True, slots=True)
class MetadataConfig:
    fields: tuple[str, ...] = ("topic", "project", "source")  # () = the stream is off
    ttl_s: float = 30.0
    scan_max: int = 20_000  # memories read per rebuild
    max_tenants: int = 1_000  # tenants whose index is kept (least recently used dropped)
    scan_timeout_s: float = 10.0  # deadline of each scan page of a build


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


@dataclass(frozen=True, slots=True)
class _Build:
    changes: int  # the tenant's count of index-changing writes when it started
    sequence: int  # the watermark the recall that started it saw
    number: int  # order of starting, over all tenants
    task: asyncio.Task[_TenantIndex]


@dataclass(slots=True)
class _TenantIndex:
    built_at: float
    changes: int  # the tenant's count of index-changing writes when it was built
    sequence: int  # the log was applied at least up to here when it was built
    build: int  # the number of the build that made it (see _Build)
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
        self._builds: dict[str, _Build] = {}  # the latest build started per tenant
        self._started = 0

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
        """The tenant's index, without waiting on a rebuild whenever one may be used: an index
        past its TTL still answers while its refresh runs in the background. A recall waits
        only when there is none it may use (none yet, a write through this gateway since, or
        one older than its read-your-writes sequence), and then for at most ``timeout``: the
        build goes on without it (shielded) and serves the recalls after it."""
        index = self._indexes.get(tenant)
        if index is not None and self._usable(index, tenant, min_sequence):
            self._indexes.move_to_end(tenant)
            if self._clock() - index.built_at >= self._config.ttl_s:
                self._building(tenant, 0, applied)  # refresh in the background
            return index
        build = self._building(tenant, min_sequence, applied)
        async with asyncio.timeout(timeout):
            return await asyncio.shield(build.task)

    def _usable(self, index: _TenantIndex, tenant: str, min_sequence: int) -> bool:
        return index.changes == self._changes[tenant] and index.sequence >= min_sequence

    def _building(self, tenant: str, min_sequence: int, applied: int) -> _Build:
        """The tenant's running build when it will be usable by a recall at ``min_sequence``
        (it started after the tenant's last write here, at a sequence at least that), else a
        new one. At most one build per tenant is started per such change."""
        build = self._builds.get(tenant)
        if (
            build is not None
            and not build.task.done()
            and build.changes == self._changes[tenant]
            and build.sequence >= min_sequence
        ):
            return build
        self._started += 1
        build = _Build(
            changes=self._changes[tenant],
            sequence=applied,
            number=self._started,
            task=asyncio.create_task(
                self._build(tenant, self._changes[tenant], applied, self._started)
            ),
        )
        self._builds[tenant] = build
        build.task.add_done_callback(lambda task: self._built(tenant, build))
        return build

    def _built(self, tenant: str, build: _Build) -> None:
        """Install a finished build unless a later-started one is installed already."""
        if self._builds.get(tenant) is build:
            del self._builds[tenant]
        if build.task.cancelled():
            return
        error = build.task.exception()
        if error is not None:
            log.warning("metadata index of %s not rebuilt: %s", tenant, error)
            return
        current = self._indexes.get(tenant)
        if current is not None and current.build > build.number:
            return
        self._indexes[tenant] = build.task.result()
        self._indexes.move_to_end(tenant)
        while len(self._indexes) > self._config.max_tenants:
            self._indexes.popitem(last=False)

    async def close(self) -> None:
        """Stop the builds still running (their recalls have their answers or gave up)."""
        builds = [b.task for b in self._builds.values()]
        for task in builds:
            task.cancel()
        await asyncio.gather(*builds, return_exceptions=True)

    async def _build(self, tenant: str, changes: int, applied: int, number: int) -> _TenantIndex:
        """``changes`` is read before the scan: a write during it makes the index stale."""
        memories, _ = await scan_memories(
            self._scan, tenant, self._config.scan_max, self._config.scan_timeout_s
        )
        index = _TenantIndex(
            built_at=self._clock(), changes=changes, sequence=applied, build=number
        )
        for m in memories:
            by_field = field_words(m, self._config.fields)
            if by_field:
                index.add(m, by_field)
        return index
