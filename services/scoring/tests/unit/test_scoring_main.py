"""``python -m engram_scoring`` as a process, in worker processes on one port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import grpc
import psutil  # type: ignore[import-untyped]  # no stubs in the lock
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_scoring.handlers import SERVICE_NAME
from engram_testing.nats_server import free_port


def _two_free_ports() -> int:
    """A port p with p + 1 free too (worker 1's /metrics)."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports")


def test_two_workers_serve_one_port_each_with_its_own_metrics_port() -> None:
    port, metrics = free_port(), _two_free_ports()
    env = {
        **os.environ,
        "ENGRAM_SCORING_PORT": str(port),
        "ENGRAM_SCORING_WORKERS": "2",
        "ENGRAM_SCORING_METRICS__PORT": str(metrics),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_scoring"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE_NAME),
                wait_for_ready=True,
                timeout=60,
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        children = psutil.Process(proc.pid).children()
        assert len([c for c in children if "spawn_main" in " ".join(c.cmdline())]) == 2
        # Each child serves its own /metrics, on a port of its own.
        for i in (0, 1):
            assert "process_cpu_time" in _metrics(metrics + i)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode(errors="replace")


def _metrics(port: int) -> str:
    for _ in range(300):  # worker 1 may still be starting
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no /metrics on {port}")
