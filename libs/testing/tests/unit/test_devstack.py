"""How `make run` and the e2e stacks start services: ports that cannot clash, and a
service counted as up only when it is the one answering on its port."""

from __future__ import annotations

import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engram_testing.devstack import SERVICE_NAMES, DevStack, Process, _wait_serving, text_log_env
from engram_testing.nats_server import free_ports, start_nats, wait_for_port


def test_free_ports_are_distinct() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64


def _health_server(serving: str) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    for name in ("", serving):
        servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def _process(name: str, port: int, tmp_path: Path, seconds: float) -> Process:
    log = tmp_path / f"{name}.log"
    log.write_text("engram-lexical: cannot bind\n")
    popen = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    return Process(name=name, popen=popen, log_path=log, port=port)


def test_another_service_on_the_port_is_not_taken_for_this_one(tmp_path: Path) -> None:
    # The vector service holds the port the lexical service was given; lexical's own
    # process dies (it could not bind), and the stack must say so.
    server, port = _health_server(SERVICE_NAMES["vector"])
    proc = _process("lexical", port, tmp_path, 1.0)
    try:
        with pytest.raises(RuntimeError, match="engram-lexical exited with code 0"):
            _wait_serving(proc, timeout_s=10.0)
    finally:
        server.stop(0)
        proc.popen.wait()


def test_the_service_itself_on_its_port_is_up(tmp_path: Path) -> None:
    server, port = _health_server(SERVICE_NAMES["lexical"])
    proc = _process("lexical", port, tmp_path, 30.0)
    try:
        _wait_serving(proc, timeout_s=10.0)
        assert proc.popen.poll() is None
    finally:
        server.stop(0)
        proc.popen.kill()
        proc.popen.wait()


def test_make_run_logs_text_unless_a_service_asks_otherwise() -> None:
    env = text_log_env({"ENGRAM_GATEWAY_LOG_FORMAT": "json"})
    assert "ENGRAM_GATEWAY_LOG_FORMAT" not in env  # what the user set stays
    assert env["ENGRAM_INGEST_LOG_FORMAT"] == "text"
    assert len(env) == len(SERVICE_NAMES) - 1


def _bare_stack(tmp_path: Path) -> DevStack:
    nats = start_nats(tmp_path / "nats")
    return DevStack(home=tmp_path, nats_url=nats.url, nats=nats, ports={}, env={})


def test_kill_pause_resume_act_on_the_one_process(tmp_path: Path) -> None:
    stack = _bare_stack(tmp_path)
    stack.processes["lexical"] = _process("lexical", 0, tmp_path, 30.0)
    stack.processes["graph"] = _process("graph", 0, tmp_path, 30.0)
    try:
        stack.pause_service("graph")
        stack.kill_service("lexical")
        assert "lexical" not in stack.processes
        graph = stack.processes["graph"].popen
        assert Path(f"/proc/{graph.pid}/stat").read_text().split()[2] == "T"  # stopped
        stack.resume_service("graph")
        assert Path(f"/proc/{graph.pid}/stat").read_text().split()[2] != "T"
    finally:
        stack.pause_service("graph")
        stack.stop()  # a paused process is woken to stop
    assert graph.returncode is not None


def test_nats_restarts_on_the_same_port_and_store(tmp_path: Path) -> None:
    stack = _bare_stack(tmp_path)
    url = stack.nats_url
    try:
        stack.stop_nats()
        assert not wait_for_port("127.0.0.1", int(url.rsplit(":", 1)[1]), 0.2)
        stack.start_nats()
        assert stack.nats is not None
        assert (stack.nats.url, stack.nats.store_dir) == (url, tmp_path / "nats")
    finally:
        stack.stop()
