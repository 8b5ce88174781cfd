"""The NATS side of consolidate: pull MemoryAccessed batches from ENGRAM_ACCESS, fold
them into one access write per memory, then ack/nak/term.

A durable pull consumer (``consolidate-access``) with explicit acks; replicas share
it. Two replicas folding the same memory at once can each add their own batch to
the same read count and lose one of the two increments, so run one replica per
tenant set until scheduled passes (#5) take a leader lease.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from engram_consolidate import bootstrap
from engram_consolidate.mapping import decode
from engram_consolidate.service import AccessTracker, Outcome, Result
from engram_platform import jetstream as jsm

if TYPE_CHECKING:
    from engram_consolidate.config import Settings

NAME = "consolidate"
log = logging.getLogger(__name__)

REASON_HEADER = "Engram-Dead-Letter-Reason"
ORIGINAL_SUBJECT_HEADER = "Engram-Original-Subject"
ORIGINAL_STREAM_HEADER = "Engram-Original-Stream"
ORIGINAL_SEQUENCE_HEADER = "Engram-Original-Sequence"
DELIVERIES_HEADER = "Engram-Deliveries"


@dataclass
class Counters:
    acked: int = 0
    retried: int = 0
    poisoned: int = 0
    batches: int = 0


def backoff_s(num_delivered: int, base_s: float, cap_s: float) -> float:
    """base, 2·base, 4·base, … up to cap — by how often the event was delivered."""
    return float(min(cap_s, base_s * 2 ** min(max(num_delivered, 1) - 1, 32)))


def consumer_config(settings: Settings) -> ConsumerConfig:
    return ConsumerConfig(
        name=jsm.DURABLE_ACCESS,
        durable_name=jsm.DURABLE_ACCESS,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=-1,  # access counts wait for a store to come back rather than vanish
        max_ack_pending=settings.max_ack_pending,
    )


class AccessConsumer:
    def __init__(
        self, nc: Client, js: JetStreamContext, tracker: AccessTracker, settings: Settings
    ) -> None:
        self._nc = nc
        self._js = js
        self._tracker = tracker
        self._settings = settings
        self._sub: JetStreamContext.PullSubscription | None = None
        self.counters = Counters()

    async def start(self) -> None:
        await self._js.add_consumer(jsm.STREAM_ACCESS, consumer_config(self._settings))
        self._sub = await self._js.pull_subscribe_bind(
            durable=jsm.DURABLE_ACCESS, stream=jsm.STREAM_ACCESS
        )
        log.info(
            "engram-%s ready: consuming %s as %s (batch %d)",
            NAME,
            jsm.STREAM_ACCESS,
            jsm.DURABLE_ACCESS,
            self._settings.batch_size,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Fold batches until stop is set; the batch in hand is always finished first."""
        progress = asyncio.create_task(self._report_progress(stop))
        try:
            while not stop.is_set():
                try:
                    msgs = await self.fetch()
                    if msgs:
                        await self.handle(msgs)
                except Exception:
                    log.exception("access batch failed; retrying in a moment")
                    await asyncio.sleep(min(1.0, self._settings.fetch_timeout_s))
            await self._hand_back()
        finally:
            progress.cancel()
            self._log_progress()
            await self._unsubscribe()

    async def fetch(self) -> list[Msg]:
        """Wait for one event, then take what else is ready, up to the batch size."""
        assert self._sub is not None, "start() first"
        try:
            first = await self._sub.fetch(1, timeout=self._settings.fetch_timeout_s)
        except TimeoutError:
            return []
        if self._settings.batch_size == 1:
            return first
        try:
            rest = await self._sub.fetch(
                self._settings.batch_size - 1, timeout=self._settings.batch_wait_s
            )
        except TimeoutError:
            rest = []
        return first + rest

    async def handle(self, msgs: Sequence[Msg]) -> None:
        decoded = [
            decode(m.subject, m.data, m.metadata.sequence.stream, m.metadata.timestamp)
            for m in msgs
        ]
        applicable = [(k, d.event) for k, d in enumerate(decoded) if d.event is not None]
        try:
            applied = await self._tracker.apply([e for _, e in applicable])
        except Exception as exc:  # a bug, not the events' fault: retry them all
            log.exception("access tracker failed")
            applied = [Result(Outcome.RETRY, f"{type(exc).__name__}: {exc}")] * len(applicable)
        results: list[Result] = [Result(Outcome.POISON, d.problem) for d in decoded]
        for (k, _), result in zip(applicable, applied, strict=True):
            results[k] = result
        for msg, d, result in zip(msgs, decoded, results, strict=True):
            await self._settle(msg, d.tenant, result)
        await self._nc.flush()
        self.counters.batches += 1

    async def _settle(self, msg: Msg, tenant: str, result: Result) -> None:
        if result.outcome is Outcome.APPLIED:
            await msg.ack()
            self.counters.acked += 1
            return
        if result.outcome is Outcome.POISON:
            try:
                await self._dead_letter(msg, tenant, result.reason)
            except Exception as exc:  # keep the event until its copy is safe
                log.warning("dead-letter publish failed, will retry: %s", exc)
            else:
                await msg.term()
                self.counters.poisoned += 1
                log.warning("dead-lettered %s: %s", msg.subject, result.reason)
                return
        deliveries = msg.metadata.num_delivered
        delay = backoff_s(deliveries, self._settings.retry_base_s, self._settings.retry_max_s)
        await msg.nak(delay=delay)
        self.counters.retried += 1
        log.warning("retrying %s in %.1fs: %s", msg.subject, delay, result.reason)

    async def _dead_letter(self, msg: Msg, tenant: str, reason: str) -> None:
        md = msg.metadata
        headers = {k: v for k, v in (msg.headers or {}).items() if not k.startswith("Nats-")}
        headers |= {
            REASON_HEADER: " ".join(reason.split())[:1000] or "invalid event",
            ORIGINAL_SUBJECT_HEADER: msg.subject,
            ORIGINAL_STREAM_HEADER: md.stream,
            ORIGINAL_SEQUENCE_HEADER: str(md.sequence.stream),
            DELIVERIES_HEADER: str(md.num_delivered),
        }
        await jsm.publish(
            self._js,
            jsm.subject(tenant or "unknown", jsm.DEAD_LETTER),
            msg.data,
            msg_id=f"dead-letter:{md.stream}:{md.sequence.stream}",
            headers=headers,
        )

    async def _hand_back(self) -> None:
        """Release events already delivered here so another replica takes them now."""
        if self._sub is None:
            return
        try:
            left = await self._sub.fetch(self._settings.batch_size, timeout=0.05)
        except Exception:
            return
        for msg in left:
            await msg.nak()
        await self._nc.flush()

    async def _unsubscribe(self) -> None:
        # Before the connection drains: nats-py's drain waits forever on a pull
        # subscription's queue (fetch never marks its messages done).
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("unsubscribe failed: %s", exc)

    async def _report_progress(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self._settings.progress_interval_s)
            self._log_progress()

    def _log_progress(self) -> None:
        c, s = self.counters, self._tracker.stats
        log.info(
            "events acked=%d retried=%d dead-lettered=%d batches=%d; memories updated=%d "
            "unknown=%d",
            c.acked,
            c.retried,
            c.poisoned,
            c.batches,
            s.updated,
            s.unknown,
        )


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; then finish the batch in hand and drain the connection."""
    consolidate = bootstrap.build(settings)
    nc, js = await jsm.connect(settings.nats, NAME)
    try:
        await jsm.ensure_streams(js, settings.nats)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        consumer = AccessConsumer(nc, js, consolidate.tracker, settings)
        await consumer.start()
        await consumer.run(stop)
        log.info("engram-%s stopping", NAME)
    finally:
        await nc.drain()
        await consolidate.close()
