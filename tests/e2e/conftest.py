"""The whole embedded stack (nats-server + seven services) on free ports, once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engram_testing.devstack import DevStack, start_stack
from engram_testing.e2e import gateway_tokens, model_env
from engram_testing.e2e_tenants import with_gone

# The dev tenant, the import target (transfer) and the tenant the deletion check deletes.
TOKENS = with_gone(gateway_tokens("default", "imported"), "tenant-gone")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    running = start_stack(
        tmp_path_factory.mktemp("engram-home"),
        gateway_port=0,
        extra_env={**model_env(), "ENGRAM_GATEWAY_TOKENS": TOKENS},
    )
    yield running
    running.stop()
