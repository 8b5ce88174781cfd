"""Worker processes on one port (engram_platform.workers), through the test-only pid server
run as the services run: a parent supervising children that share the port."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import grpc
import psutil  # type: ignore[import-untyped]  # no stubs in the lock
import pytest

from engram_platform import grpc_server, workers
from engram_platform.settings import MetricsSettings, ServiceSettings
from engram_testing import pid_server
from engram_testing.nats_server import free_port

# Connections the kernel spreads over two children: all on one has odds 2**-39.
CONNECTIONS = 40


def _env(port: int, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "ENGRAM_PIDTEST_PORT": str(port),
        "ENGRAM_PIDTEST_WORKERS": "2",
        "ENGRAM_PIDTEST_GRACE_S": "5",
        **extra,
    }


def _channel(port: int) -> grpc.aio.Channel:
    """A channel with a connection of its own (grpc shares them between channels to one
    target otherwise)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)


async def _pid_of(port: int) -> int:
    """The pid of the process a new connection to ``port`` reaches."""
    async with _channel(port) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{pid_server.SERVICE}/Get"
        )
        reply = await call(b"", wait_for_ready=True, timeout=60)
    return int(reply)


async def _pids(port: int) -> set[int]:
    return {await _pid_of(port) for _ in range(CONNECTIONS)}


async def _serving(port: int, children: int) -> set[int]:
    """The pids behind ``port`` once ``children`` distinct ones answer (a child just
    started may not listen yet)."""
    for _ in range(50):
        pids = await _pids(port)
        if len(pids) == children:
            return pids
    raise AssertionError(f"never {children} processes on the port: {pids}")


@pytest.fixture
def supervised() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_testing.pid_server"],
        env=_env(port),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


async def test_children_share_the_port_are_restarted_and_drain_on_sigterm(
    supervised: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = supervised
    first = await _serving(port, 2)
    parent = psutil.Process(proc.pid)
    assert first <= {c.pid for c in parent.children()}
    assert proc.pid not in first

    killed = min(first)
    os.kill(killed, signal.SIGKILL)
    for _ in range(50):
        now = await _serving(port, 2)
        if killed not in now:
            break
    assert killed not in now
    assert len(now) == 2
    assert (first - {killed}) <= now

    async with _channel(port) as channel:
        slow: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            f"/{pid_server.SERVICE}/Slow"
        )
        call = slow(b"", wait_for_ready=True, timeout=60)
        stream = aiter(call)
        serving = int(await anext(stream))  # the call is in flight
        proc.send_signal(signal.SIGTERM)
        assert int(await anext(stream)) == serving  # finished while its process drained
        assert await call.code() == grpc.StatusCode.OK
    out, _ = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")
    assert not any(psutil.pid_exists(p) and psutil.Process(p).ppid() == proc.pid for p in now)


def test_a_crash_loop_stops_the_parent_with_status_1(tmp_path: object) -> None:
    # Children fail at start (TLS files missing), every one: the parent gives up.
    env = _env(
        free_port(),
        ENGRAM_PIDTEST_TLS__CERT_FILE="/nonexistent/cert.pem",
        ENGRAM_PIDTEST_TLS__KEY_FILE="/nonexistent/key.pem",
    )
    done = subprocess.run(
        [sys.executable, "-m", "engram_testing.pid_server"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout.decode(errors="replace")
    assert b"workers keep dying" in done.stdout + done.stderr


def test_child_settings_share_the_port_and_step_the_metrics_port() -> None:
    settings = ServiceSettings(port=0, metrics=MetricsSettings(port=9500))
    child = workers.worker_settings(settings, 2, 7000)
    assert (child.port, child.metrics.port) == (7000, 9502)
    free = ServiceSettings(metrics=MetricsSettings(port=0))
    assert workers.worker_settings(free, 3, 7000).metrics.port == 0


async def test_a_lone_server_keeps_its_port_to_itself() -> None:
    running = await grpc_server.start_server(
        "lone", ServiceSettings(port=0), lambda _server: None, []
    )
    try:
        with pytest.raises(OSError, match="in use"):
            workers.reserve_port("127.0.0.1", running.port)
        with pytest.raises(OSError, match="cannot bind"):
            await grpc_server.start_server(
                "second", ServiceSettings(port=running.port), lambda _server: None, []
            )
    finally:
        await running.stop(0)


def test_reserve_port_picks_a_free_port_children_can_share() -> None:
    held = workers.reserve_port("127.0.0.1", 0)
    try:
        port = held.getsockname()[1]
        assert port > 0
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", port))
        other.close()
    finally:
        held.close()
