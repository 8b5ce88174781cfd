"""Expansion after ranking (service/expand.py) and the hybrid_graph mode: the pure parts,
then recalls through the gateway's fakes and its gRPC surface."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import Filter, Hit, Memory, Relation
from engram_core.scoring import ScoredCandidate
from engram_gateway.adapters.recall_codec import ProtoRecallCodec
from engram_gateway.service import RecallMode
from engram_gateway.service.expand import (
    EXPANSION_COMPONENT,
    ExpandConfig,
    ExpandedCandidate,
    ExpandRequest,
    Link,
    entity_candidate,
    expansion_of,
    link_candidate,
    merge_expanded,
    plan_expansion,
    relation_links,
)
from engram_gateway.service.pagerank import PPR_COMPONENT
from engram_gateway.service.ports import RecallResult


def _id(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


def scored(id: str, score: float, entities: tuple[str, ...] = ()) -> ScoredCandidate:
    return ScoredCandidate(Memory(id=id, tenant="t", content=id, entities=entities), score, {}, {})


def rel(a: str, b: str, strength: float, type: str = "RELATES_TO") -> Relation:
    return Relation(a, b, type, strength)


# --- pure: links, scores, validation --------------------------------------------------------


def test_bridges_come_first_by_summed_strength_then_by_seed_score_times_strength() -> None:
    seeds = [scored("s1", 1.0), scored("s2", 0.5)]
    links = relation_links(
        seeds,
        [
            rel("s1", "single", 0.9),
            rel("weak-bridge", "s1", 0.3),  # either direction links
            rel("s2", "weak-bridge", 0.3),
            rel("s1", "bridge", 0.5),
            rel("s2", "bridge", 0.6),
            rel("s2", "other", 1.0),  # 0.5 × 1.0 < 1.0 × 0.9
        ],
        types=(),
        min_strength=0.0,
        per_seed=10,
    )
    assert [link.id for link in links] == ["bridge", "weak-bridge", "single", "other"]
    assert links[0].seeds == (("s2", 0.6), ("s1", 0.5))
    assert links[0].bridge
    assert links[0].strength == pytest.approx(1.1)


def test_links_are_bounded_per_seed_and_filtered() -> None:
    seeds = [scored("s1", 1.0), scored("s2", 0.9)]
    relations = [
        rel("s1", "a", 0.9),
        rel("s1", "b", 0.8),
        rel("s1", "c", 0.7, "LEADS_TO"),
        rel("s1", "weak", 0.1),
        rel("s1", "s2", 1.0),  # seeds are not expanded into each other
        rel("s1", "known", 1.0),  # already a result
        rel("s1", "entity", 1.0, "MENTIONS"),
    ]
    top2 = relation_links(
        seeds, relations, types=(), min_strength=0.0, per_seed=2, exclude={"known"}
    )
    assert [link.id for link in top2] == ["a", "b"]
    strong = relation_links(seeds, relations, types=(), min_strength=0.5, per_seed=10)
    assert [link.id for link in strong] == ["known", "a", "b", "c"]
    typed = relation_links(seeds, relations, types=("LEADS_TO",), min_strength=0.0, per_seed=10)
    assert [link.id for link in typed] == ["c"]


def test_expanded_scores_never_exceed_their_seed() -> None:
    seeds = {"s1": scored("s1", 0.8), "s2": scored("s2", 0.4)}
    m = Memory(id="n", tenant="t", content="n")
    single = link_candidate(Link("n", (("s1", 0.5),)), m, seeds)
    assert (single.score, single.expansion, single.expanded_from) == (0.4, "relation", "s1")
    assert single.components == {EXPANSION_COMPONENT: 0.5}
    bridge = link_candidate(Link("n", (("s2", 0.7), ("s1", 0.6))), m, seeds)
    assert bridge.score == pytest.approx(0.8)  # best seed × min(1, 1.3)
    assert (bridge.expansion, bridge.expanded_from) == ("bridge", "s2,s1")
    small = link_candidate(Link("n", (("s1", 0.2), ("s2", 0.2))), m, seeds)
    assert small.score == pytest.approx(0.8 * 0.4)


def test_entity_expansion_takes_the_best_seed_sharing_an_entity() -> None:
    seeds = [scored("s1", 0.9, ("people:ana",)), scored("s2", 0.6, ("places:oslo",))]
    m = Memory(id="n", tenant="t", content="n", entities=("places:oslo",))
    e = entity_candidate(m, seeds, factor=0.5)
    assert (e.score, e.expansion, e.expanded_from) == (0.3, "entity", "s2")
    unknown = entity_candidate(replace(m, entities=()), seeds, factor=0.5)
    assert unknown.expanded_from == "s1"


def test_merge_keeps_ranked_first_on_ties() -> None:
    a, b = scored("a", 1.0), scored("b", 0.5)
    e = ExpandedCandidate(Memory(id="e", tenant="t", content=""), 0.5, {}, {}, "relation", "a")
    assert [s.memory.id for s in merge_expanded([a, b], [e])] == ["a", "b", "e"]
    assert expansion_of(e) == ("relation", "a")
    assert expansion_of(a) is None


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (ExpandRequest(types=("RELATES_TO", "NOPE")), "expansion.types[1]"),
        (ExpandRequest(per_seed=-1), "expansion.per_seed"),
        (ExpandRequest(limit=101), "expansion.limit"),
        (ExpandRequest(min_strength=1.5), "expansion.min_strength"),
        (ExpandRequest(min_importance=float("nan")), "expansion.min_importance"),
    ],
)
def test_plan_refuses_bad_fields_naming_them(req: ExpandRequest, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        plan_expansion(req, ExpandConfig(), 100)
    assert err.value.field == field


def test_plan_takes_defaults_for_zero() -> None:
    o = plan_expansion(
        ExpandRequest(relations=True, types=("leads_to",)), ExpandConfig(per_seed=4), 100
    )
    assert (o.per_seed, o.limit, o.types, o.on) == (4, 10, ("LEADS_TO",), True)
    assert not plan_expansion(ExpandRequest(), ExpandConfig(), 100).on


# --- through the gateway (fakes) ------------------------------------------------------------


async def _recall(h: Any, query: str = "tea garden", **kw: Any) -> RecallResult:
    return await h.recall(query, **kw)


def _ids(result: RecallResult) -> list[str]:
    return [s.memory.id for s in result.results]


def _marks(result: RecallResult) -> dict[str, tuple[str, str]]:
    return {s.memory.id: e for s in result.results if (e := expansion_of(s)) is not None}


SEED1, SEED2, NEIGH, BRIDGE, WEAK, FAR = (_id(i) for i in range(1, 7))


def _world(h: Any) -> None:
    """Two memories match "tea garden"; the others match nothing and are only linked."""
    h.world.put(
        h.memory(SEED1, "tea garden in kyoto", tags=["trip:japan"]),
        h.memory(SEED2, "a tea garden tour", tags=["trip:japan"]),
        h.memory(NEIGH, "the kettle we bought there", tags=["shopping"], importance=0.8),
        h.memory(BRIDGE, "ceramic cups from both visits", tags=["trip:japan"]),
        h.memory(WEAK, "someone mentioned the weather", tags=["trip:japan"], importance=0.2),
        h.memory(FAR, "the kettle handle broke later", tags=["shopping"]),
    )
    h.world.relations += [
        (h.tenant, rel(SEED1, NEIGH, 0.8)),
        (h.tenant, rel(SEED1, BRIDGE, 0.6)),
        (h.tenant, rel(BRIDGE, SEED2, 0.6, "LEADS_TO")),
        (h.tenant, rel(SEED2, WEAK, 0.2)),
        (h.tenant, rel(NEIGH, FAR, 0.9)),  # two hops from a seed: never expanded
    ]


async def test_relation_expansion_adds_marked_neighbours_below_their_seeds(harness: Any) -> None:
    h = harness
    _world(h)
    plain = await _recall(h)
    assert set(_ids(plain)) == {SEED1, SEED2}

    result = await _recall(h, expand=ExpandRequest(relations=True))
    marks = _marks(result)
    assert marks == {
        BRIDGE: ("bridge", f"{SEED1},{SEED2}"),
        NEIGH: ("relation", SEED1),
        WEAK: ("relation", SEED2),
    }
    assert FAR not in _ids(result)
    assert _ids(result)[:2] == _ids(plain)  # the seeds keep their places at the top
    by_id = {s.memory.id: s for s in result.results}
    assert by_id[NEIGH].score == pytest.approx(by_id[SEED1].score * 0.8)
    assert all(s.score <= by_id[SEED1].score for s in result.results)
    assert "expand" not in result.degraded


async def test_expansion_bounds_and_filters(harness: Any) -> None:
    h = harness
    _world(h)
    strong = await _recall(h, expand=ExpandRequest(relations=True, min_strength=0.5))
    assert set(_marks(strong)) == {BRIDGE, NEIGH}
    one = await _recall(h, expand=ExpandRequest(relations=True, limit=1))
    assert set(_marks(one)) == {BRIDGE}  # bridges first
    per_seed = await _recall(h, expand=ExpandRequest(relations=True, per_seed=1))
    assert set(_marks(per_seed)) == {NEIGH, BRIDGE}  # s1's strongest, s2's strongest
    important = await _recall(h, expand=ExpandRequest(relations=True, min_importance=0.5))
    assert set(_marks(important)) == {BRIDGE, NEIGH}
    typed = await _recall(h, expand=ExpandRequest(relations=True, types=("LEADS_TO",)))
    assert _marks(typed) == {BRIDGE: ("relation", SEED2)}


async def test_tag_scope_binds_expansion_only_when_asked(harness: Any) -> None:
    h = harness
    _world(h)
    out = await _recall(h, tags=["trip:japan"], expand=ExpandRequest(relations=True))
    assert NEIGH in _marks(out)  # tagged shopping, linked to a japan seed
    scoped = await _recall(
        h, tags=["trip:japan"], expand=ExpandRequest(relations=True, in_scope=True)
    )
    assert set(_marks(scoped)) == {BRIDGE, WEAK}
    # exclude_tags always hold.
    excluded = await _recall(h, exclude_tags=["shopping"], expand=ExpandRequest(relations=True))
    assert NEIGH not in _ids(excluded)


async def test_expanded_memories_must_be_current(harness: Any) -> None:
    h = harness
    _world(h)
    head = _id(9)
    h.world.put(
        replace(h.world.memories[(h.tenant, WEAK)], archived=True),
        h.memory(head, "the new kettle", tags=["shopping"]),
    )
    h.world.relations.append((h.tenant, rel(NEIGH, head, 1.0, "EVOLVED_INTO")))
    result = await _recall(h, expand=ExpandRequest(relations=True))
    ids = _ids(result)
    assert WEAK not in ids  # archived
    assert NEIGH not in ids
    assert head in ids
    assert _marks(result)[head] == ("relation", SEED1)


async def test_entity_expansion_through_graph_search(harness: Any) -> None:
    h = harness
    _world(h)
    for mid, ents in ((SEED1, ("places:kyoto",)), (FAR, ("places:kyoto",))):
        h.world.put(replace(h.world.memories[(h.tenant, mid)], entities=ents))
    asked: list[tuple[Sequence[str], Filter]] = []
    search = h.graph.search

    async def by_entity(
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
        timeout: float | None = None,
    ) -> list[Hit]:
        if keywords:
            return list(await search(tenant, entity_keys, keywords, flt, limit, timeout))
        asked.append((tuple(entity_keys), flt))
        return [Hit(m.id, 1.0) for m in h.world.of(tenant) if set(m.entities) & set(entity_keys)]

    h.graph.search = by_entity
    result = await _recall(h, tags=["trip:japan"], expand=ExpandRequest(entities=True))
    assert _marks(result) == {FAR: ("entity", SEED1)}
    by_id = {s.memory.id: s for s in result.results}
    assert by_id[FAR].score == pytest.approx(0.5 * by_id[SEED1].score)
    assert asked == [(("places:kyoto",), replace(asked[0][1], tags=()))]  # scope without tags


async def test_a_failed_expansion_degrades_and_keeps_the_ranking(harness: Any) -> None:
    h = harness
    _world(h)
    relations = h.graph.relations
    calls = 0

    async def failing(
        tenant: str, ids: Sequence[str], origin: str = "", timeout: float | None = None
    ) -> Any:
        nonlocal calls
        calls += 1
        if calls >= 3:  # the relations step and the state step go through; expansion fails
            raise Unavailable("graph down")
        return await relations(tenant, ids, origin, timeout)

    h.graph.relations = failing
    result = await _recall(h, expand=ExpandRequest(relations=True))
    assert "expand" in result.degraded
    assert set(_ids(result)) == {SEED1, SEED2}


async def test_expansion_and_alpha_are_part_of_the_cache_key(harness: Any) -> None:
    h = harness
    _world(h)
    await _recall(h)
    assert _marks(await _recall(h, expand=ExpandRequest(relations=True)))
    assert not _marks(await _recall(h))
    a = await _recall(h, mode=RecallMode.HYBRID_GRAPH, graph_alpha=0.2)
    b = await _recall(h, mode=RecallMode.HYBRID_GRAPH, graph_alpha=0.9)
    assert [s.score for s in a.results] != [s.score for s in b.results]


def test_the_cache_codec_keeps_the_marks() -> None:
    e = ExpandedCandidate(Memory(id=_id(1), tenant="t", content="x"), 0.5, {}, {}, "bridge", "a,b")
    r = RecallResult(results=(e, scored(_id(2), 0.4)), streams=("vector",), degraded=())
    codec = ProtoRecallCodec()
    back = codec.decode(codec.encode(r))
    assert [expansion_of(s) for s in back.results] == [("bridge", "a,b"), None]


# --- hybrid_graph ---------------------------------------------------------------------------


async def test_hybrid_graph_lifts_a_result_sharing_a_rare_entity_with_the_seeds(
    new_harness: Any,
) -> None:
    h = new_harness(graph_rerank={"seeds": 2})
    kyoto = ("places:kyoto",)
    h.world.put(
        h.memory(_id(1), "tea garden kyoto trip", entities=kyoto),
        h.memory(_id(2), "tea garden kyoto visit", entities=kyoto),
        h.memory(_id(3), "tea garden trip"),  # matches more words, tied to nothing
        h.memory(_id(4), "tea ceremony", entities=kyoto),  # matches less, shares kyoto
        h.memory(_id(5), "tea", entities=("people:ana",)),
    )
    hybrid = await _recall(h, query="tea garden kyoto trip", limit=3)
    assert _ids(hybrid) == [_id(1), _id(2), _id(3)]
    graph = await _recall(
        h, query="tea garden kyoto trip", limit=3, mode=RecallMode.HYBRID_GRAPH, graph_alpha=0.5
    )
    assert _ids(graph) == [_id(1), _id(2), _id(4)]
    assert all(PPR_COMPONENT in s.components for s in graph.results)
    # The rerank saw a pool wider than the limit.
    assert h.ranker.calls[-1]["limit"] >= 5


async def test_hybrid_graph_degrades_to_hybrid_when_the_graph_fails(harness: Any) -> None:
    h = harness
    _world(h)
    h.graph.fail = Unavailable("graph down")
    result = await _recall(h, mode=RecallMode.HYBRID_GRAPH)
    assert "graph_rerank" in result.degraded
    assert set(_ids(result)) == {SEED1, SEED2}


# --- gRPC -----------------------------------------------------------------------------------


async def test_grpc_expansion_fields_and_marks(client: Any) -> None:
    _world(client.harness)
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(
            query="tea garden",
            expansion=gateway_pb2.Expansion(
                relations=True,
                min_strength=0.5,
                types=["relates_to", "LEADS_TO"],
                per_seed=5,
                limit=5,
            ),
        ),
        metadata=client.auth(),
    )
    marks = {r.memory.id: (r.expanded, r.expansion, r.expanded_from) for r in reply.results}
    assert marks[NEIGH] == (True, "relation", SEED1)
    assert marks[BRIDGE] == (True, "bridge", f"{SEED1},{SEED2}")
    assert marks[SEED1] == (False, "", "")
    assert WEAK not in marks


async def test_grpc_hybrid_graph_mode(client: Any) -> None:
    _world(client.harness)
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(
            query="tea garden",
            mode=gateway_pb2.RECALL_MODE_HYBRID_GRAPH,
            graph_rerank=gateway_pb2.GraphRerank(alpha=0.4),
        ),
        metadata=client.auth(),
    )
    assert {r.memory.id for r in reply.results} == {SEED1, SEED2}
    assert all(PPR_COMPONENT in r.components for r in reply.results)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"expansion": {"types": ["RELATES_TO", "FRIENDS_WITH"]}}, "expansion.types[1]"),
        ({"expansion": {"per_seed": -2}}, "expansion.per_seed"),
        ({"expansion": {"limit": 500}}, "expansion.limit"),
        ({"expansion": {"min_strength": -0.1}}, "expansion.min_strength"),
        ({"expansion": {"min_importance": 2.0}}, "expansion.min_importance"),
        ({"graph_rerank": {"alpha": 1.5}}, "graph_rerank.alpha"),
        ({"graph_rerank": {"alpha": -1.0}}, "graph_rerank.alpha"),
        ({"mode": 99}, "mode"),
    ],
)
async def test_grpc_bad_input_names_the_field(
    client: Any, fields: dict[str, Any], name: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.Recall(
            gateway_pb2.RecallRequest(query="tea", **fields), metadata=client.auth()
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(err.value) == name
