"""Embedding ahead: contents read ahead are embedded while the batch before them is
written, each once, and what a batch settles is forgotten; a vector is only used for the
same content by the same embedder, and a failed head start is embedded again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from engram_core.errors import Unavailable
from engram_core.model import Memory, UpsertResult
from engram_embed.hashing import HashingEmbedder
from engram_ingest.service import Applier, MemoryWritten, Outcome
from engram_ingest.service.ahead import EmbedAhead

if TYPE_CHECKING:
    from conftest import FakeVector, Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def written(seq: int, content: str = "") -> MemoryWritten:
    memory = Memory(
        id=f"0195a000-0000-7000-8000-{seq:012d}",
        tenant="t1",
        content=content or f"memory {seq}",
        timestamp=T0,
    )
    return MemoryWritten(memory, seq, created=True)


class GatedVector:
    """The fake vector store, whose upserts wait until ``gate`` is set."""

    def __init__(self, inner: FakeVector) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, list[float]]]
    ) -> UpsertResult:
        self.entered.set()
        await self.gate.wait()
        return await self.inner.upsert(tenant, items)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def with_ahead(stores: Stores, batch: int, vector: object = None) -> tuple[Applier, EmbedAhead]:
    ahead = EmbedAhead(lambda: stores.embedder, batch, batch, 5.0, held_max=100)
    writer = vector or stores.vector
    return Applier(stores.embedder, writer, stores.lexical, stores.graph, ahead=ahead), ahead  # type: ignore[arg-type]


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def embedded(stores: Stores) -> list[str]:
    return [text for call in stores.embedder.calls for text in call]


async def test_the_next_batch_is_embedded_while_the_one_before_is_written(
    stores: Stores,
) -> None:
    vector = GatedVector(stores.vector)
    applier, _ = with_ahead(stores, batch=2, vector=vector)
    first, second = [written(1), written(2)], [written(3), written(4)]
    applier.offer(first + second)
    applying = asyncio.create_task(applier.apply(first))
    await vector.entered.wait()
    await until(lambda: "memory 3" in embedded(stores))  # the first's upsert is still held
    assert not stores.vector.live("t1")
    vector.gate.set()
    assert [r.outcome for r in await applying] == [Outcome.APPLIED] * 2
    assert [r.outcome for r in await applier.apply(second)] == [Outcome.APPLIED] * 2
    assert sorted(embedded(stores)) == [f"memory {n}" for n in range(1, 5)]  # each once
    assert stores.vector.vectors[("t1", written(4).memory.id)] == stores.embedder.embed_one(
        "memory 4"
    )


async def test_a_batch_settled_is_forgotten_whatever_its_outcome(stores: Stores) -> None:
    applier, ahead = with_ahead(stores, batch=4)
    events = [written(1), written(2, content=" ")]  # the second is invalid: never embedded
    applier.offer(events)
    results = await applier.apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.POISON]
    assert len(ahead) == 0
    await applier.close()


async def test_a_failed_head_start_is_embedded_again_by_the_batch(stores: Stores) -> None:
    applier, _ = with_ahead(stores, batch=4)
    stores.embedder.fail_next = [Unavailable("model busy")]
    applier.offer([written(1)])
    await until(lambda: len(stores.embedder.calls) == 1)
    assert [r.outcome for r in await applier.apply([written(1)])] == [Outcome.APPLIED]
    assert stores.embedder.calls == [["memory 1"], ["memory 1"]]
    await applier.close()


async def test_only_the_same_content_by_the_same_embedder_is_taken(stores: Stores) -> None:
    ahead = EmbedAhead(lambda: stores.embedder, 4, 4, 5.0, held_max=100)
    ahead.offer([(1, "memory 1"), (2, "memory 2")])
    await until(lambda: len(stores.embedder.calls) == 1)
    other = HashingEmbedder(32)
    assert await ahead.take(other, {1: "memory 1"}) == {}
    assert await ahead.take(stores.embedder, {2: "changed"}) == {}
    assert await ahead.take(stores.embedder, {2: "memory 2"}) == {
        2: stores.embedder.embed_one("memory 2")
    }
    await ahead.close()


async def test_what_is_held_is_bounded_the_oldest_dropped_first(stores: Stores) -> None:
    ahead = EmbedAhead(lambda: stores.embedder, 1, 1, 5.0, held_max=3)
    ahead.offer((n, f"memory {n}") for n in range(1, 6))
    assert len(ahead) == 3
    await until(lambda: bool(stores.embedder.calls))
    assert stores.embedder.calls[0] == ["memory 3"]  # 1 and 2 dropped before any started
    await ahead.close()
