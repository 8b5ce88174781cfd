"""The NATS side of ingest: pull batches from ENGRAM_MEMORY, apply them, ack/nak/term.

A durable pull consumer (``ingest-apply``) shared by every replica: the log hands
each event to one of them. Explicit acks and unlimited redeliveries make the
consumer's ack floor the watermark — the highest sequence at and below which every
event is decided: in all three stores, or dead-lettered because it is invalid or a store
refused it — since an event is acked only once it is decided, however the replicas
interleave. The consumer mechanism is
``engram_platform.pull_worker``; this module decodes a batch and applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation

from engram_ingest import bootstrap
from engram_ingest.service import Applier, Event
from engram_platform import jetstream as jsm
from engram_platform import worker_metrics
from engram_platform.lanes import LanedWorker
from engram_platform.log_events import Decoded, decode, tenant_of

# Re-exported for readers of dead-letter copies (the tests among them).
from engram_platform.pull_worker import ORIGINAL_SEQUENCE_HEADER as ORIGINAL_SEQUENCE_HEADER
from engram_platform.pull_worker import ORIGINAL_SUBJECT_HEADER as ORIGINAL_SUBJECT_HEADER
from engram_platform.pull_worker import REASON_HEADER as REASON_HEADER
from engram_platform.pull_worker import STORE_HEADER as STORE_HEADER
from engram_platform.pull_worker import Decodable, PullWorker, Settlement, run_worker
from engram_platform.pull_worker import backoff_s as backoff_s
from engram_platform.telemetry import extract_context

if TYPE_CHECKING:
    from engram_ingest.config import Settings

NAME = "ingest"
_tracer = trace.get_tracer(__name__)


def _watermark_lag(_: CallbackOptions) -> list[Observation]:
    # The lag the pull worker last read in the background: a collection never waits on NATS.
    lag = worker_metrics.lag_of(jsm.DURABLE_INGEST)
    return [] if lag is None else [Observation(lag.behind)]


metrics.get_meter("engram.ingest").create_observable_gauge(
    "engram.ingest.watermark.lag",
    callbacks=[_watermark_lag],
    unit="{event}",
    description="Events logged but not yet decided: the log's newest sequence minus the "
    "watermark (the ingest consumer's ack floor).",
)


class IngestConsumer(LanedWorker):
    def __init__(self, nc: Client, js: JetStreamContext, applier: Applier, settings: Settings):
        super().__init__(nc, js, NAME, jsm.STREAM_MEMORY, jsm.DURABLE_INGEST, settings)
        self.detail = f"embedder {applier.embedding_model}, {settings.lanes} lanes"
        self._applier = applier

    def lane_key(self, msg: Msg) -> str:
        # A tenant's events one batch after another, in log order; tenants side by side.
        return tenant_of(msg.subject)

    def on_read(self, msgs: Sequence[Msg]) -> None:
        # Embedding starts now, while the tenant's earlier batches are written and acked.
        decoded = (decode(m.subject, m.data, m.metadata.sequence.stream) for m in msgs)
        self._applier.offer(d.event for d in decoded if d.event is not None)

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        decoded = [decode(m.subject, m.data, m.metadata.sequence.stream) for m in msgs]
        with _tracer.start_as_current_span(
            f"engram.{NAME}/Apply", links=_links(decoded), kind=trace.SpanKind.CONSUMER
        ) as span:
            span.set_attribute("messaging.batch.message_count", len(msgs))
            events: Sequence[Decodable[Event]] = decoded  # mypy would infer object from the union
            return await self.apply_decoded(events, self._applier.apply)

    async def on_decided(self, decided: Sequence[tuple[str, int]]) -> None:
        # The marks let one tenant's read-your-writes wait pass other tenants' backlog; a
        # missing mark only makes that wait fall back to the ack floor.
        try:
            await jsm.mark_decided(self._js, decided)
        except Exception as exc:
            self.log.warning("decided events not recorded: %s", exc)

    async def progress(self) -> str:
        return f"watermark={await jsm.watermark(self._js)}"


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

    def make(nc: Client, js: JetStreamContext) -> PullWorker:
        return IngestConsumer(nc, js, ingest.applier, settings)

    await run_worker(NAME, settings, make, on_stop=ingest.close)
