"""Timeline neighbours of the best candidates: the input of scoring's ``context`` step. Pure.

In a conversation the turn that answers a question is often not the one that matches
it: "What did you paint?" matches, "A sunset over the lake" answers. So the memories
stored right before and after the best candidates are looked up (a filtered vector
search per time window around them, all in one call), put in timeline order — timestamp,
then id, which is a UUIDv7 and so the order of storing — and every candidate learns which
others lie within ``distance`` steps of it. Memories found that way next to a candidate
join the candidates; scoring then lets a candidate borrow from its best neighbour's score.

A window read is capped (``limit``) and ranked by the query, so a full one may leave out
memories in between, and two memories read next to each other need not be neighbours. Its
seeds' windows are read again, ``NARROWING`` times narrower, up to ``NARROWINGS`` times
(``reads.Reader._windows``); a window still full is not used.

Where many agents write to one tenant at once, the memory stored just before another may be
of another conversation. With ``thread`` (``CONTEXT__THREAD``, e.g. ``tag:session``) each
thread has its own timeline: memories are neighbours only within one (those without the
key share one).

In a conversation the turn around a hit often holds the answer, which is why the step
exists (its measured worth: services/gateway/README.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import pairwise

from engram_core.model import Filter, Memory
from engram_core.scoring import Candidate
from engram_gateway.service.postrank import GroupBy


@dataclass(frozen=True, slots=True)
class ContextConfig:
    seeds: int = 5  # best candidates (by the default formula) whose neighbourhood is read
    distance: int = 2  # neighbours up to this many steps away on the timeline
    window_s: float = 3600.0  # read this far either side of a seed's timestamp
    limit: int = 64  # most memories read per window
    thread: GroupBy | None = None  # one timeline per thread; None: the tenant's one

    def __post_init__(self) -> None:
        if self.seeds < 0 or self.distance < 1 or self.window_s < 0 or self.limit < 1:
            raise ValueError(f"bad context settings: {self}")


Window = tuple[datetime, datetime]

NARROWING = 16  # a full window's seeds are read again this many times narrower…
NARROWINGS = 2  # …at most this many times (3600 s → 225 s → 14 s)


def seed_windows(seeds: Sequence[Memory], window_s: float) -> list[Window]:
    """Time windows around the seeds' timestamps, overlapping ones merged."""
    span = timedelta(seconds=window_s)
    spans = sorted((m.timestamp - span, m.timestamp + span) for m in seeds)
    merged: list[Window] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def inside(memories: Iterable[Memory], windows: Sequence[Window]) -> list[Memory]:
    """The memories whose timestamp lies in one of ``windows``."""
    return [m for m in memories if any(s <= m.timestamp <= e for s, e in windows)]


def window_filter(flt: Filter, window: Window) -> Filter | None:
    """The request's filter narrowed to ``window``; None when nothing of it is left."""
    start = window[0] if flt.start is None else max(flt.start, window[0])
    end = window[1] if flt.end is None else min(flt.end, window[1])
    return None if start > end else replace(flt, start=start, end=end)


def _timelines(
    windows: Iterable[Sequence[Memory]], thread: GroupBy | None
) -> Iterator[list[Memory]]:
    """Each window's memories once each, in the order of storing (timestamp, then id): a
    timeline per window, or per window and ``thread`` key (memories without one share one)."""
    for found in windows:
        line = sorted({m.id: m for m in found}.values(), key=lambda m: (m.timestamp, m.id))
        if thread is None:
            yield line
            continue
        threads: dict[str | None, list[Memory]] = {}
        for m in line:
            threads.setdefault(thread.key(m), []).append(m)
        yield from threads.values()


def with_neighbours(
    candidates: Sequence[Candidate],
    windows: Iterable[Sequence[Memory]],
    distance: int,
    thread: GroupBy | None = None,
) -> list[Candidate]:
    """The candidates, plus window memories within ``distance`` of one, each carrying the
    other candidates within ``distance`` of it (the nearest distance when windows overlap).

    A memory found in a window but farther than ``distance`` from every candidate stays out:
    it has nothing to borrow from.
    """
    by_id = {c.memory.id: c for c in candidates}
    added: dict[str, Candidate] = {}
    near: dict[str, dict[str, int]] = {}
    for line in _timelines(windows, thread):
        at = [i for i, m in enumerate(line) if m.id in by_id]
        keep = {
            j for i in at for j in range(max(0, i - distance), min(len(line), i + distance + 1))
        }
        for j in sorted(keep):
            m = line[j]
            if m.id not in by_id and m.id not in added:
                added[m.id] = Candidate(memory=m)
        for i in sorted(keep):
            for j in sorted(keep):
                if i != j and abs(i - j) <= distance:
                    mine = near.setdefault(line[i].id, {})
                    other = line[j].id
                    mine[other] = min(mine.get(other, distance), abs(i - j))
    out = [*candidates, *added.values()]
    return [replace(c, neighbours=near[c.memory.id]) if c.memory.id in near else c for c in out]


def preceding(
    memories: Iterable[Memory],
    windows: Iterable[Sequence[Memory]],
    thread: GroupBy | None = None,
) -> dict[str, Memory]:
    """For each of ``memories`` found in a window, the memory stored just before it there
    (in its thread, with ``thread``).

    A conversation's turn often answers the turn before it ("So what's your favorite game?"
    — "Yep! I'm playing Xenoblade"), so the reranker reads the two together. A memory first
    on its window's timeline has none.
    """
    wanted = {m.id for m in memories}
    before: dict[str, Memory] = {}
    for line in _timelines(windows, thread):
        for prev, m in pairwise(line):
            if m.id in wanted and m.id not in before:
                before[m.id] = prev
    return before
