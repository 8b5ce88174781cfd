"""Proto <-> domain for the gateway's own types (Memory itself: engram_platform.convert)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.protobuf import timestamp_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram.scoring.v1 import scoring_pb2
from engram_core import validation as v
from engram_core.errors import InvalidArgument
from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    TenantErased,
)
from engram_core.model import Memory
from engram_core.scoring import (
    Candidate,
    Focus,
    Fusion,
    RecencyBias,
    ScoredCandidate,
    StreamScore,
)
from engram_core.state import StateMode
from engram_core.validation import Limits, MemoryInput, RawTimestamp
from engram_gateway.service import (
    FeedQuery,
    ItemResult,
    ListPage,
    ListRequest,
    RecallMode,
    RecallRequest,
    RelatedItem,
    StoreOutcome,
)
from engram_gateway.service.expand import ExpandedCandidate, ExpandRequest, expansion_of
from engram_gateway.service.ports import RecallResult
from engram_gateway.service.stats import TenantStats
from engram_platform.convert import (
    focus_from_proto,
    focus_to_proto,
    memory_from_proto,
    memory_to_proto,
    merge_memory,
    recency_bias_from_proto,
    recency_bias_to_proto,
    relation_to_proto,
    struct_to_dict,
    tag_match_from_proto,
    tag_mode_from_proto,
)

_FUSION: Mapping[int, Fusion | None] = {
    gateway_pb2.FUSION_UNSPECIFIED: None,
    gateway_pb2.FUSION_WEIGHTED: Fusion.WEIGHTED,
    gateway_pb2.FUSION_RRF: Fusion.RRF,
}
_SCORING_FUSION: Mapping[Fusion | None, scoring_pb2.Fusion.ValueType] = {
    None: scoring_pb2.FUSION_UNSPECIFIED,
    Fusion.WEIGHTED: scoring_pb2.FUSION_WEIGHTED,
    Fusion.RRF: scoring_pb2.FUSION_RRF,
}
_MODES: Mapping[int, RecallMode] = {
    gateway_pb2.RECALL_MODE_UNSPECIFIED: RecallMode.HYBRID,
    gateway_pb2.RECALL_MODE_HYBRID: RecallMode.HYBRID,
    gateway_pb2.RECALL_MODE_VECTOR: RecallMode.VECTOR,
    gateway_pb2.RECALL_MODE_BM25: RecallMode.BM25,
    gateway_pb2.RECALL_MODE_GRAPH: RecallMode.GRAPH,
    gateway_pb2.RECALL_MODE_HYBRID_GRAPH: RecallMode.HYBRID_GRAPH,
}
_STATE_MODES: Mapping[int, StateMode | None] = {
    common_pb2.STATE_MODE_UNSPECIFIED: None,
    common_pb2.STATE_MODE_CURRENT: StateMode.CURRENT,
    common_pb2.STATE_MODE_ALL: StateMode.ALL,
}
_TAG_MODES = (common_pb2.TAG_MODE_UNSPECIFIED, common_pb2.TAG_MODE_ANY, common_pb2.TAG_MODE_ALL)
_TAG_MATCHES = (
    common_pb2.TAG_MATCH_UNSPECIFIED,
    common_pb2.TAG_MATCH_EXACT,
    common_pb2.TAG_MATCH_PREFIX,
)


def _raw_ts(ts: timestamp_pb2.Timestamp) -> RawTimestamp:
    # Kept raw: converting first would fail on out-of-range values without naming the field.
    return RawTimestamp(ts.seconds, ts.nanos)


def memory_input_from_proto(p: common_pb2.MemoryInput) -> MemoryInput:
    return MemoryInput(
        id=p.id,
        content=p.content,
        type=p.type,
        tags=tuple(p.tags),
        importance=p.importance if p.HasField("importance") else None,
        confidence=p.confidence if p.HasField("confidence") else None,
        metadata=struct_to_dict(p.metadata, finite=False) if p.HasField("metadata") else None,
        timestamp=_raw_ts(p.timestamp) if p.HasField("timestamp") else None,
        t_valid=_raw_ts(p.t_valid) if p.HasField("t_valid") else None,
        t_invalid=_raw_ts(p.t_invalid) if p.HasField("t_invalid") else None,
        embedding=tuple(p.embedding),
    )


def fusion_from_proto(value: int) -> Fusion | None:
    # proto3 enums are open: an unknown number arrives as is.
    if value not in _FUSION:
        raise InvalidArgument("fusion", f"unknown fusion {value}")
    return _FUSION[value]


def mode_from_proto(value: int) -> RecallMode:
    if value not in _MODES:
        raise InvalidArgument("mode", f"unknown recall mode {value}")
    return _MODES[value]


def state_mode_from_proto(value: int) -> StateMode | None:
    if value not in _STATE_MODES:
        raise InvalidArgument("state_mode", f"unknown state mode {value}")
    return _STATE_MODES[value]


def fusion_to_scoring(value: Fusion | None) -> scoring_pb2.Fusion.ValueType:
    return _SCORING_FUSION[value]


def list_request_from_proto(p: gateway_pb2.ListRequest) -> ListRequest:
    if p.tag_mode not in _TAG_MODES:
        raise InvalidArgument("tag_mode", f"unknown tag mode {p.tag_mode}")
    if p.tag_match not in _TAG_MATCHES:
        raise InvalidArgument("tag_match", f"unknown tag match {p.tag_match}")
    return ListRequest(
        tags=tuple(p.tags),
        tag_mode=tag_mode_from_proto(p.tag_mode),
        tag_match=tag_match_from_proto(p.tag_match),
        exclude_tags=tuple(p.exclude_tags),
        types=tuple(p.types),
        exclude_types=tuple(p.exclude_types),
        start=p.start,
        end=p.end,
        include_archived=p.include_archived,
        cursor=p.cursor,
        page_size=p.page_size,
        include_relations=p.include_relations,
    )


def list_page_to_proto(page: ListPage) -> gateway_pb2.ListResponse:
    return gateway_pb2.ListResponse(
        memories=[memory_to_proto(m) for m in page.memories],
        relations=[relation_to_proto(r) for r in page.relations],
        cursor=page.cursor,
    )


def recall_request_from_proto(p: gateway_pb2.RecallRequest) -> RecallRequest:
    if p.tag_mode not in _TAG_MODES:
        raise InvalidArgument("tag_mode", f"unknown tag mode {p.tag_mode}")
    if p.tag_match not in _TAG_MATCHES:
        raise InvalidArgument("tag_match", f"unknown tag match {p.tag_match}")
    return RecallRequest(
        query=p.query,
        limit=p.limit,
        tags=tuple(p.tags),
        tag_mode=tag_mode_from_proto(p.tag_mode),
        tag_match=tag_match_from_proto(p.tag_match),
        exclude_tags=tuple(p.exclude_tags),
        types=tuple(p.types),
        start=p.start,
        end=p.end,
        min_sequence=p.min_sequence,
        fusion=fusion_from_proto(p.fusion),
        include_archived=p.include_archived,
        mode=mode_from_proto(p.mode),
        time_query=p.time_query,
        timezone=p.timezone,
        state_mode=state_mode_from_proto(p.state_mode),
        diversify_by=p.diversify_by,
        max_per_group=p.max_per_group,
        token_budget=p.token_budget,
        min_score=p.min_score,
        exclude_types=tuple(p.exclude_types),
        hyde=p.hyde if p.HasField("hyde") else None,
        rerank=p.rerank if p.HasField("rerank") else None,
        expand=ExpandRequest(
            relations=p.expansion.relations,
            entities=p.expansion.entities,
            per_seed=p.expansion.per_seed,
            limit=p.expansion.limit,
            min_strength=p.expansion.min_strength,
            min_importance=p.expansion.min_importance,
            in_scope=p.expansion.in_scope,
            types=tuple(p.expansion.types),
        ),
        graph_alpha=p.graph_rerank.alpha,
        queries=tuple(p.queries),
        per_query_limit=p.per_query_limit,
        decompose=p.decompose if p.HasField("decompose") else None,
        sort=p.sort,
        focus=focus_from_proto(p.focus),
        recency_bias=recency_bias_from_proto(p.recency_bias),
        embedding=tuple(p.embedding),
        profile=p.profile,
    )


def _streams_to_proto(streams: Mapping[str, StreamScore]) -> dict[str, common_pb2.StreamScore]:
    return {n: common_pb2.StreamScore(score=s.score, rank=s.rank) for n, s in streams.items()}


def scored_to_proto(s: ScoredCandidate) -> common_pb2.ScoredMemory:
    out = common_pb2.ScoredMemory(
        memory=memory_to_proto(s.memory),
        score=s.score,
        components=dict(s.components),
        streams=_streams_to_proto(s.streams),
    )
    expanded = expansion_of(s)
    if expanded is not None:
        out.expanded = True
        out.expansion, out.expanded_from = expanded
    return out


def scored_from_proto(p: common_pb2.ScoredMemory, memory: Memory | None = None) -> ScoredCandidate:
    """``memory``: the caller's own copy of ``p.memory``, used instead of decoding it."""
    memory = memory if memory is not None else memory_from_proto(p.memory)
    components = dict(p.components)
    streams = {n: StreamScore(s.score, s.rank) for n, s in p.streams.items()}
    if p.expanded:
        return ExpandedCandidate(memory, p.score, components, streams, p.expansion, p.expanded_from)
    return ScoredCandidate(memory=memory, score=p.score, components=components, streams=streams)


def rank_request(
    query: str,
    candidates: Sequence[Candidate],
    fusion: Fusion | None,
    limit: int,
    query_tags: Sequence[str],
    focus: Focus | None = None,
    recency_bias: RecencyBias | None = None,
    profile: str = "",
) -> scoring_pb2.RankRequest:
    """The scoring request for ``candidates``, each memory slim (SCORED_FIELDS)."""
    request = scoring_pb2.RankRequest(
        query=query,
        fusion=fusion_to_scoring(fusion),
        limit=limit,
        query_tags=list(query_tags),
        focus=focus_to_proto(focus) if focus else None,
        recency_bias=recency_bias_to_proto(recency_bias),
        profile=profile,
    )
    # Filled in place: a candidate message built apart and then copied into the request
    # parsed each memory once more and copied it twice, hundreds of times per recall.
    for c in candidates:
        out = request.candidates.add(relation=c.relation)
        merge_memory(out.memory, c.memory, scored_only=True)
        for name, s in c.streams.items():
            stream = out.streams[name]
            stream.score, stream.rank = s.score, s.rank
        out.neighbours.update(c.neighbours)
    return request


def recall_result_to_proto(r: RecallResult) -> gateway_pb2.RecallResponse:
    return gateway_pb2.RecallResponse(
        results=[scored_to_proto(s) for s in r.results],
        degraded=list(r.degraded),
        streams=list(r.streams),
        query_ms=r.query_ms,
        context=r.context,
        context_tokens=r.context_tokens,
        cut=dict(r.cut),
        escalated=r.escalated,
        models=list(r.models),
        models_failed=list(r.models_failed),
    )


def recall_result_from_proto(p: gateway_pb2.RecallResponse) -> RecallResult:
    return RecallResult(
        results=tuple(scored_from_proto(s) for s in p.results),
        streams=tuple(p.streams),
        degraded=tuple(p.degraded),
        query_ms=p.query_ms,
        context=p.context,
        context_tokens=p.context_tokens,
        cut=dict(p.cut),
        escalated=p.escalated,
        models=tuple(p.models),
        models_failed=tuple(p.models_failed),
    )


def related_to_proto(items: list[RelatedItem]) -> gateway_pb2.RelatedResponse:
    return gateway_pb2.RelatedResponse(
        related=[
            gateway_pb2.RelatedMemory(
                memory=memory_to_proto(i.memory), type=i.type, strength=i.strength, depth=i.depth
            )
            for i in items
        ]
    )


def stats_to_proto(view: TenantStats) -> gateway_pb2.StatsResponse:
    s = view.stats
    return gateway_pb2.StatsResponse(
        tenant=s.tenant,
        counts=s.counts,
        watermark=s.watermark,
        last_sequence=s.last_sequence,
        dead_letters=view.dead_letters,
    )


def store_result_to_proto(r: ItemResult) -> gateway_pb2.StoreResult:
    if r.error is not None:
        return gateway_pb2.StoreResult(code=r.error.code, message=r.error.message)
    return gateway_pb2.StoreResult(id=r.id, sequence=r.sequence, duplicate=r.duplicate)


def store_outcome_to_proto(out: StoreOutcome) -> gateway_pb2.StoreBatchResponse:
    return gateway_pb2.StoreBatchResponse(
        ids=list(out.ids),
        sequence=out.sequence,
        results=[store_result_to_proto(r) for r in out.results],
        failed=out.failed,
    )


# JetStream's sequences are int64 on the server: a start past this is no position it has.
_MAX_SEQUENCE = 2**63 - 2


def feed_query_from_proto(p: gateway_pb2.SubscribeRequest, limits: Limits) -> FeedQuery:
    after = p.after_sequence if p.HasField("after_sequence") else None
    if after is not None and after > _MAX_SEQUENCE:
        raise InvalidArgument("after_sequence", f"above the log's largest ({_MAX_SEQUENCE})")
    return FeedQuery(
        after=after,
        tags=v.check_tags(list(p.tags), "tags", limits),
        types=v.check_types(list(p.types), "types", limits),
    )


_Kind = gateway_pb2.SubscribeResponse.Kind


def event_to_proto(event: Event) -> gateway_pb2.SubscribeResponse:
    seq = event.sequence
    if isinstance(event, MemoryWritten):
        kind = _Kind.MEMORY_STORED if event.created else _Kind.MEMORY_UPDATED
        return gateway_pb2.SubscribeResponse(
            sequence=seq, kind=kind, memory_id=event.memory.id, memory=memory_to_proto(event.memory)
        )
    if isinstance(event, MemoryRemoved):
        return gateway_pb2.SubscribeResponse(
            sequence=seq, kind=_Kind.MEMORY_DELETED, memory_id=event.id
        )
    if isinstance(event, TenantErased):
        return gateway_pb2.SubscribeResponse(sequence=seq, kind=_Kind.TENANT_DELETED)
    kind = _Kind.RELATION_ADDED if isinstance(event, RelationLinked) else _Kind.RELATION_REMOVED
    return gateway_pb2.SubscribeResponse(
        sequence=seq,
        kind=kind,
        memory_id=event.relation.source_id,
        relation=relation_to_proto(event.relation),
    )
