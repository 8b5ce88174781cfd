"""Access tracking: MemoryAccessed events → last_accessed and access_count in every store.

Per batch, accesses are folded per (tenant, memory): n accesses and the latest time.
The current count is read from the vector store and each memory gets ONE write per
store per batch: ``access_count = stored + n``, ``last_accessed = max(stored, latest)``.

The vector store — the one read back — is written last, after lexical and graph
succeeded. If any write fails, the batch is retried and recomputes the same absolute
values from the unchanged vector count, so a retry does not count twice. (A batch
whose acks are lost after the vector write is counted twice: access statistics are
at-least-once.) Ids no longer in the stores (deleted memories) are skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from engram_consolidate.service.events import APPLIED, Accessed, Outcome, Result
from engram_consolidate.service.ports import AccessStore, AccessWriter
from engram_core.errors import DeadlineExceeded, EngramError
from engram_core.model import AccessUpdate, Memory

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class AccessStats:
    updated: int = 0  # memories written (once per store)
    unknown: int = 0  # ids skipped because no store holds them any more


class AccessTracker:
    def __init__(
        self,
        vector: AccessStore,
        lexical: AccessWriter,
        graph: AccessWriter,
        write_timeout_s: float = 10.0,
        read_chunk: int = 100,
        write_chunk: int = 1000,
    ) -> None:
        self._vector = vector
        self._lexical = lexical
        self._graph = graph
        self._timeout_s = write_timeout_s
        self._read_chunk = read_chunk
        self._write_chunk = write_chunk
        self.stats = AccessStats()

    async def apply(self, events: Sequence[Accessed]) -> list[Result]:
        """One result per event, in the order given; a tenant's events share their fate."""
        results: dict[int, Result] = {}
        by_tenant: dict[str, list[int]] = {}
        for i, event in enumerate(events):
            if not event.tenant:
                results[i] = Result(Outcome.POISON, "missing tenant")
            else:
                by_tenant.setdefault(event.tenant, []).append(i)
        tenants = list(by_tenant)
        outcomes = await asyncio.gather(
            *(self._tenant(t, [events[i] for i in by_tenant[t]]) for t in tenants),
            return_exceptions=True,
        )
        for tenant, outcome in zip(tenants, outcomes, strict=True):
            result = APPLIED if outcome is None else _retry(outcome)
            results.update(dict.fromkeys(by_tenant[tenant], result))
        return [results[i] for i in range(len(events))]

    async def _tenant(self, tenant: str, events: list[Accessed]) -> None:
        counts: dict[str, int] = {}
        latest: dict[str, datetime] = {}
        for event in events:
            for id_ in event.ids:
                if not id_:
                    continue
                counts[id_] = counts.get(id_, 0) + 1
                if id_ not in latest or event.accessed_at > latest[id_]:
                    latest[id_] = event.accessed_at
        if not counts:
            return
        ids = list(counts)
        stored: dict[str, Memory] = {}
        for start in range(0, len(ids), self._read_chunk):
            chunk = ids[start : start + self._read_chunk]
            got = await self._bounded(self._vector.get(tenant, chunk), "vector get")
            stored.update((memory.id, memory) for memory in got)
        updates = [
            AccessUpdate(
                id=id_,
                last_accessed=max(latest[id_], m.last_accessed or latest[id_]),
                access_count=m.access_count + counts[id_],
            )
            for id_ in ids
            if (m := stored.get(id_)) is not None
        ]
        if updates:
            await self._write_all(tenant, updates)
        self.stats.updated += len(updates)
        self.stats.unknown += len(ids) - len(updates)

    async def _write_all(self, tenant: str, updates: list[AccessUpdate]) -> None:
        """Every store gets the updates in chunks of ``write_chunk`` (a store takes at most
        1000 a call; a busy batch folds more memories than that), sent at once."""
        size = self._write_chunk
        chunks = [updates[i : i + size] for i in range(0, len(updates), size)]
        outcomes = await asyncio.gather(
            *(
                self._bounded(self._lexical.update_access(tenant, c), "lexical update_access")
                for c in chunks
            ),
            *(
                self._bounded(self._graph.update_access(tenant, c), "graph update_access")
                for c in chunks
            ),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await asyncio.gather(
            *(
                self._bounded(self._vector.update_access(tenant, c), "vector update_access")
                for c in chunks
            )
        )

    async def _bounded(self, awaitable: Awaitable[T], what: str) -> T:
        try:
            return await asyncio.wait_for(awaitable, self._timeout_s)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"{what} took longer than {self._timeout_s}s") from exc


def _retry(exc: BaseException) -> Result:
    # Store errors are retried, never dead-lettered: an access event carries nothing a
    # store could find wrong, so a refusal points at the store or its configuration.
    if isinstance(exc, EngramError):
        return Result(Outcome.RETRY, f"{exc.code}: {exc.message}")
    return Result(Outcome.RETRY, f"{type(exc).__name__}: {exc}")
