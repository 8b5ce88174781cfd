"""A memory event carrying the client's own vector: that vector is what the vector store
gets, stamped with the configured model, and the model embeds only the other memories of
the batch (in one call)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from engram_core.model import Memory
from engram_ingest.config import Settings
from engram_ingest.service import Applier, MemoryWritten, Outcome

if TYPE_CHECKING:
    from conftest import Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)
DIMENSION = 32  # the counting embedder's


def _id(n: int) -> str:
    return f"0195a000-0000-7000-8000-{n:012d}"


def _own(n: int) -> tuple[float, ...]:
    """A vector no model would give for the content: only the client could have sent it."""
    return tuple(1.0 if i == n % DIMENSION else 0.0 for i in range(DIMENSION))


def written(seq: int, embedding: tuple[float, ...] = ()) -> MemoryWritten:
    memory = Memory(id=_id(seq), tenant="t1", content=f"memory {seq}", timestamp=T0)
    return MemoryWritten(memory, seq, created=True, embedding=embedding)


def applier(stores: Stores) -> Applier:
    return stores.applier(Settings(write_timeout_s=5.0, embed_timeout_s=5.0, ack_wait_s=30.0))


async def test_a_mixed_batch_embeds_only_the_memories_without_a_vector(stores: Stores) -> None:
    events = [written(1, _own(1)), written(2), written(3, _own(3)), written(4)]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 4
    assert stores.embedder.calls == [["memory 2", "memory 4"]]  # one call, the rest only
    vectors = stores.vector.vectors
    assert vectors[("t1", _id(1))] == list(_own(1))
    assert vectors[("t1", _id(3))] == list(_own(3))
    assert vectors[("t1", _id(2))] == stores.embedder.embed_one("memory 2")
    models = {m.embedding_model for m in stores.vector.live("t1").values()}
    assert models == {stores.embedder.model_name}  # the client promised that model's space


async def test_a_batch_of_own_vectors_never_calls_the_model(stores: Stores) -> None:
    results = await applier(stores).apply([written(1, _own(1)), written(2, _own(2))])
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 2
    assert stores.embedder.calls == []
    assert stores.vector.vectors[("t1", _id(2))] == list(_own(2))
    assert len(stores.lexical.live("t1")) == len(stores.graph.live("t1")) == 2


async def test_a_vector_of_another_size_than_the_model_s_is_replaced_by_the_model_s(
    stores: Stores,
) -> None:
    """The gateway checked it against a live generation swapped since: no dead letter, the
    content is embedded."""
    (result,) = await applier(stores).apply([written(1, (0.6, 0.8))])
    assert result.outcome is Outcome.APPLIED
    assert stores.embedder.calls == [["memory 1"]]
    assert stores.vector.vectors[("t1", _id(1))] == stores.embedder.embed_one("memory 1")
