"""What every pass shares: the run it works for, the steps it reports, the stores it reads
and writes, and deterministic event ids.

A pass is a few phases; a phase is an async iterator of ``Step``s. A step is reported
after its writes are done, so the runner's checkpoint after it never claims more than
happened: a crash redoes at most the step in flight, and every write of a step is
idempotent (a score set twice is the same score; an event id repeats, so the log drops
the second copy).
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from engram_consolidate.service.ports import (
    ChangeMarks,
    EventSink,
    GraphStore,
    RelevanceWriter,
    VectorStore,
)
from engram_consolidate.service.records import Key, PassName, Tally
from engram_core.errors import DeadlineExceeded
from engram_core.model import Memory, Relation, RelevanceUpdate

T = TypeVar("T")

# Fixed forever: ids of events the worker publishes are derived from it, so a republished
# event (same run, same change) carries the same Nats-Msg-Id and the log drops it.
EVENT_NAMESPACE = uuid.UUID("5a0c9e44-2f6b-4c1d-8e3a-71d9b6f0c2a5")


@dataclass(frozen=True, slots=True)
class Step:
    """Reported after a step's writes: ``cursor`` resumes the phase after it ("" = from the
    start, for phases that cannot resume midway; None = the phase is finished)."""

    cursor: str | None
    items: int  # items of the phase this step finished (0: a heartbeat)
    total: int | None = None  # the phase's total, when the pass learns it
    params: str | None = None  # the run's new params (what it learnt), saved with the step


@dataclass(slots=True)
class Run:
    key: Key
    run_id: str
    now: datetime  # fixed for the run: a resumed run computes what the first would have
    tally: Tally
    params: str = ""  # the request's parameters and what the run learnt (JSON, the pass's)

    @property
    def tenant(self) -> str:
        return self.key.tenant

    @property
    def dry_run(self) -> bool:
        return self.key.dry_run

    def event_id(self, *parts: str) -> str:
        """The id (and log dedupe key) of an event this run publishes for ``parts``."""
        name = "\x1f".join((self.tenant, self.run_id, self.key.pass_name.value, *parts))
        return str(uuid.uuid5(EVENT_NAMESPACE, name))


@dataclass(frozen=True, slots=True)
class Stores:
    """The ports every pass uses, with one deadline per call."""

    vector: VectorStore
    lexical: RelevanceWriter
    graph: GraphStore
    events: EventSink
    timeout_s: float = 10.0
    page_size: int = 256
    publish_concurrency: int = 64
    read_chunk: int = 100  # ids per get/relations call, each with its own deadline
    marks: ChangeMarks | None = None  # the log's positions and what was written between

    async def all(self, calls: Sequence[Callable[[], Awaitable[object]]], what: str) -> None:
        """Run ``calls`` (e.g. a page's publishes) ``publish_concurrency`` at a time, each
        with the deadline; the first failure is raised once all have settled."""
        gate = asyncio.Semaphore(self.publish_concurrency)

        async def one(call: Callable[[], Awaitable[object]]) -> None:
            async with gate:
                await self.bounded(call(), what)

        outcomes = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def bounded(self, awaitable: Awaitable[T], what: str) -> T:
        try:
            return await asyncio.wait_for(awaitable, self.timeout_s)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"{what} took longer than {self.timeout_s}s") from exc

    async def pages(
        self, tenant: str, cursor: str
    ) -> AsyncIterator[tuple[list[Memory], str | None]]:
        """The tenant's memories a page at a time from ``cursor`` ("" = the start), each
        with the cursor after it (None after the last)."""
        at: str | None = cursor or None
        while True:
            page = await self.bounded(self.vector.scan(tenant, at, self.page_size), "vector scan")
            yield page.memories, page.next_cursor
            if page.next_cursor is None or (not page.memories and page.next_cursor == at):
                return
            at = page.next_cursor

    def _chunks(self, ids: Sequence[str]) -> list[list[str]]:
        wanted = list(dict.fromkeys(ids))
        return [wanted[i : i + self.read_chunk] for i in range(0, len(wanted), self.read_chunk)]

    async def get(self, tenant: str, ids: Sequence[str]) -> dict[str, Memory]:
        out: dict[str, Memory] = {}
        for chunk in self._chunks(ids):
            got = await self.bounded(self.vector.get(tenant, chunk), "vector get")
            out.update((m.id, m) for m in got)
        return out

    async def relations(self, tenant: str, ids: Sequence[str]) -> list[Relation]:
        """The graph's edges touching ``ids`` (an edge between two chunks comes twice; the
        rules that read them count an edge once)."""
        out: list[Relation] = []
        for chunk in self._chunks(ids):
            out += await self.bounded(self.graph.relations(tenant, chunk), "graph relations")
        return out

    async def write_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> None:
        """Lexical and graph first, then vector: the store the passes read is written last,
        so after a failure a retry reads the old score and writes the same values again."""
        outcomes = await asyncio.gather(
            self.bounded(self.lexical.update_relevance(tenant, updates), "lexical relevance"),
            self.bounded(self.graph.update_relevance(tenant, updates), "graph relevance"),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await self.bounded(self.vector.update_relevance(tenant, updates), "vector relevance")


class Pass(ABC):
    """One pass over one tenant. A new instance per run: phases may keep state in it (a
    phase that needs another's state rebuilds it when resumed in a new process)."""

    name: PassName
    phases: tuple[str, ...]

    def __init__(self, stores: Stores) -> None:
        self.stores = stores

    def resumable(self, phase: str) -> bool:
        """Whether a checkpointed cursor of ``phase`` may be resumed (else: from its start)."""
        return True

    async def total(self, run: Run, phase: str) -> int:
        """Items of ``phase`` when it starts (0: learnt later from a step, or unknown)."""
        return 0

    @abstractmethod
    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        """Do ``phase`` from ``cursor`` ("" = its start), reporting after each step."""
