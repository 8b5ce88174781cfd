"""Worker tests against a real nats-server: the event log, fast settings, the real process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext

from engram_platform import jetstream as jsm
from engram_platform.pull_worker import PullWorker
from engram_platform.settings import NatsSettings, ServiceSettings
from engram_testing.nats_server import NatsServer

S = TypeVar("S", bound=ServiceSettings)
W = TypeVar("W", bound=PullWorker)

# Short polls and retries so a test waits milliseconds, not the production seconds; progress
# logs stay out of the way.
FAST_WORKER: dict[str, object] = {
    "fetch_timeout_s": 0.2,
    "retry_base_s": 0.05,
    "retry_max_s": 0.2,
    "progress_interval_s": 60.0,
}


def worker_settings(cls: type[S], server: NatsServer, **fields: object) -> S:
    """A worker's ``cls`` Settings on ``server`` with `FAST_WORKER`; ``fields`` override."""
    values: dict[str, object] = {"nats": NatsSettings(url=server.url), **FAST_WORKER, **fields}
    return cls(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def log_connection(server: NatsServer) -> AsyncIterator[JetStreamContext]:
    """A JetStream context on ``server`` with the engram streams in place, drained on exit."""
    nc, js = await jsm.connect(NatsSettings(url=server.url), "test")
    try:
        await jsm.ensure_streams(js, NatsSettings(url=server.url))
        yield js
    finally:
        await nc.drain()


@asynccontextmanager
async def running_worker(
    nats: NatsSettings, make: Callable[[Client, JetStreamContext], W], name: str
) -> AsyncIterator[W]:
    """The worker ``make`` builds on its own connection, started and running; on exit it is
    stopped (it finishes the batch in hand) and the connection drained."""
    nc, js = await jsm.connect(nats, name)
    worker = make(nc, js)
    await worker.start()
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await nc.drain()


async def ready_then_sigterm(
    module: str,
    env: Mapping[str, str],
    *,
    ready_timeout_s: float = 30.0,
    stop_timeout_s: float = 10.0,
) -> int:
    """Run ``python -m module`` with ``env`` added to ours until it logs "ready" on stderr,
    send it SIGTERM and return its exit code. AssertionError when it exits before it is
    ready; a process still running after the timeouts is killed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=os.environ | dict(env), stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(ready_timeout_s):
            while b"ready" not in (line := await proc.stderr.readline()):
                if not line:
                    raise AssertionError(f"{module} exited before it was ready")
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(stop_timeout_s):
            return await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
