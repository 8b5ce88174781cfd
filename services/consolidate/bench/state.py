"""Figures of the latest-state log, Sync and Rebuild: a real nats-server, the keeper and the
readers of this worker, the engram_testing in-memory stores (so the figures are the control
plane's cost: the log, the keeper, paging, enrich — not Qdrant/tantivy/ladybug writes nor a
real embedding model; the hashing embedder stands in).

    uv run python services/consolidate/bench/state.py --memories 10000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from engram.events.v1 import events_pb2
from engram_consolidate.adapters.checkpoints import open_bucket
from engram_consolidate.adapters.state import (
    KvKeeperCheckpoints,
    NatsKeeperSource,
    NatsStateLog,
    NatsStateSink,
    ensure_state_stream,
)
from engram_consolidate.service import (
    GLOBAL,
    Key,
    PassName,
    PassRunner,
    PassSettings,
    RunnerConfig,
    Stores,
    Trigger,
    pass_factory,
)
from engram_consolidate.service.rebuild import Generational, Maintenance, maintenance_factory
from engram_consolidate.service.runner import Start
from engram_consolidate.service.state import KeeperConfig, StateKeeper
from engram_consolidate.service.state_apply import GraphTarget, LexicalTarget, VectorTarget
from engram_core.model import Memory
from engram_embed.hashing import HashingEmbedder
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto
from engram_platform.coordination import MemoryLease
from engram_platform.settings import NatsSettings
from engram_testing.fakes.generations import fake_text_generations
from engram_testing.fakes.graph import FakeGraphStore
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex
from engram_testing.nats_server import start_nats

NOW = datetime(2026, 6, 1, tzinfo=UTC)
T = "bench"


class Bound:
    def __init__(self, gens: object, name: str) -> None:
        self._gens = gens
        self._name = name

    def __getattr__(self, method: str) -> object:
        async def call(*args: object) -> object:
            index = await self._gens.index(self._name)  # type: ignore[attr-defined]
            return await getattr(index, method)(*args)

        return call


class Tenants:
    async def tenants(self) -> set[str]:
        return {T}


class AllApplied(NatsStateLog):
    """No ingest runs here: every event counts as applied in the stores."""

    async def applied_sequence(self) -> int:
        return await self.log_sequence()


class NoEvents:
    async def stored(self, *a: object) -> bool:
        raise AssertionError


async def main(n: int) -> None:
    home = Path(tempfile.mkdtemp())
    server = start_nats(home / "nats")
    try:
        nc, js = await jsm.connect(NatsSettings(url=server.url), "bench")
        settings = NatsSettings(url=server.url)
        await jsm.ensure_streams(js, settings)
        await ensure_state_stream(js, settings)
        kv = await open_bucket(js, 1)

        started = time.perf_counter()
        acks = []
        for i in range(n):
            m = Memory(
                id=f"00000000-0000-7000-8000-{i:012d}",
                tenant=T,
                content=f"memory {i} about the harbour and Sarah's invoices",
                timestamp=NOW,
                updated_at=NOW,
            )
            msg = events_pb2.MemoryStored(
                envelope=events_pb2.Envelope(tenant=T), memory=memory_to_proto(m)
            )
            acks.append(js.publish(jsm.subject(T, jsm.MEMORY_STORED), msg.SerializeToString()))
            if len(acks) >= 500:
                await asyncio.gather(*acks)
                acks = []
        await asyncio.gather(*acks)
        print(f"published {n} events in {time.perf_counter() - started:.1f}s")
        last = await jsm.last_sequence(js)

        keeper = StateKeeper(
            NatsKeeperSource(js, 60.0, 1024),
            NatsStateSink(js, 10.0),
            KvKeeperCheckpoints(kv),
            MemoryLease(),
            "bench",
            KeeperConfig(batch_size=512),
            lambda: NOW,
        )
        log = AllApplied(js, kv)
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(keeper.run(stop))
        while await log.keeper_sequence() < last:  # noqa: ASYNC110 (polls the KV bucket)
            await asyncio.sleep(0.05)
        took = time.perf_counter() - started
        stop.set()
        await task
        print(f"keeper: {n} events in {took:.2f}s = {n / took:.0f} events/s")

        embedder = HashingEmbedder(384)

        async def emb() -> HashingEmbedder:
            return embedder

        vector, lexical, graph = FakeVectorIndex(), FakeTextIndex(), FakeGraphStore()
        text = fake_text_generations()
        m = Maintenance(
            state=log,
            targets={
                "vector": VectorTarget(vector, emb),
                "lexical": LexicalTarget(lexical),
                "graph": GraphTarget(graph),
            },
            graph=graph,
            generational={
                "lexical": Generational(
                    text,
                    LexicalTarget(Bound(text, "")),  # type: ignore[arg-type]
                    lambda g, _: LexicalTarget(Bound(text, g)),  # type: ignore[arg-type]
                )
            },
            tenants=Tenants(),
        )
        stores = Stores(vector, lexical, graph, NoEvents(), 30.0, 256)  # type: ignore[arg-type]
        make = pass_factory(stores, PassSettings(), maintenance_factory(stores, m))

        class Checkpoints:
            def __init__(self) -> None:
                self.records: dict[object, tuple[object, int]] = {}

            async def get(self, key: object) -> object:
                return self.records.get(key)

            async def put(self, record: object, revision: int | None) -> int:
                rev = (revision or 0) + 1
                self.records[record.key] = (record, rev)  # type: ignore[attr-defined]
                return rev

            async def keys(self) -> set[object]:
                return set(self.records)

        runner = PassRunner(
            Checkpoints(),  # type: ignore[arg-type]
            MemoryLease(),
            "bench",
            RunnerConfig(),
            lambda: NOW,
        )

        async def run(key: Key) -> float:
            began = time.perf_counter()
            record = await runner.run(
                key, lambda: make(key), lambda _: Start(str(key), Trigger.REQUEST), asyncio.Event()
            )
            assert record is not None, key
            counts = {c.kind: c.count for c in record.changes}
            took = time.perf_counter() - began
            print(f"{key.pass_name.value}: {record.state.value} in {took:.2f}s {counts}")
            return took

        for name in (PassName.SYNC_LEXICAL, PassName.SYNC_VECTOR, PassName.SYNC_GRAPH):
            await run(Key(T, name))  # empty stores: everything missing, re-applied
        for name in (PassName.SYNC_LEXICAL, PassName.SYNC_VECTOR):
            await run(Key(T, name, dry_run=True))  # in sync: the compare alone
        await run(Key(GLOBAL, PassName.REBUILD_LEXICAL))
        await nc.close()
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().memories))
