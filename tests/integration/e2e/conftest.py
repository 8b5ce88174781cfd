"""The seven services on real OpenSearch, Neo4j, Redis and NATS, once per session.

A fresh tenant and index prefix per session keep runs on long-lived servers apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from engram_testing import localservers
from engram_testing.devstack import DevStack, start_stack
from engram_testing.e2e import ServerStack, gateway_tokens, model_env
from engram_testing.e2e_tenants import gone_tenant, with_gone


@pytest.fixture(scope="session")
def server_stack(
    tmp_path_factory: pytest.TempPathFactory,
    opensearch_url: str,
    neo4j_url: str,
    redis_url: str,
    nats_url: str,
) -> Iterator[ServerStack]:
    run = uuid.uuid4().hex[:8]
    tenant, prefix = f"e2e-{run}", f"engram-e2e-{run}"
    env = {
        **model_env(),
        **localservers.service_env(),
        # Second tenants: the import target and the one the deletion check deletes.
        "ENGRAM_GATEWAY_TOKENS": with_gone(
            gateway_tokens(tenant, f"{tenant}-import"), gone_tenant(tenant)
        ),
        "ENGRAM_LEXICAL_OPENSEARCH__INDEX_PREFIX": prefix,
    }
    stack = start_stack(
        tmp_path_factory.mktemp("engram-servers-home"),
        gateway_port=0,
        extra_env=env,
        nats_url=nats_url,
    )
    yield ServerStack(stack, tenant, prefix)
    stack.stop()


@pytest.fixture(scope="session")
def stack(server_stack: ServerStack) -> DevStack:
    return server_stack.stack
