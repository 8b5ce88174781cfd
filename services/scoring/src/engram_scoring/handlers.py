"""gRPC servicer for engram.scoring.v1.ScoringService: validate, map, rank, map back."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import grpc

from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.scoring import Candidate
from engram_core.validation import MAX_TIMESTAMP_SECONDS
from engram_platform.convert import focus_from_proto, recency_bias_from_proto
from engram_platform.request_checks import check_struct
from engram_platform.timeutil import from_epoch_ms
from engram_scoring.mapping import candidate_from_proto, fusion_from_proto, scored_to_proto
from engram_scoring.service import Ranker

SERVICE_NAME: str = scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name


def _check_candidates(candidates: Sequence[scoring_pb2.Candidate]) -> None:
    seen: set[str] = set()
    for i, c in enumerate(candidates):
        mid = c.memory.id
        if not mid:
            raise InvalidArgument(f"candidates[{i}].memory.id", "must not be empty")
        if mid in seen:
            raise InvalidArgument(f"candidates[{i}].memory.id", f"duplicate id {mid!r}")
        seen.add(mid)
        if not (math.isfinite(c.relation) and c.relation >= 0):
            raise InvalidArgument(f"candidates[{i}].relation", "must be finite and >= 0")
        for name, s in c.streams.items():
            if not math.isfinite(s.score):
                raise InvalidArgument(f"candidates[{i}].streams[{name}].score", "must be finite")
            if s.rank < 1:
                raise InvalidArgument(f"candidates[{i}].streams[{name}].rank", "must be >= 1")
        for other, distance in c.neighbours.items():
            if distance < 1:
                raise InvalidArgument(f"candidates[{i}].neighbours[{other}]", "must be >= 1")


def _candidates(candidates: Sequence[scoring_pb2.Candidate]) -> list[Candidate]:
    try:
        return [candidate_from_proto(c) for c in candidates]
    except ValueError:
        # A metadata number JSON has no word for fails the conversion; it is named only
        # then, so a recall's hundreds of candidates are not walked twice.
        for i, c in enumerate(candidates):
            check_struct(f"candidates[{i}].memory.metadata", c.memory.metadata)
        raise


class ScoringHandlers(scoring_pb2_grpc.ScoringServiceServicer):
    def __init__(self, ranker: Ranker) -> None:
        self._ranker = ranker

    async def Rank(  # noqa: N802 (the generated servicer's name)
        self, request: scoring_pb2.RankRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scoring_pb2.RankResponse:
        # Cheap checks first: a bad knob should not cost decoding thousands of memories.
        fusion = fusion_from_proto(request.fusion)
        params = self._ranker.params(fusion, request.limit, dict(request.weights), request.profile)
        self._ranker.check_count(len(request.candidates))
        if not 0 <= request.now_unix_ms <= MAX_TIMESTAMP_SECONDS * 1000:
            raise InvalidArgument("now_unix_ms", "must be within 0 (server clock)..year 9999")
        recency_bias = recency_bias_from_proto(request.recency_bias)
        _check_candidates(request.candidates)

        results = self._ranker.rank(
            _candidates(request.candidates),
            params,
            text=request.query,
            tags=request.query_tags,
            now=from_epoch_ms(request.now_unix_ms) if request.now_unix_ms else None,
            focus=focus_from_proto(request.focus),
            recency_bias=recency_bias,
        )
        sent = {c.memory.id: c.memory for c in request.candidates}
        return scoring_pb2.RankResponse(
            results=[scored_to_proto(r, sent[r.memory.id]) for r in results]
        )
