"""The end-to-end suite on real servers, and proof that the data went to them."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from neo4j import AsyncGraphDatabase
from redis.asyncio import Redis

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_testing.e2e import (
    AUTH,
    GatewayEndToEnd,
    ServerStack,
    Stub,
    store_corpus,
    wait_for_watermark,
)
from engram_testing.e2e_candidates import CandidateGenerationEndToEnd
from engram_testing.e2e_expansion import ExpansionEndToEnd
from engram_testing.e2e_transfer import TransferEndToEnd
from engram_testing.nats_server import free_port


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

    async def test_recall_degrades_when_opensearch_is_unreachable(
        self, server_stack: ServerStack, gateway: Stub
    ) -> None:
        """The lexical service stays up but its server is gone: recall answers from the
        other streams and names lexical as degraded; the stored data is untouched."""
        ids, seq = await store_corpus(gateway, "suite:opensearch-down")
        await wait_for_watermark(gateway, seq)
        stack = server_stack.stack
        served_by = stack.env["ENGRAM_LEXICAL_OPENSEARCH__URL"]
        stack.stop_service("lexical")
        stack.env["ENGRAM_LEXICAL_OPENSEARCH__URL"] = f"http://127.0.0.1:{free_port()}"
        try:
            stack.start_service("lexical")
            reply = await gateway.Recall(
                gateway_pb2.RecallRequest(
                    query="Priya billing ledger Postgres", limit=3, tags=["suite:opensearch-down"]
                ),
                metadata=AUTH,
                timeout=30,
            )
            assert "lexical" in reply.degraded
            assert reply.results[0].memory.id == ids[42]
        finally:
            stack.stop_service("lexical")
            stack.env["ENGRAM_LEXICAL_OPENSEARCH__URL"] = served_by
            stack.start_service("lexical")
        reply = await gateway.Recall(
            gateway_pb2.RecallRequest(
                query="Priya billing ledger Postgres", limit=3, tags=["suite:opensearch-down"]
            ),
            metadata=AUTH,
            timeout=30,
        )
        assert not reply.degraded
        assert reply.results[0].memory.id == ids[42]


class TestServerCandidates(CandidateGenerationEndToEnd):
    """Several queries, trending, metadata fields on OpenSearch/Neo4j/Redis."""


class TestServerExpansion(ExpansionEndToEnd):
    """Relation and entity expansion and hybrid_graph over Neo4j relations."""


class TestServerTransfer(TransferEndToEnd):
    """List over the server vector store's scan and Neo4j relations; export and import."""
