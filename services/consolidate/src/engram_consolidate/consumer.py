"""The NATS side of consolidate: pull MemoryAccessed batches from ENGRAM_ACCESS, fold
them into one access write per memory, then ack/nak/term.

A durable pull consumer (``consolidate-access``) with explicit acks; replicas share
it. Two replicas folding the same memory at once can each add their own batch to
the same read count and lose one of the two increments, so run one replica per
tenant set until scheduled passes (#5) take a leader lease. The consumer mechanism
is ``engram_platform.pull_worker``; this module decodes a batch and folds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram_consolidate import bootstrap
from engram_consolidate.mapping import decode
from engram_consolidate.service import AccessTracker
from engram_platform import jetstream as jsm

# Re-exported for readers of dead-letter copies (the tests among them).
from engram_platform.pull_worker import ORIGINAL_SEQUENCE_HEADER as ORIGINAL_SEQUENCE_HEADER
from engram_platform.pull_worker import REASON_HEADER as REASON_HEADER
from engram_platform.pull_worker import PullWorker, Settlement, run_worker

if TYPE_CHECKING:
    from engram_consolidate.config import Settings

NAME = "consolidate"


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


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; then finish the batch in hand and drain the connection."""
    consolidate = bootstrap.build(settings)

    def make(nc: Client, js: JetStreamContext) -> PullWorker:
        return AccessConsumer(nc, js, consolidate.tracker, settings)

    await run_worker(NAME, settings.nats, make, on_stop=consolidate.close)
