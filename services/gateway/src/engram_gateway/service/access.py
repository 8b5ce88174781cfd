"""MemoryAccessed events, published after answering: fire-and-forget, never failing a read.

A read never waits for them. While the log is slow or down, at most ``max_pending``
publishes are in flight; the events of reads beyond that are dropped and counted
(access statistics are best effort; the memories themselves are untouched).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from engram_gateway.service import metrics
from engram_gateway.service.ports import Envelope, EventLog

log = logging.getLogger(__name__)


class AccessRecorder:
    def __init__(
        self,
        log_: EventLog,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        max_pending: int = 256,
    ) -> None:
        self._log = log_
        self._clock = clock
        self._new_id = new_id
        self._max_pending = max_pending
        self._tasks: set[asyncio.Task[None]] = set()
        self.dropped = 0  # events not published because too many were in flight
        self.failed = 0  # events whose publish failed

    def record(self, tenant: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        if len(self._tasks) >= self._max_pending:
            self.dropped += 1
            metrics.access_dropped.add(1, {"reason": "backlog"})
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("MemoryAccessed dropped (%d so far): the log is behind", self.dropped)
            return
        now = self._clock()
        env = Envelope(self._new_id(), tenant, now)
        task = asyncio.create_task(self._publish(env, list(ids), now))
        # The loop keeps only weak references to tasks; hold them until done.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, env: Envelope, ids: list[str], now: datetime) -> None:
        try:
            await self._log.accessed(env, ids, now)
        except Exception as exc:
            self.failed += 1
            metrics.access_dropped.add(1, {"reason": "error"})
            log.warning("MemoryAccessed for %d ids not published: %s", len(ids), exc)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for pending publishes (on shutdown)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
