"""A test-only service run by `engram_platform.workers` the way the services run it
(``python -m engram_testing.pid_server``, settings ENGRAM_PIDTEST_*): ``/test.Pid/Get``
answers the pid of the process that took the call; ``/test.Pid/Slow`` streams it twice,
``SLOW_S`` apart, so a caller that has the first knows its call is in flight (while the
server stops, say). No service's API carries a pid."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import grpc
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from engram_platform import grpc_server, workers
from engram_platform.settings import MetricsSettings, ServiceSettings

NAME = "pidtest"
SERVICE = "test.Pid"
SLOW_S = 1.0


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_PIDTEST_", env_nested_delimiter="__", extra="ignore"
    )

    workers: int = Field(1, ge=1, description="Processes serving the port.")
    metrics: MetricsSettings = Field(  # nothing to record, and no port to clash on
        default_factory=lambda: MetricsSettings(exporter="none")
    )


async def _pid(_request: bytes, _context: Any) -> bytes:
    return str(os.getpid()).encode()


async def _slow(request: bytes, context: Any) -> AsyncIterator[bytes]:
    yield await _pid(request, context)
    await asyncio.sleep(SLOW_S)
    yield await _pid(request, context)


def _register(server: grpc.aio.Server) -> None:
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Get": grpc.unary_unary_rpc_method_handler(_pid),
        "Slow": grpc.unary_stream_rpc_method_handler(_slow),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


async def _serve(settings: Settings) -> None:
    await grpc_server.serve(NAME, settings, _register, [SERVICE])


def main() -> None:
    settings = Settings()
    workers.main(NAME, settings, settings.workers, _serve)


if __name__ == "__main__":
    main()
