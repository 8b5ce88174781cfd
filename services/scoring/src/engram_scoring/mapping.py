"""Proto <-> domain for the scoring RPC. Memory itself goes through engram_platform.convert."""

from __future__ import annotations

from collections.abc import Mapping

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2
from engram_core.errors import InvalidArgument
from engram_core.scoring import Candidate, Fusion, ScoredCandidate, StreamScore
from engram_platform.convert import memory_from_proto, memory_to_proto

_FUSION_FROM_PROTO: Mapping[int, Fusion | None] = {
    scoring_pb2.FUSION_UNSPECIFIED: None,
    scoring_pb2.FUSION_WEIGHTED: Fusion.WEIGHTED,
    scoring_pb2.FUSION_RRF: Fusion.RRF,
}
_FUSION_TO_PROTO: Mapping[Fusion, scoring_pb2.Fusion.ValueType] = {
    Fusion.WEIGHTED: scoring_pb2.FUSION_WEIGHTED,
    Fusion.RRF: scoring_pb2.FUSION_RRF,
}


def fusion_from_proto(value: int) -> Fusion | None:
    """None for UNSPECIFIED (the server default); proto3 enums are open, so check the rest."""
    if value not in _FUSION_FROM_PROTO:
        raise InvalidArgument("fusion", f"unknown fusion {value}")
    return _FUSION_FROM_PROTO[value]


def fusion_to_proto(value: Fusion) -> scoring_pb2.Fusion.ValueType:
    return _FUSION_TO_PROTO[value]


def streams_from_proto(
    streams: Mapping[str, common_pb2.StreamScore],
) -> dict[str, StreamScore]:
    return {name: StreamScore(s.score, s.rank) for name, s in streams.items()}


def candidate_from_proto(p: scoring_pb2.Candidate) -> Candidate:
    return Candidate(
        memory_from_proto(p.memory),
        streams_from_proto(p.streams),
        p.relation,
        dict(p.neighbours),
    )


def candidate_to_proto(c: Candidate) -> scoring_pb2.Candidate:
    out = scoring_pb2.Candidate(
        memory=memory_to_proto(c.memory), relation=c.relation, neighbours=dict(c.neighbours)
    )
    for name, s in c.streams.items():
        out.streams[name].CopyFrom(common_pb2.StreamScore(score=s.score, rank=s.rank))
    return out


def scored_to_proto(
    s: ScoredCandidate, memory: common_pb2.Memory | None = None
) -> common_pb2.ScoredMemory:
    """``memory``: the caller's own proto of the same memory, when it has one.

    Copying it back is lossless (metadata numbers stay as sent) and skips re-encoding
    the metadata Struct, the costliest part of the response.
    """
    out = common_pb2.ScoredMemory(score=s.score, components=dict(s.components))
    out.memory.CopyFrom(memory if memory is not None else memory_to_proto(s.memory))
    for name, st in s.streams.items():
        out.streams[name].CopyFrom(common_pb2.StreamScore(score=st.score, rank=st.rank))
    return out
