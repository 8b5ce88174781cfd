"""Dead letters per tenant (AdminService.ListDeadLetters, ReplayDeadLetters, Stats) against
a real nats-server: letters written as the workers' PullWorker writes them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram.common.v1 import common_pb2
from engram.events.v1 import events_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.outcomes import Outcome
from engram_gateway import server
from engram_gateway.adapters.consolidation import NatsConsolidation
from engram_gateway.adapters.dead_letters import JetStreamDeadLetters, replay_id
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_admin
from engram_gateway.service import Deadline, StatsView
from engram_gateway.service.dead_letters import DeadLetters
from engram_platform import jetstream as jsm
from engram_platform.pull_worker import (
    DELIVERIES_HEADER,
    ORIGINAL_SEQUENCE_HEADER,
    ORIGINAL_STREAM_HEADER,
    ORIGINAL_SUBJECT_HEADER,
    REASON_HEADER,
    STORE_HEADER,
    PullWorker,
    Settlement,
)
from engram_testing.nats_server import NatsServer
from engram_testing.waiting import until

if TYPE_CHECKING:
    from conftest import Harness

TOKENS = "a-admin=acme:admin;a-rw=acme:read+write;g-admin=globex:admin;root=*:admin"
A_ADMIN = (("authorization", "Bearer a-admin"),)
A_RW = (("authorization", "Bearer a-rw"),)
G_ADMIN = (("authorization", "Bearer g-admin"),)
ROOT = (("authorization", "Bearer root"),)
AT = datetime(2026, 6, 1, tzinfo=UTC)


def stored(tenant: str, memory_id: str) -> tuple[str, bytes]:
    """A MemoryStored event: its subject and payload."""
    event = events_pb2.MemoryStored(
        envelope=events_pb2.Envelope(event_id=f"ev-{memory_id}", tenant=tenant),
        memory=common_pb2.Memory(id=memory_id, tenant=tenant, content="x"),
    )
    return jsm.subject(tenant, jsm.MEMORY_STORED), event.SerializeToString()


async def poison(
    js: JetStreamContext, tenant: str, memory_id: str, reason: str = "refused", store: str = ""
) -> int:
    """Publish an event to the log and its dead letter as PullWorker._dead_letter does
    (with the store the refusal came from); the letter's sequence."""
    subject, payload = stored(tenant, memory_id)
    ack = await js.publish(
        subject,
        payload,
        headers={"Nats-Msg-Id": f"ev-{memory_id}", jsm.EVENT_HEADER: jsm.MEMORY_STORED},
    )
    headers = {
        jsm.EVENT_HEADER: jsm.MEMORY_STORED,
        REASON_HEADER: reason,
        STORE_HEADER: store,
        ORIGINAL_SUBJECT_HEADER: subject,
        ORIGINAL_STREAM_HEADER: jsm.STREAM_MEMORY,
        ORIGINAL_SEQUENCE_HEADER: str(ack.seq),
        DELIVERIES_HEADER: "3",
    }
    seq, _ = await jsm.publish(
        js,
        jsm.subject(tenant, jsm.DEAD_LETTER),
        payload,
        msg_id=f"dead-letter:{jsm.STREAM_MEMORY}:{ack.seq}",
        headers=headers,
    )
    return seq


@dataclass
class Api:
    admin: admin_pb2_grpc.AdminServiceStub
    memory: gateway_pb2_grpc.MemoryServiceStub
    js: JetStreamContext


@pytest.fixture
async def api(new_harness: Callable[..., Harness], js: JetStreamContext) -> AsyncIterator[Api]:
    harness = new_harness(tokens=TOKENS)
    letters = JetStreamDeadLetters(js, 2.0)
    gateway = replace(
        harness.gateway,
        admin=build_admin(harness.settings, NatsConsolidation(js, 2.0)),
        dead_letters=DeadLetters(letters, 2.0),
        stats=StatsView(harness.gateway.reader, letters, 2.0),
    )
    running = await server.start(harness.settings, gateway, Authenticator.from_sources(TOKENS))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Api(
            admin_pb2_grpc.AdminServiceStub(channel),
            gateway_pb2_grpc.MemoryServiceStub(channel),
            js,
        )
    finally:
        await channel.close()
        await running.stop(None)


async def refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return err.value


def listing(tenant: str = "", page_size: int = 0, after: int = 0) -> Any:
    return admin_pb2.ListDeadLettersRequest(tenant=tenant, page_size=page_size, after=after)


async def all_letters(api: Api, metadata: Any, tenant: str = "") -> list[admin_pb2.DeadLetter]:
    reply = await api.admin.ListDeadLetters(listing(tenant, 1000), metadata=metadata)
    return list(reply.dead_letters)


async def test_list_pages_through_the_tenants_letters_and_no_others(api: Api) -> None:
    acme = [await poison(api.js, "acme", f"a{n}", f"bad {n} zoë", "lexical") for n in range(3)]
    theirs = await poison(api.js, "globex", "g0")
    acme.append(await poison(api.js, "acme", "a3"))

    first = await api.admin.ListDeadLetters(listing(page_size=2), metadata=A_ADMIN)
    assert [d.sequence for d in first.dead_letters] == acme[:2]
    assert first.next_after == acme[1]
    second = await api.admin.ListDeadLetters(
        listing(page_size=2, after=first.next_after), metadata=A_ADMIN
    )
    assert [d.sequence for d in second.dead_letters] == acme[2:]
    assert second.next_after == 0  # no more, though globex has one after

    letter = first.dead_letters[0]
    assert (letter.event, letter.original_subject, letter.original_stream) == (
        "memory_stored",
        "engram.acme.memory_stored.v1",
        jsm.STREAM_MEMORY,
    )
    assert (letter.reason, letter.store, letter.deliveries, letter.memory_id) == (
        "bad 0 zoë",  # a reason quoting the input: UTF-8 kept
        "lexical",
        3,
        "a0",
    )
    assert letter.original_sequence == 1
    assert letter.HasField("dead_lettered_at")

    assert [d.sequence for d in await all_letters(api, G_ADMIN)] == [theirs]
    assert [d.memory_id for d in await all_letters(api, ROOT, "globex")] == ["g0"]
    await refused(
        api.admin.ListDeadLetters(listing("globex"), metadata=A_ADMIN),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    await refused(
        api.admin.ListDeadLetters(listing(), metadata=A_RW), grpc.StatusCode.PERMISSION_DENIED
    )
    err = await refused(
        api.admin.ListDeadLetters(listing(page_size=1001), metadata=A_ADMIN),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "page_size" in (err.details() or "")


async def memory_stream(js: JetStreamContext, after: int) -> list[Any]:
    info = await js.stream_info(jsm.STREAM_MEMORY)
    last = info.state.last_seq
    return [await js.get_msg(jsm.STREAM_MEMORY, s) for s in range(after + 1, last + 1)]


async def test_replay_republishes_under_a_new_id_and_deletes_only_what_it_replayed(
    api: Api,
) -> None:
    one, two = await poison(api.js, "acme", "a1"), await poison(api.js, "acme", "a2")
    theirs = await poison(api.js, "globex", "g1")
    before = (await api.js.stream_info(jsm.STREAM_MEMORY)).state.last_seq

    request = admin_pb2.ReplayDeadLettersRequest(sequences=[one, theirs, 999])
    reply = await api.admin.ReplayDeadLetters(request, metadata=A_ADMIN)

    assert (reply.replayed, reply.failed) == (1, 2)
    [done] = reply.replays
    assert (done.sequence, done.new_sequence) == (one, before + 1)
    assert {(f.sequence, f.reason) for f in reply.failures} == {
        (theirs, "not found"),
        (999, "not found"),
    }
    # The original (same event id, still in the duplicate window) did not swallow it.
    [again] = await memory_stream(api.js, before)
    assert again.subject == "engram.acme.memory_stored.v1"
    assert again.data == stored("acme", "a1")[1]
    assert again.headers["Nats-Msg-Id"] == replay_id(one)
    assert again.headers[jsm.EVENT_HEADER] == jsm.MEMORY_STORED
    assert not {REASON_HEADER, ORIGINAL_SUBJECT_HEADER} & set(again.headers)
    assert [d.sequence for d in await all_letters(api, A_ADMIN)] == [two]
    assert [d.sequence for d in await all_letters(api, G_ADMIN)] == [theirs]


async def test_replay_of_all_takes_every_letter_of_the_tenant_and_none_of_anothers(
    api: Api,
) -> None:
    for n in range(5):
        await poison(api.js, "acme", f"a{n}")
    theirs = await poison(api.js, "globex", "g1")
    before = (await api.js.stream_info(jsm.STREAM_MEMORY)).state.last_seq

    reply = await api.admin.ReplayDeadLetters(
        admin_pb2.ReplayDeadLettersRequest(), metadata=A_ADMIN
    )

    assert (reply.replayed, reply.failed, reply.remaining) == (5, 0, 0)
    republished = await memory_stream(api.js, before)
    assert [m.subject for m in republished] == ["engram.acme.memory_stored.v1"] * 5
    assert await all_letters(api, A_ADMIN) == []
    assert [d.sequence for d in await all_letters(api, G_ADMIN)] == [theirs]


class DeleteFailsOnce(JetStreamDeadLetters):
    def __init__(self, js: JetStreamContext) -> None:
        super().__init__(js, 2.0)
        self.failed = False

    async def delete(self, sequence: int) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("log went away")
        await super().delete(sequence)


async def test_a_letter_is_kept_until_its_copy_is_acked_and_a_retry_is_one_event(
    js: JetStreamContext,
) -> None:
    seq = await poison(js, "acme", "a1")
    # An original subject no stream takes: the republish fails, the letter stays.
    stray = await jsm.publish(
        js,
        jsm.subject("acme", jsm.DEAD_LETTER),
        b"x",
        "stray",
        {ORIGINAL_SUBJECT_HEADER: "engram.acme.no_such_event.v1"},
    )
    foreign = await jsm.publish(
        js,
        jsm.subject("acme", jsm.DEAD_LETTER),
        b"x",
        "foreign",
        {ORIGINAL_SUBJECT_HEADER: "engram.globex.memory_stored.v1"},
    )
    letters = DeleteFailsOnce(js)
    service = DeadLetters(letters, 2.0)
    before = (await js.stream_info(jsm.STREAM_MEMORY)).state.last_seq

    first = await service.replay("acme", [seq, stray[0], foreign[0]], Deadline.within(10))
    assert first.replayed == ()
    assert [s for s, _ in first.failed] == [seq, stray[0], foreign[0]]
    assert "not deleted" in first.failed[0][1]
    assert "not the tenant's" in first.failed[2][1]
    second = await service.replay("acme", [seq], Deadline.within(10))
    assert [(r.sequence, r.new_sequence) for r in second.replayed] == [(seq, before + 1)]

    assert len(await memory_stream(js, before)) == 1  # the retry was a duplicate
    left = await letters.page("acme", 0, 10)
    assert [d.sequence for d in left] == [stray[0], foreign[0]]


async def test_bad_sequences_are_invalid(js: JetStreamContext) -> None:
    service = DeadLetters(JetStreamDeadLetters(js, 2.0), 2.0)
    with pytest.raises(InvalidArgument) as err:
        await service.replay("acme", [3, 0], Deadline.within(5))
    assert err.value.field == "sequences[1]"
    with pytest.raises(InvalidArgument) as err:
        await service.replay("acme", list(range(1, 1002)), Deadline.within(5))
    assert err.value.field == "sequences"


class Poisoner(PullWorker):
    """A worker that refuses every event, as ingest refuses one a store will never take."""

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        tenants = [m.subject.split(".")[1] for m in msgs]
        return [Settlement(Outcome.POISON, "refused for good", t) for t in tenants]


@dataclass(frozen=True)
class Tuning:
    batch_size: int = 8
    fetch_timeout_s: float = 0.2
    batch_wait_s: float = 0.02
    ack_wait_s: float = 30.0
    max_ack_pending: int = 100
    retry_base_s: float = 0.05
    retry_max_s: float = 0.2
    progress_interval_s: float = 60.0


async def test_what_a_worker_dead_letters_is_listed_and_replayed(
    api: Api, nats_server: NatsServer
) -> None:
    for tenant, memory_id in (("acme", "a1"), ("globex", "g1"), ("acme", "a2")):
        subject, payload = stored(tenant, memory_id)
        await api.js.publish(subject, payload, headers={jsm.EVENT_HEADER: jsm.MEMORY_STORED})
    nc = Client()
    await nc.connect(nats_server.url)
    worker = Poisoner(nc, nc.jetstream(), "poisoner", jsm.STREAM_MEMORY, "test-poison", Tuning())
    await worker.start()
    try:
        await until(lambda: _poisoned(worker, 3))
    finally:
        await worker._unsubscribe()
        await nc.close()

    mine = await all_letters(api, A_ADMIN)
    assert [(d.memory_id, d.reason, d.original_sequence) for d in mine] == [
        ("a1", "refused for good", 1),
        ("a2", "refused for good", 3),
    ]
    reply = await api.admin.ReplayDeadLetters(
        admin_pb2.ReplayDeadLettersRequest(sequences=[mine[1].sequence]), metadata=A_ADMIN
    )
    assert [r.new_sequence for r in reply.replays] == [4]
    assert [d.memory_id for d in await all_letters(api, A_ADMIN)] == ["a1"]


async def _poisoned(worker: Poisoner, count: int) -> bool:
    msgs = await worker.fetch()
    if msgs:
        await worker.process(msgs)
    return worker.counters.poisoned >= count


# --- Stats: the dead-letter count, and log positions of the tenant's own ------------------


async def test_stats_counts_the_tenants_dead_letters(api: Api) -> None:
    for n in range(3):
        await poison(api.js, "acme", f"a{n}")
    await poison(api.js, "globex", "g1")
    stats = await api.memory.Stats(gateway_pb2.StatsRequest(), metadata=A_RW)
    assert stats.dead_letters == 3
    stats = await api.memory.Stats(gateway_pb2.StatsRequest(tenant="globex"), metadata=ROOT)
    assert stats.dead_letters == 1


async def test_the_tenant_log_reads_the_tenants_latest_event(js: JetStreamContext) -> None:
    letters = JetStreamDeadLetters(js, 2.0)
    assert await letters.last_sequence("acme") == 0
    for tenant, memory_id in (("acme", "a1"), ("globex", "g1"), ("globex", "g2")):
        subject, payload = stored(tenant, memory_id)
        await js.publish(subject, payload)
    await js.publish(jsm.subject("acme", jsm.MEMORY_ACCESSED), b"")  # another stream
    assert (await letters.last_sequence("acme"), await letters.last_sequence("globex")) == (1, 3)


async def test_stats_shows_a_tenant_its_own_log_positions_only(
    new_harness: Callable[..., Harness],
) -> None:
    tokens = "a=acme:read+write;g=globex:read+write;root=*:read"
    h = new_harness(tokens=tokens)
    running = await server.start(h.settings, h.gateway, Authenticator.from_sources(tokens))
    g, root = (("authorization", "Bearer g"),), (("authorization", "Bearer root"),)
    a = (("authorization", "Bearer a"),)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)

            async def store(auth: Any, content: str) -> int:
                memory = common_pb2.MemoryInput(content=content)
                reply = await stub.Store(gateway_pb2.StoreRequest(memory=memory), metadata=auth)
                return int(reply.sequence)

            async def positions(auth: Any, tenant: str = "") -> tuple[int, int]:
                reply = await stub.Stats(gateway_pb2.StatsRequest(tenant=tenant), metadata=auth)
                return reply.watermark, reply.last_sequence

            await store(a, "one")
            theirs = await store(g, "two")
            await store(a, "three")
            seen = await positions(g)
            assert seen == (theirs, theirs)
            for n in range(5):  # acme writes on: globex's figures do not move
                await store(a, f"more {n}")
            assert await positions(g) == seen
            assert await positions(root, "globex") == (8, 8)  # the log's own
            await refused(
                stub.Stats(gateway_pb2.StatsRequest(tenant="acme"), metadata=g),
                grpc.StatusCode.PERMISSION_DENIED,
            )
            h.log.auto_watermark = False
            h.log.applied = 2
            assert await positions(a) == (2, 8)  # behind its own writes: the watermark
    finally:
        await running.stop(None)


async def test_replay_of_all_stops_near_the_deadline_and_counts_what_is_left(
    js: JetStreamContext,
) -> None:
    for n in range(102):
        await poison(js, "acme", f"a{n}")
    # A backend timeout longer than the deadline leaves time for one page only.
    service = DeadLetters(JetStreamDeadLetters(js, 2.0), backend_timeout_s=60.0)
    out = await service.replay("acme", [], Deadline.within(30))
    assert (len(out.replayed), out.failed, out.remaining) == (100, (), 2)
    out = await service.replay("acme", [], Deadline.within(30))
    assert (len(out.replayed), out.remaining) == (2, 0)
