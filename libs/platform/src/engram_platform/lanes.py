"""A pull worker whose batches are cut per key (a tenant) and run on concurrent lanes.

The log delivers in stream order, so a worker that handles what it fetched batch after
batch makes every tenant wait behind whatever any tenant logged first. ``LanedWorker``
instead reads ahead (up to ``read_ahead`` events held, all kept in progress), queues
what it holds by key, and runs up to ``lanes`` batches at once. A key never has two
batches in flight and its events are handed out in the order they arrived, so each
tenant's events are still applied one batch after another, in log order; keys with
events waiting take turns for a free lane, so a key with a backlog holds at most one
lane while another's single event is taken up by the next lane that frees.

What is settled and how is the pull worker's (``process``): an event is acked only once
decided, so the durable's ack floor keeps its meaning whatever order the lanes finish in.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram_platform.pull_worker import PullSettings, PullWorker

T = TypeVar("T")


class LaneSettings(PullSettings, Protocol):
    @property
    def lanes(self) -> int: ...
    @property
    def read_ahead(self) -> int: ...


class KeyedQueues(Generic[T]):
    """Held items by key, each key's in order of position (a log sequence: an event
    redelivered after a retry or a dead replica's ack_wait goes before the later events
    read ahead of it, not behind them; a second copy of one queued replaces the first).
    ``take`` hands out a batch of keys that have nothing in flight, in turn; ``done``
    frees them for their next batch."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue[T]] = {}
        self._turns: deque[str] = deque()  # keys with items queued and none in flight
        self._busy: set[str] = set()
        self._count = 0

    def __len__(self) -> int:
        """Items queued (in flight ones excluded)."""
        return self._count

    def __iter__(self) -> Iterator[T]:
        for queue in self._queues.values():
            yield from queue.items.values()

    @property
    def ready(self) -> bool:
        return bool(self._turns)

    def add(self, key: str, position: int, item: T) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
            if key not in self._busy:
                self._turns.append(key)
        self._count += queue.put(position, item)

    def take(self, limit: int) -> tuple[list[str], list[T]]:
        """Up to ``limit`` items: the whole queue of each key whose turn it is, in turn,
        the last one cut at the limit. The keys are in flight until ``done``."""
        keys: list[str] = []
        items: list[T] = []
        while self._turns and len(items) < limit:
            key = self._turns.popleft()
            queue = self._queues[key]
            items += queue.pop(limit - len(items))
            if not queue.items:
                del self._queues[key]
            keys.append(key)
            self._busy.add(key)
        self._count -= len(items)
        return keys, items

    def done(self, keys: Sequence[str]) -> None:
        """The batch of ``keys`` is settled: each with items queued takes its turn again,
        after the keys already waiting."""
        for key in keys:
            self._busy.discard(key)
            if key in self._queues:
                self._turns.append(key)

    def clear(self) -> list[T]:
        """Everything queued, removed (for a hand-back); what is in flight stays in flight."""
        items = list(self)
        self._queues.clear()
        self._turns.clear()
        self._count = 0
        return items


class _Queue(Generic[T]):
    """One key's items by position, the lowest first."""

    def __init__(self) -> None:
        self.items: dict[int, T] = {}
        self._order: list[int] = []  # a heap of the positions in items

    def put(self, position: int, item: T) -> int:
        """1 when the position is new, 0 when its item is replaced."""
        new = position not in self.items
        if new:
            heapq.heappush(self._order, position)
        self.items[position] = item
        return int(new)

    def pop(self, limit: int) -> list[T]:
        return [
            self.items.pop(heapq.heappop(self._order)) for _ in range(min(limit, len(self.items)))
        ]


class LanedWorker(PullWorker):
    """A ``PullWorker`` that reads ahead and runs batches of different keys on lanes."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        name: str,
        stream: str,
        durable: str,
        settings: LaneSettings,
    ) -> None:
        super().__init__(nc, js, name, stream, durable, settings)
        self._lanes = settings.lanes
        self._read_ahead = settings.read_ahead
        self._queued: KeyedQueues[Msg] = KeyedQueues()
        self._in_flight = 0
        self._changed = asyncio.Condition()

    def lane_key(self, msg: Msg) -> str:
        """Which events must be applied one batch after another (the tenant, say)."""
        return ""

    def on_read(self, msgs: Sequence[Msg]) -> None:
        """Called with every fetch's events once they are queued, before their batch's
        turn: work that does not depend on the apply order can start here."""
        return

    async def run(self, stop: asyncio.Event) -> None:
        """Read ahead and run the lanes until stop is set; the batches in flight are always
        finished first, and what is held but not started is handed back."""
        progress = asyncio.create_task(self._report_progress(stop))
        keeper = asyncio.create_task(self._keep_queued_in_hand())
        lanes = [asyncio.create_task(self._lane(stop)) for _ in range(self._lanes)]
        try:
            await self._read(stop)
        finally:
            if not stop.is_set():  # cancelled or failed: nothing would end the lanes
                for lane in lanes:
                    lane.cancel()
            async with self._changed:
                self._changed.notify_all()
            await asyncio.gather(*lanes, return_exceptions=True)
            keeper.cancel()
            await self._hand_back(self._queued.clear())
            await self._wind_down(progress)

    async def _read(self, stop: asyncio.Event) -> None:
        """Fetch while fewer than ``read_ahead`` events are held, and queue them by key."""
        while not stop.is_set():
            room = self._read_ahead - len(self._queued) - self._in_flight
            if room <= 0:
                # Woken when a lane settles; the timeout rechecks stop.
                with contextlib.suppress(TimeoutError):
                    async with self._changed:
                        await asyncio.wait_for(self._changed.wait(), self._settings.fetch_timeout_s)
                continue
            try:
                msgs = await self.fetch(min(room, self._settings.batch_size * self._lanes))
            except TimeoutError:
                continue
            except Exception:
                # The connection reconnects by itself; unacked events come back.
                self.log.exception("%s fetch failed; retrying in a moment", self._name)
                await asyncio.sleep(min(1.0, self._settings.fetch_timeout_s))
                continue
            if msgs:
                for msg in msgs:
                    self._queued.add(self.lane_key(msg), msg.metadata.sequence.stream, msg)
                try:
                    self.on_read(msgs)
                except Exception:  # only a head start is lost: the batches run as they are
                    self.log.exception("%s: work ahead of the events read failed", self._name)
                async with self._changed:
                    self._changed.notify_all()

    async def _lane(self, stop: asyncio.Event) -> None:
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self._queued.ready or stop.is_set())
                if stop.is_set():
                    return
                keys, msgs = self._queued.take(self._settings.batch_size)
                self._in_flight += len(msgs)
            try:
                await self.process(msgs)
            except Exception:
                # Unsettled: the log redelivers them after ack_wait.
                self.log.exception("%s batch failed", self._name)
            finally:
                async with self._changed:
                    self._in_flight -= len(msgs)
                    self._queued.done(keys)
                    self._changed.notify_all()

    async def _keep_queued_in_hand(self) -> None:
        """Mark what waits for a lane in progress every third of ack_wait, as ``process``
        does for a batch in flight: read ahead is kept, not redelivered."""
        while True:
            await asyncio.sleep(self._settings.ack_wait_s / 3)
            try:
                for msg in list(self._queued):
                    await msg.in_progress()
            except Exception as exc:  # the connection is down: redelivery is then harmless
                self.log.debug("in-progress for the events held failed: %s", exc)
