"""Ingest's instruments: apply time per store, and the watermark lag gauge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from engram.events.v1 import events_pb2
from engram_core.model import Memory
from engram_ingest.config import Settings
from engram_ingest.consumer import IngestConsumer
from engram_ingest.service import MemoryRemoved, MemoryWritten, Outcome
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto
from engram_testing.metrics import ServiceMetrics
from engram_testing.nats_server import NatsServer
from engram_testing.processes import log_connection, running_worker, worker_settings
from engram_testing.waiting import until

if TYPE_CHECKING:
    from conftest import Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)
APPLY = "engram.ingest.apply.duration"
LAG = "engram.ingest.watermark.lag"
STORES = ("vector", "lexical", "graph")


def _id(n: int) -> str:
    return f"0195a000-0000-7000-8000-{n:012d}"


def _memory(n: int) -> Memory:
    return Memory(id=_id(n), tenant="t1", content=f"memory number {n}", timestamp=T0)


async def test_each_store_write_is_timed_by_store_and_operation(
    stores: Stores, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    keys = [(s, op) for s in STORES for op in ("upsert", "delete")] + [("embedding", "embed")]
    before = {k: m.value(APPLY, store=k[0], op=k[1]) for k in keys}
    applier = stores.applier(Settings(ack_wait_s=30.0))
    results = await applier.apply(
        [MemoryWritten(_memory(1), 1), MemoryWritten(_memory(2), 2), MemoryRemoved("t1", _id(1), 3)]
    )
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3
    moved = {k: m.value(APPLY, store=k[0], op=k[1]) - n for k, n in before.items()}
    # One upsert per store for both memories, one delete per store, one embedder call.
    assert moved == dict.fromkeys(keys, 1)


async def test_the_watermark_lag_follows_the_ack_floor(
    nats_server: NatsServer, stores: Stores, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    settings = worker_settings(
        Settings, nats_server, batch_size=16, batch_wait_s=0.01, ack_wait_s=30.0
    )

    def make(nc: object, js: object) -> IngestConsumer:
        return IngestConsumer(nc, js, stores.applier(settings), settings)  # type: ignore[arg-type]

    async with log_connection(nats_server) as js:

        async def publish(n: int) -> int:
            payload = events_pb2.MemoryStored(
                envelope=events_pb2.Envelope(event_id=f"e{n}", tenant="t1"),
                memory=memory_to_proto(_memory(n)),
            ).SerializeToString()
            seq, _ = await jsm.publish(js, jsm.subject("t1", jsm.MEMORY_STORED), payload, f"e{n}")
            return seq

        last = [await publish(n) for n in (1, 2)][-1]
        async with running_worker(settings.nats, make, "ingest-test") as consumer:

            async def applied() -> bool:
                return await jsm.watermark(js) >= last

            await until(applied)
            await consumer.refresh_lag()
            assert m.value(LAG) == 0
            stores.vector.down_for.add("t1")  # what comes now waits for vector
            await publish(3)
            await publish(4)
            await until(lambda: consumer.counters.retried >= 2)
            await consumer.refresh_lag()
            assert m.value(LAG) == 2
