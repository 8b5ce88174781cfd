"""The perf bench's client-supplied vectors: unit length, the model's size, the same for the
same seed (a batch's) and different for another."""

from __future__ import annotations

import math

from bench.perf import unit_vectors


def test_unit_vectors_are_unit_length_sized_and_seeded() -> None:
    first = unit_vectors(3, 384, seed=500)
    assert [len(v) for v in first] == [384] * 3
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-5) for v in first)
    assert unit_vectors(3, 384, seed=500) == first
    assert unit_vectors(3, 384, seed=1000)[0] != first[0]
    assert first[0] != first[1]
