"""The NATS side of ingest: pull batches from ENGRAM_MEMORY, apply them, ack/nak/term.

A durable pull consumer (``ingest-apply``) shared by every replica: the log hands
each event to one of them. Explicit acks and unlimited redeliveries make the
consumer's ack floor the watermark — the highest sequence at and below which every
event is in all three stores — since an event is acked only once it is applied
(or dead-lettered), however the replicas interleave.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry import trace

from engram_ingest import bootstrap
from engram_ingest.mapping import Decoded, decode
from engram_ingest.service import Applier, Outcome, Result
from engram_platform import jetstream as jsm
from engram_platform.telemetry import extract_context

if TYPE_CHECKING:
    from engram_ingest.config import Settings

NAME = "ingest"
log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

# Headers of a dead-lettered copy; the payload is the original, byte for byte.
REASON_HEADER = "Engram-Dead-Letter-Reason"
ORIGINAL_SUBJECT_HEADER = "Engram-Original-Subject"
ORIGINAL_STREAM_HEADER = "Engram-Original-Stream"
ORIGINAL_SEQUENCE_HEADER = "Engram-Original-Sequence"
DELIVERIES_HEADER = "Engram-Deliveries"


@dataclass
class Counters:
    applied: int = 0
    retried: int = 0
    poisoned: int = 0
    batches: int = 0


def backoff_s(num_delivered: int, base_s: float, cap_s: float) -> float:
    """base, 2·base, 4·base, … up to cap — by how often the event was delivered."""
    return float(min(cap_s, base_s * 2 ** min(max(num_delivered, 1) - 1, 32)))


def consumer_config(settings: Settings) -> ConsumerConfig:
    return ConsumerConfig(
        name=jsm.DURABLE_INGEST,
        durable_name=jsm.DURABLE_INGEST,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=-1,  # never give up on an event: the watermark must not pass it
        max_ack_pending=settings.max_ack_pending,
    )


class IngestConsumer:
    def __init__(self, nc: Client, js: JetStreamContext, applier: Applier, settings: Settings):
        self._nc = nc
        self._js = js
        self._applier = applier
        self._settings = settings
        self._sub: JetStreamContext.PullSubscription | None = None
        self.counters = Counters()

    async def start(self) -> None:
        """Create or update the durable (same config from every replica) and bind to it."""
        await self._js.add_consumer(jsm.STREAM_MEMORY, consumer_config(self._settings))
        self._sub = await self._js.pull_subscribe_bind(
            durable=jsm.DURABLE_INGEST, stream=jsm.STREAM_MEMORY
        )
        log.info(
            "engram-%s ready: consuming %s as %s (batch %d, embedder %s)",
            NAME,
            jsm.STREAM_MEMORY,
            jsm.DURABLE_INGEST,
            self._settings.batch_size,
            self._applier.embedding_model,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Apply batches until stop is set; the batch in hand is always finished first."""
        progress = asyncio.create_task(self._report_progress(stop))
        try:
            while not stop.is_set():
                try:
                    msgs = await self.fetch()
                    if msgs:
                        await self.handle(msgs)
                except Exception:
                    # The connection reconnects by itself; unacked events come back.
                    log.exception("ingest batch failed; retrying in a moment")
                    await asyncio.sleep(min(1.0, self._settings.fetch_timeout_s))
            await self._hand_back()
        finally:
            progress.cancel()
            await self._log_progress()
            await self._unsubscribe()

    async def fetch(self) -> list[Msg]:
        """Wait for one event, then take what else is ready, up to the batch size.

        One fetch of the whole batch would hold a lone event back for the full fetch
        timeout while it waits for the batch to fill.
        """
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
        decoded = [decode(m.subject, m.data, m.metadata.sequence.stream) for m in msgs]
        applicable = [(k, d) for k, d in enumerate(decoded) if d.event is not None]
        with _tracer.start_as_current_span(
            f"engram.{NAME}/Apply", links=_links(decoded), kind=trace.SpanKind.CONSUMER
        ) as span:
            span.set_attribute("messaging.batch.message_count", len(msgs))
            try:
                applied = await self._applier.apply([d.event for _, d in applicable if d.event])
            except Exception as exc:  # a bug, not the events' fault: retry them all
                log.exception("applier failed")
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
            self.counters.applied += 1
            return
        deliveries = msg.metadata.num_delivered
        if result.outcome is Outcome.POISON:
            try:
                await self._dead_letter(msg, tenant, result.reason)
            except Exception as exc:  # keep the event until its copy is safe
                log.warning("dead-letter publish failed, will retry: %s", exc)
            else:
                await msg.term()
                self.counters.poisoned += 1
                log.warning(
                    "dead-lettered %s seq %d: %s",
                    msg.subject,
                    msg.metadata.sequence.stream,
                    result.reason,
                )
                return
        delay = backoff_s(deliveries, self._settings.retry_base_s, self._settings.retry_max_s)
        await msg.nak(delay=delay)
        self.counters.retried += 1
        log.warning(
            "retrying %s seq %d in %.1fs (delivery %d): %s",
            msg.subject,
            msg.metadata.sequence.stream,
            delay,
            deliveries,
            result.reason,
        )

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
        """Release events already delivered to this replica so another takes them now,
        not after ack_wait."""
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
            await self._log_progress()

    async def _log_progress(self) -> None:
        try:
            mark = await jsm.watermark(self._js)
        except Exception:
            mark = -1
        c = self.counters
        log.info(
            "applied=%d retried=%d dead-lettered=%d batches=%d watermark=%d",
            c.applied,
            c.retried,
            c.poisoned,
            c.batches,
            mark,
        )


def _links(decoded: Sequence[Decoded]) -> list[trace.Link]:
    """The batch span links to the span of every request that published one of its events."""
    links = []
    for d in decoded:
        if d.trace_context:
            ctx = trace.get_current_span(extract_context(d.trace_context)).get_span_context()
            if ctx.is_valid:
                links.append(trace.Link(ctx))
    return links


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; then finish the batch in hand and drain the connection."""
    ingest = bootstrap.build(settings)
    nc, js = await jsm.connect(settings.nats, NAME)
    try:
        await jsm.ensure_streams(js, settings.nats)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        consumer = IngestConsumer(nc, js, ingest.applier, settings)
        await consumer.start()
        started = time.monotonic()
        await consumer.run(stop)
        log.info("engram-%s stopping after %.0fs", NAME, time.monotonic() - started)
    finally:
        await nc.drain()
        await ingest.close()
