"""The Python SDK against the embedded stack: its README's examples, read-your-writes,
store_many, and errors that name the field (both the trailer and the BadRequest detail)."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_client import AsyncEngram, Engram, InvalidArgument, Progress
from engram_testing.devstack import DEV_ADMIN_TOKEN, DEV_TOKEN, DevStack

README = Path(__file__).parents[2] / "libs" / "sdk" / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.fixture
def env(stack: DevStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_ADDRESS", stack.gateway_address)
    monkeypatch.setenv("ENGRAM_TOKEN", DEV_TOKEN)


def test_every_readme_example_runs(env: None, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = _BLOCK.findall(README.read_text())
    assert len(blocks) >= 5
    for i, code in enumerate(blocks):
        exec(compile(code, f"README block {i}", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "billing ledger" in out  # the first example reads back its own store
    assert "250 []" in out  # store_many stored every row
    assert "importance" in out  # the error example names the field
    assert "stored True" in out  # the subscription replays the example's own store


def test_a_recall_reads_the_clients_own_store(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    with Engram() as engram:
        stored = engram.store("Quokkas live on Rottnest Island", tags=[tag])
        found = engram.recall("where do quokkas live?", tags=[tag], limit=3)
        again = engram.store("Quokkas live on Rottnest Island", tags=[tag])
    assert [h.id for h in found] == [stored.id]
    assert tag in found.results[0].memory.tags
    assert again.id != stored.id  # each store call has its own key


def test_store_many_reports_progress_and_stores_every_item_once(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    rows = [
        {"content": f"note {i} about kiwis", "tags": [tag], "idempotency_key": f"{tag}:{i}"}
        for i in range(25)
    ]
    seen: list[Progress] = []
    with Engram() as engram:
        first = engram.store_many(rows, batch_size=10, progress=seen.append)
        rerun = engram.store_many(rows, batch_size=10)
        found = engram.recall("kiwis", tags=[tag], limit=50)
    assert [p.done for p in seen] == [10, 20, 25]
    assert first.stored == 25
    assert all(r.duplicate for r in rerun.results)
    assert [r.id for r in rerun.results] == [r.id for r in first.results]
    assert len(found) == 25


def test_an_invalid_field_is_named_by_the_sdk_and_by_the_standard_detail(
    env: None, stack: DevStack
) -> None:
    with Engram() as engram, pytest.raises(InvalidArgument) as caught:
        engram.store("too keen", importance=2.0)
    assert caught.value.field.endswith("importance")
    with grpc.insecure_channel(stack.gateway_address) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raw:
            stub.Store(
                gateway_pb2.StoreRequest(
                    memory={"content": "too keen", "importance": 2.0}  # type: ignore[arg-type]
                ),
                metadata=(("authorization", f"Bearer {DEV_TOKEN}"),),
                timeout=10,
            )
    status = rpc_status.from_call(raw.value)
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert bad.field_violations[0].field == caught.value.field


def test_get_with_a_stores_sequence_finds_it(stack: DevStack) -> None:
    auth = (("authorization", f"Bearer {DEV_TOKEN}"),)
    with grpc.insecure_channel(stack.gateway_address) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        stored = stub.Store(
            gateway_pb2.StoreRequest(memory={"content": "Pangolins eat ants"}),  # type: ignore[arg-type]
            metadata=auth,
            timeout=10,
        )
        got = stub.Get(
            gateway_pb2.GetRequest(id=stored.id, min_sequence=stored.sequence),
            metadata=auth,
            timeout=10,
        )
    assert got.memory.content == "Pangolins eat ants"


def test_get_and_related_read_the_clients_own_writes(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    with Engram() as engram:
        a = engram.store("Puffins nest in burrows", tags=[tag])
        b = engram.store("Puffins eat sand eels", tags=[tag])
        got = engram.get(b.id)  # waits for both stores: Associate then finds them
        engram.associate(a.id, b.id, "RELATES_TO", strength=0.6)
        related = engram.related(a.id)
    assert got.content == "Puffins eat sand eels"
    assert [(r.memory.id, r.type) for r in related] == [(b.id, "RELATES_TO")]


async def test_the_async_client_reads_its_own_store(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    async with AsyncEngram() as engram:
        stored = await engram.store("Wombats produce cube-shaped droppings", tags=[tag])
        found = await engram.recall("wombat droppings", tags=[tag], limit=3)
    assert [h.id for h in found] == [stored.id]


def test_relations_stats_batches_streams_and_deletes_through_the_sdk(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    with Engram() as engram:
        batch = engram.store_batch([{"content": "Otters hold hands", "tags": [tag]}, "x " + tag])
        streamed = engram.store_stream([f"stream {i} {tag}" for i in range(3)])
        a, b = batch.ids
        engram.get(a)  # Associate needs both applied: the get waits for them
        engram.associate(a, b, "RELATES_TO", strength=0.7)
        related = engram.related(a)
        deleted = engram.delete(b)
        stats = engram.stats()
    assert batch.failed == 0
    assert streamed.failed == 0
    assert len(streamed.results) == 3
    assert [(r.memory.id, r.type) for r in related] == [(b, "RELATES_TO")]
    assert deleted.id == b
    assert stats.tenant == "default"
    assert stats.counts


def test_list_pages_a_tag_with_its_relations(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    with Engram() as engram:
        batch = engram.store_batch(
            [{"content": f"harbour note {i}", "tags": [tag]} for i in range(5)]
        )
        engram.store_many([{"content": "not tagged", "tags": ["other"]}])
        engram.recall("harbour", tags=[tag])  # applied: Associate looks both ends up
        engram.associate(batch.ids[0], batch.ids[1], "LEADS_TO", strength=0.6)
        engram.recall("harbour", tags=[tag])
        listed = [m.id for m in engram.list(tags=[tag], page_size=2)]
        pages = list(engram.list_pages(tags=[tag], include_relations=True))
    assert sorted(listed) == sorted(batch.ids)
    assert len(listed) == len(set(listed))
    relations = [(r.source_id, r.target_id, r.type) for p in pages for r in p.relations]
    assert (batch.ids[0], batch.ids[1], "LEADS_TO") in relations
    assert pages[-1].cursor == ""


def test_subscribe_from_a_sequence_replays_a_tags_events_in_order(env: None) -> None:
    tag = f"sdk:{uuid.uuid4().hex[:8]}"
    with Engram() as writer, Engram() as watcher:
        first, second = (writer.store(f"tide table {i}", tags=[tag]) for i in range(2))
        writer.recall("tide", tags=[tag])  # Update reads the store
        updated = writer.update(first.id, importance=0.9)
        ours = {first.id, second.id}
        stream = watcher.subscribe(tags=[tag], after_sequence=first.sequence - 1)

        def three() -> list[tuple[int, str, str]]:
            seen = []
            for event in stream:
                if event.memory_id in ours:  # relation events pass any tag filter
                    seen.append((event.sequence, event.kind, event.memory_id))
                if len(seen) == 3:
                    return seen
            return seen

        with ThreadPoolExecutor(1) as pool:
            seen = pool.submit(three).result(timeout=60)
        stream.close()
    assert seen == [
        (first.sequence, "stored", first.id),
        (second.sequence, "stored", second.id),
        (updated.sequence, "updated", first.id),
    ]


def test_delete_tenant_counts_on_a_dry_run_and_erases_with_confirmation(
    stack: DevStack, env: None
) -> None:
    with Engram(token=DEV_ADMIN_TOKEN) as admin:
        dry = admin.delete_tenant("default", dry_run=True)
        gone = admin.delete_tenant("sdk-erased", confirm="sdk-erased")
        for _ in range(600):
            status = admin.delete_tenant_status("sdk-erased", gone.sequence)
            if status.applied:
                break
            time.sleep(0.1)
        with pytest.raises(InvalidArgument) as refused:
            admin.delete_tenant("sdk-erased", confirm="another")
    assert dry.dry_run
    assert dry.sequence == 0
    assert dry.counts["vector"] > 0  # the other tests' memories, untouched
    assert gone.sequence > 0
    assert status.applied
    assert sum(status.counts.values()) == 0
    assert refused.value.field == "confirm"
