"""state_mode: validity, supersession chains, and the order-keeping filter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from engram_core.errors import InvalidArgument
from engram_core.model import Memory, Relation
from engram_core.state import (
    Hidden,
    StateMode,
    StateResult,
    apply_state,
    chain_frontier,
    chain_heads,
    heads_to_fetch,
    is_current,
    parse_state_mode,
    successors,
    superseded,
    validity,
)

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def mem(id: str, **kw: object) -> Memory:
    return Memory(id=id, tenant="t", content=f"memory {id}", **kw)  # type: ignore[arg-type]


def evolved(a: str, b: str) -> Relation:
    return Relation(a, b, "EVOLVED_INTO")


def invalidated(a: str, b: str) -> Relation:
    return Relation(a, b, "INVALIDATED_BY")


@dataclass(frozen=True)
class Item:
    memory: Memory
    score: float
    via: str = ""  # the superseded id this item took the place of


def items(*ids: str) -> list[Item]:
    return [Item(mem(i), 1.0 - n / 10) for n, i in enumerate(ids)]


def ids(result: list[Item]) -> list[str]:
    return [i.memory.id for i in result]


def substitute(item: Item, head: Memory) -> Item:
    return replace(item, memory=head, via=item.memory.id)


def run(
    xs: list[Item],
    rels: list[Relation],
    *,
    mode: StateMode = StateMode.CURRENT,
    memories: Mapping[str, Memory] | None = None,
    sub: Callable[[Item, Memory], Item] | None = substitute,
) -> tuple[list[str], StateResult[Item]]:
    out = apply_state(
        xs, rels, mode=mode, now=NOW, memory_of=lambda i: i.memory, memories=memories,
        substitute=sub,
    )  # fmt: skip
    return ids(out.items), out


# --- mode and validity --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "mode"),
    [("", StateMode.CURRENT), ("current", StateMode.CURRENT), (" ALL ", StateMode.ALL)],
)
def test_parse_state_mode(raw: str, mode: StateMode) -> None:
    assert parse_state_mode(raw) is mode


def test_unknown_state_mode_names_the_field() -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_state_mode("latest")
    assert err.value.field == "state_mode"
    assert "current" in err.value.reason
    assert "all" in err.value.reason


@pytest.mark.parametrize(
    ("memory", "why"),
    [
        (mem("a"), None),
        (mem("a", archived=True), Hidden.ARCHIVED),
        (mem("a", t_valid=NOW + HOUR), Hidden.NOT_YET_VALID),
        (mem("a", t_valid=NOW), None),  # valid from this instant
        (mem("a", t_valid=NOW - HOUR, t_invalid=NOW + HOUR), None),
        (mem("a", t_invalid=NOW), Hidden.EXPIRED),  # t_invalid is the first instant it is not
        (mem("a", t_invalid=NOW - HOUR), Hidden.EXPIRED),
        (mem("a", t_valid=NOW, t_invalid=NOW), Hidden.EXPIRED),
        (mem("a", archived=True, t_invalid=NOW - HOUR), Hidden.ARCHIVED),
    ],
)
def test_validity(memory: Memory, why: Hidden | None) -> None:
    assert validity(memory, NOW) == why
    assert is_current(memory, NOW) is (why is None)


# --- chains -------------------------------------------------------------------------------


def test_successors_keep_only_superseding_edges() -> None:
    rels = [
        evolved("a", "b"),
        invalidated("a", "c"),
        Relation("a", "d", "RELATES_TO"),
        Relation("x", "y", "evolved_into"),  # parsed like the registry: case-insensitive
        evolved("s", "s"),  # a self-loop says nothing
        evolved("a", "b"),
    ]
    assert successors(rels) == {"a": ("b", "c"), "x": ("y",)}


def test_chain_heads_follow_the_chain() -> None:
    succ = successors([evolved("a", "b"), evolved("b", "c"), invalidated("c", "d")])
    assert chain_heads("a", succ) == ("d",)
    assert chain_heads("c", succ) == ("d",)
    assert chain_heads("d", succ) == ()
    assert chain_heads("unrelated", succ) == ()


def test_direction_matters() -> None:
    # "a INVALIDATED_BY b": a is the old one. b is current.
    succ = successors([invalidated("a", "b")])
    assert chain_heads("a", succ) == ("b",)
    assert chain_heads("b", succ) == ()


def test_forks_have_every_head() -> None:
    succ = successors([evolved("a", "b"), evolved("a", "c"), evolved("c", "d")])
    assert chain_heads("a", succ) == ("b", "d")


def test_cycles_end_and_supersede_nothing() -> None:
    loop = successors([evolved("a", "b"), evolved("b", "a")])
    assert chain_heads("a", loop) == ()
    assert chain_heads("b", loop) == ()
    # A cycle with a way out leads there.
    out = successors([evolved("a", "b"), evolved("b", "a"), evolved("b", "c")])
    assert chain_heads("a", out) == ("c",)
    # Into a loop from outside: nothing to show instead, so nothing is hidden.
    into = successors([evolved("x", "a"), evolved("a", "b"), evolved("b", "a")])
    assert chain_heads("x", into) == ()


def test_long_chain_is_linear_work() -> None:
    n = 5000
    rels = [evolved(f"m{i}", f"m{i + 1}") for i in range(n)] + [evolved(f"m{n}", "m0")]
    rels.append(evolved(f"m{n // 2}", "head"))
    assert chain_heads("m0", successors(rels)) == ("head",)


def test_superseded_and_heads_to_fetch() -> None:
    rels = [evolved("a", "b"), evolved("b", "c"), invalidated("x", "y")]
    assert superseded(["a", "b", "c", "z"], rels) == {"a": ("c",), "b": ("c",)}
    assert heads_to_fetch(["a", "x", "z"], rels, have={"y"}) == ["c"]


def test_chain_frontier_asks_for_unseen_successors() -> None:
    # Relations of the candidates a and z only: a → b is known, b's own edges are not.
    rels = [evolved("a", "b"), evolved("p", "z")]
    assert chain_frontier(["a", "z"], rels, fetched={"a", "z"}) == ["b"]
    # After fetching b's relations the chain goes on to c, then ends.
    rels.append(evolved("b", "c"))
    assert chain_frontier(["a", "z"], rels, fetched={"a", "z", "b"}) == ["c"]
    assert chain_frontier(["a", "z"], rels, fetched={"a", "z", "b", "c"}) == []


# --- apply_state --------------------------------------------------------------------------


def test_all_mode_keeps_everything() -> None:
    xs = [Item(mem("a", archived=True), 1.0), Item(mem("b"), 0.5)]
    got, out = run(xs, [evolved("b", "a")], mode=StateMode.ALL)
    assert got == ["a", "b"]
    assert out.hidden == {}


def test_current_hides_by_validity_and_keeps_order() -> None:
    xs = [
        Item(mem("archived", archived=True), 0.9),
        Item(mem("ok1"), 0.8),
        Item(mem("future", t_valid=NOW + HOUR), 0.7),
        Item(mem("expired", t_invalid=NOW - HOUR), 0.6),
        Item(mem("ok2", t_valid=NOW - HOUR, t_invalid=NOW + HOUR), 0.5),
    ]
    got, out = run(xs, [])
    assert got == ["ok1", "ok2"]
    assert out.hidden == {
        "archived": Hidden.ARCHIVED,
        "future": Hidden.NOT_YET_VALID,
        "expired": Hidden.EXPIRED,
    }


def test_superseded_takes_its_heads_place_with_its_rank() -> None:
    # old (rank 1) evolved into new (rank 3): new moves up to rank 1, once.
    xs = items("old", "other", "new")
    got, out = run(xs, [evolved("old", "new")])
    assert got == ["new", "other"]
    first = out.items[0]
    assert (first.memory.id, first.score, first.via) == ("new", 1.0, "old")
    assert out.hidden == {"old": Hidden.SUPERSEDED}
    assert out.replaced == {"new": "old"}


def test_head_already_ranked_higher_is_not_repeated() -> None:
    got, out = run(items("new", "old"), [invalidated("old", "new")])
    assert got == ["new"]
    assert out.replaced == {}


def test_head_outside_the_items_comes_from_memories() -> None:
    head = mem("c")
    got, out = run(items("a", "x"), [evolved("a", "b"), evolved("b", "c")], memories={"c": head})
    assert got == ["c", "x"]
    assert out.unresolved == ()


def test_missing_head_is_reported_and_the_old_one_still_hidden() -> None:
    got, out = run(items("a", "x"), [evolved("a", "b")])
    assert got == ["x"]
    assert out.unresolved == ("b",)
    assert out.hidden == {"a": Hidden.SUPERSEDED}


def test_head_that_is_not_current_is_not_shown() -> None:
    memories = {"b": mem("b", archived=True)}
    got, out = run(items("a", "x"), [evolved("a", "b")], memories=memories)
    assert got == ["x"]
    assert out.hidden == {"a": Hidden.SUPERSEDED}


def test_two_old_versions_of_one_head_give_one_result() -> None:
    got, out = run(items("v1", "v2", "x"), [evolved("v1", "v2"), evolved("v2", "v3")],
                   memories={"v3": mem("v3")})  # fmt: skip
    assert got == ["v3", "x"]
    assert out.replaced == {"v3": "v1"}


def test_fork_shows_both_heads_in_the_old_ones_place() -> None:
    got, _ = run(items("a", "x", "c"), [evolved("a", "b"), evolved("a", "c")],
                 memories={"b": mem("b")})  # fmt: skip
    assert got == ["b", "c", "x"]


def test_cycle_hides_nothing() -> None:
    got, out = run(items("a", "b"), [evolved("a", "b"), evolved("b", "a")])
    assert got == ["a", "b"]
    assert out.hidden == {}


def test_without_substitute_superseded_are_only_dropped() -> None:
    got, _ = run(items("old", "x", "new"), [evolved("old", "new")], sub=None)
    assert got == ["x", "new"]


def test_duplicate_ids_in_items_are_kept_once() -> None:
    got, _ = run(items("a", "a", "b"), [])
    assert got == ["a", "b"]
