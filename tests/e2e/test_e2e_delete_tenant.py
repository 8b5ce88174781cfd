"""Tenant deletion on the embedded stack (the check: engram_testing.e2e_tenants).

The module restarts the stack's gateway with a token for the tenant to delete beside the dev
tokens, so the other modules' calls keep working.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from engram.gateway.v1 import admin_pb2_grpc, gateway_pb2_grpc
from engram_platform.devstack import DevStack
from engram_testing.e2e_tenants import Api, check_tenant_deletion, tokens

GONE = "tenant-gone"
TOKENS = tokens("default", GONE)


@pytest.fixture(scope="module")
def gateway(stack: DevStack) -> DevStack:
    if stack.env.get("ENGRAM_GATEWAY_TOKENS") != TOKENS:
        stack.stop_service("gateway")
        stack.env = {**stack.env, "ENGRAM_GATEWAY_TOKENS": TOKENS}
        stack.start_service("gateway")
    return stack


@pytest.fixture
async def api(gateway: DevStack) -> AsyncIterator[Api]:
    async with grpc.aio.insecure_channel(gateway.gateway_address) as channel:
        yield Api(
            gateway_pb2_grpc.MemoryServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
            gateway,
        )


async def test_a_deleted_tenant_leaves_nothing_and_the_other_is_untouched(api: Api) -> None:
    await check_tenant_deletion(api, GONE)
