"""End to end through the public API: candidate generation — several queries in
one recall, decomposition, trending for an empty query, metadata fields found by the
lexical stream.

Mix `CandidateGenerationEndToEnd` into a ``Test*`` class next to a conftest that provides
``stack`` (as for `GatewayEndToEnd`). Each test stores a small handmade corpus under its own
tag and scopes its recalls to it, so the tests share a tenant without seeing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_testing.e2e import AUTH, GatewayFixture, Stub, recall

FILLER = [
    "The team lunch moved to the rooftop terrace",
    "Quarterly planning starts with a review of the roadmap",
    "The printer on the third floor is out of toner again",
    "Someone left an umbrella in the meeting room",
    "The coffee machine was descaled on Monday",
    "A new hire joins the support team next week",
]


def _ts(day: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(datetime(2025, 3, day, 12, tzinfo=UTC))
    return ts


async def _store(
    gateway: Stub, tag: str, items: Sequence[common_pb2.MemoryInput]
) -> tuple[list[str], int]:
    memories = [*items, *(common_pb2.MemoryInput(content=f, tags=[tag]) for f in FILLER)]
    reply = await gateway.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH
    )
    return list(reply.ids)[: len(items)], reply.sequence


class CandidateGenerationEndToEnd(GatewayFixture):
    async def test_queries_find_what_each_asks_for(self, gateway: Stub) -> None:
        tag = "suite:multiquery"
        (ledger, kiln), seq = await _store(
            gateway,
            tag,
            [
                common_pb2.MemoryInput(
                    content="Priya migrated the billing ledger to Postgres", tags=[tag]
                ),
                common_pb2.MemoryInput(content="The pottery kiln reaches 1200 degrees", tags=[tag]),
            ],
        )
        reply = await recall(
            gateway,
            query="billing ledger database",
            queries=["pottery kiln temperature"],
            limit=3,
            tags=[tag],
            min_sequence=seq,
        )
        ranked = [r.memory.id for r in reply.results]
        assert ledger in ranked[:2]
        assert kiln in ranked[:2]
        found = {
            r.memory.id: {k for k in r.streams if k.startswith("query:")} for r in reply.results
        }
        assert "query:0" in found[ledger]
        assert "query:1" in found[kiln]
        assert not reply.degraded

    async def test_decompose_splits_coordinated_names(self, gateway: Stub) -> None:
        tag = "suite:decompose"
        (jon, gina), seq = await _store(
            gateway,
            tag,
            [
                common_pb2.MemoryInput(
                    content="Jon won the regional salsa competition", tags=[tag]
                ),
                common_pb2.MemoryInput(
                    content="Gina entered a tango competition in Buenos Aires", tags=[tag]
                ),
            ],
        )
        reply = await recall(
            gateway,
            query="Did Jon and Gina both enter dance competitions?",
            decompose=True,
            limit=3,
            tags=[tag],
            min_sequence=seq,
        )
        ranked = [r.memory.id for r in reply.results]
        assert {jon, gina} <= set(ranked[:2])
        streams = {k for r in reply.results for k in r.streams}
        assert {"query:1", "query:2"} <= streams  # the two sub-queries ran

    async def test_an_empty_query_is_trending(self, gateway: Stub) -> None:
        tag = "suite:trending"
        (low, high, mid), seq = await _store(
            gateway,
            tag,
            [
                common_pb2.MemoryInput(
                    content="minor note", tags=[tag], importance=0.2, timestamp=_ts(3)
                ),
                common_pb2.MemoryInput(
                    content="key decision", tags=[tag], importance=0.95, timestamp=_ts(1)
                ),
                common_pb2.MemoryInput(
                    content="useful fact", tags=[tag], importance=0.7, timestamp=_ts(2)
                ),
            ],
        )
        by_importance = await recall(gateway, query="", limit=20, tags=[tag], min_sequence=seq)
        ranked = [r.memory.id for r in by_importance.results]
        # The filler has the default importance 0.5: between mid (0.7) and low (0.2).
        assert len(ranked) == 3 + len(FILLER)
        assert ranked[:2] == [high, mid]
        assert ranked[-1] == low
        assert list(by_importance.streams) == ["trending"]
        by_recency = await recall(
            gateway, query="*", sort="recency", limit=20, tags=[tag], min_sequence=seq
        )
        order = [r.memory.id for r in by_recency.results]
        # The filler carries the store's clock (now), so it comes first.
        assert order[-3:] == [low, mid, high]
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await recall(gateway, query="", sort="popular", tags=[tag])
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    async def test_metadata_fields_find_what_the_text_does_not_say(self, gateway: Stub) -> None:
        tag = "suite:metadata"
        meta = struct_pb2.Struct()
        meta.update({"project": "zephyrine"})
        (launch,), seq = await _store(
            gateway,
            tag,
            [
                common_pb2.MemoryInput(
                    content="The launch slipped to Friday", tags=[tag], metadata=meta
                )
            ],
        )
        reply = await recall(
            gateway, query="zephyrine status", limit=3, tags=[tag], min_sequence=seq
        )
        assert reply.results
        assert reply.results[0].memory.id == launch
        # The lexical index holds whitelisted metadata values with the content; scoring's
        # metadata component rewards the match.
        assert "keyword" in reply.results[0].streams
        assert reply.results[0].components["metadata"] > 0

    async def test_focus_and_recency_bias_rank_the_handmade_corpus(self, gateway: Stub) -> None:
        tag = "suite:focus"
        (old, new, runbook, lunch), seq = await _store(
            gateway,
            tag,
            [
                common_pb2.MemoryInput(
                    content="The deploy server is alpha-1", tags=[tag], timestamp=_ts(1)
                ),
                common_pb2.MemoryInput(
                    content="The deploy server is beta-7 now", tags=[tag], timestamp=_ts(20)
                ),
                common_pb2.MemoryInput(
                    content="Deploy checklist: drain, migrate, switch",
                    tags=[tag, "runbook:deploy"],
                    type="Procedure",
                    timestamp=_ts(5),
                ),
                common_pb2.MemoryInput(content="Lunch is at noon", tags=[tag], timestamp=_ts(6)),
            ],
        )
        scoped = {"tags": [tag], "min_sequence": seq, "limit": 4}
        # Asked for the latest, the newer server memory leads the older one (auto bias).
        latest = await recall(gateway, query="which deploy server is the latest", **scoped)
        ranked = [r.memory.id for r in latest.results]
        assert ranked.index(new) < ranked.index(old)
        bias = {r.memory.id: r.components["recency_bias"] for r in latest.results}
        assert bias[new] > bias[old] == 0.0
        off = await recall(
            gateway,
            query="which deploy server is the latest",
            recency_bias=common_pb2.RECENCY_BIAS_OFF,
            **scoped,
        )
        assert all(r.components["recency_bias"] == 0.0 for r in off.results)
        # A pinned focus: the runbook (by tag) and lunch (by id, found by no stream) first.
        focus = common_pb2.Focus(tags=["runbook"], ids=[lunch], pinned=True)
        pinned = await recall(gateway, query="deploy server", focus=focus, **scoped)
        assert [r.memory.id for r in pinned.results][:2] == [lunch, runbook]
        assert pinned.results[0].components["focus_id"] == 1.0
        assert pinned.results[1].components["focus_tag"] == 1.0
        assert not pinned.degraded
