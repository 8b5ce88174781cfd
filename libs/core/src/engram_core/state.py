"""``state_mode`` for recall: which memories are *current*. Pure.

``StateMode.CURRENT`` (the default) hides a memory that is

* archived;
* not yet valid: ``t_valid`` after ``now``;
* expired: ``t_invalid`` at or before ``now`` (``t_invalid`` is the first instant it is no
  longer true, so a memory with ``t_valid == t_invalid`` is never current);
* superseded: the source of an ``INVALIDATED_BY`` or ``EVOLVED_INTO`` edge. Both read
  "source → its successor" (``A INVALIDATED_BY B``: B is what holds now; ``A EVOLVED_INTO
  B``: B is the newer form). A superseded memory is replaced by the *heads* of its chain:
  the memories reached by following those edges that have no successor themselves. A
  chain that only loops (bad data: A → B → A) supersedes nothing, so contradictory edges
  hide nothing; a fork (A → B, A → C) has two heads, both shown.

``StateMode.ALL`` hides nothing. The validity checks need only the memory and ``now``
(an index can apply them inside its query); supersession needs the graph's edges, so the
recall pipeline applies it after merging: fetch the candidates' relations, extend the
chains with ``chain_frontier`` until it is empty (bounded), fetch the heads' memories
(``heads_to_fetch``), then ``apply_state``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, StrEnum
from typing import Generic, TypeVar

from engram_core.errors import InvalidArgument
from engram_core.model import Memory, Relation
from engram_core.relations import RelationType, parse_relation_type

T = TypeVar("T")

SUPERSEDING: frozenset[RelationType] = frozenset(
    {RelationType.INVALIDATED_BY, RelationType.EVOLVED_INTO}
)
"""Edge types whose source is replaced by its target."""


class StateMode(Enum):
    CURRENT = "current"
    ALL = "all"


class Hidden(StrEnum):
    """Why ``StateMode.CURRENT`` left a memory out."""

    ARCHIVED = "archived"
    NOT_YET_VALID = "not_yet_valid"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


def parse_state_mode(value: str, field_path: str = "state_mode") -> StateMode:
    """``current`` | ``all`` (any case); empty → ``current``."""
    text = value.strip().lower()
    if not text:
        return StateMode.CURRENT
    try:
        return StateMode(text)
    except ValueError:
        known = ", ".join(m.value for m in StateMode)
        raise InvalidArgument(
            field_path, f"unknown state mode {value[:64]!r}; one of {known}"
        ) from None


def validity(memory: Memory, now: datetime) -> Hidden | None:
    """Why ``memory`` is not current at ``now`` on its own fields, or None when it is."""
    if memory.archived:
        return Hidden.ARCHIVED
    if memory.t_valid is not None and memory.t_valid > now:
        return Hidden.NOT_YET_VALID
    if memory.t_invalid is not None and memory.t_invalid <= now:
        return Hidden.EXPIRED
    return None


def is_current(memory: Memory, now: datetime) -> bool:
    return validity(memory, now) is None


def successors(relations: Iterable[Relation]) -> dict[str, tuple[str, ...]]:
    """Superseded id → the ids it is superseded by (sorted; self-loops and duplicates dropped)."""
    out: dict[str, set[str]] = {}
    for r in relations:
        if r.source_id != r.target_id and parse_relation_type(r.type) in SUPERSEDING:
            out.setdefault(r.source_id, set()).add(r.target_id)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def chain_heads(id: str, succ: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The heads that replace ``id``, in breadth-first order; () when nothing supersedes it.

    Each id is visited once, so cycles end the walk; a walk that reaches no id without
    successors (only loops) returns () as well.
    """
    if not succ.get(id):
        return ()
    seen = {id}
    queue = deque([id])
    heads: list[str] = []
    while queue:
        for nxt in succ.get(queue.popleft(), ()):
            if nxt in seen:
                continue
            seen.add(nxt)
            if succ.get(nxt):
                queue.append(nxt)
            else:
                heads.append(nxt)
    return tuple(heads)


def superseded(ids: Iterable[str], relations: Iterable[Relation]) -> dict[str, tuple[str, ...]]:
    """For each of ``ids`` that is superseded: the heads of its chain."""
    succ = successors(relations)
    out = {i: chain_heads(i, succ) for i in ids}
    return {i: heads for i, heads in out.items() if heads}


def chain_frontier(
    ids: Iterable[str], relations: Iterable[Relation], fetched: Collection[str]
) -> list[str]:
    """Successors reachable from ``ids`` whose own edges are not in ``relations`` yet.

    ``fetched`` holds the ids whose relations were already asked for. The chain may go on
    past these: fetch their relations, add them, and call again until this is empty (or a
    hop bound is reached; an unfinished chain then ends at the last successor known).
    """
    succ = successors(relations)
    seen: set[str] = set()
    out: list[str] = []
    queue = deque(ids)
    while queue:
        for nxt in succ.get(queue.popleft(), ()):
            if nxt in seen:
                continue
            seen.add(nxt)
            if nxt not in fetched:
                out.append(nxt)
            queue.append(nxt)
    return out


def heads_to_fetch(
    ids: Iterable[str], relations: Iterable[Relation], have: Collection[str]
) -> list[str]:
    """Heads replacing some of ``ids`` whose memory is not in ``have`` (to fetch by id)."""
    wanted = (h for heads in superseded(ids, relations).values() for h in heads)
    return [h for h in dict.fromkeys(wanted) if h not in have]


@dataclass(frozen=True, slots=True)
class StateResult(Generic[T]):
    items: list[T]
    hidden: dict[str, Hidden] = field(default_factory=dict)  # id → why it was left out
    replaced: dict[str, str] = field(default_factory=dict)  # head id → superseded id it replaced
    unresolved: tuple[str, ...] = ()  # heads whose memory was neither among items nor given


def apply_state(
    items: Sequence[T],
    relations: Iterable[Relation],
    *,
    mode: StateMode,
    now: datetime,
    memory_of: Callable[[T], Memory],
    memories: Mapping[str, Memory] | None = None,
    substitute: Callable[[T, Memory], T] | None = None,
) -> StateResult[T]:
    """``items`` (best first) with what ``mode`` hides left out, order kept.

    A superseded item gives its place to each head of its chain that is current and not
    already placed: ``substitute(item, head_memory)`` builds the head's item (e.g.
    ``dataclasses.replace(scored, memory=head)``: the head inherits the rank its older
    version earned). The head's memory comes from ``items`` or ``memories``. A head placed
    that way, or earlier on its own, is not repeated where it would have come itself.
    Without ``substitute`` a superseded item is only dropped.
    """
    if mode is StateMode.ALL:
        return StateResult(list(items))
    known = dict(memories or {})
    for item in items:
        known.setdefault(memory_of(item).id, memory_of(item))
    heads_of = superseded((memory_of(i).id for i in items), relations)
    out: list[T] = []
    placed: set[str] = set()
    hidden: dict[str, Hidden] = {}
    replaced: dict[str, str] = {}
    unresolved: list[str] = []
    for item in items:
        memory = memory_of(item)
        heads = heads_of.get(memory.id)
        if heads:
            hidden[memory.id] = Hidden.SUPERSEDED
            for head_id in heads:
                head = known.get(head_id)
                if head is None:
                    unresolved.append(head_id)
                elif substitute is not None and head_id not in placed and is_current(head, now):
                    out.append(substitute(item, head))
                    placed.add(head_id)
                    replaced[head_id] = memory.id
            continue
        why = validity(memory, now)
        if why is not None:
            hidden[memory.id] = why
        elif memory.id not in placed:
            out.append(item)
            placed.add(memory.id)
    return StateResult(out, hidden, replaced, tuple(dict.fromkeys(unresolved)))
