"""The recall plan is data: its cache key is its canonical form, never a hand-made list."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import pytest

from engram_core import scoring
from engram_core.model import Filter
from engram_core.ordering import Sort
from engram_core.state import StateMode
from engram_gateway.service.expand import ExpandOptions
from engram_gateway.service.postrank import PostRankOptions
from engram_gateway.service.recall.canonical import KEYED, canonical
from engram_gateway.service.recall.plan import Plan, RecallMode

# Every optional field set, so that each can be changed by its value alone. Kept as text so
# that another interpreter (another hash seed) can build the same plan.
BASE = """
Plan(
    query="what did Caroline paint",
    limit=10,
    flt=Filter(
        tags=("conv:1",),
        exclude_tags=("draft",),
        types=("turn",),
        exclude_types=("meta",),
        start=datetime(2026, 1, 1, tzinfo=UTC),
        end=datetime(2026, 2, 1, tzinfo=UTC),
    ),
    fusion=scoring.Fusion.WEIGHTED,
    min_sequence=7,
    mode=RecallMode.HYBRID,
    state_mode=StateMode.CURRENT,
    post=PostRankOptions(limit=10, diversify_by="session", token_budget=100),
    escalation_floor=0.25,
    expand=ExpandOptions(relations=True, types=("turn",)),
    graph_alpha=0.5,
    queries=("sunsets",),
    per_query_limit=5,
    sort=Sort.RECENCY,
    focus=scoring.Focus(tags=("art",), types=("turn",), keywords=("oil",), ids=("x",)),
    recency_bias=scoring.RecencyBias.OFF,
    embedding=(0.25, 0.5),
)
"""
_NAMES = {
    "Plan": Plan,
    "Filter": Filter,
    "datetime": datetime,
    "UTC": UTC,
    "scoring": scoring,
    "RecallMode": RecallMode,
    "StateMode": StateMode,
    "PostRankOptions": PostRankOptions,
    "ExpandOptions": ExpandOptions,
    "Sort": Sort,
}


def base() -> Plan:
    plan = eval(BASE, dict(_NAMES))  # the test's own constant, also run by another process
    assert isinstance(plan, Plan)
    return plan


def _changed(value: Any) -> Any:
    """Another valid value of ``value``'s type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, Enum):
        members = list(type(value))
        return members[(members.index(value) + 1) % len(members)]
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25 if value <= 0.5 else value - 0.25  # shares stay within 0..1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, datetime):
        return value + timedelta(days=1)
    if isinstance(value, tuple):
        return (*value, value[0] if value else "x")
    raise AssertionError(f"no other value for {value!r}")


def variants(obj: Any, path: str = "") -> Iterator[tuple[str, bool, Any]]:
    """(field path, keyed, ``obj`` with that one leaf field changed) for every leaf field
    that can be set, nested dataclasses included."""
    for f in fields(obj):
        if not f.init:  # derived from the others (e.g. PostRankOptions.group_by)
            continue
        value, where = getattr(obj, f.name), f"{path}{f.name}"
        keyed = bool(f.metadata.get(KEYED, True))
        if is_dataclass(value):
            for inner, inner_keyed, changed in variants(value, where + "."):
                yield inner, keyed and inner_keyed, replace(obj, **{f.name: changed})
        else:
            yield where, keyed, replace(obj, **{f.name: _changed(value)})


def test_plans_differing_in_any_one_field_have_different_keys() -> None:
    plan = base()
    seen = {plan.fingerprint(): "base"}
    checked = list(variants(plan))
    for where, keyed, other in checked:
        key = other.fingerprint()
        if keyed:
            assert key not in seen, f"{where} changed and the key did not ({seen.get(key)})"
            seen[key] = where
        else:
            assert key == plan.fingerprint(), f"{where} is not keyed but the key changed"
    # Nested fields count one by one: the filter's, post-ranking's, expansion's, focus's.
    assert {"flt.start", "post.token_budget", "expand.entity_factor", "focus.pinned"} <= {
        w for w, _, _ in checked
    }


def test_only_what_the_watermark_covers_is_left_out_of_the_key() -> None:
    unkeyed = [f.name for f in fields(Plan) if not f.metadata.get(KEYED, True)]
    assert unkeyed == ["min_sequence"]
    assert replace(base(), min_sequence=99).fingerprint() == base().fingerprint()


def test_a_field_added_to_the_plan_is_in_the_key_without_being_listed() -> None:
    @dataclass(frozen=True, slots=True)
    class Wider(Plan):
        rerank_depth: int = 0

    plan = base()
    one = Wider(**{f.name: getattr(plan, f.name) for f in fields(Plan)}, rerank_depth=1)
    two = replace(one, rerank_depth=2)
    assert one.fingerprint() != two.fingerprint()
    assert replace(two, rerank_depth=1).fingerprint() == one.fingerprint()


def test_equal_plans_have_one_key_in_every_process() -> None:
    """No hash(), no set order: another interpreter, with another hash seed, agrees."""
    script = (
        "from datetime import UTC, datetime\n"
        "from engram_core import scoring\n"
        "from engram_core.model import Filter\n"
        "from engram_core.ordering import Sort\n"
        "from engram_core.state import StateMode\n"
        "from engram_gateway.service.expand import ExpandOptions\n"
        "from engram_gateway.service.postrank import PostRankOptions\n"
        "from engram_gateway.service.recall.plan import Plan, RecallMode\n"
        f"print({BASE.strip()}.fingerprint(), end='')\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout == base().fingerprint()
    assert base().fingerprint() == base().fingerprint()


def test_a_value_without_a_canonical_form_is_an_error_not_a_guess() -> None:
    @dataclass(frozen=True)
    class Odd:
        thing: object

    with pytest.raises(TypeError, match="object"):
        canonical(Odd(object()))


def test_sets_and_mappings_key_the_same_whatever_their_order() -> None:
    assert canonical(frozenset({"b", "a", "c"})) == canonical(frozenset({"c", "b", "a"}))
    assert canonical({"b": 1, "a": 2}) == canonical({"a": 2, "b": 1})
    assert canonical((1, 2)) != canonical((2, 1))
