"""The end-to-end suite on real servers, and proof that the data went to them."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from neo4j import AsyncGraphDatabase
from redis.asyncio import Redis

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_testing.e2e import AUTH, GatewayEndToEnd, ServerStack, Stub, wait_for_watermark


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: dict[str, object] = json.load(reply)
    return body


class TestServerStack(GatewayEndToEnd):
    async def test_the_data_lives_in_the_servers(
        self,
        server_stack: ServerStack,
        gateway: Stub,
        opensearch_url: str,
        neo4j_url: str,
        redis_url: str,
    ) -> None:
        """A misnamed setting would leave a service on its embedded backend and every
        other test green; look inside each server instead."""
        stored = await gateway.Store(
            gateway_pb2.StoreRequest(
                memory=common_pb2.MemoryInput(content="Noor keeps the spare keys at Omar's")
            ),
            metadata=AUTH,
        )
        await wait_for_watermark(gateway, stored.sequence)
        await gateway.Recall(
            gateway_pb2.RecallRequest(query="where are the spare keys", limit=3),
            metadata=AUTH,
        )

        url = f"{opensearch_url}/{server_stack.index_prefix}*/_count"
        assert (await asyncio.to_thread(_get_json, url))["count"] >= 1

        async with AsyncGraphDatabase.driver(neo4j_url) as driver:
            records, _, _ = await driver.execute_query(
                "MATCH (n) WHERE any(k IN keys(n) WHERE toStringOrNull(n[k]) CONTAINS $id) "
                "RETURN count(n) AS n",
                id=stored.id,
            )
        assert records[0]["n"] >= 1

        redis = Redis.from_url(redis_url)
        try:
            keys = [key async for key in redis.scan_iter(count=1000)]
        finally:
            await redis.aclose()
        assert any(server_stack.tenant.encode() in key for key in keys), keys[:20]
