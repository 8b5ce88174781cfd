"""Stats as a caller may see them: the reader's counts, the tenant's dead letters, and
log positions scoped to the tenant.

The log is one stream for every tenant, so its last sequence and the ingest watermark move
with every tenant's writes. A tenant caller gets its own latest event's sequence instead,
and the watermark capped there (what it needs to wait for its own writes); only a
cluster-admin caller sees the log's own positions.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Protocol

from engram_core.errors import Unavailable
from engram_gateway.service.deadline import Deadline
from engram_gateway.service.reads import Reader, Stats

log = logging.getLogger(__name__)


class TenantLog(Protocol):
    """What the log holds for one tenant."""

    async def last_sequence(self, tenant: str) -> int:
        """The sequence of the tenant's latest memory event; 0: none."""
        ...

    async def dead_letters(self, tenant: str) -> int: ...


@dataclass(frozen=True, slots=True)
class TenantStats:
    stats: Stats
    dead_letters: int  # -1: the log did not answer


class StatsView:
    def __init__(self, reader: Reader, tenant_log: TenantLog | None, timeout_s: float) -> None:
        """Without ``tenant_log`` a tenant caller sees no positions (0) and no count (-1)."""
        self._reader = reader
        self._log = tenant_log
        self._timeout = timeout_s

    async def stats(self, tenant: str, deadline: Deadline, cluster: bool) -> TenantStats:
        """``cluster``: the caller holds a cluster-admin token (sees the log's positions)."""
        timeout = deadline.cap(self._timeout)
        stats, dead, own = await asyncio.gather(
            self._reader.stats(tenant, deadline),
            self._count(tenant, timeout),
            self._own(tenant, timeout),
        )
        if not cluster:
            stats = replace(stats, watermark=min(stats.watermark, own), last_sequence=own)
        return TenantStats(stats, dead)

    async def _own(self, tenant: str, timeout: float) -> int:
        if self._log is None:
            return 0
        try:
            return await asyncio.wait_for(self._log.last_sequence(tenant), timeout)
        except TimeoutError as exc:
            raise Unavailable(f"the log did not answer within {timeout:.2f}s") from exc

    async def _count(self, tenant: str, timeout: float) -> int:
        if self._log is None:
            return -1
        try:
            return await asyncio.wait_for(self._log.dead_letters(tenant), timeout)
        except Exception as exc:  # a count is not worth failing the call for
            log.warning("dead-letter count failed: %s", exc)
            return -1
