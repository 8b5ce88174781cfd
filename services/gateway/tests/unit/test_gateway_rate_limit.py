"""Per-tenant rate limit: every RPC counts once, after auth; over it is RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from pydantic import ValidationError

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.errors import ResourceExhausted
from engram_core.ports import RateDecision
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.config import Settings
from engram_gateway.service import RateLimitConfig, TenantRateLimit
from engram_platform.coordination import MemoryRateLimiter
from engram_platform.errors import RETRY_AFTER_KEY
from engram_platform.settings import CacheSettings

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"
# One request per 30 s window: the second call of a test is always over the limit.
ONE_PER_WINDOW: dict[str, Any] = {"rate_limit_rps": 1 / 30, "rate_limit_window_s": 30.0}


def _auth(token: str = "rw-token") -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@asynccontextmanager
async def _stub(new_harness: Callable[..., Any], **settings: Any) -> AsyncIterator[Any]:
    h = new_harness(**settings)
    running = await server.start(
        h.settings, h.gateway, Authenticator.from_sources(h.settings.tokens.get_secret_value())
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            yield gateway_pb2_grpc.MemoryServiceStub(channel)
    finally:
        await h.gateway.access.drain()
        await running.stop(None)


async def _code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def _calls() -> list[tuple[str, Any]]:
    mem = common_pb2.MemoryInput(content="x")
    return [
        ("Store", gateway_pb2.StoreRequest(memory=mem)),
        ("StoreBatch", gateway_pb2.StoreBatchRequest(memories=[mem])),
        ("Update", gateway_pb2.UpdateRequest(id=UUID, memory=mem)),
        ("Delete", gateway_pb2.DeleteRequest(id=UUID)),
        (
            "Associate",
            gateway_pb2.AssociateRequest(source_id=UUID, target_id=UUID, type="RELATES_TO"),
        ),
        ("Recall", gateway_pb2.RecallRequest(query="x")),
        ("Get", gateway_pb2.GetRequest(id=UUID)),
        ("Related", gateway_pb2.RelatedRequest(id=UUID)),
        ("Stats", gateway_pb2.StatsRequest()),
    ]


@pytest.mark.parametrize(("rpc", "request_"), _calls())
async def test_every_rpc_counts_against_the_tenant(
    new_harness: Callable[..., Any], rpc: str, request_: Any
) -> None:
    async with _stub(new_harness, **ONE_PER_WINDOW) as stub:
        method = getattr(stub, rpc)
        # The first call is admitted whatever it then answers (NOT_FOUND, OK, …).
        assert await _code(method(request_, metadata=_auth())) != (
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await method(request_, metadata=_auth())
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "'acme'" in (exc.value.details() or "")
        assert "retry after" in (exc.value.details() or "")
        hint = dict(exc.value.trailing_metadata() or ())[RETRY_AFTER_KEY]
        assert int(hint) >= 1
        # Another tenant has its own budget.
        assert await _code(method(request_, metadata=_auth("other"))) != (
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )


async def test_store_stream_counts_once(new_harness: Callable[..., Any]) -> None:
    async def two() -> AsyncIterator[gateway_pb2.StoreRequest]:
        for text in ("a", "b"):
            yield gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=text))

    async with _stub(new_harness, **ONE_PER_WINDOW) as stub:
        reply = await stub.StoreStream(two(), metadata=_auth())
        assert len(reply.ids) == 2
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.StoreStream(two(), metadata=_auth())
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# Three memories per 30 s window.
THREE_MEMORIES: dict[str, Any] = {"write_rate_limit": 0.1, "rate_limit_window_s": 30.0}


def _batch(n: int) -> gateway_pb2.StoreBatchRequest:
    return gateway_pb2.StoreBatchRequest(
        memories=[common_pb2.MemoryInput(content=f"m{i}") for i in range(n)]
    )


async def test_the_write_rate_counts_memories_not_calls(new_harness: Callable[..., Any]) -> None:
    async with _stub(new_harness, **THREE_MEMORIES) as stub:
        assert len((await stub.StoreBatch(_batch(2), metadata=_auth())).ids) == 2
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.StoreBatch(_batch(2), metadata=_auth())  # 4 memories > 3
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 memories per 30s" in (exc.value.details() or "")
        # Reads are not writes, and another tenant has its own budget.
        await stub.Recall(gateway_pb2.RecallRequest(query="m1"), metadata=_auth())
        assert len((await stub.StoreBatch(_batch(3), metadata=_auth("other"))).ids) == 3


async def test_a_batch_larger_than_a_window_passes_alone() -> None:
    config = RateLimitConfig(3, 1.0, key_prefix="w:", counted="memories")
    limit = TenantRateLimit(MemoryRateLimiter(), config)
    await limit.admit("acme", 50)  # a whole window's allowance
    with pytest.raises(ResourceExhausted, match="3 memories per 1s"):
        await limit.admit("acme", 1)


async def test_refused_auth_does_not_use_the_budget(new_harness: Callable[..., Any]) -> None:
    async with _stub(new_harness, **ONE_PER_WINDOW) as stub:
        for token in ("unknown", "w-token"):  # UNAUTHENTICATED, PERMISSION_DENIED
            code = await _code(stub.Stats(gateway_pb2.StatsRequest(), metadata=_auth(token)))
            assert code != grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await _code(stub.Stats(gateway_pb2.StatsRequest(), metadata=_auth())) == (
            grpc.StatusCode.OK
        )


async def test_no_limit_by_default(new_harness: Callable[..., Any]) -> None:
    async with _stub(new_harness) as stub:
        codes = await asyncio.gather(
            *(_code(stub.Stats(gateway_pb2.StatsRequest(), metadata=_auth())) for _ in range(50))
        )
        assert set(codes) == {grpc.StatusCode.OK}


async def test_limit_allows_the_rate_then_refuses_with_retry_after() -> None:
    limit = TenantRateLimit(MemoryRateLimiter(), RateLimitConfig(requests_per_s=10, window_s=0.2))
    await limit.admit("acme")
    await limit.admit("acme")  # 2 per 0.2 s window (10 rps)
    with pytest.raises(ResourceExhausted, match=r"tenant 'acme' .* 2 requests per 0.2s"):
        await limit.admit("acme")
    await limit.admit("globex")
    await asyncio.sleep(0.25)
    await limit.admit("acme")


async def test_retry_after_comes_from_the_limiter() -> None:
    class Refusing:
        async def hit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateDecision:
            assert key == "gateway:rps:acme"
            assert (limit, window_s) == (10, 1.0)
            return RateDecision(allowed=False, retry_after_s=0.4321)

    limit = TenantRateLimit(Refusing(), RateLimitConfig(requests_per_s=10))
    with pytest.raises(ResourceExhausted, match=r"retry after 0\.432s") as exc:
        await limit.admit("acme")
    assert exc.value.retry_after_s == 0.4321
    assert limit.enabled
    assert not TenantRateLimit(Refusing(), RateLimitConfig()).enabled
    await TenantRateLimit(Refusing(), RateLimitConfig()).admit("acme")  # 0 rps: off


def test_a_rate_below_one_request_per_window_is_refused() -> None:
    with pytest.raises(ValidationError, match="rate_limit_rps"):
        Settings(rate_limit_rps=0.5, rate_limit_window_s=1.0)
    assert Settings(rate_limit_rps=0.5, rate_limit_window_s=2.0).rate_limit_rps == 0.5


def test_cache_backend_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_CACHE__BACKEND", "redis")
    monkeypatch.setenv("ENGRAM_GATEWAY_CACHE__REDIS__URL", "redis://cache:6379/1")
    monkeypatch.setenv("ENGRAM_GATEWAY_RATE_LIMIT_RPS", "50")
    settings = Settings()
    assert settings.cache.backend == "redis"
    assert settings.cache.redis.url == "redis://cache:6379/1"
    assert settings.rate_limit_rps == 50
    assert CacheSettings().backend == "memory"
