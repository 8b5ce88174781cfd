"""Redis (the gateway's and vector's cache, the consolidate lease) killed mid-run: caches
miss and nothing fails — stores, recalls, idempotent stores and reads all answer."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections import Counter
from collections.abc import Awaitable, Iterator
from pathlib import Path

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import AUTH_A, Figures, Stub, read_back_s, start_fault_stack, store_one
from engram_testing.nats_server import free_port, wait_for_port

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

BEFORE_S, DOWN_S = 5.0, 10.0


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    binary = shutil.which("redis-server")
    if binary is None:  # .ci/run installs it; a missing one fails, never skips
        pytest.fail("redis-server not found: install Debian's redis-server package")
    port = free_port()
    args = ["--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([binary, *args, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    assert wait_for_port("127.0.0.1", port, 10.0), "redis-server did not start"
    yield f"redis://127.0.0.1:{port}/0", proc
    proc.kill()
    proc.wait()


@pytest.fixture
def redis_stack(tmp_path: Path, redis: tuple[str, subprocess.Popen[bytes]]) -> Iterator[DevStack]:
    env = {}
    for service in ("GATEWAY", "VECTOR", "CONSOLIDATE"):
        env[f"ENGRAM_{service}_CACHE__BACKEND"] = "redis"
        env[f"ENGRAM_{service}_CACHE__REDIS__URL"] = redis[0]
    running = start_fault_stack(tmp_path / "home", env)
    yield running
    running.stop()


async def _work(gateway: Stub, done: asyncio.Event, codes: Counter[str]) -> None:
    """Stores (half with an idempotency key, each sent twice), recalls that repeat (cache
    hits while Redis is up), and Gets."""
    i = 0
    while not done.is_set():
        i += 1
        key = f"redis-key-{i}" if i % 2 else ""
        request = gateway_pb2.StoreRequest(idempotency_key=key)
        request.memory.content = f"redis run note {i}"
        calls: list[Awaitable[object]] = [
            gateway.Store(request, metadata=AUTH_A, timeout=10),
            gateway.Recall(
                gateway_pb2.RecallRequest(query=f"redis run note {i % 5}", limit=5),
                metadata=AUTH_A,
                timeout=10,
            ),
        ]
        if key:
            calls.append(gateway.Store(request, metadata=AUTH_A, timeout=10))
        for call in calls:
            try:
                await call
                codes["OK"] += 1
            except grpc.aio.AioRpcError as err:
                codes[err.code().name] += 1
        await asyncio.sleep(0.02)


async def test_redis_down_caches_miss_nothing_fails(
    redis_stack: DevStack, redis: tuple[str, subprocess.Popen[bytes]], figures: Figures
) -> None:
    codes: Counter[str] = Counter()
    done = asyncio.Event()
    async with grpc.aio.insecure_channel(redis_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        work = asyncio.gather(*(_work(gateway, done, codes) for _ in range(4)))
        await asyncio.sleep(BEFORE_S)
        redis[1].kill()
        redis[1].wait()
        before_kill = sum(codes.values())
        await asyncio.sleep(DOWN_S)
        done.set()
        await work
        memory_id, seq = await store_one(gateway, AUTH_A, "after redis went away")
        after_s = await read_back_s(gateway, AUTH_A, memory_id, seq, 60.0)
    failed = sum(n for code, n in codes.items() if code != "OK")
    figures.record(
        "redis_down",
        calls=sum(codes.values()),
        calls_while_down=sum(codes.values()) - before_kill,
        failed=failed,
        wedged=int(after_s is None),
        **{f"code_{k.lower()}": v for k, v in codes.items() if k != "OK"},
    )
    assert failed == 0, f"calls failed with Redis down: {dict(codes)}"
    assert after_s is not None
