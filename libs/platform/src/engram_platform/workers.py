"""Several processes of one service on one port: one process runs Python on one core (the
GIL), so a CPU-bound service that keeps no state of its own starts N of them.

The parent holds the port (bound with SO_REUSEPORT, never listening, so nothing else takes
it between two children), starts each child with the ``spawn`` method (no grpc state is
forked), and supervises: a child that dies is started again, unless children died
`MAX_RESTARTS` times within `RESTART_WINDOW_S` (a crash loop: the parent stops the others
and exits 1, so the orchestrator sees the failure). SIGTERM or SIGINT to the parent is
passed to every child, which drains its calls as one process would (``grace_s``).

Each child serves its own /metrics: child ``i`` on the metrics port + ``i`` (0 stays 0).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import functools
import logging
import multiprocessing
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, TypeVar

from engram_platform.logs import configure_logging
from engram_platform.metrics import configure_metrics
from engram_platform.settings import ServiceSettings
from engram_platform.telemetry import configure_tracing

log = logging.getLogger(__name__)
S = TypeVar("S", bound=ServiceSettings)
Worker = Callable[[int, int], None]  # (index, port): runs one child until it is told to stop
Serve = Callable[[S], Coroutine[Any, Any, None]]  # a service's server.serve

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
_PR_SET_PDEATHSIG = 1
_sharing_port = False


def sharing_port() -> bool:
    """Whether this process is one of several serving one port (its server must set
    SO_REUSEPORT, which a lone server leaves off so a second one on its port fails)."""
    return _sharing_port


def worker_settings(settings: S, index: int, port: int) -> S:
    """``settings`` of child ``index``: the parent's port, the metrics port + index."""
    metrics = settings.metrics
    metrics_port = metrics.port + index if metrics.port else 0
    return settings.model_copy(
        update={"port": port, "metrics": metrics.model_copy(update={"port": metrics_port})}
    )


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to host:port with SO_REUSEPORT (port 0: a free one), not listening:
    it keeps the port for the children and fails at once when a lone server holds it."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _child(worker: Worker, index: int, port: int) -> None:
    global _sharing_port
    _sharing_port = True
    if sys.platform == "linux":  # a parent killed outright takes its children with it
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    worker(index, port)


class _Supervisor:
    def __init__(self, name: str, worker: Worker, port: int, grace_s: float) -> None:
        self._name = name
        self._worker = worker
        self._port = port
        self._grace_s = grace_s
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[int, BaseProcess] = {}
        self._deaths: collections.deque[float] = collections.deque(maxlen=MAX_RESTARTS)
        self.stopping = False

    def start(self, index: int) -> None:
        child = self._context.Process(
            target=_child, args=(self._worker, index, self._port), name=f"{self._name}-{index}"
        )
        child.start()
        self._children[index] = child
        log.info("engram-%s worker %d started (pid %s)", self._name, index, child.pid)

    def watch(self) -> int:
        """Restart children as they die until told to stop (0) or a crash loop (1)."""
        while not self.stopping:
            # A short wait: the signal handler only sets a flag, seen here.
            wait([c.sentinel for c in self._children.values()], timeout=0.2)
            for index, child in list(self._children.items()):
                if self.stopping or child.is_alive():
                    continue
                log.error(
                    "engram-%s worker %d (pid %s) exited with %s",
                    self._name,
                    index,
                    child.pid,
                    child.exitcode,
                )
                if self._crash_loop():
                    log.error("engram-%s: workers keep dying; stopping", self._name)
                    self.stop()
                    return 1
                self.start(index)
        self.stop()
        return 0

    def _crash_loop(self) -> bool:
        now = time.monotonic()
        self._deaths.append(now)
        return len(self._deaths) == MAX_RESTARTS and now - self._deaths[0] < RESTART_WINDOW_S

    def stop(self) -> None:
        """SIGTERM to every child, then wait for each to drain (SIGKILL past the grace)."""
        self.stopping = True
        for child in self._children.values():
            if child.is_alive():
                child.terminate()
        deadline = time.monotonic() + self._grace_s + 10.0  # drain, then close its clients
        for child in self._children.values():
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                log.error("engram-%s worker pid %s did not stop; killing", self._name, child.pid)
                child.kill()
                child.join()


def supervise(name: str, settings: ServiceSettings, workers: int, worker: Worker) -> int:
    """Run ``workers`` children of ``worker`` on settings.host:settings.port until SIGTERM
    or SIGINT (exit status 0) or a crash loop (1). ``worker`` must be a module-level
    function: the children are started with ``spawn``."""
    held = reserve_port(settings.host, settings.port)
    port = int(held.getsockname()[1])
    supervisor = _Supervisor(name, worker, port, settings.grace_s)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        supervisor.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        for index in range(workers):
            supervisor.start(index)
        log.info("engram-%s: %d workers on %s:%d", name, workers, settings.host, port)
        return supervisor.watch()
    finally:
        held.close()


def main(name: str, settings: S, workers: int, serve: Serve[S]) -> None:
    """A service's process: ``serve`` here, or with ``workers`` > 1 that many children of
    it on the one port under a supervisor (whose exit status ends the process)."""
    if workers <= 1:
        run(name, settings, serve)
        return
    configure_logging(name, settings.log_level, settings.log_format)
    child = functools.partial(_run_child, name, type(settings), serve)
    sys.exit(supervise(name, settings, workers, child))


def run(name: str, settings: S, serve: Serve[S]) -> None:
    """One process: logs, traces and metrics as settings say, then serve until stopped."""
    configure_logging(name, settings.log_level, settings.log_format)
    configure_tracing(name, settings.tracing)
    configure_metrics(name, settings)
    asyncio.run(serve(settings))


def _run_child(name: str, settings_type: type[S], serve: Serve[S], index: int, port: int) -> None:
    # Module-level (and given module-level arguments) so ``spawn`` can pickle it; the child
    # reads its settings from the environment as the parent did.
    run(name, worker_settings(settings_type(), index, port), serve)
