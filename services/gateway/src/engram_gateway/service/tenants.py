"""Erasing a tenant (AdminService.DeleteTenant).

The deletion is a ``TenantDeleted`` event on the tenant's log subject, like every other write:
ingest applies it to vector, lexical and graph in log order with the tenant's other events,
and consolidate's state keeper purges the tenant's states, so no rebuild or sync brings the
tenant back. What only the gateway's side holds goes at once: the tenant's recall answers
(held back until the watermark covers the tombstone, as after any write), its idempotency
keys (and a key used again derives a new event id, which the log's duplicate window does
not drop), and, through ``TenantPurge``, its dead letters and consolidation run records.

The reply counts what the stores hold when asked (a dry run changes nothing else); the
tombstone's sequence is the ``min_sequence`` at which a Recall or Stats sees the tenant empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from engram_core.errors import InvalidArgument
from engram_core.ports import Cache
from engram_gateway.service.deadline import Deadline
from engram_gateway.service.deadline import bounded as _within
from engram_gateway.service.ports import Envelope, EventLog, GraphPort, LexicalPort, VectorPort
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.stats import TenantLog
from engram_gateway.service.writes import IDEMPOTENCY_EPOCH, IDEMPOTENCY_PREFIX

log = logging.getLogger(__name__)


class TenantPurge(Protocol):
    """What the log keeps of a tenant outside the memory stream."""

    async def purge(self, tenant: str) -> None:
        """Drop the tenant's dead letters and consolidation run records."""
        ...


@dataclass(frozen=True, slots=True)
class TenantDeletion:
    tenant: str
    dry_run: bool
    sequence: int  # the tombstone's; 0 on a dry run
    counts: tuple[tuple[str, int], ...]  # (store, what it held)


@dataclass(frozen=True, slots=True)
class DeletionStatus:
    tenant: str
    sequence: int
    applied: bool  # ingest decided every event of the tenant up to ``sequence``
    counts: tuple[tuple[str, int], ...]  # what the stores hold now


class TenantEraser:
    def __init__(
        self,
        log: EventLog,
        stores: tuple[VectorPort, LexicalPort, GraphPort],
        cache: Cache,
        recall_cache: RecallCache,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        backend_timeout_s: float,
        key_epoch_ttl_s: float,
        tenant_log: TenantLog | None = None,
        purge: TenantPurge | None = None,
    ) -> None:
        self._log = log
        self._stores = stores
        self._cache = cache
        self._recall_cache = recall_cache
        self._clock = clock
        self._new_id = new_id
        self._timeout = backend_timeout_s
        self._key_epoch_ttl = key_epoch_ttl_s
        self._tenant_log = tenant_log
        self._purge = purge

    async def delete(
        self, tenant: str, confirm: str, dry_run: bool, deadline: Deadline
    ) -> TenantDeletion:
        """``tenant`` is already checked (a valid tenant name); ``confirm`` must repeat it
        unless nothing is to change (a dry run)."""
        if not dry_run and confirm.strip() != tenant:
            raise InvalidArgument("confirm", f"must repeat the tenant's name ({tenant!r})")
        counts = await self._counts(tenant, deadline)
        if dry_run:
            return TenantDeletion(tenant, True, 0, counts)
        env = Envelope(self._new_id(), tenant, self._clock())
        ack = await self._log.tenant_deleted(env, deadline.cap(self._timeout))
        log.warning("tenant %s deleted at log sequence %d", tenant, ack.sequence)
        await self._recall_cache.invalidate(tenant, ack.sequence)
        # The epoch first: a keyed store racing the purge then derives its new event id.
        epoch = str(ack.sequence).encode("ascii")
        await self._cache.set(IDEMPOTENCY_EPOCH + tenant, epoch, self._key_epoch_ttl)
        await self._cache.delete_prefix(f"{IDEMPOTENCY_PREFIX}{tenant}:")
        if self._purge is not None:
            await _within(self._purge.purge(tenant), deadline.cap(self._timeout), "the purge")
        return TenantDeletion(tenant, False, ack.sequence, counts)

    async def status(self, tenant: str, sequence: int, deadline: Deadline) -> DeletionStatus:
        """Whether ingest has decided the tenant's events up to the deletion's ``sequence``,
        with what the stores hold of the tenant now."""
        if sequence <= 0:
            raise InvalidArgument("sequence", "required: the DeleteTenant reply's sequence")
        timeout = deadline.cap(self._timeout)
        watermark = await _within(self._log.watermark(), timeout, "the watermark read")
        applied = watermark >= sequence or sequence <= await _within(
            self._log.tenant_decided_through(tenant, watermark, sequence), timeout, "the log read"
        )
        counts = await self._counts(tenant, deadline)
        return DeletionStatus(tenant, sequence, applied, counts)

    async def _counts(self, tenant: str, deadline: Deadline) -> tuple[tuple[str, int], ...]:
        timeout = deadline.cap(self._timeout)
        vector, lexical, graph = self._stores
        names = ["vector", "lexical", "graph"]
        reads = [vector.count(tenant, timeout), lexical.count(tenant, timeout)]
        reads.append(graph.count(tenant, timeout))
        if self._tenant_log is not None:
            names.append("dead_letters")
            reads.append(self._tenant_log.dead_letters(tenant))
        got = await _within(asyncio.gather(*reads), timeout, "the counts")
        return tuple(zip(names, got, strict=True))
