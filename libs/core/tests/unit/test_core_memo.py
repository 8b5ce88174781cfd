"""SizedMemo: computes a key once while it is held, holds at most its budget in bytes,
evicts the least recently used first, and keeps no value too large for its share."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from engram_core.memo import SizedMemo


class Counted:
    """``key * 2``, counting how often each key was computed."""

    def __init__(self) -> None:
        self.calls: Counter[int] = Counter()

    def __call__(self, key: int) -> int:
        self.calls[key] += 1
        return key * 2


def test_a_held_key_is_computed_once() -> None:
    fn = Counted()
    memo: SizedMemo[int, int] = SizedMemo(fn, lambda k, v: 10, budget=1000)
    assert [memo(k) for k in (1, 2, 1, 1, 2)] == [2, 4, 2, 2, 4]
    assert fn.calls == Counter({1: 1, 2: 1})
    assert memo.used == 20
    assert len(memo) == 2


def test_the_least_recently_used_goes_first_when_the_budget_is_full() -> None:
    fn = Counted()
    memo: SizedMemo[int, int] = SizedMemo(fn, lambda k, v: 10, budget=160)  # 16 items of 10
    for k in range(16):
        memo(k)
    memo(0)  # used again: 1 is now the oldest
    memo(16)  # over budget: 1 goes
    assert memo.used == 160
    assert len(memo) == 16
    memo(0)
    memo(1)
    assert fn.calls[0] == 1  # still held
    assert fn.calls[1] == 2  # evicted, computed again


def test_a_value_too_large_for_its_share_is_returned_but_not_kept() -> None:
    fn = Counted()
    memo: SizedMemo[int, int] = SizedMemo(fn, lambda k, v: 1000 if k == 7 else 1, budget=1600)
    assert memo(7) == 14
    assert memo(7) == 14
    assert fn.calls[7] == 2
    assert memo.used == 0
    memo(3)
    memo(3)
    assert fn.calls[3] == 1


def test_threads_always_get_the_right_value_and_the_budget_holds() -> None:
    memo: SizedMemo[int, int] = SizedMemo(lambda k: k * 2, lambda k, v: 7, budget=16 * 7 * 3)
    wrong: list[tuple[int, int]] = []

    def work(seed: int) -> None:
        for i in range(3000):
            k = (i * (seed + 3)) % 97
            if (v := memo(k)) != k * 2:
                wrong.append((k, v))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert memo.used <= 16 * 7 * 3
    assert memo.used == 7 * len(memo)


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="budget"):
        SizedMemo(lambda k: k, lambda k, v: 1, budget=0)
