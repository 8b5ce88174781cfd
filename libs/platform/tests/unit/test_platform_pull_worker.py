"""PullWorker against a real nats-server: batching, settling, hand-back, the process loop."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from engram_core.outcomes import Result
from engram_platform import jetstream as jsm
from engram_platform import logs, worker_metrics
from engram_platform.pull_worker import (
    DELIVERIES_HEADER,
    ORIGINAL_SEQUENCE_HEADER,
    ORIGINAL_STREAM_HEADER,
    ORIGINAL_SUBJECT_HEADER,
    REASON_HEADER,
    STORE_HEADER,
    Outcome,
    PullWorker,
    Settlement,
    backoff_s,
    run_worker,
)
from engram_platform.settings import NatsSettings, WorkerSettings
from engram_testing import waiting
from engram_testing.metrics import ServiceMetrics
from engram_testing.nats_server import NatsServer, free_ports, start_nats

STREAM = "PULLTEST"
DURABLE = "pulltest-worker"
SUBJECT = "pulltest.work"


@dataclass(frozen=True)
class Tuning:
    batch_size: int = 8
    fetch_timeout_s: float = 0.2
    batch_wait_s: float = 0.02
    ack_wait_s: float = 30.0  # far beyond every wait below: a redelivery is a nak's doing
    max_ack_pending: int = 1000
    retry_base_s: float = 0.05
    retry_max_s: float = 0.2
    progress_interval_s: float = 60.0


Decide = Callable[[Msg], Settlement]
W = TypeVar("W", bound=PullWorker)


def applied(_: Msg) -> Settlement:
    return Settlement(Outcome.APPLIED)


class Recorder(PullWorker):
    """Settles every message as ``decide`` says and records what it was handed."""

    def __init__(
        self, nc: Client, js: JetStreamContext, tuning: Tuning, decide: Decide = applied
    ) -> None:
        super().__init__(nc, js, "pulltest", STREAM, DURABLE, tuning)
        self.decide = decide
        self.batches: list[list[int]] = []  # stream sequences, batch by batch
        self.deliveries: list[tuple[int, int]] = []  # (seq, num_delivered)

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        self.batches.append([m.metadata.sequence.stream for m in msgs])
        self.deliveries += [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in msgs]
        return [self.decide(m) for m in msgs]


@dataclass
class Log:
    nc: Client
    js: JetStreamContext
    workers: list[tuple[PullWorker, asyncio.Event, asyncio.Task[None]]] = field(
        default_factory=list
    )

    async def publish(self, n: int, headers: dict[str, str] | None = None) -> int:
        ack = await self.js.publish(SUBJECT, f"job {n}".encode(), headers=headers)
        return int(ack.seq)

    async def consumer(self) -> tuple[int, int, int]:
        """(ack floor, ack pending, redelivered) of the durable."""
        info = await self.js.consumer_info(STREAM, DURABLE)
        floor = int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0
        return floor, int(info.num_ack_pending or 0), int(info.num_redelivered or 0)

    async def start(self, worker: W, run: bool = True) -> W:
        await worker.start()
        stop = asyncio.Event()
        if run:
            self.workers.append((worker, stop, asyncio.create_task(worker.run(stop))))
        return worker

    async def stop_all(self) -> None:
        for _, stop, task in self.workers:
            stop.set()
            await asyncio.wait_for(task, 10)
        self.workers.clear()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()


@asynccontextmanager
async def connected(server: NatsServer) -> AsyncIterator[Log]:
    settings = NatsSettings(url=server.url)
    nc, js = await jsm.connect(settings, "pulltest")
    await jsm.ensure_streams(js, settings)  # the dead-letter stream
    await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT]))
    log = Log(nc, js)
    try:
        yield log
    finally:
        await log.stop_all()
        await nc.drain()


@pytest.fixture
async def log(nats_server: NatsServer) -> AsyncIterator[Log]:
    async with connected(nats_server) as log:
        yield log


# This file's waits are shorter than the shared defaults; a stuck test fails sooner.
until = partial(waiting.until, timeout_s=10.0, interval_s=0.01)


async def test_a_batch_takes_what_is_ready_up_to_the_batch_size(log: Log) -> None:
    for n in range(1, 8):
        await log.publish(n)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(batch_size=3)))
    await until(lambda: worker.counters.acked == 7)
    assert worker.batches == [[1, 2, 3], [4, 5, 6], [7]]


async def test_a_lone_event_is_not_held_back_to_fill_a_batch(log: Log) -> None:
    # Handled once batch_wait_s is up, not after fetch_timeout_s: a worker holding it back
    # to fill a batch would hand both events over in one.
    tuning = Tuning(batch_size=16, fetch_timeout_s=1.5, batch_wait_s=0.02)
    worker = await log.start(Recorder(log.nc, log.js, tuning))
    await asyncio.sleep(0.2)  # idle: the worker waits for a first event
    await log.publish(1)
    await asyncio.sleep(0.5)
    await log.publish(2)
    await until(lambda: worker.counters.acked == 2)
    assert worker.batches == [[1], [2]]


async def test_events_arriving_within_batch_wait_join_the_first_ones_batch(log: Log) -> None:
    tuning = Tuning(batch_size=16, fetch_timeout_s=1.5, batch_wait_s=0.6)
    worker = await log.start(Recorder(log.nc, log.js, tuning))
    await asyncio.sleep(0.2)  # idle: the worker waits for a first event
    await log.publish(1)
    await asyncio.sleep(0.1)
    await log.publish(2)
    await until(lambda: worker.counters.acked == 2)
    assert worker.batches == [[1, 2]]


async def test_acks_advance_the_ack_floor_but_never_past_an_unsettled_event(log: Log) -> None:
    def retry_seq_2(msg: Msg) -> Settlement:
        if msg.metadata.sequence.stream == 2:
            return Settlement(Outcome.RETRY, "dependency down")
        return Settlement(Outcome.APPLIED)

    for n in range(1, 6):
        last = await log.publish(n)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(), retry_seq_2))
    await until(lambda: worker.counters.acked == 4 and worker.counters.retried >= 3)
    floor, pending, _ = await log.consumer()
    assert (floor, pending) == (1, 1)  # 3..5 are acked, but 2 holds the floor

    worker.decide = applied  # the dependency is back
    await until(lambda: worker.counters.acked == 5)
    await until(lambda: _floor_is(log, last))
    await until(lambda: _nothing_pending(log))  # the server settles the ack a moment later


async def _nothing_pending(log: Log) -> bool:
    return (await log.consumer())[1] == 0


async def _floor_is(log: Log, sequence: int) -> bool:
    return (await log.consumer())[0] == sequence


async def test_a_retry_is_redelivered_after_an_exponential_backoff(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    def retry_twice(msg: Msg) -> Settlement:
        if msg.metadata.num_delivered <= 2:
            return Settlement(Outcome.RETRY, "not yet")
        return Settlement(Outcome.APPLIED)

    delays: list[float | None] = []
    nak = Msg.nak

    async def recording_nak(msg: Msg, delay: float | None = None) -> None:
        delays.append(delay)
        await nak(msg, delay=delay)

    monkeypatch.setattr(Msg, "nak", recording_nak)
    await log.publish(1)
    tuning = Tuning(retry_base_s=0.3, retry_max_s=5.0)
    worker = await log.start(Recorder(log.nc, log.js, tuning, retry_twice))
    await until(lambda: worker.counters.acked == 1)
    assert worker.deliveries == [(1, 1), (1, 2), (1, 3)]
    # The server holds a nak'd event back for the delay asked, far below ack_wait (30 s):
    # the base, then doubled.
    assert delays == [0.3, 0.6]
    assert worker.counters.retried == 2
    await until(lambda: _nothing_pending(log))  # the server settles the ack a moment later


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_s(n, 0.5, 3.0) for n in (0, 1, 2, 3, 4, 5, 50)] == [
        0.5,
        0.5,
        1.0,
        2.0,
        3.0,
        3.0,
        3.0,
    ]


async def dead_letters(js: JetStreamContext, count: int) -> list[Msg]:
    sub = await js.pull_subscribe(jsm.subject("*", jsm.DEAD_LETTER), stream=jsm.STREAM_DEADLETTER)
    try:
        return await sub.fetch(count, timeout=5)
    finally:
        await sub.unsubscribe()


async def test_poison_is_copied_to_the_dead_letter_stream_then_termed(log: Log) -> None:
    def poison(msg: Msg) -> Settlement:
        tenant = "t9" if msg.metadata.sequence.stream == 1 else ""
        return Settlement(Outcome.POISON, "bad\n   bytes", tenant, "lexical" if tenant else "")

    first = await log.publish(1, headers={"Nats-Msg-Id": "job-1", "X-Origin": "test"})
    await log.publish(2)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(), poison))
    await until(lambda: worker.counters.poisoned == 2)

    one, two = await dead_letters(log.js, 2)
    assert one.subject == "engram.t9.dead_letter.v1"
    assert two.subject == "engram.unknown.dead_letter.v1"  # no tenant: still kept
    assert one.data == b"job 1"  # the original payload, untouched
    assert one.headers is not None
    assert one.headers[REASON_HEADER] == "bad bytes"
    assert one.headers[STORE_HEADER] == "lexical"
    assert two.headers is not None
    assert two.headers[STORE_HEADER] == ""  # decided from the event alone
    assert one.headers[ORIGINAL_SUBJECT_HEADER] == SUBJECT
    assert one.headers[ORIGINAL_STREAM_HEADER] == STREAM
    assert one.headers[ORIGINAL_SEQUENCE_HEADER] == str(first)
    assert one.headers[DELIVERIES_HEADER] == "1"
    assert one.headers["X-Origin"] == "test"  # the publisher's own headers travel along
    assert one.headers["Nats-Msg-Id"] == f"dead-letter:{STREAM}:{first}"  # not "job-1"
    # Termed, not retried: nothing pending, nothing redelivered, the floor passed both.
    assert await log.consumer() == (2, 0, 0)
    assert worker.counters.retried == 0


async def test_retry_and_dead_letter_lines_name_the_events_tenant(log: Log) -> None:
    def decide(msg: Msg) -> Settlement:
        if msg.metadata.sequence.stream == 1:
            return Settlement(Outcome.POISON, "garbage", "t1")
        return Settlement(Outcome.RETRY if msg.metadata.num_delivered == 1 else Outcome.APPLIED)

    stream = io.StringIO()
    handler = logs.make_handler("pulltest", "json", stream)
    worker_log = logging.getLogger(Recorder.__module__)
    worker_log.addHandler(handler)
    try:
        await log.publish(1)
        await log.publish(2)
        worker = await log.start(Recorder(log.nc, log.js, Tuning(), decide))
        await until(lambda: worker.counters.acked == 1)
    finally:
        worker_log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    tenants = {line["message"].split(" ")[0]: line.get("tenant") for line in lines}
    assert tenants == {"dead-lettered": "t1", "retrying": None}  # the retry had no tenant


async def test_a_bounded_retry_is_dead_lettered_once_delivered_that_often(log: Log) -> None:
    def wait_for_a_dependency(_: Msg) -> Settlement:
        return Settlement(Outcome.RETRY, "endpoint x not applied", "t1", max_deliveries=3)

    await log.publish(1)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(), wait_for_a_dependency))
    await until(lambda: worker.counters.poisoned == 1)
    assert [n for _, n in worker.deliveries] == [1, 2, 3]
    assert worker.counters.retried == 2
    (copy,) = await dead_letters(log.js, 1)
    assert copy.headers is not None
    assert copy.headers[REASON_HEADER].startswith("endpoint x not applied (gave up after 3")
    await until(lambda: _nothing_pending(log))  # decided: the floor moves on


async def test_poison_whose_copy_cannot_be_stored_is_kept_and_retried(log: Log) -> None:
    def poison(msg: Msg) -> Settlement:
        # "a.b" makes a subject no stream takes: the dead-letter publish fails.
        tenant = "a.b" if msg.metadata.num_delivered == 1 else "t1"
        return Settlement(Outcome.POISON, "bad", tenant)

    await log.publish(1)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(), poison))
    await until(lambda: worker.counters.poisoned == 1)
    assert worker.counters.retried == 1
    (copy,) = await dead_letters(log.js, 1)
    assert copy.headers is not None
    assert copy.headers[DELIVERIES_HEADER] == "2"


async def test_decided_messages_are_reported_with_their_tenant_after_settling(log: Log) -> None:
    outcomes = {1: Outcome.APPLIED, 2: Outcome.POISON, 3: Outcome.RETRY, 4: Outcome.APPLIED}

    def decide(msg: Msg) -> Settlement:
        seq = msg.metadata.sequence.stream
        outcome = outcomes[seq] if msg.metadata.num_delivered == 1 else Outcome.APPLIED
        return Settlement(outcome, "why", "" if seq == 4 else f"t{seq}")

    class Reporting(Recorder):
        decided: list[tuple[str, int]] = []

        async def on_decided(self, decided: Sequence[tuple[str, int]]) -> None:
            self.decided.extend(decided)
            # Settled first: whatever is reported is already acked or dead-lettered.
            assert len(self.decided) <= self.counters.acked + self.counters.poisoned

    for n in range(1, 5):
        await log.publish(n)
    worker = await log.start(Reporting(log.nc, log.js, Tuning(), decide))
    await until(lambda: len(worker.decided) == 3)
    # The retry is reported only once decided; a message without a tenant never is.
    assert sorted(worker.decided) == [("t1", 1), ("t2", 2), ("t3", 3)]


async def test_stop_hands_back_what_was_delivered_but_not_started(log: Log) -> None:
    for n in range(1, 4):
        await log.publish(n)
    one = Recorder(log.nc, log.js, Tuning())
    await log.start(one, run=False)
    # A pull answered after its fetch gave up: three messages sit, delivered, in
    # this replica's queue (the inbox is private to nats-py; a test may reach it).
    sub = one._sub
    assert sub is not None
    request = json.dumps({"batch": 3, "no_wait": True}).encode()
    await log.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{DURABLE}", request, sub._deliver)
    await until(lambda: sub.pending_msgs == 3)
    assert (await log.consumer())[1] == 3  # the log counts them as delivered to us

    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(one.run(stop), 5)
    assert one.batches == []

    # Nak'd: another replica has them at once, not after ack_wait (30 s).
    two = await log.start(Recorder(log.nc, log.js, Tuning()))
    await until(lambda: two.counters.acked == 3, timeout_s=5)
    assert [n for _, n in two.deliveries] == [2, 2, 2]


async def test_a_failing_handle_leaves_the_batch_for_redelivery(log: Log) -> None:
    class Crashing(Recorder):
        async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
            await super().handle(msgs)
            raise RuntimeError("bug")

    await log.publish(1)
    worker = await log.start(Crashing(log.nc, log.js, Tuning()))
    await until(lambda: bool(worker.batches))
    await asyncio.sleep(0.3)
    assert worker.counters.acked == worker.counters.retried == 0
    assert (await log.consumer())[1] == 1  # unsettled: the log redelivers after ack_wait


class Slow(Recorder):
    """Takes ``hold_s`` over every batch (a slow embedder or store)."""

    hold_s = 0.0

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        settled = await super().handle(msgs)
        await asyncio.sleep(self.hold_s)
        return settled


async def test_a_batch_taking_longer_than_ack_wait_is_kept_not_redelivered(log: Log) -> None:
    tuning = Tuning(ack_wait_s=0.6)
    slow = await log.start(Slow(log.nc, log.js, tuning))
    slow.hold_s = 2.0  # over three ack_waits
    idle = await log.start(Recorder(log.nc, log.js, tuning))  # would take a redelivery
    await log.publish(1)
    await until(lambda: slow.counters.acked + idle.counters.acked == 1)
    handled = slow.deliveries + idle.deliveries
    assert handled == [(1, 1)]
    assert (await log.consumer())[2] == 0  # never redelivered


async def test_a_batch_abandoned_by_a_dead_worker_is_redelivered_to_another(log: Log) -> None:
    # The worker fetches a batch, then dies without acking or handing it back (kill -9):
    # another replica gets it after the short ack_wait, and the ack floor moves on.
    tuning = Tuning(ack_wait_s=0.6)
    for n in range(1, 4):
        last = await log.publish(n)
    dead = await log.start(Recorder(log.nc, log.js, tuning), run=False)
    assert [m.metadata.sequence.stream for m in await dead.fetch()] == [1, 2, 3]
    survivor = await log.start(Recorder(log.nc, log.js, tuning))
    await until(lambda: survivor.counters.acked == 3)
    assert survivor.deliveries == [(1, 2), (2, 2), (3, 2)]
    await until(lambda: _floor_is(log, last))


@dataclass
class Decoded:
    tenant: str
    event: int | None = None
    problem: str = ""


async def test_apply_decoded_poisons_the_undecodable_and_applies_the_rest(log: Log) -> None:
    worker = Recorder(log.nc, log.js, Tuning())
    seen: list[list[int]] = []

    async def apply(events: list[int]) -> list[Result]:
        seen.append(events)
        verdicts = {1: Result(Outcome.APPLIED), 2: Result(Outcome.RETRY, "odd one", "graph", 3)}
        return [verdicts.get(e, Result(Outcome.POISON, "refused", "vector")) for e in events]

    decoded = [
        Decoded("t1", 1),
        Decoded("t2", problem="garbage"),
        Decoded("t3", 2),
        Decoded("t4", 3),
    ]
    assert await worker.apply_decoded(decoded, apply) == [
        Settlement(Outcome.APPLIED, "", "t1"),
        Settlement(Outcome.POISON, "garbage", "t2"),
        Settlement(Outcome.RETRY, "odd one", "t3", "graph", 3),
        Settlement(Outcome.POISON, "refused", "t4", "vector"),
    ]
    assert seen == [[1, 2, 3]]

    async def crash(events: list[int]) -> list[Result]:
        raise KeyError("bug")

    assert await worker.apply_decoded(decoded, crash) == [
        Settlement(Outcome.RETRY, "KeyError: 'bug'", "t1"),
        Settlement(Outcome.POISON, "garbage", "t2"),
        Settlement(Outcome.RETRY, "KeyError: 'bug'", "t3"),
        Settlement(Outcome.RETRY, "KeyError: 'bug'", "t4"),
    ]


async def _health(port: int, service: str) -> int:
    """The status the health service on ``port`` gives ``service``; -1 when nothing answers."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
        except grpc.aio.AioRpcError:
            return -1
        return int(reply.status)


async def test_run_worker_logs_ready_serves_health_and_stops_on_sigterm(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with connected(nats_server) as log:
        await log.publish(1)
    stopped: list[bool] = []
    workers: list[Recorder] = []

    def make(nc: Client, js: JetStreamContext) -> PullWorker:
        workers.append(Recorder(nc, js, Tuning()))
        return workers[0]

    async def on_stop() -> None:
        stopped.append(True)

    (port,) = free_ports(1)
    settings = WorkerSettings(nats=NatsSettings(url=nats_server.url), port=port)
    task = asyncio.create_task(run_worker("pulltest", settings, make, on_stop))
    await until(lambda: bool(workers) and workers[0].counters.acked == 1)
    serving = health_pb2.HealthCheckResponse.SERVING
    assert await _health(port, "engram-pulltest") == serving
    assert await _health(port, "") == serving
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # ours, not the default
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 10)
    assert await _health(port, "engram-pulltest") == -1  # the server is gone
    assert stopped == [True]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handed back
    messages = [r.getMessage() for r in caplog.records]
    assert f"engram-pulltest ready: consuming {STREAM} as {DURABLE} (batch 8)" in messages
    assert any(m.startswith("engram-pulltest stopping after") for m in messages)
    assert any(m.startswith("acked=1 retried=0 dead-lettered=0 batches=1") for m in messages)


async def test_settlements_batches_and_redeliveries_are_counted(
    log: Log, service_metrics: ServiceMetrics
) -> None:
    m, worker_ = service_metrics, {"worker": "pulltest"}

    def decide(msg: Msg) -> Settlement:
        seq, n = msg.metadata.sequence.stream, msg.metadata.num_delivered
        if seq == 2:
            return Settlement(Outcome.POISON, "refused", "t1", "lexical")
        if seq == 3 and n == 1:
            return Settlement(Outcome.RETRY, "not yet")
        return Settlement(Outcome.APPLIED)

    def counts() -> list[float]:
        return [
            m.value("engram.worker.events", outcome="acked", **worker_),
            m.value("engram.worker.events", outcome="retried", **worker_),
            m.value("engram.worker.events", outcome="dead_lettered", **worker_),
            m.value("engram.worker.dead_letters", store="lexical", **worker_),
            m.value("engram.worker.redeliveries", **worker_),
        ]

    before, batches = counts(), m.value("engram.worker.batch.size", **worker_)
    for n in range(1, 4):
        await log.publish(n)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(), decide))
    await until(lambda: worker.counters.acked == 2)
    moved = [after - b for after, b in zip(counts(), before, strict=True)]
    assert moved == [2, 1, 1, 1, 1]  # acked 1 and 3; 3 retried once; 2 dead-lettered
    assert m.value("engram.worker.batch.size", **worker_) - batches == len(worker.batches)


async def test_consumer_lag_is_read_in_the_background_and_only_observed_by_the_gauges(
    log: Log, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    for n in range(1, 4):
        await log.publish(n)
    worker = await log.start(Recorder(log.nc, log.js, Tuning(batch_size=1)), run=False)
    await worker.refresh_lag()
    assert m.value("engram.jetstream.consumer.pending", durable=DURABLE) == 3
    assert m.value("engram.jetstream.consumer.ack_pending", durable=DURABLE) == 0
    lag = worker_metrics.lag_of(DURABLE)
    assert lag is not None
    assert (lag.last_sequence, lag.ack_floor, lag.behind) == (3, 0, 3)

    (msg,) = await worker.fetch()
    await msg.ack()
    await until(lambda: _floor_is(log, 1))
    await worker.refresh_lag()
    assert m.value("engram.jetstream.consumer.pending", durable=DURABLE) == 2
    assert worker_metrics.lag_of(DURABLE) == worker_metrics.ConsumerLag(2, 0, 3, 1)
