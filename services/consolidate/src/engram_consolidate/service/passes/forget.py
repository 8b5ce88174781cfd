"""Forget: archive, then (on a later pass) delete unprotected memories whose relevance has
fallen below the thresholds (engram_core.forgetting; both off by default).

The score is the fresh one at the run's ``now`` (the decay formula), never the stored
one, which may be stale or never written. Archive and delete are events on the log, as
the gateway's Update and Delete publish them, so every store converges, versions and
tombstones hold, and a rebuild replays them: archive = ``MemoryUpdated`` of the whole
memory with ``archived = true``, ``updated_at = now`` (mask ``archived``); delete =
``MemoryDeleted``. Like the gateway's Update, the event carries the memory as read, so a
user edit landing between the page read and the publish would be reverted.

Resume: a memory this run archived has ``updated_at = now`` and is protected
(``recently_updated``); if ingest has not applied it yet, the same decision republishes
the same event id, which the log drops. Either way it is counted once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.passes.decay import DecayPass
from engram_consolidate.service.records import PassName
from engram_core.forgetting import Action, ForgetSettings, decide
from engram_core.model import Memory
from engram_core.relevance import DecaySettings

SCAN = "scan"
ARCHIVED = "archived"
DELETED = "deleted"
OFF = "thresholds_off"


class ForgetPass(Pass):
    name = PassName.FORGET
    phases = (SCAN,)

    def __init__(self, stores: Stores, decay: DecaySettings, settings: ForgetSettings) -> None:
        super().__init__(stores)
        self.settings = settings
        self._scores = DecayPass(stores, decay)

    async def total(self, run: Run, phase: str) -> int:
        if self.settings.archive_below is None:
            return 0
        return await self.stores.bounded(self.stores.vector.count(run.tenant), "vector count")

    async def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        if self.settings.archive_below is None:  # delete_below needs it: nothing can change
            run.tally.add(OFF, count=0)
            yield Step(None, 0)
            return
        async for memories, after in self.stores.pages(run.tenant, cursor):
            await self.page(run, memories)
            yield Step(after, len(memories))

    async def page(self, run: Run, memories: list[Memory]) -> None:
        scores = await self._scores.fresh_scores(run, memories)
        publish: list[Callable[[], Awaitable[bool]]] = []
        for m in memories:
            decision = decide(m, scores[m.id], run.now, self.settings)
            if decision.action is Action.ARCHIVE:
                archived = replace(m, archived=True, updated_at=run.now)
                publish.append(self._archive(run, archived))
                run.tally.add(ARCHIVED, [m.id])
            elif decision.action is Action.DELETE:
                publish.append(self._delete(run, m.id))
                run.tally.add(DELETED, [m.id])
        if publish and not run.dry_run:
            await self.stores.all(publish, "publish forget")

    def _archive(self, run: Run, memory: Memory) -> Callable[[], Awaitable[bool]]:
        event_id = run.event_id(memory.id, "archive")
        return lambda: self.stores.events.updated(run.tenant, memory, ["archived"], event_id)

    def _delete(self, run: Run, id_: str) -> Callable[[], Awaitable[bool]]:
        event_id = run.event_id(id_, "delete")
        return lambda: self.stores.events.deleted(run.tenant, id_, event_id)
