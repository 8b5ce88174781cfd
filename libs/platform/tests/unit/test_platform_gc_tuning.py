"""The collector settings a server runs with after start-up."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from engram_platform.gc_tuning import GEN0_THRESHOLD, tune_for_serving


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_what_start_up_holds_is_frozen_and_young_collections_are_rarer() -> None:
    held = [object() for _ in range(10)]  # noqa: F841 (alive across the call)
    _, gen1, gen2 = gc.get_threshold()
    tune_for_serving()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GEN0_THRESHOLD, gen1, gen2)
    assert GEN0_THRESHOLD > 700  # CPython's default: tuning that kept it would do nothing


@pytest.mark.usefixtures("restored_gc")
def test_cycles_made_after_start_up_are_still_collected() -> None:
    tune_for_serving()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() > 0
