"""Starting, waiting for and stopping local servers, with stand-in processes."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from engram_testing import localservers
from engram_testing.localservers import Server
from engram_testing.nats_server import free_port


def fake(
    name: str, script: str, *, mark: str | None = "fake ready on", timeout: float = 20.0
) -> Server:
    port = free_port()
    return Server(
        name=name,
        port=port,
        url=f"fake://127.0.0.1:{port}",
        ready_mark=mark,
        start_timeout_s=timeout,
        command=lambda d: [sys.executable, "-c", script],
    )


SERVES = "import time; print('fake ready on', flush=True); time.sleep(60)"


def test_up_waits_for_the_mark_then_down_stops_it(tmp_path: Path) -> None:
    server = fake("alpha", SERVES)
    run = localservers.launch(server, tmp_path)
    assert run is not None
    took = localservers.wait_all([run])
    assert set(took) == {"alpha"}
    pid = int((tmp_path / "servers" / "alpha" / "pid").read_text())
    assert localservers.launch(server, tmp_path) is None  # already running: left alone
    assert localservers.stop(server, tmp_path)
    assert run.process.wait(timeout=10) is not None
    assert not (tmp_path / "servers" / "alpha" / "pid").exists()
    assert not localservers.stop(server, tmp_path)
    assert pid > 0


def test_a_server_that_dies_while_starting_is_named_with_its_log(tmp_path: Path) -> None:
    server = fake("bravo", "import sys; print('no java here'); sys.exit(3)")
    run = localservers.launch(server, tmp_path)
    assert run is not None
    with pytest.raises(RuntimeError) as err:
        localservers.wait_all([run])
    message = str(err.value)
    assert "bravo exited with code 3" in message
    log = tmp_path / "servers" / "bravo" / "bravo.log"
    assert str(log) in message
    assert "no java here" in log.read_text()


def test_a_server_that_never_gets_ready_times_out_and_is_stopped(tmp_path: Path) -> None:
    server = fake("charlie", "import time; time.sleep(60)", timeout=0.5)
    run = localservers.launch(server, tmp_path)
    assert run is not None
    with pytest.raises(RuntimeError, match=r"charlie did not become ready .* within 0s"):
        localservers.wait_all([run])
    assert run.process.wait(timeout=10) is not None


def test_a_port_taken_by_something_else_is_refused_with_the_setting_to_change(
    tmp_path: Path,
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = Server("delta", port, "x", None, 5.0, lambda d: [sys.executable, "-V"])
        with pytest.raises(RuntimeError, match="ENGRAM_SERVERS_DELTA_PORT"):
            localservers.launch(server, tmp_path)


def test_the_poms_and_launchers_are_found_from_the_checkout() -> None:
    deploy = localservers.deploy_dir()
    for component, launcher in (("opensearch", "OpenSearchLauncher"), ("neo4j", "Neo4jLauncher")):
        assert (deploy / component / "pom.xml").is_file()
        assert (deploy / component / f"{launcher}.java").is_file()


def test_service_env_points_every_backend_at_its_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_SERVERS_OPENSEARCH_PORT", "19999")
    env = localservers.service_env()
    assert env["ENGRAM_LEXICAL_BACKEND"] == "opensearch"
    assert env["ENGRAM_LEXICAL_OPENSEARCH__URL"] == "http://127.0.0.1:19999"
    assert env["ENGRAM_GRAPH_BACKEND"] == "neo4j"
