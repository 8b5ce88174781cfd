"""A service's gRPC server in the test's own process, on a free port."""

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
