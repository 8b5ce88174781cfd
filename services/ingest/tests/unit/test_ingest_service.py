"""The ingest service over fake stores: batching, versions, idempotency, retry, poison."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from engram.graph.v1 import graph_pb2
from engram.vector.v1 import vector_pb2
from engram_core.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from engram_core.limits import MAX_TAGS
from engram_core.model import Entity, Memory, Relation, UpsertResult
from engram_core.relevance import relevance_score
from engram_core.tags import tag_prefixes
from engram_embed.factory import EmbedSettings
from engram_embed.hashing import HashingEmbedder
from engram_ingest.config import Settings
from engram_ingest.service import (
    Applier,
    Event,
    MemoryRemoved,
    MemoryWritten,
    Outcome,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
)
from engram_ingest.service.chunks import request_bytes
from engram_platform.convert import entity_to_proto, memory_to_proto
from engram_platform.lexicons import EntitySettings

if TYPE_CHECKING:
    from conftest import FakeVector, Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)
ID_A = "0195a000-0000-7000-8000-00000000000a"
ID_B = "0195a000-0000-7000-8000-00000000000b"


def applier(stores: Stores, write_s: float = 5.0, **kw: Any) -> Applier:
    settings = Settings(write_timeout_s=write_s, embed_timeout_s=5.0, ack_wait_s=30.0, **kw)
    return stores.applier(settings)


def written(
    seq: int, id_: str = ID_A, content: str = "notes", tenant: str = "t1", **kw: object
) -> MemoryWritten:
    memory = Memory(id=id_, tenant=tenant, content=content, timestamp=T0, **kw)  # type: ignore[arg-type]
    return MemoryWritten(memory, seq)


async def test_a_batch_is_embedded_in_one_call_and_written_once_per_store(stores: Stores) -> None:
    events = [written(s, f"0195a000-0000-7000-8000-{s:012d}", f"memory {s}") for s in range(1, 11)]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 10
    assert stores.embedder.calls == [[f"memory {s}" for s in range(1, 11)]]
    for store in stores.all():
        (call,) = store.calls
        assert call.method == "upsert"
        assert len(call.ids) == 10
        assert len(store.live("t1")) == 10


async def test_out_of_the_box_a_speaker_prefix_names_nobody(stores: Stores) -> None:
    event = written(42, content="Melanie: I'm planning a trip to Paris")
    await applier(stores).apply([event])
    m = stores.lexical.memory("t1", ID_A)
    assert m is not None
    assert m.tags == ("entity:places:paris",)


async def test_version_is_the_sequence_and_entities_become_tags(stores: Stores) -> None:
    event = written(
        42,
        content="Melanie: I'm planning a trip to Paris with Docker folks",
        tags=("Travel", "entity:people:bob"),
        entities=("people:bob",),  # the previous extraction, no longer in the content
    )
    await applier(stores, entities={"profile": "conversation"}).apply([event])
    m = stores.lexical.memory("t1", ID_A)
    assert m is not None
    assert m.version == 42
    assert m.embedding_model == "hashing-32"
    assert m.tags == (
        "travel",
        "entity:people:melanie",
        "entity:places:paris",
        "entity:tools:docker",
    )
    assert m.tag_prefixes == tag_prefixes(m.tags)
    assert "entity:people" in m.tag_prefixes
    assert m.entities == ("people:melanie", "places:paris", "tools:docker")
    assert stores.vector.memory("t1", ID_A) == m
    assert stores.vector.vectors[("t1", ID_A)] == stores.embedder.embed_one(event.memory.content)
    assert [e.key for e in stores.graph.mentions[("t1", ID_A)]] == list(m.entities)


async def test_the_entity_profile_and_lexicon_dir_come_from_the_settings(
    stores: Stores, tmp_path: Path
) -> None:
    (tmp_path / "tools.txt").write_text("Zephyr\n", encoding="utf-8")
    settings = Settings(entities=EntitySettings(profile="default", lexicon_dir=tmp_path))
    content = "Melanie: we flash Zephyr boards and talk about adoption"
    await stores.applier(settings).apply([written(1, content=content)])
    m = stores.lexical.memory("t1", ID_A)
    assert m is not None
    # No speaker rule, no chat-topic concept, and the directory's tools.
    assert m.entities == ("tools:zephyr",)


async def test_a_redelivered_event_changes_nothing(stores: Stores) -> None:
    a = applier(stores)
    await a.apply([written(5, content="first"), written(7, content="second")])
    before = {s.name: dict(s.rows) for s in stores.all()}
    # The log redelivers seq 5 (its ack was lost) and seq 7: both are already applied.
    results = await a.apply([written(5, content="first"), written(7, content="second")])
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.APPLIED]
    assert {s.name: dict(s.rows) for s in stores.all()} == before
    m = stores.graph.memory("t1", ID_A)
    assert m is not None
    assert (m.content, m.version) == ("second", 7)


async def test_deletes_carry_the_sequence_and_stop_older_upserts(stores: Stores) -> None:
    a = applier(stores)
    await a.apply([written(3)])
    results = await a.apply([MemoryRemoved("t1", ID_A, 9), written(3)])  # late redelivery
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.APPLIED]
    for store in stores.all():
        assert store.live("t1") == {}
        assert store.writes("delete")[0].version == 9
    await a.apply([written(12, content="back again")])  # newer than the tombstone
    assert all(ID_A in s.live("t1") for s in stores.all())


async def test_a_tenant_deletion_empties_every_store_of_that_tenant_only(stores: Stores) -> None:
    a = applier(stores)
    await a.apply([written(1), written(2, ID_B), written(3, tenant="t2")])
    await a.apply([RelationLinked("t1", Relation(ID_A, ID_B, "RELATES_TO"), 4)])
    results = await a.apply([TenantErased("t1", 5), written(6, ID_B, "after")])
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.APPLIED]
    for store in stores.all():
        assert [c.tenant for c in store.writes("delete_tenant")] == ["t1"]
        assert list(store.live("t1")) == [ID_B]  # what the log wrote after it stays
        assert list(store.live("t2")) == [ID_A]
    assert stores.graph.relations == {}
    assert list(stores.graph.mentions) == [("t2", ID_A), ("t1", ID_B)]


async def test_an_event_retried_past_its_tenants_deletion_does_not_bring_it_back(
    stores: Stores,
) -> None:
    a = applier(stores)
    stores.lexical.fail_next.append(Unavailable("lexical down"))
    [first] = await a.apply([written(1)])
    assert first.outcome is Outcome.RETRY
    await a.apply([TenantErased("t1", 2)])
    # The log redelivers the write from before the deletion.
    [again] = await a.apply([written(1)])
    assert again.outcome is Outcome.APPLIED
    assert all(s.live("t1") == {} for s in stores.all())
    await a.apply([written(3, ID_B)])  # what comes after the deletion applies
    assert all(list(s.live("t1")) == [ID_B] for s in stores.all())


async def test_a_tenant_deletion_is_retried_while_a_store_is_down(stores: Stores) -> None:
    a = applier(stores)
    await a.apply([written(1)])
    stores.graph.fail_next.append(Unavailable("graph down"))
    [result] = await a.apply([TenantErased("t1", 2)])
    assert result.outcome is Outcome.RETRY
    assert result.store == "graph"
    [result] = await a.apply([TenantErased("t1", 2)])
    assert result.outcome is Outcome.APPLIED
    assert all(s.live("t1") == {} for s in stores.all())


async def test_relations_go_to_the_graph_with_the_sequence_and_registry_type(
    stores: Stores,
) -> None:
    rel = Relation(ID_A, ID_B, "leads_to", strength=0.7)
    events: list[Event] = [written(1, ID_A), written(2, ID_B), RelationLinked("t1", rel, 3)]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3
    stored, version = stores.graph.relations[("t1", ID_A, ID_B, "LEADS_TO")]
    assert (stored.strength, version) == (0.7, 3)
    # Both memories went out in one upsert, before the relation that links them.
    assert [c.method for c in stores.graph.calls] == ["upsert", "add_relations"]


async def test_relation_to_a_deleted_memory_is_dead_lettered_not_retried(
    stores: Stores,
) -> None:
    # The graph has no node of B and neither has vector nor lexical: B was deleted since
    # the gateway checked it, so the edge is moot — dead-lettered with why, not retried.
    a = written(1).memory
    for store in stores.all():
        store._put("t1", a)
        store.rows[("t1", ID_B)] = (4, None)  # B's tombstone
    stores.graph.check_ends = True
    (result,) = await applier(stores).apply(
        [RelationLinked("t1", Relation(ID_A, ID_B, "LEADS_TO"), 5)]
    )
    assert result.outcome is Outcome.POISON
    assert f"endpoint {ID_B} is deleted" in result.reason
    assert stores.graph.relations == {}


async def test_a_relation_waits_for_an_endpoint_the_graph_has_not_applied_yet(
    stores: Stores,
) -> None:
    # B is in vector and lexical, but its graph write is still being retried (graph was
    # down): the relation is retried, bounded, and applied once B reaches the graph.
    a, b = written(1).memory, written(2, ID_B).memory
    for store in stores.all():
        store._put("t1", a)
    stores.vector._put("t1", b)
    stores.lexical._put("t1", b)
    stores.graph.check_ends = True
    edge = RelationLinked("t1", Relation(ID_A, ID_B, "LEADS_TO"), 5)
    ingest = applier(stores)

    (result,) = await ingest.apply([edge])
    assert result.outcome is Outcome.RETRY
    assert f"endpoint {ID_B} not applied" in result.reason
    assert result.max_deliveries == Settings().endpoint_deliveries
    assert stores.graph.relations == {}

    assert [r.outcome for r in await ingest.apply([written(2, ID_B)])] == [Outcome.APPLIED]
    (result,) = await ingest.apply([edge])
    assert result.outcome is Outcome.APPLIED
    assert ("t1", ID_A, ID_B, "LEADS_TO") in stores.graph.relations


async def test_a_relation_waits_while_it_cannot_tell_a_late_endpoint_from_a_deleted_one(
    stores: Stores,
) -> None:
    a = written(1).memory
    for store in stores.all():
        store._put("t1", a)
    stores.graph.check_ends = True
    stores.vector.fail_next.append(Unavailable("vector down"))
    (result,) = await applier(stores).apply(
        [RelationLinked("t1", Relation(ID_A, ID_B, "LEADS_TO"), 5)]
    )
    assert result.outcome is Outcome.RETRY
    assert result.max_deliveries > 0


ID_C = "0195a000-0000-7000-8000-00000000000c"


async def test_relation_events_go_out_as_one_call_per_tenant(stores: Stores) -> None:
    events: list[Event] = [
        RelationLinked("t1", Relation(ID_A, ID_B, "relates_to"), 7),
        RelationLinked("t2", Relation(ID_A, ID_B, "LEADS_TO"), 8),
        RelationLinked("t1", Relation(ID_B, ID_C, "SIMILAR_TO", origin="system"), 9),
        RelationLinked("t1", Relation(ID_A, ID_C, "PART_OF"), 11),
    ]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 4
    calls = stores.graph.writes("add_relations")
    assert sorted((c.tenant, len(c.ids)) for c in calls) == [("t1", 3), ("t2", 1)]
    # Each edge carries its own event's sequence, in the registry's spelling.
    assert {k: v for k, (_, v) in stores.graph.relations.items()} == {
        ("t1", ID_A, ID_B, "RELATES_TO"): 7,
        ("t2", ID_A, ID_B, "LEADS_TO"): 8,
        ("t1", ID_B, ID_C, "SIMILAR_TO"): 9,
        ("t1", ID_A, ID_C, "PART_OF"): 11,
    }


async def test_a_batch_naming_a_deleted_memory_falls_back_to_one_call_per_event(
    stores: Stores,
) -> None:
    stores.graph.fail_next += [NotFound(f"memory {ID_C} not found")] * 2
    events: list[Event] = [
        RelationLinked("t1", Relation(ID_A, ID_C, "LEADS_TO"), 3),
        RelationLinked("t1", Relation(ID_A, ID_B, "LEADS_TO"), 4),
    ]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.POISON, Outcome.APPLIED]
    assert [len(c.ids) for c in stores.graph.writes("add_relations")] == [2, 1, 1]
    assert {k: v for k, (_, v) in stores.graph.relations.items()} == {
        ("t1", ID_A, ID_B, "LEADS_TO"): 4
    }


async def test_relation_removed_goes_to_the_graph_in_order(stores: Stores) -> None:
    gone = Relation(ID_A, ID_B, "similar_to", origin="system")
    events: list[Event] = [
        RelationLinked("t1", Relation(ID_A, ID_B, "SIMILAR_TO", origin="system"), 1),
        RelationLinked("t1", Relation(ID_A, ID_C, "SIMILAR_TO", origin="system"), 2),
        RelationUnlinked("t1", gone, 3),
    ]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3
    assert [c.method for c in stores.graph.calls] == ["add_relations", "remove_relations"]
    assert list(stores.graph.relations) == [("t1", ID_A, ID_C, "SIMILAR_TO")]
    # A failed removal is retried like any write.
    stores.graph.fail_next.append(Unavailable("graph down"))
    (result,) = await applier(stores).apply([RelationUnlinked("t1", gone, 4)])
    assert result.outcome is Outcome.RETRY


async def test_a_self_loop_or_mentions_relation_is_poison(stores: Stores) -> None:
    events: list[Event] = [
        RelationLinked("t1", Relation(ID_A, ID_A, "LEADS_TO"), 1),
        RelationLinked("t1", Relation(ID_A, ID_B, "MENTIONS"), 2),
    ]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.POISON] * 2
    assert stores.graph.calls == []


async def test_a_new_memory_gets_its_initial_relevance(stores: Stores) -> None:
    new = MemoryWritten(
        Memory(id=ID_A, tenant="t1", content="n", timestamp=T0, importance=0.9, confidence=0.4),
        1,
        created=True,
    )
    updated = MemoryWritten(Memory(id=ID_B, tenant="t1", content="u", timestamp=T0), 2)
    await applier(stores).apply([new, updated])
    for store in stores.all():
        a, b = store.memory("t1", ID_A), store.memory("t1", ID_B)
        assert a is not None
        assert b is not None
        # Age 0, no access, no relations: 1 * (0.3 + 0.3) * 1 * (0.5 + 0.9) * (0.7 + 0.3 * 0.4)
        assert a.relevance_score == pytest.approx(0.6 * 1.4 * 0.82)
        assert a.relevance_score == relevance_score(new.memory, 0, T0)
        assert b.relevance_score == 0.0  # an update keeps what it carries


async def test_initial_relevance_can_be_switched_off(stores: Stores) -> None:
    settings = Settings(ack_wait_s=60.0, initial_relevance=False)
    a = stores.applier(settings)
    await a.apply([MemoryWritten(Memory(id=ID_A, tenant="t1", content="n", timestamp=T0), 1, True)])
    m = stores.vector.memory("t1", ID_A)
    assert m is not None
    assert m.relevance_score == 0.0


async def test_events_apply_in_sequence_order_by_kind_segments(stores: Stores) -> None:
    # Delivered out of order; applied as upsert(1), delete(2), upsert(3).
    events: list[Event] = [written(3, content="again"), MemoryRemoved("t1", ID_A, 2), written(1)]
    await applier(stores).apply(events)
    assert [c.method for c in stores.lexical.calls] == ["upsert", "delete", "upsert"]
    m = stores.lexical.memory("t1", ID_A)
    assert m is not None
    assert m.content == "again"


async def test_one_write_per_tenant_and_tenants_stay_apart(stores: Stores) -> None:
    events = [written(1, ID_A, "of one", "t1"), written(2, ID_A, "of two", "t2")]
    await applier(stores).apply(events)
    assert sorted(c.tenant for c in stores.vector.calls) == ["t1", "t2"]
    one, two = stores.vector.memory("t1", ID_A), stores.vector.memory("t2", ID_A)
    assert one is not None
    assert two is not None
    assert (one.content, two.content) == ("of one", "of two")


async def test_a_store_down_means_retry_and_the_retry_applies(stores: Stores) -> None:
    a = applier(stores)
    stores.lexical.fail_next.append(Unavailable("lexical down"))
    events = [written(1), written(2, ID_B)]
    results = await a.apply(events)
    assert [r.outcome for r in results] == [Outcome.RETRY, Outcome.RETRY]
    assert "UNAVAILABLE" in results[0].reason
    results = await a.apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.APPLIED]
    assert all(len(s.live("t1")) == 2 for s in stores.all())


@pytest.mark.parametrize(
    ("store", "error"),
    [
        ("vector", InvalidArgument("points[0].vector", "expected 384 dimensions")),
        ("lexical", InvalidArgument("memories[0].tags", "at most 64 tags, got 65")),
        ("graph", FailedPrecondition("memories[0]", "not writable")),
    ],
)
async def test_a_store_refusal_is_poison_naming_the_store(
    stores: Stores, store: str, error: Exception
) -> None:
    getattr(stores, store).fail_next.append(error)
    (result,) = await applier(stores).apply([written(1)])
    assert result.outcome is Outcome.POISON
    assert result.store == store
    assert result.reason.startswith(f"{store} upsert: {error.code}")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "error",
    [
        Unavailable("down"),
        DeadlineExceeded("slow"),
        ResourceExhausted("overloaded"),
        Internal("a bug"),
        RuntimeError("unexpected"),
    ],
)
async def test_a_failure_that_may_pass_later_is_retried(stores: Stores, error: Exception) -> None:
    stores.graph.fail_next.append(error)
    (result,) = await applier(stores).apply([written(1)])
    assert result.outcome is Outcome.RETRY
    assert result.store == "graph"


async def test_one_refused_memory_does_not_hold_back_its_batch(stores: Stores) -> None:
    poison, plain, other = ID_A, ID_B, "0195a000-0000-7000-8000-00000000000c"
    stores.lexical.refused_ids.add(poison)
    events: list[Event] = [
        written(1, poison, "refused by lexical"),
        written(2, plain, "plain, same tenant"),
        written(3, other, "another tenant's", tenant="t2"),
        MemoryRemoved("t1", "0195a000-0000-7000-8000-00000000000d", 4),
    ]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [
        Outcome.POISON,
        Outcome.APPLIED,
        Outcome.APPLIED,
        Outcome.APPLIED,
    ]
    assert (results[0].store, "INVALID_ARGUMENT" in results[0].reason) == ("lexical", True)
    for store in stores.all():
        assert plain in store.live("t1")
        assert other in store.live("t2")
    assert poison not in stores.lexical.live("t1")


FIRST = ("Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas")
LAST = ("Smith", "Jones", "Brown", "Okafor", "Khan", "Novak", "Rossi", "Tanaka")


@pytest.mark.parametrize(
    ("content", "tags"),
    [
        ("Lunch with Sarah.", tuple(f"topic:{i}" for i in range(MAX_TAGS))),
        ("We met " + ", ".join(f"{a} {b}" for a in FIRST for b in LAST) + ".", ()),
        ("Lunch with Sarah, who pasted Q" + "x" * 125 + " into the config.", ()),
    ],
    ids=["full-tags-and-a-person", "eighty-people", "long-token"],
)
async def test_what_the_gateway_accepts_the_stores_accept(
    stores: Stores, content: str, tags: tuple[str, ...]
) -> None:
    (result,) = await applier(stores).apply([written(1, content=content, tags=tags)])
    assert result.outcome is Outcome.APPLIED
    assert all(ID_A in s.live("t1") for s in stores.all())


class Counted(HashingEmbedder):
    def __init__(self, dimension: int, name: str = "") -> None:
        super().__init__(dimension)
        self.calls = 0
        self._name = name  # "" = the hashing model's own

    @property
    def model_name(self) -> str:
        return self._name or super().model_name

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return await super().embed(texts)


class ModelGuardedVector:
    """The fake vector store, refusing upserts not embedded with ``model`` as vector does
    after a generation swap (FailedPrecondition naming the embedding_model)."""

    def __init__(self, inner: FakeVector, model: str) -> None:
        self.inner = inner
        self.model = model
        self.refused = 0

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        return await self.inner.delete(tenant, ids, version)

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        for i, (m, _) in enumerate(items):
            if m.embedding_model != self.model:
                self.refused += 1
                raise FailedPrecondition(
                    f"points[{i}].memory.embedding_model",
                    f"{m.embedding_model!r} is not the model of generation v2 ({self.model!r})",
                )
        return await self.inner.upsert(tenant, items)


async def test_a_refused_embedding_model_switches_to_the_next_embedder_at_once(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = Counted(32), Counted(48)
    vector = ModelGuardedVector(stores.vector, new.model_name)
    settings = Settings(write_timeout_s=5.0, embed_timeout_s=5.0, ack_wait_s=30.0)
    a = stores.applier(settings, vector=vector, embedder=old, next_embedder=new)
    assert a.embedding_model == "hashing-32"
    rel = Relation(ID_A, ID_B, "RELATES_TO")
    events: list[Event] = [written(1), written(2, ID_B), RelationLinked("t1", rel, 3)]
    with caplog.at_level(logging.WARNING):
        results = await a.apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3  # in the same call
    assert [m.embedding_model for m in stores.vector.live("t1").values()] == ["hashing-48"] * 2
    assert stores.vector.vectors[("t1", ID_A)] == new.embed_one("notes")
    assert (old.calls, new.calls) == (1, 1)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "hashing-32" in warning.getMessage()
    assert "hashing-48" in warning.getMessage()
    assert a.embedding_model == "hashing-48"  # kept afterwards
    (result,) = await a.apply([written(4, content="later")])
    assert result.outcome is Outcome.APPLIED
    assert (old.calls, new.calls) == (1, 2)
    assert vector.refused == 1


async def test_after_the_switch_a_client_vector_is_replaced_by_the_next_model_s(
    stores: Stores,
) -> None:
    """The client's vector is of the configured model's space, not the next model's (of
    the same size here, so the size alone would not tell)."""
    old, new = Counted(32), Counted(32, "next-32")
    vector = ModelGuardedVector(stores.vector, new.model_name)
    settings = Settings(write_timeout_s=5.0, embed_timeout_s=5.0, ack_wait_s=30.0)
    a = stores.applier(settings, vector=vector, embedder=old, next_embedder=new)
    own = MemoryWritten(written(1).memory, 1, embedding=(1.0,) + (0.0,) * 31)
    (result,) = await a.apply([own])
    assert result.outcome is Outcome.APPLIED
    assert (old.calls, new.calls) == (0, 1)  # the own vector first, refused, then the model
    assert stores.vector.vectors[("t1", ID_A)] == new.embed_one("notes")


async def test_a_refused_embedding_model_is_retried_without_a_next_embedder(
    stores: Stores,
) -> None:
    settings = Settings(write_timeout_s=5.0, embed_timeout_s=5.0, ack_wait_s=30.0)
    vector = ModelGuardedVector(stores.vector, "hashing-48")
    a = stores.applier(settings, vector=vector)
    (result,) = await a.apply([written(1)])
    assert result.outcome is Outcome.RETRY
    assert "FAILED_PRECONDITION" in result.reason
    assert "embedding_model" in result.reason
    assert stores.vector.live("t1") == {}


async def test_a_refusal_after_the_switch_is_retried_as_today(stores: Stores) -> None:
    vector = ModelGuardedVector(stores.vector, "hashing-64")
    settings = Settings(
        write_timeout_s=5.0,
        embed_timeout_s=5.0,
        ack_wait_s=30.0,
        next_embed=EmbedSettings(provider="hashing", dimension=48),
    )
    a = stores.applier(settings, vector=vector)  # the next embedder is built from settings
    (result,) = await a.apply([written(1)])
    assert result.outcome is Outcome.RETRY
    assert "embedding_model" in result.reason
    assert vector.refused == 2  # one switch per call, then backoff
    assert a.embedding_model == "hashing-48"


async def test_a_failed_segment_holds_back_every_later_one(stores: Stores) -> None:
    stores.graph.fail_next.append(Unavailable("graph down"))
    rel = Relation(ID_A, ID_B, "RELATES_TO")
    events: list[Event] = [written(1), RelationLinked("t1", rel, 2), MemoryRemoved("t1", ID_B, 3)]
    results = await applier(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.RETRY] * 3
    assert results[1].reason.startswith("after an earlier failure")
    assert stores.graph.relations == {}
    assert stores.vector.writes("delete") == []


async def test_embedder_down_retries_the_batch_without_writing(stores: Stores) -> None:
    stores.embedder.fail_next.append(Unavailable("model not loaded"))
    results = await applier(stores).apply([written(1), MemoryRemoved("t1", ID_B, 2)])
    assert [r.outcome for r in results] == [Outcome.RETRY, Outcome.RETRY]
    assert "embedding" in results[0].reason
    assert results[0].store == "embedding"
    assert all(s.calls == [] for s in stores.all())


async def test_a_slow_store_is_a_retry_after_the_write_timeout(stores: Stores) -> None:
    stores.graph.delay_s = 1.0
    (result,) = await applier(stores, write_s=0.05).apply([written(1)])
    assert result.outcome is Outcome.RETRY
    assert "DEADLINE_EXCEEDED" in result.reason


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (written(1, content="   "), "empty content"),
        (written(1, id_=""), "missing memory id"),
        (written(1, tenant=""), "missing tenant"),
        (MemoryRemoved("t1", "", 4), "missing memory id"),
        (RelationLinked("t1", Relation(ID_A, "", "RELATES_TO"), 4), "without source or target"),
        (RelationLinked("t1", Relation(ID_A, ID_B, "LIKES"), 4), "unknown relation type"),
    ],
)
async def test_invalid_events_are_poison_and_do_not_block_the_rest(
    stores: Stores, event: MemoryWritten | MemoryRemoved | RelationLinked, reason: str
) -> None:
    results = await applier(stores).apply([event, written(9, ID_B)])
    assert results[0].outcome is Outcome.POISON
    assert reason in results[0].reason
    assert results[1].outcome is Outcome.APPLIED
    assert list(stores.vector.live("t1")) == [ID_B]


async def test_writes_to_the_three_stores_run_concurrently(stores: Stores) -> None:
    # Each write waits until all three have started: one at a time would time out.
    barrier = asyncio.Barrier(3)
    for store in stores.all():
        store.barrier = barrier
    (result,) = await applier(stores, write_s=2.0).apply([written(1)])
    assert result.outcome is Outcome.APPLIED


def test_a_batch_larger_than_one_store_write_is_refused_at_start() -> None:
    assert Settings(batch_size=1000).batch_size == 1000
    with pytest.raises(ValueError, match="batch_size must be at most 1000"):
        Settings(batch_size=1001)


async def test_a_tenants_writes_are_cut_to_fit_a_message(stores: Stores) -> None:
    a = stores.applier(Settings(max_message_bytes=64 * 1024, write_timeout_s=5.0))
    events = [written(s, f"0195a000-0000-7000-8000-{s:012d}", "x" * 10_000) for s in range(1, 5)]
    results = await a.apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 4
    for store in stores.all():
        assert [len(c.ids) for c in store.writes("upsert")] == [2, 2]
        assert len(store.live("t1")) == 4


@pytest.mark.parametrize(
    "memory",
    [
        Memory(id=ID_A, tenant="t1", content="é" * 16_000, timestamp=T0),
        Memory(id=ID_A, tenant="t1", content="x", timestamp=T0, metadata={"k": [0] * 8000}),
        Memory(
            id=ID_A,
            tenant="t1",
            content="x",
            timestamp=T0,
            tags=tuple(":".join(f"{i}" for _ in range(64))[:128] for i in range(10)),
            tag_prefixes=tag_prefixes(
                ":".join(f"{i}{j}" for j in range(40))[:128] for i in range(64)
            ),
            metadata={"a": {"b": {"c": [True, None, 1.5, "s"] * 100}}},
        ),
    ],
    ids=["long-content", "numeric-metadata", "many-prefixes"],
)
def test_the_size_estimate_bounds_every_store_request(memory: Memory) -> None:
    entities = [Entity("people", "sarah", "Sarah")]
    vector = [0.5] * 384
    estimate = request_bytes(memory, entities, vector)
    proto = memory_to_proto(memory)
    requests = [
        vector_pb2.Point(memory=proto, vector=vector),
        graph_pb2.GraphMemory(memory=proto, entities=[entity_to_proto(e) for e in entities]),
    ]
    assert all(r.ByteSize() <= estimate for r in requests)
