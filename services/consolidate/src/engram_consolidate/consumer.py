"""The NATS side of consolidate, three loops on one connection:

- **access**: pull MemoryAccessed batches from ENGRAM_ACCESS (durable
  ``consolidate-access``), fold them into one access write per memory, then ack/nak/term;
- **requests**: pull ConsolidateRequested events from ENGRAM_CONSOLIDATE (durable
  ``consolidate-requests``) and record each on the KV records of its passes;
- **scheduler**: run due, requested and orphaned passes under their leases.

Two replicas folding the same memory's accesses at once can each add their own batch to
the same read count and lose one increment, so access counts are approximate with more
than one replica; the passes are safe on any number (lease + compare-and-set). The
consumer mechanism is ``engram_platform.pull_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram_consolidate import bootstrap
from engram_consolidate.adapters.log import DURABLE_REQUESTS, STREAM_CONSOLIDATE
from engram_consolidate.mapping import decode, decode_request
from engram_consolidate.service import AccessTracker, Request, Scheduler
from engram_core.errors import EngramError
from engram_core.outcomes import APPLIED, Outcome, Result
from engram_platform import jetstream as jsm
from engram_platform.grpc_server import start_health

# Re-exported for readers of dead-letter copies (the tests among them).
from engram_platform.pull_worker import ORIGINAL_SEQUENCE_HEADER as ORIGINAL_SEQUENCE_HEADER
from engram_platform.pull_worker import REASON_HEADER as REASON_HEADER
from engram_platform.pull_worker import PullWorker, Settlement

if TYPE_CHECKING:
    from engram_consolidate.config import Settings

NAME = "consolidate"
log = logging.getLogger(__name__)


class AccessConsumer(PullWorker):
    def __init__(
        self, nc: Client, js: JetStreamContext, tracker: AccessTracker, settings: Settings
    ) -> None:
        super().__init__(nc, js, NAME, jsm.STREAM_ACCESS, jsm.DURABLE_ACCESS, settings)
        self._tracker = tracker

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        decoded = [
            decode(m.subject, m.data, m.metadata.sequence.stream, m.metadata.timestamp)
            for m in msgs
        ]
        return await self.apply_decoded(decoded, self._tracker.apply)

    async def progress(self) -> str:
        s = self._tracker.stats
        return f"memories updated={s.updated} unknown={s.unknown}"


class RequestConsumer(PullWorker):
    """Consolidation requests → pending runs on the KV records (the scheduler starts them)."""

    def __init__(
        self, nc: Client, js: JetStreamContext, scheduler: Scheduler, settings: Settings
    ) -> None:
        super().__init__(nc, js, NAME, STREAM_CONSOLIDATE, DURABLE_REQUESTS, settings)
        self._scheduler = scheduler

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        decoded = [decode_request(m.subject, m.data, m.metadata.timestamp) for m in msgs]
        return await self.apply_decoded(decoded, self._record)

    async def _record(self, requests: list[Request]) -> list[Result]:
        out = []
        for request in requests:
            try:
                await self._scheduler.request(request)
            except EngramError as exc:
                out.append(Result(Outcome.RETRY, f"{exc.code}: {exc.message}"))
            else:
                log.info(
                    "request %s: %s of %s%s",
                    request.run_id,
                    "+".join(p.value for p in request.passes),
                    request.tenant,
                    " (dry run)" if request.dry_run else "",
                )
                out.append(APPLIED)
        return out

    async def progress(self) -> str:
        return f"passes running={len(self._scheduler.running)}"


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; then finish the access batch in hand, let running passes
    stop after their current page (checkpointed: another replica or the next start resumes
    them), drain the connection and close the clients. The health service answers on the
    worker's port while it consumes (`grpc_server.start_health`)."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    consolidate: bootstrap.Consolidate | None = None
    try:
        nc, js = await jsm.connect(settings.nats, NAME)
        try:
            await jsm.ensure_streams(js, settings.nats)
            consolidate = await bootstrap.open_consolidate(settings, js)
            stop = asyncio.Event()
            for sig in signals:
                loop.add_signal_handler(sig, stop.set)
            access = AccessConsumer(nc, js, consolidate.tracker, settings)
            requests = RequestConsumer(nc, js, consolidate.scheduler, settings)
            await requests.start()
            await access.start()
            health = await start_health(NAME, settings)
            loops = [access.run(stop), requests.run(stop), consolidate.scheduler.run(stop)]
            if consolidate.keeper is not None:
                loops.append(consolidate.keeper.run(stop))
            try:
                await asyncio.gather(*loops)
            finally:
                await health.stop(0)
            log.info("engram-%s stopping", NAME)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await nc.drain()
    finally:
        if consolidate is not None:
            await consolidate.close()
