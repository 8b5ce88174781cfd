"""What store generations cost, timed the same way for every store with generations (the
vector and lexical `bench/bench_generations.py` scripts): fill two generations, then time
create (empty), swap (back and forth), list (counts every generation) and drop."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

BATCH = 500  # items per upsert while filling


async def timed(label: str, step: Callable[[int], Awaitable[Any]], repeat: int) -> None:
    """Run ``step(k)`` for k in 0..repeat-1; print p50 and max in ms."""
    took = []
    for k in range(repeat):
        start = time.perf_counter()
        await step(k)
        took.append((time.perf_counter() - start) * 1000)
    print(f"{label:<28} p50 {statistics.median(took):8.1f} ms   max {max(took):8.1f} ms")


async def bench_generations(
    store: Any,
    tenant: str,
    fill: Callable[[int], Sequence[Any]],
    label: str,
    repeat: int,
) -> None:
    """``store`` (a store's generations, with ``index(name)``) gets the live generation and
    one new one filled with ``fill(seed)`` (seed 0, 1: what each index's upsert takes), then
    each step is timed ``repeat`` times; the store is closed at the end."""
    for seed, index in enumerate([await store.index(), None]):
        if index is None:
            index = await store.index((await store.create_generation("")).name)
        items = fill(seed)
        for start in range(0, len(items), BATCH):
            await index.upsert(tenant, items[start : start + BATCH])
    names = [g.name for g in await store.list_generations()]
    print(f"{label}: generations {names}")
    await timed("create (empty)", lambda k: store.create_generation(""), repeat)
    await timed("swap", lambda k: store.swap_generation(names[(k + 1) % 2]), repeat)
    await timed("list (counts all)", lambda k: store.list_generations(), repeat)
    extra = [g.name for g in await store.list_generations() if g.name not in names]
    await timed("drop (empty)", lambda k: store.drop_generation(extra[k]), repeat)
    await store.close()
