"""Lanes: batches cut per key, each key's in order, keys side by side; the queues alone,
then a LanedWorker against a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from engram_core.outcomes import Outcome
from engram_platform import jetstream as jsm
from engram_platform.lanes import KeyedQueues, LanedWorker
from engram_platform.pull_worker import Settlement
from engram_platform.settings import NatsSettings
from engram_testing import waiting
from engram_testing.nats_server import NatsServer, start_nats
from engram_testing.processes import running_worker

STREAM = "LANETEST"
DURABLE = "lanetest-worker"

until = partial(waiting.until, timeout_s=15.0, interval_s=0.01)


def test_a_key_with_a_backlog_takes_one_batch_while_another_key_takes_the_next() -> None:
    queues: KeyedQueues[int] = KeyedQueues()
    for n in range(1, 1001):
        queues.add("a", n, n)
    queues.add("b", 1001, 1001)
    assert queues.take(64) == (["a"], list(range(1, 65)))
    # a is in flight: the next batch is b's, though 936 of a's were queued before it.
    assert queues.take(64) == (["b"], [1001])
    assert queues.take(64) == ([], [])
    queues.done(["a"])
    assert queues.take(64) == (["a"], list(range(65, 129)))
    assert len(queues) == 1000 - 128


def test_keys_take_turns_and_each_keys_items_keep_their_order() -> None:
    queues: KeyedQueues[str] = KeyedQueues()
    for n in range(6):
        queues.add("a", n, f"a{n}")
    queues.add("b", 100, "b0")
    queues.add("c", 101, "c0")
    assert queues.take(2) == (["a"], ["a0", "a1"])
    queues.done(["a"])  # a waits behind b and c now
    assert queues.take(3) == (["b", "c", "a"], ["b0", "c0", "a2"])
    queues.done(["b", "c", "a"])
    assert queues.take(3) == (["a"], ["a3", "a4", "a5"])


def test_a_redelivered_item_replaces_its_queued_copy_in_place() -> None:
    queues: KeyedQueues[str] = KeyedQueues()
    queues.add("a", 1, "first delivery of 1")
    queues.add("a", 2, "2")
    queues.add("a", 1, "second delivery of 1")
    assert len(queues) == 2
    assert queues.take(10) == (["a"], ["second delivery of 1", "2"])


def test_an_item_redelivered_late_goes_before_the_later_ones_read_ahead() -> None:
    # A dead replica's batch (3, 4) comes back after ack_wait, behind 5..9 read since.
    queues: KeyedQueues[int] = KeyedQueues()
    for n in (5, 6, 7, 8, 9, 3, 4):
        queues.add("a", n, n)
    assert queues.take(4) == (["a"], [3, 4, 5, 6])


def test_clear_returns_what_is_queued_and_leaves_nothing_to_take() -> None:
    queues: KeyedQueues[int] = KeyedQueues()
    for n in range(5):
        queues.add(str(n % 2), n, n)
    keys, taken = queues.take(1)
    assert sorted(queues.clear()) == sorted({0, 1, 2, 3, 4} - set(taken))
    assert len(queues) == 0
    assert not queues.ready
    queues.done(keys)
    assert queues.take(10) == ([], [])


@dataclass(frozen=True)
class Tuning:
    batch_size: int = 8
    fetch_timeout_s: float = 0.2
    batch_wait_s: float = 0.01
    ack_wait_s: float = 30.0
    max_ack_pending: int = 5000
    retry_base_s: float = 0.05
    retry_max_s: float = 0.2
    progress_interval_s: float = 60.0
    lanes: int = 3
    read_ahead: int = 2000


class Recorder(LanedWorker):
    """Takes ``hold_s`` over each batch; records the batches and which keys overlapped."""

    def __init__(self, nc: Client, js: JetStreamContext, tuning: Tuning, hold_s: float) -> None:
        super().__init__(nc, js, "lanetest", STREAM, DURABLE, tuning)
        self.hold_s = hold_s
        self.batches: list[list[tuple[str, int]]] = []  # (key, sequence), batch by batch
        self.active: list[str] = []
        self.overlaps = 0  # batches started while a batch of the same key was in flight
        self.most_active = 0  # most keys in flight at once
        self.deliveries: list[int] = []

    def lane_key(self, msg: Msg) -> str:
        return msg.subject.split(".")[1]

    async def handle(self, msgs: Sequence[Msg]) -> list[Settlement]:
        keys = {self.lane_key(m) for m in msgs}
        self.overlaps += len(keys & set(self.active))
        self.active += keys
        self.most_active = max(self.most_active, len(self.active))
        self.batches.append([(self.lane_key(m), m.metadata.sequence.stream) for m in msgs])
        self.deliveries += [m.metadata.num_delivered for m in msgs]
        await asyncio.sleep(self.hold_s)
        for key in keys:
            self.active.remove(key)
        return [Settlement(Outcome.APPLIED, tenant=self.lane_key(m)) for m in msgs]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc, js = await jsm.connect(NatsSettings(url=nats_server.url), "lanetest")
    await jsm.ensure_streams(js, NatsSettings(url=nats_server.url))  # the dead-letter stream
    await js.add_stream(StreamConfig(name=STREAM, subjects=["lanetest.*"]))
    yield js
    await nc.drain()


async def publish(js: JetStreamContext, key: str, count: int) -> None:
    for _ in range(count):
        await js.publish(f"lanetest.{key}", b"job")


@asynccontextmanager
async def running(
    server: NatsServer, tuning: Tuning, hold_s: float = 0.02
) -> AsyncIterator[Recorder]:
    def make(nc: Client, js: JetStreamContext) -> Recorder:
        return Recorder(nc, js, tuning, hold_s)

    async with running_worker(NatsSettings(url=server.url), make, "lanetest") as worker:
        yield worker


def done(worker: Recorder, key: str) -> int:
    return sum(1 for batch in worker.batches for k, _ in batch if k == key)


async def test_a_backlog_of_one_key_does_not_hold_another_keys_event(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    await publish(js, "a", 400)
    await publish(js, "b", 1)  # logged behind all of a's
    async with running(nats_server, Tuning()) as worker:
        await until(lambda: done(worker, "b") == 1)
        a_before_b = done(worker, "a")
        await until(lambda: done(worker, "a") == 400)
    # In log order b's event would come after all 400; beside them it waits for a few
    # of a's batches at most (those started while the worker read ahead).
    assert a_before_b <= 400 // 4


async def test_each_keys_events_are_handled_in_log_order_one_batch_at_a_time(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    for _ in range(20):
        for key, count in (("a", 9), ("b", 3), ("c", 1)):
            await publish(js, key, count)
    async with running(nats_server, Tuning(batch_size=4), hold_s=0.005) as worker:
        await until(lambda: sum(map(len, worker.batches)) == 260)
    for key in "abc":
        sequences = [s for batch in worker.batches for k, s in batch if k == key]
        assert sequences == sorted(sequences)
        assert len(sequences) == len(set(sequences))
    assert worker.overlaps == 0
    assert worker.most_active >= 2  # ...while keys did run side by side
    assert worker.counters.acked == 260


async def test_events_held_ahead_of_their_lane_are_kept_not_redelivered(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    await publish(js, "a", 40)
    # Forty events in batches of 8 on one lane at 0.5 s a batch: the last wait 2 s, over
    # three times ack_wait, held ahead of the lane.
    tuning = Tuning(lanes=1, ack_wait_s=0.6)
    async with running(nats_server, tuning, hold_s=0.5) as worker:
        await until(lambda: worker.counters.acked == 40)
    assert worker.deliveries == [1] * 40
    info = await js.consumer_info(STREAM, DURABLE)
    assert info.num_redelivered == 0


async def test_stop_hands_back_what_was_read_ahead_but_not_started(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    await publish(js, "a", 30)
    async with running(nats_server, Tuning(lanes=1), hold_s=0.3) as one:
        await until(lambda: len(one.batches) == 1)  # the rest is read ahead, waiting
    assert one.counters.acked == 8  # the batch in hand was finished
    async with running(nats_server, Tuning()) as two:
        await until(lambda: two.counters.acked == 22, timeout_s=5)  # not after ack_wait
    assert set(two.deliveries) == {2}


class Reader(Recorder):
    """Records what ``on_read`` was given, and when: before or after its batch started."""

    def __init__(self, *args: object, fail: bool = False) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.read_first: set[int] = set()  # read before any batch holding it was handled
        self.fail = fail

    def on_read(self, msgs: Sequence[Msg]) -> None:
        handled = {s for batch in self.batches for _, s in batch}
        self.read_first |= {m.metadata.sequence.stream for m in msgs} - handled
        if self.fail:
            raise RuntimeError("no head start today")


@pytest.mark.parametrize("fail", [False, True])
async def test_every_event_read_is_offered_ahead_of_its_batch_and_a_failure_only_logs(
    nats_server: NatsServer, js: JetStreamContext, fail: bool
) -> None:
    await publish(js, "a", 40)

    def make(nc: Client, js: JetStreamContext) -> Reader:
        return Reader(nc, js, Tuning(lanes=1), 0.02, fail=fail)

    async with running_worker(NatsSettings(url=nats_server.url), make, "lanetest") as worker:
        await until(lambda: worker.counters.acked == 40)
    assert worker.read_first == set(range(1, 41))
