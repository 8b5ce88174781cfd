"""Tenant deletion on the embedded stack (the check: engram_testing.e2e_tenants); the
stack's gateway knows a token for the tenant it deletes (tests/e2e/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from engram.gateway.v1 import admin_pb2_grpc, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.e2e_tenants import Api, check_tenant_deletion

GONE = "tenant-gone"


@pytest.fixture
async def api(stack: DevStack) -> AsyncIterator[Api]:
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        yield Api(
            gateway_pb2_grpc.MemoryServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
            stack,
        )


async def test_a_deleted_tenant_leaves_nothing_and_the_other_is_untouched(api: Api) -> None:
    await check_tenant_deletion(api, GONE)
