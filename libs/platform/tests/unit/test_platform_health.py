"""`python -m engram_platform.health`: exit 0 only when the named service is SERVING."""

from __future__ import annotations

import asyncio

import pytest

from engram_platform.grpc_server import start_server
from engram_platform.health import main, status
from engram_platform.settings import ServiceSettings
from engram_testing.nats_server import free_ports

NAME = "engram.test.v1.Thing"


async def test_serving_then_not_serving_once_the_server_stops(
    capsys: pytest.CaptureFixture[str],
) -> None:
    running = await start_server("test", ServiceSettings(port=0), lambda _s: None, [NAME])
    address = f"127.0.0.1:{running.port}"
    try:
        assert await asyncio.to_thread(main, [address, NAME]) == 0
        assert capsys.readouterr().out == f"{address} {NAME}: SERVING\n"
        assert await asyncio.to_thread(main, [address]) == 0  # the server as a whole
        assert await asyncio.to_thread(main, [address, "engram.other.v1.Thing"]) == 1
        assert capsys.readouterr().out.endswith(": NOT_FOUND\n")
    finally:
        await running.stop(0)
    assert await asyncio.to_thread(status, address, NAME, 1.0) == "UNAVAILABLE"


def test_nothing_listening_is_a_failure_that_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)
    assert main([f"127.0.0.1:{port}", "--timeout", "0.5"]) == 1
    assert capsys.readouterr().out == f"127.0.0.1:{port} (server): UNAVAILABLE\n"
