"""Embeds memories' contents as they are read ahead, so the model never waits on the stores.

A tenant's batches are applied one after another: its upserts, its acks, then its next
batch. With the model called inside the apply, the model sits idle while the stores write
and the log acks, and one tenant's backlog loads at the model's speed times the share of
the time it runs. The worker instead ``offer``s what it reads ahead; one background task
embeds it in log order, a batch at a time, at most ``limit`` vectors ahead of the applies;
the applier ``take``s its batch's vectors (waiting for those being embedded) and embeds
only what was not offered or not started yet.

Embedding early changes only which contents share a model call (an int8 model's vectors
move slightly with their batch companions, as they did with the applier's own batches);
the apply order, the acks and the retries stay the applier's. What is held is keyed by log
sequence and checked against the content; a vector embedded by an embedder that is no
longer the applier's (switched to ``next_embed``) is not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from engram_core.ports import Embedder
from engram_ingest.service.metrics import timed

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Entry:
    content: str
    vector: asyncio.Future[list[float]] = field(default_factory=asyncio.Future)
    embedder: Embedder | None = None  # set when its embedding starts


class EmbedAhead:
    """Vectors of offered contents by log sequence, embedded in the background."""

    def __init__(
        self,
        embedder_of: Callable[[], Embedder],
        batch: int,
        limit: int,
        timeout_s: float,
        held_max: int,
    ) -> None:
        if batch < 1 or limit < batch:
            raise ValueError("batch must be at least 1 and limit at least batch")
        self._embedder_of = embedder_of  # the applier's embedder of the moment
        self._batch = batch
        self._limit = limit  # most vectors embedded or being embedded and not yet taken
        self._timeout_s = timeout_s
        self._held_max = held_max  # most entries held: the oldest go first beyond it
        self._held: dict[int, _Entry] = {}  # insertion order is log order
        self._waiting: deque[int] = deque()  # sequences not started, in order offered
        self._ahead = 0  # entries started and not yet taken
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._held)

    def offer(self, items: Iterable[tuple[int, str]]) -> None:
        """Embed these (log sequence, content) in the background; a sequence already held
        (a redelivery) is kept as it is."""
        for sequence, content in items:
            if sequence in self._held:
                continue
            self._held[sequence] = _Entry(content)
            self._waiting.append(sequence)
        while len(self._held) > self._held_max:
            self._drop(next(iter(self._held)))
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="embed-ahead")
        self._wake.set()

    async def take(self, embedder: Embedder, wanted: Mapping[int, str]) -> dict[int, list[float]]:
        """The vectors by ``embedder`` of the (sequence → content) wanted that were offered
        and started; each is taken once. What is missing here the caller embeds itself."""
        started: dict[int, _Entry] = {}
        for sequence, content in wanted.items():
            entry = self._held.get(sequence)
            if entry is None or entry.content != content:
                continue
            if entry.embedder is None:  # not started: the caller's own call is sooner
                self._drop(sequence)
            else:
                started[sequence] = entry
        vectors: dict[int, list[float]] = {}
        for sequence, entry in started.items():
            with contextlib.suppress(Exception):  # failed or cut off: embedded again
                vector = await asyncio.wait_for(asyncio.shield(entry.vector), self._timeout_s)
                if entry.embedder is embedder:
                    vectors[sequence] = vector
            self._drop(sequence)
        return vectors

    def discard(self, sequences: Iterable[int]) -> None:
        """Forget these sequences (their batch is settled), taken or not."""
        for sequence in sequences:
            self._drop(sequence)

    async def close(self) -> None:
        self._closed = True  # wait_for may swallow the cancel when its call just ended
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for sequence in list(self._held):
            self._drop(sequence)

    def _drop(self, sequence: int) -> None:
        entry = self._held.pop(sequence, None)
        if entry is None:
            return
        if entry.embedder is not None:
            self._ahead -= 1
            self._wake.set()
        if not entry.vector.done():
            entry.vector.cancel()

    def _next_batch(self) -> list[tuple[int, _Entry]]:
        room = min(self._batch, self._limit - self._ahead)
        batch: list[tuple[int, _Entry]] = []
        while self._waiting and len(batch) < room:
            sequence = self._waiting.popleft()
            entry = self._held.get(sequence)
            if entry is not None and entry.embedder is None:
                batch.append((sequence, entry))
        return batch

    async def _run(self) -> None:
        while not self._closed:
            batch = self._next_batch()
            if not batch:
                self._wake.clear()
                await self._wake.wait()
                continue
            embedder = self._embedder_of()
            for _, entry in batch:
                entry.embedder = embedder
            self._ahead += len(batch)
            await self._embed(embedder, [e for _, e in batch])

    async def _embed(self, embedder: Embedder, entries: list[_Entry]) -> None:
        try:
            vectors = await asyncio.wait_for(
                timed("embedding", "embed", embedder.embed([e.content for e in entries])),
                self._timeout_s,
            )
            if len(vectors) != len(entries):
                raise ValueError(f"{len(vectors)} vectors for {len(entries)} texts")
        except Exception as exc:  # the applier embeds these again and classifies a failure
            log.debug("embedding ahead failed: %s", exc)
            for entry in entries:
                if not entry.vector.done():
                    entry.vector.set_exception(exc)
                    entry.vector.exception()  # retrieved: no "never retrieved" warning
            return
        for entry, vector in zip(entries, vectors, strict=True):
            if not entry.vector.done():
                entry.vector.set_result(vector)
