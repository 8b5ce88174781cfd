"""A service's gRPC server, or a fake servicer, in the test's own process on a free port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar

import grpc

from engram_platform.grpc_client import open_channel
from engram_platform.grpc_server import RunningServer
from engram_platform.settings import ServiceSettings


class Closable(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=ServiceSettings)
Svc = TypeVar("Svc", bound=Closable)
T = TypeVar("T")


@asynccontextmanager
async def serving(
    start: Callable[[S, Svc], Awaitable[RunningServer]], settings: S, service: Svc
) -> AsyncIterator[grpc.aio.Channel]:
    """``start(settings, service)`` (a service's ``server.start``; port 0 in ``settings``),
    yield a channel to it; on exit close the channel, stop the server, then close
    ``service``."""
    running = await start(settings, service)
    channel = open_channel(f"127.0.0.1:{running.port}")
    try:
        yield channel
    finally:
        await channel.close()
        await running.stop(0)
        await service.close()


@asynccontextmanager
async def serving_fake(
    add_to_server: Callable[[T, grpc.aio.Server], None], servicer: T
) -> AsyncIterator[grpc.aio.Channel]:
    """``servicer`` (a fake, added with the generated ``add_…Servicer_to_server``) on a
    bare server; yield a plain channel to it, closed and stopped on exit."""
    server = grpc.aio.server()
    add_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(0)
