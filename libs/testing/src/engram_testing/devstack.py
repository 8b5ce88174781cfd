"""`make run`: nats-server and the seven services as local processes on embedded backends.

Also used by the end-to-end tests, which start the same stack on free ports in a
temporary ENGRAM_HOME. State stays under $ENGRAM_HOME between runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from engram.gateway.v1 import gateway_pb2
from engram.graph.v1 import graph_pb2
from engram.lexical.v1 import lexical_pb2
from engram.scoring.v1 import scoring_pb2
from engram.vector.v1 import vector_pb2
from engram_platform import health
from engram_platform.grpc_server import worker_health_name
from engram_platform.health import SERVING
from engram_platform.settings import engram_home
from engram_testing import localservers
from engram_testing.nats_server import NatsServer, free_ports, start_nats

GRPC_SERVICES = ("vector", "lexical", "graph", "scoring", "gateway")
WORKERS = ("ingest", "consolidate")
SERVICE_NAMES = {  # what each answers SERVING to: its gRPC service; a worker once consuming
    "vector": vector_pb2.DESCRIPTOR.services_by_name["VectorService"].full_name,
    "lexical": lexical_pb2.DESCRIPTOR.services_by_name["LexicalService"].full_name,
    "graph": graph_pb2.DESCRIPTOR.services_by_name["GraphService"].full_name,
    "scoring": scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name,
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
    **{name: worker_health_name(name) for name in WORKERS},
}
# Stores first, the gateway last: each starts once what it calls is SERVING.
START_ORDER = ("vector", "lexical", "graph", "scoring", "ingest", "consolidate", "gateway")
DEV_TOKEN = "dev-token"
# A cluster-admin token (tenant "*"): what spans tenants, e.g. AdminService.Rebuild.
DEV_ADMIN_TOKEN = "dev-admin-token"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    port: int = 0


@dataclass
class DevStack:
    home: Path
    nats_url: str
    nats: NatsServer | None  # None: a nats-server this stack did not start
    ports: dict[str, int]
    env: dict[str, str]
    processes: dict[str, Process] = field(default_factory=dict)
    python: str = sys.executable  # the interpreter the services run on
    metrics_ports: dict[str, int] = field(default_factory=dict)  # each one's /metrics

    @property
    def gateway_address(self) -> str:
        return f"127.0.0.1:{self.ports['gateway']}"

    def metrics_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.metrics_ports[name]}/metrics"

    def start_service(self, name: str, timeout_s: float = 60.0) -> None:
        log_dir = self.home / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                [self.python, "-m", f"engram_{name}"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        proc = Process(name=name, popen=popen, log_path=log_path, port=self.ports[name])
        self.processes[name] = proc
        _wait_serving(proc, timeout_s)

    def stop_service(self, name: str, timeout_s: float = 15.0) -> None:
        proc = self.processes.pop(name, None)
        if proc is None or proc.popen.poll() is not None:
            return
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()

    def kill_service(self, name: str) -> None:
        """SIGKILL, as a crash: nothing is flushed, nothing is acked on the way out."""
        proc = self.processes.pop(name, None)
        if proc is not None and proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait()

    def pause_service(self, name: str, timeout_s: float = 5.0) -> None:
        """SIGSTOP: the process keeps its port and connections but answers nothing (a hang).
        Returns once the kernel shows it stopped, so what follows meets the hang."""
        popen = self.processes[name].popen
        popen.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{popen.pid}/stat")
        deadline = time.monotonic() + timeout_s
        # The state follows the command name, which may hold spaces: read after its ")".
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not stop within {timeout_s}s")
            time.sleep(0.01)

    def resume_service(self, name: str) -> None:
        self.processes[name].popen.send_signal(signal.SIGCONT)

    def stop_nats(self) -> None:
        if self.nats is None:
            raise RuntimeError("this stack did not start its nats-server")
        self.nats.stop()

    def start_nats(self) -> None:
        """Start nats-server again on the same port and store: the log survives."""
        if self.nats is None:
            raise RuntimeError("this stack did not start its nats-server")
        port = int(self.nats.url.rsplit(":", 1)[1])
        self.nats = start_nats(self.nats.store_dir, port=port)

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            proc = self.processes[name]
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGCONT)  # a paused process cannot stop
            self.stop_service(name)
        if self.nats is not None:
            self.nats.stop()


@contextmanager
def replica(
    stack: DevStack, name: str, settings: Mapping[str, str] | None = None
) -> Iterator[DevStack]:
    """Another process of ``name`` on ``stack``'s log and stores, on ports of its own (a
    second replica of a Deployment), with ``settings`` added to its environment; stopped on
    exit. Yields a view of the stack that owns only this process."""
    port, metrics_port = free_ports(2)
    prefix = f"ENGRAM_{name.upper()}_"
    env = {
        **stack.env,
        f"{prefix}PORT": str(port),
        f"{prefix}METRICS__PORT": str(metrics_port),
        **(settings or {}),
    }
    other = replace(
        stack,
        nats=None,
        ports={**stack.ports, name: port},
        metrics_ports={**stack.metrics_ports, name: metrics_port},
        env=env,
        processes={},
    )
    other.start_service(name)
    try:
        yield other
    finally:
        other.stop()


def _fail(proc: Process, why: str) -> RuntimeError:
    tail = proc.log_path.read_text(errors="replace").splitlines()[-25:]
    return RuntimeError(f"engram-{proc.name} {why}; log {proc.log_path}:\n" + "\n".join(tail))


def _wait_serving(proc: Process, timeout_s: float) -> None:
    """Until the process serves its own service on its port (asked by name: another
    server that took the port answers NOT_FOUND, so it is never taken for this one)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise _fail(proc, f"exited with code {proc.popen.returncode}")
        if health.status(f"127.0.0.1:{proc.port}", SERVICE_NAMES[proc.name], 1.0) == SERVING:
            return
        time.sleep(0.1)
    raise _fail(proc, f"not SERVING within {timeout_s:.0f}s")


def stack_env(
    home: Path,
    nats_url: str,
    ports: Mapping[str, int],
    token: str,
    extra: Mapping[str, str],
    metrics_ports: Mapping[str, int] | None = None,  # else each service's default port
) -> dict[str, str]:
    addr = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    env = dict(os.environ)
    env["ENGRAM_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    for name in (*GRPC_SERVICES, *WORKERS):
        env[f"ENGRAM_{name.upper()}_PORT"] = str(ports[name])
        if metrics_ports:
            env[f"ENGRAM_{name.upper()}_METRICS__PORT"] = str(metrics_ports[name])
    for consumer in ("GATEWAY", "INGEST", "CONSOLIDATE"):
        env[f"ENGRAM_{consumer}_NATS__URL"] = nats_url
        for store in ("vector", "lexical", "graph"):
            env[f"ENGRAM_{consumer}_{store.upper()}_ADDR"] = addr[store]
    env["ENGRAM_GATEWAY_SCORING_ADDR"] = addr["scoring"]
    env.setdefault(
        "ENGRAM_GATEWAY_TOKENS", f"{token}=default:read+write+admin;{DEV_ADMIN_TOKEN}=*:admin"
    )
    env.update(extra)
    return env


def text_log_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`make run`'s logs are for people reading $ENGRAM_HOME/logs: plain text, unless a
    service's ``LOG_FORMAT`` is set. The end-to-end tests keep JSON, like a deployment."""
    names = (f"ENGRAM_{name.upper()}_LOG_FORMAT" for name in (*GRPC_SERVICES, *WORKERS))
    return {name: "text" for name in names if name not in environ}


def start_stack(
    home: Path | None = None,
    gateway_port: int = 50051,
    nats_port: int = 0,
    extra_env: Mapping[str, str] | None = None,
    nats_url: str | None = None,
) -> DevStack:
    """Start nats-server (unless ``nats_url`` names a running one), then the services in
    dependency order; raise naming what failed."""
    home = home or engram_home()
    nats = None if nats_url else start_nats(home / "data" / "nats", port=nats_port)
    url = nats.url if nats else str(nats_url)
    names = (*GRPC_SERVICES, *WORKERS)
    free = free_ports(2 * len(names))
    ports = dict(zip(names, free[: len(names)], strict=True))
    ports["gateway"] = gateway_port or ports["gateway"]
    metrics_ports = dict(zip(names, free[len(names) :], strict=True))
    env = stack_env(home, url, ports, DEV_TOKEN, extra_env or {}, metrics_ports)
    stack = DevStack(
        home=home, nats_url=url, nats=nats, ports=ports, env=env, metrics_ports=metrics_ports
    )
    try:
        for name in START_ORDER:
            stack.start_service(name)
    except BaseException:
        stack.stop()
        raise
    return stack


def _start(port: int, servers: bool, home: Path) -> DevStack:
    """The stack `make run` (or with ``servers``, `make run-servers`) starts."""
    if not servers:
        print(f"engram: starting nats-server and 7 services (state in {home}) ...", flush=True)
        return start_stack(home, gateway_port=port, extra_env=text_log_env(os.environ))
    print("engram: starting OpenSearch, Neo4j, Redis and NATS ...", flush=True)
    for name, took_s in localservers.up(list(localservers.servers()), home).items():
        state = "already running" if took_s is None else f"ready in {took_s:.1f}s"
        print(f"  {name:<11} {state}", flush=True)
    print(f"engram: starting 7 services on them (state in {home}) ...", flush=True)
    return start_stack(
        home,
        gateway_port=port,
        extra_env={**text_log_env(os.environ), **localservers.service_env()},
        nats_url=localservers.servers()["nats"].url,
    )


def _banner(stack: DevStack, took: float, servers: bool) -> str:
    """Where everything is, the tokens, and a first Store and Recall to try."""
    addr = stack.gateway_address
    metrics = "\n            ".join(
        f"{name:<12}{stack.metrics_url(name)}" for name in stack.metrics_ports
    )
    servers_note = " (the servers keep running: make down-servers)" if servers else ""
    return f"""
engram is up in {took:.1f}s.
  gateway   {addr}   (engram.gateway.v1.MemoryService, reflection on)
  token     {DEV_TOKEN}   (tenant "default", scopes read+write+admin)
            {DEV_ADMIN_TOKEN}   (cluster admin, tenant "*": Rebuild, RebuildStatus)
  logs      {stack.home / "logs"}
  nats      {stack.nats_url}
  metrics   {metrics}

Try it:
  grpcurl -plaintext -H 'authorization: Bearer {DEV_TOKEN}' \\
    -d '{{"memory": {{"content": "Sarah prefers Postgres", "tags": ["project:atlas"]}}}}' \\
    {addr} engram.gateway.v1.MemoryService/Store
  grpcurl -plaintext -H 'authorization: Bearer {DEV_TOKEN}' \\
    -d '{{"query": "which database does Sarah like?", "limit": 3}}' \\
    {addr} engram.gateway.v1.MemoryService/Recall
  or, without grpcurl:  uv run engram --help

Ctrl-C stops the services{servers_note}."""


def _run_until_stopped(stack: DevStack) -> None:
    """Until SIGINT or SIGTERM, or until a service exits; then stop them all."""
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop:
            for proc in stack.processes.values():
                if proc.popen.poll() is not None:
                    print(
                        f"engram-{proc.name} exited ({proc.popen.returncode}); see {proc.log_path}"
                    )
                    stop = True
            time.sleep(0.5)
    finally:
        print("engram: stopping ...", flush=True)
        stack.stop()
        print("engram: stopped.", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run Engram locally.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENGRAM_PORT", "50051")))
    parser.add_argument(
        "--servers",
        action="store_true",
        help="on real OpenSearch, Neo4j, Redis and NATS (started first, left running)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    stack = _start(args.port, args.servers, engram_home())
    print(_banner(stack, time.monotonic() - started, args.servers), flush=True)
    _run_until_stopped(stack)


if __name__ == "__main__":
    main()
