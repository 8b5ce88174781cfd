"""Admission: how many recalls a gateway works on at once, and what the others get."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.errors import DeadlineExceeded, ResourceExhausted
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.service import Deadline
from engram_gateway.service.admission import Admission, AdmissionConfig
from engram_platform.errors import RETRY_AFTER_KEY

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


class _Gates:
    """Recalls that each stay inside until let go by name; who is inside, in entry order."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.inside: list[str] = []
        self.entered: list[str] = []
        self._go: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def _one(self, tenant: str, name: str) -> None:
        self._go[name] = asyncio.Event()
        async with self.admission.turn(tenant, Deadline.within(5.0)):
            self.entered.append(name)
            self.inside.append(name)
            await self._go[name].wait()
            self.inside.remove(name)

    async def start(self, tenant: str, *names: str) -> None:
        self.tasks += [asyncio.create_task(self._one(tenant, n)) for n in names]
        await asyncio.sleep(0.01)

    async def let_go(self, *names: str) -> None:
        for name in names:
            self._go[name].set()
        await asyncio.sleep(0.01)

    def of(self, tenant: str) -> list[str]:
        return [n for n in self.inside if n.startswith(tenant)]

    async def finish(self) -> None:
        for go in self._go.values():
            go.set()
        await asyncio.gather(*self.tasks)


async def test_with_two_tenants_the_flooding_one_holds_at_most_its_share() -> None:
    gates = _Gates(Admission(AdmissionConfig(limit=4, queue=20)))
    await gates.start("a", *(f"a{i}" for i in range(8)))
    assert gates.of("a") == ["a0", "a1", "a2", "a3"]  # alone, a tenant gets every slot
    await gates.start("b", "b0")
    await gates.let_go("a0")
    assert gates.of("b") == ["b0"]
    # Two tenants: a's share is 2 of 4. Its releases free slots until it is down to it,
    # although its own recalls are waiting and a slot stays unused.
    await gates.let_go("a1")
    assert gates.of("a") == ["a2", "a3"]
    await gates.let_go("a2")
    assert gates.of("a") == ["a3", "a4"]
    assert len(gates.inside) == 3
    # b done: a alone again, its waiters fill every slot.
    await gates.let_go("b0")
    assert gates.of("a") == ["a3", "a4", "a5", "a6"]
    await gates.finish()
    assert gates.entered == ["a0", "a1", "a2", "a3", "b0", "a4", "a5", "a6", "a7"]
    assert gates.admission.waiting == 0


async def test_a_newcomer_below_its_share_takes_a_free_slot_at_once() -> None:
    gates = _Gates(Admission(AdmissionConfig(limit=4, queue=20)))
    await gates.start("a", *(f"a{i}" for i in range(6)))
    await gates.start("b", "b0")
    await gates.let_go("a0", "a1")  # b0 enters; a drops to its share of 2
    assert gates.of("a") == ["a2", "a3"]
    await gates.let_go("b0")  # b leaves: a alone, back to every slot
    assert gates.of("a") == ["a2", "a3", "a4", "a5"]
    await gates.let_go("a2")
    await gates.start("c", "c0")  # a free slot and c below its share: no wait behind a
    assert gates.of("c") == ["c0"]
    await gates.finish()


async def test_without_tenant_share_a_flooding_tenant_refills_every_slot() -> None:
    gates = _Gates(Admission(AdmissionConfig(limit=4, queue=20, tenant_share=False)))
    await gates.start("a", *(f"a{i}" for i in range(8)))
    await gates.start("b", "b0")
    await gates.let_go("a0", "a1")
    assert gates.of("a") == ["a2", "a3", "a4"]
    assert gates.of("b") == ["b0"]
    await gates.finish()


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


async def test_a_tenant_at_its_queue_limit_is_refused_and_the_others_still_get_in() -> None:
    admission = Admission(AdmissionConfig(limit=1, queue=20, tenant_queue=2))
    entered: list[str] = []
    go = asyncio.Event()

    async def one(tenant: str, name: str) -> None:
        async with admission.turn(tenant, Deadline.within(5.0)):
            entered.append(name)
            await go.wait()

    holder = asyncio.create_task(one("a", "a0"))
    await asyncio.sleep(0.01)
    tasks = [asyncio.create_task(one("a", f"a{i}")) for i in (1, 2)]
    await asyncio.sleep(0.01)
    with pytest.raises(ResourceExhausted, match=r"tenant 'a' already has 2 .*retry after") as exc:
        async with admission.turn("a", Deadline.within(5.0)):
            pass
    assert exc.value.retry_after_s is not None
    assert exc.value.retry_after_s > 0
    tasks.append(asyncio.create_task(one("b", "b1")))  # b waits, though a's queue is full
    await asyncio.sleep(0.01)
    assert admission.waiting == 3
    go.set()
    await asyncio.gather(holder, *tasks)
    assert entered == ["a0", "a1", "b1", "a2"]


async def test_the_retry_hint_grows_with_the_tenants_waiting() -> None:
    """A refused tenant's next waiter goes after one recall of each tenant waiting."""
    admission = Admission(AdmissionConfig(limit=1, tenant_queue=1))
    go = asyncio.Event()

    async def one(tenant: str) -> None:
        async with admission.turn(tenant, Deadline.within(5.0)):
            await go.wait()

    async def hint() -> float:
        with pytest.raises(ResourceExhausted) as exc:
            async with admission.turn("a", Deadline.within(5.0)):
                pass
        assert exc.value.retry_after_s is not None
        return exc.value.retry_after_s

    tasks = [asyncio.create_task(one(t)) for t in ("x", "a")]
    await asyncio.sleep(0.01)
    alone = await hint()
    tasks += [asyncio.create_task(one(t)) for t in ("b", "c")]
    await asyncio.sleep(0.01)
    assert await hint() == pytest.approx(3 * alone)
    go.set()
    await asyncio.gather(*tasks)


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
    # The slot the expired waiter never got is free: a new turn gets in (a leaked slot
    # would keep it waiting past its deadline).
    async with admission.turn(TENANT, Deadline.within(0.05)):
        assert admission.waiting == 0


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
    with pytest.raises(ValueError, match="bad admission settings"):
        AdmissionConfig(tenant_queue=-1)


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
    calls_when_first_done: list[int] = []
    first.add_done_callback(lambda _: calls_when_first_done.append(len(h.vector.calls)))
    second = await h.recall("sunset")
    # Admitted only once the first had finished: every vector read of the second comes
    # after the first's last one.
    [first_done_at] = calls_when_first_done
    searched = [(i, arg[0]) for i, (op, arg) in enumerate(h.vector.calls) if op == "search"]
    assert {q for i, q in searched if i < first_done_at} == {"lake"}
    assert {q for i, q in searched if i >= first_done_at} == {"sunset"}
    assert [r.memory.id for r in second.results] == ["m1"]
    assert not second.degraded


async def test_a_tenant_refused_over_grpc_gets_a_retry_hint_and_another_is_served(
    new_harness: Callable[..., Any],
) -> None:
    h = new_harness(recall_concurrency=1, recall_tenant_queue=1, recall_cache_ttl_s=0)
    h.world.put(
        h.memory("m1", "the lake at sunset"), h.memory("g1", "the lake at dawn", tenant="globex")
    )
    h.vector.delay = 0.2
    auth = Authenticator.from_sources(h.settings.tokens.get_secret_value())
    running = await server.start(h.settings, h.gateway, auth)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            first = asyncio.create_task(h.recall("lake"))  # acme's turn
            await asyncio.sleep(0.05)
            second = asyncio.create_task(h.recall("sunset"))  # acme's one waiter
            await asyncio.sleep(0.01)
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.Recall(gateway_pb2.RecallRequest(query="lake"), metadata=_auth())
            assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "retry after" in (exc.value.details() or "")
            assert int(dict(exc.value.trailing_metadata() or ())[RETRY_AFTER_KEY]) >= 1
            other = await stub.Recall(
                gateway_pb2.RecallRequest(query="lake"), metadata=_auth("other")
            )
            assert [r.memory.id for r in other.results] == ["g1"]
            await asyncio.gather(first, second)
    finally:
        await h.gateway.access.drain()
        await running.stop(None)


def _auth(token: str = "rw-token") -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)
