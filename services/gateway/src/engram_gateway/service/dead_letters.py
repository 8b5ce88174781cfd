"""Dead letters of one tenant: list them, replay them (AdminService).

A worker copies an event it cannot apply to the dead-letter stream and moves on; these are
the copies. Replay puts a copy back on its original subject under a new event id, and
deletes the copy only once the log has acknowledged the republished event: a failure in
between leaves the letter in place, and the replay id, derived from the letter, makes a
retried replay a duplicate the log swallows rather than a second event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from engram_core.errors import InvalidArgument, NotFound
from engram_gateway.service.deadline import Deadline

log = logging.getLogger(__name__)

DEFAULT_PAGE, MAX_PAGE = 100, 1000
MAX_SEQUENCES = 1000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    sequence: int  # in the dead-letter stream
    event: str
    original_subject: str
    original_stream: str
    original_sequence: int
    reason: str
    store: str  # the store that refused it; "" when not known (e.g. it did not decode)
    deliveries: int
    at: datetime | None
    memory_id: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    letters: tuple[DeadLetter, ...]
    next_after: int  # 0: no more


@dataclass(frozen=True, slots=True)
class Replayed:
    sequence: int
    new_sequence: int


@dataclass(frozen=True, slots=True)
class Replay:
    replayed: tuple[Replayed, ...]
    failed: tuple[tuple[int, str], ...]  # (sequence, reason)
    remaining: int = 0  # "all": letters not reached within the deadline


class DeadLetterLog(Protocol):
    async def page(self, tenant: str, after: int, limit: int) -> list[DeadLetter]:
        """The tenant's letters with sequences above ``after``, oldest first."""
        ...

    async def republish(self, tenant: str, sequence: int) -> int:
        """Put letter ``sequence`` of ``tenant`` back on its original subject; the new
        event's sequence once the log has it. NotFound: no such letter of the tenant."""
        ...

    async def delete(self, sequence: int) -> None: ...

    async def dead_letters(self, tenant: str) -> int:
        """How many letters the tenant has."""
        ...


class DeadLetters:
    def __init__(self, letters: DeadLetterLog, backend_timeout_s: float) -> None:
        self._letters = letters
        self._timeout = backend_timeout_s

    async def listing(self, tenant: str, after: int, page_size: int) -> DeadLetterPage:
        if page_size < 0 or page_size > MAX_PAGE:
            raise InvalidArgument("page_size", f"0..{MAX_PAGE} (0: {DEFAULT_PAGE})")
        limit = page_size or DEFAULT_PAGE
        # One more than the page says whether another page follows.
        got = await self._letters.page(tenant, after, limit + 1)
        page = tuple(got[:limit])
        return DeadLetterPage(page, page[-1].sequence if len(got) > limit else 0)

    async def replay(self, tenant: str, sequences: Sequence[int], deadline: Deadline) -> Replay:
        """Replay the named letters, or all the tenant's (page by page until the deadline
        is near) when none is named."""
        if len(sequences) > MAX_SEQUENCES:
            raise InvalidArgument("sequences", f"at most {MAX_SEQUENCES} per call")
        for i, s in enumerate(sequences):
            if s <= 0:
                raise InvalidArgument(f"sequences[{i}]", "a dead-letter sequence (> 0)")
        if sequences:
            done, failed = await self._replay_each(tenant, list(dict.fromkeys(sequences)))
            return Replay(tuple(done), tuple(failed))
        return await self._replay_all(tenant, deadline)

    async def _replay_all(self, tenant: str, deadline: Deadline) -> Replay:
        """The letters there are when it starts: one replayed and refused again comes back
        as a new letter, which this call does not take up again."""
        total = await self._letters.dead_letters(tenant)
        done: list[Replayed] = []
        failed: list[tuple[int, str]] = []
        after = handled = 0
        while handled < total:
            if handled and deadline.remaining() < self._timeout:
                break
            page = await self._letters.page(tenant, after, min(DEFAULT_PAGE, total - handled))
            if not page:  # fewer than counted: deleted meanwhile
                handled = total
                break
            ok, bad = await self._replay_each(tenant, [letter.sequence for letter in page])
            done += ok
            failed += bad
            after = page[-1].sequence
            handled += len(page)
        return Replay(tuple(done), tuple(failed), max(0, total - handled))

    async def _replay_each(
        self, tenant: str, sequences: Sequence[int]
    ) -> tuple[list[Replayed], list[tuple[int, str]]]:
        done: list[Replayed] = []
        failed: list[tuple[int, str]] = []
        for seq in sequences:
            try:
                new = await self._letters.republish(tenant, seq)
            except NotFound:
                failed.append((seq, "not found"))
                continue
            except Exception as exc:  # this letter stays; the others still go
                log.warning("replay of dead letter %d failed: %s", seq, exc)
                failed.append((seq, f"republish failed: {exc}"))
                continue
            try:
                await self._letters.delete(seq)
            except Exception as exc:  # replayed, but kept: a second replay is a duplicate
                log.warning("dead letter %d replayed as %d but not deleted: %s", seq, new, exc)
                failed.append((seq, f"replayed as {new}, not deleted: {exc}"))
                continue
            done.append(Replayed(seq, new))
        return done, failed
