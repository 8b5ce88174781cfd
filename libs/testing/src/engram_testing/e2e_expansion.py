"""Expansion after ranking and the hybrid_graph mode end to end: real ingest (entity
extraction), graph relations written through Associate, the gateway's Recall. tests/e2e runs it
on the embedded stack, tests/integration/e2e on the servers.

Each test writes its own small corpus under tags of its own, so the right answer is known:
the memories the query matches carry the scope tag, the ones only linked to them do not.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_testing import e2e
from engram_testing.e2e import AUTH, Stub, wait_for_watermark

QUERY = "Which database did we pick for the billing ledger?"


async def store(gateway: Stub, items: list[tuple[str, str]]) -> list[str]:
    """(content, tag) each; returns the ids once ingest applied them."""
    reply = await gateway.StoreBatch(
        gateway_pb2.StoreBatchRequest(
            memories=[common_pb2.MemoryInput(content=c, tags=[t]) for c, t in items]
        ),
        metadata=AUTH,
    )
    await wait_for_watermark(gateway, reply.sequence)
    return list(reply.ids)


async def associate(gateway: Stub, edges: list[tuple[str, str, str, float]]) -> None:
    last = 0
    for source, target, type_, strength in edges:
        r = await gateway.Associate(
            gateway_pb2.AssociateRequest(
                source_id=source, target_id=target, type=type_, strength=strength
            ),
            metadata=AUTH,
        )
        last = max(last, r.sequence)
    await wait_for_watermark(gateway, last)


async def recall(gateway: Stub, **fields: Any) -> gateway_pb2.RecallResponse:
    """These steps have a budget of their own (0.5 s by default); on a loaded machine a step
    can run out of it and the reply says so in ``degraded``: ask again (three times at most)
    so the test checks what the steps do, not how fast this machine is."""
    for _ in range(3):
        reply = await e2e.recall(gateway, **{"query": QUERY, **fields})
        if not {"expand", "graph_rerank"} & set(reply.degraded):
            break
    return reply


class ExpansionEndToEnd(e2e.GatewayFixture):
    """Needs a ``stack`` fixture (a running DevStack)."""

    async def test_relations_expand_into_linked_memories_outside_the_tag_scope(
        self,
        gateway: Stub,
    ) -> None:
        scope, other = f"e2e:expand-{uuid.uuid4().hex[:8]}", "e2e:elsewhere"
        pick, drill, runbook, review, lunch = await store(
            gateway,
            [
                ("We picked Postgres as the database for the billing ledger.", scope),
                ("The billing ledger database failover drill ran on Tuesday.", scope),
                ("The cut-over runbook lists every step in order.", other),
                ("Rollback plan reviewed with the on-call team.", other),
                ("Team lunch moved to Thursday.", other),
            ],
        )
        await associate(
            gateway,
            [
                (pick, runbook, "LEADS_TO", 0.9),
                (pick, review, "RELATES_TO", 0.6),
                (review, drill, "RELATES_TO", 0.6),
                (drill, lunch, "RELATES_TO", 0.1),
            ],
        )
        plain = await recall(gateway, tags=[scope], limit=5)
        assert {r.memory.id for r in plain.results} == {pick, drill}
        assert not any(r.expanded for r in plain.results)

        reply = await recall(
            gateway,
            tags=[scope],
            limit=5,
            expansion=gateway_pb2.Expansion(relations=True, min_strength=0.5),
        )
        seeds = [r.memory.id for r in reply.results if not r.expanded]
        marks = {r.memory.id: (r.expansion, r.expanded_from) for r in reply.results if r.expanded}
        assert set(seeds) == {pick, drill}
        assert marks[runbook] == ("relation", pick)
        assert marks[review][0] == "bridge"
        assert set(marks[review][1].split(",")) == {pick, drill}
        assert lunch not in marks  # strength 0.1 < expansion.min_strength
        score = {r.memory.id: r.score for r in reply.results}
        assert score[runbook] <= score[pick]
        assert "expand" not in reply.degraded

        scoped = await recall(
            gateway,
            tags=[scope],
            limit=5,
            expansion=gateway_pb2.Expansion(relations=True, in_scope=True),
        )
        assert {r.memory.id for r in scoped.results} == {pick, drill}

    async def test_entities_expand_into_memories_sharing_one(self, gateway: Stub) -> None:
        scope = f"e2e:entity-{uuid.uuid4().hex[:8]}"
        pick, same_person, stranger = await store(
            gateway,
            [
                ("For the billing ledger database we went with what Ottilie Vasquez chose.", scope),
                ("Yesterday Ottilie Vasquez flew to the Porto office.", "e2e:elsewhere"),
                ("Yesterday Marguerite Oyelaran flew to the Porto office.", "e2e:elsewhere"),
            ],
        )
        reply = await recall(
            gateway, tags=[scope], limit=5, expansion=gateway_pb2.Expansion(entities=True)
        )
        marks = {r.memory.id: (r.expansion, r.expanded_from) for r in reply.results if r.expanded}
        assert marks.get(same_person) == ("entity", pick), reply.degraded
        assert stranger not in {r.memory.id for r in reply.results}

    async def test_hybrid_graph_reranks_by_pagerank_from_the_seeds(self, gateway: Stub) -> None:
        scope = f"e2e:graph-{uuid.uuid4().hex[:8]}"
        contents = [
            "We picked Postgres as the database for the billing ledger.",
            "The billing ledger database failover drill ran on Tuesday.",
            "Budget spreadsheet for the database team offsite.",
            "Team lunch moved to Thursday.",
            "The printer on floor two is out of toner.",
            "Parking permits renew in March.",
            "The hiring plan for next quarter is drafted.",
            "Quarterly report notes.",  # matches nothing; tied to both seeds
        ]
        ids = await store(gateway, [(c, scope) for c in contents])
        pick, drill, linked = ids[0], ids[1], ids[-1]
        await associate(
            gateway, [(pick, linked, "RELATES_TO", 1.0), (linked, drill, "LEADS_TO", 1.0)]
        )

        graph = await recall(
            gateway,
            tags=[scope],
            limit=8,
            mode=gateway_pb2.RECALL_MODE_HYBRID_GRAPH,
            graph_rerank=gateway_pb2.GraphRerank(alpha=1.0),
        )
        assert {r.memory.id for r in graph.results} == set(ids)
        assert all("ppr" in r.components for r in graph.results)
        order = [r.memory.id for r in graph.results]
        # PageRank alone: the memory linked to both best results ranks among them, above every
        # memory tied to nothing, whatever its fused rank was.
        assert set(order[:3]) == {pick, drill, linked}
        ppr = [r.components["ppr"] for r in graph.results]
        assert ppr == sorted(ppr, reverse=True)
        assert "graph_rerank" not in graph.degraded

    async def test_unknown_expand_type_is_invalid_argument(self, gateway: Stub) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await recall(
                gateway,
                expansion=gateway_pb2.Expansion(relations=True, types=["RELATES_TO", "KNOWS"]),
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "expansion.types[1]" in (err.value.details() or "")
