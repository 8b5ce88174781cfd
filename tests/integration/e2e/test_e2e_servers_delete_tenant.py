"""Tenant deletion on real OpenSearch, Neo4j, Redis and NATS (the check:
engram_testing.e2e_tenants): the server adapters' delete_tenant, end to end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from engram.gateway.v1 import admin_pb2_grpc, gateway_pb2_grpc
from engram_testing.e2e import ServerStack
from engram_testing.e2e_tenants import Api, check_tenant_deletion, gone_tenant


@pytest.fixture
async def api(server_stack: ServerStack) -> AsyncIterator[Api]:
    stack = server_stack.stack
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        yield Api(
            gateway_pb2_grpc.MemoryServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
            stack,
        )


async def test_a_deleted_tenant_leaves_nothing_in_the_servers(
    api: Api, server_stack: ServerStack
) -> None:
    await check_tenant_deletion(api, gone_tenant(server_stack.tenant))
