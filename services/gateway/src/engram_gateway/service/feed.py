"""Subscribe: a tenant's memory events, filtered, with a bound on the readers each holds.

Every subscription holds a reader on the log (an ephemeral consumer) for as long as it
lasts, so one tenant opening many must not starve the others or the log: each tenant may
hold `per_tenant` on this gateway, and the gateway `total` in all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engram_core.errors import ResourceExhausted
from engram_core.log_events import Event, MemoryWritten
from engram_gateway.service import metrics
from engram_gateway.service.ports import ChangeFeed


@dataclass(frozen=True, slots=True)
class FeedConfig:
    per_tenant: int = 16
    total: int = 1024
    # A slot frees only when another subscription ends, which nothing here can foresee.
    retry_after_s: float = 5.0
    tenant_label: bool = False  # the tenant on refusal metrics (METRICS_TENANT_LABEL)


@dataclass(frozen=True, slots=True)
class FeedQuery:
    after: int | None = None  # None: only events from now on
    tags: tuple[str, ...] = ()  # normalised; a written memory passes with any of them
    types: tuple[str, ...] = ()


def wanted(event: Event, query: FeedQuery) -> bool:
    """Tags and types filter the events that carry a memory; the others carry nothing to
    filter on and always pass (a subscriber may hold the memory they name)."""
    if not isinstance(event, MemoryWritten):
        return True
    memory = event.memory
    if query.types and memory.type not in query.types:
        return False
    return not query.tags or any(t in memory.tags for t in query.tags)


class Subscriptions:
    def __init__(self, feed: ChangeFeed, config: FeedConfig) -> None:
        self._feed = feed
        self._config = config
        self._held: Counter[str] = Counter()

    def held(self, tenant: str) -> int:
        return self._held[tenant]

    def _acquire(self, tenant: str) -> None:
        cfg = self._config
        if self._held[tenant] >= cfg.per_tenant:
            reason, why = "tenant_subscriptions", f"tenant {tenant!r} holds its most subscriptions"
        elif self._held.total() >= cfg.total:
            reason, why = "subscriptions", f"the gateway holds its most subscriptions ({cfg.total})"
        else:
            self._held[tenant] += 1
            metrics.subscriptions_open.add(1)
            return
        metrics.rejected(reason, tenant, cfg.tenant_label)
        raise ResourceExhausted(
            f"{why}; retry after {cfg.retry_after_s:.3f}s", retry_after_s=cfg.retry_after_s
        )

    def _release(self, tenant: str) -> None:
        metrics.subscriptions_open.add(-1)
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]

    async def subscribe(self, tenant: str, query: FeedQuery) -> AsyncIterator[Event]:
        """The tenant's events that `query` wants, until the caller stops iterating; the
        slot is taken at the first step and given back however the iteration ends."""
        self._acquire(tenant)
        try:
            events = self._feed.events(tenant, query.after)
            try:
                async for event in events:
                    if event.tenant == tenant and wanted(event, query):
                        yield event
            finally:
                await _close(events)
        finally:
            self._release(tenant)


async def _close(events: AsyncIterator[Event]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
