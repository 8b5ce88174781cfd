"""Admission: how many recalls a gateway works on at once, and what the others get."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from engram_core.errors import DeadlineExceeded, ResourceExhausted
from engram_gateway.service import Deadline
from engram_gateway.service.admission import Admission, AdmissionConfig

TENANT = "acme"


async def _hold(admission: Admission, inside: list[str], name: str, go: asyncio.Event) -> float:
    async with admission.turn(TENANT, Deadline.within(5.0)) as waited:
        inside.append(name)
        await go.wait()
        inside.remove(name)
    return waited


async def test_at_most_limit_inside_and_the_rest_enter_in_arrival_order() -> None:
    admission = Admission(AdmissionConfig(limit=2, queue=10))
    inside: list[str] = []
    entered: list[str] = []
    go = asyncio.Event()

    async def one(name: str) -> None:
        async with admission.turn(TENANT, Deadline.within(5.0)):
            entered.append(name)
            inside.append(name)
            assert len(inside) <= 2
            await go.wait()
            inside.remove(name)

    tasks = [asyncio.create_task(one(f"r{i}")) for i in range(5)]
    await asyncio.sleep(0.01)
    assert entered == ["r0", "r1"]
    assert admission.waiting == 3
    go.set()
    await asyncio.gather(*tasks)
    assert entered == ["r0", "r1", "r2", "r3", "r4"]
    assert admission.waiting == 0


async def test_turns_go_round_the_tenants() -> None:
    admission = Admission(AdmissionConfig(limit=1, queue=20))
    entered: list[str] = []
    go = asyncio.Event()

    async def one(tenant: str, name: str) -> None:
        async with admission.turn(tenant, Deadline.within(5.0)):
            entered.append(name)
            await go.wait()

    holder = asyncio.create_task(one("a", "a0"))
    await asyncio.sleep(0.01)
    # Tenant a floods the queue first; b and c come after with one recall each.
    tasks = [asyncio.create_task(one("a", f"a{i}")) for i in range(1, 5)]
    await asyncio.sleep(0.01)
    tasks += [asyncio.create_task(one(t, f"{t}1")) for t in ("b", "c")]
    await asyncio.sleep(0.01)
    go.set()
    await asyncio.gather(holder, *tasks)
    assert entered == ["a0", "a1", "b1", "c1", "a2", "a3", "a4"]
    assert admission.waiting == 0


async def test_a_full_queue_refuses_at_once() -> None:
    admission = Admission(AdmissionConfig(limit=1, queue=1))
    inside: list[str] = []
    go = asyncio.Event()
    first = asyncio.create_task(_hold(admission, inside, "a", go))
    second = asyncio.create_task(_hold(admission, inside, "b", go))
    await asyncio.sleep(0.01)
    with pytest.raises(ResourceExhausted, match="1 recalls waiting"):
        async with admission.turn(TENANT, Deadline.within(5.0)):
            pass
    go.set()
    assert await first == pytest.approx(0.0, abs=0.05)
    assert await second > 0.0  # it waited for the first


async def test_a_waiter_gives_up_at_its_deadline_and_leaks_no_slot() -> None:
    admission = Admission(AdmissionConfig(limit=1, queue=5))
    inside: list[str] = []
    go = asyncio.Event()
    holder = asyncio.create_task(_hold(admission, inside, "a", go))
    await asyncio.sleep(0.01)
    with pytest.raises(DeadlineExceeded, match="waiting for a turn"):
        async with admission.turn(TENANT, Deadline.within(0.05)):
            pass
    assert admission.waiting == 0
    go.set()
    await holder
    # The slot the expired waiter never got is free: a new turn starts at once.
    async with admission.turn(TENANT, Deadline.within(0.05)) as waited:
        assert waited < 0.05


async def test_a_cancelled_waiter_leaks_no_slot() -> None:
    admission = Admission(AdmissionConfig(limit=1, queue=5))
    inside: list[str] = []
    go = asyncio.Event()
    holder = asyncio.create_task(_hold(admission, inside, "a", go))
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(_hold(admission, inside, "b", go))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert admission.waiting == 0
    go.set()
    await holder
    async with admission.turn(TENANT, Deadline.within(0.05)):
        pass


async def test_limit_zero_admits_everyone() -> None:
    admission = Admission(AdmissionConfig(limit=0, queue=0))
    inside: list[str] = []
    go = asyncio.Event()
    tasks = [asyncio.create_task(_hold(admission, inside, f"r{i}", go)) for i in range(50)]
    await asyncio.sleep(0.01)
    assert len(inside) == 50
    go.set()
    await asyncio.gather(*tasks)


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="bad admission settings"):
        AdmissionConfig(limit=-1)
    with pytest.raises(ValueError, match="bad admission settings"):
        AdmissionConfig(queue=-1)


async def _one_recall_running(new_harness: Callable[..., Any], queue: int) -> tuple[Any, Any]:
    """A gateway working on one recall at a time (each reads a slow vector store), and a
    recall it is working on."""
    h = new_harness(recall_concurrency=1, recall_queue=queue, recall_cache_ttl_s=0)
    h.world.put(h.memory("m1", "the lake at sunset"))
    h.vector.delay = 0.2
    running = asyncio.create_task(h.recall("lake"))
    await asyncio.sleep(0.05)
    return h, running


async def test_the_gateway_refuses_a_recall_beyond_its_queue(
    new_harness: Callable[..., Any],
) -> None:
    h, running = await _one_recall_running(new_harness, queue=0)
    with pytest.raises(ResourceExhausted):
        await h.recall("sunset")
    assert [r.memory.id for r in (await running).results] == ["m1"]


async def test_the_gateway_runs_a_waiting_recall_after_the_one_before(
    new_harness: Callable[..., Any],
) -> None:
    h, first = await _one_recall_running(new_harness, queue=4)
    started = time.monotonic()
    second = await h.recall("sunset")
    # Each recall reads the vector store twice (its stream, then the context windows), 0.4 s:
    # the second waited about 0.35 s for the first to finish, then took its own 0.4 s.
    assert time.monotonic() - started >= 0.6
    assert first.done()
    assert [r.memory.id for r in second.results] == ["m1"]
    assert not second.degraded
