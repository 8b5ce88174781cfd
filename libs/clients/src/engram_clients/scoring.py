"""Client of engram.scoring.v1.ScoringService."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grpc

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_platform.grpc_client import translate_errors

NAME = "scoring"


class ScoringClient:
    """Thin: the gateway builds Candidate protos itself (it merges streams into them)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = scoring_pb2_grpc.ScoringServiceStub(channel)

    async def rank(
        self,
        query: str,
        candidates: Sequence[scoring_pb2.Candidate],
        fusion: int,
        limit: int,
        weights: Mapping[str, float] | None = None,
        query_tags: Sequence[str] = (),
        timeout: float | None = None,
        focus: common_pb2.Focus | None = None,
        recency_bias: int = common_pb2.RECENCY_BIAS_UNSPECIFIED,
        profile: str = "",
    ) -> list[common_pb2.ScoredMemory]:
        request = scoring_pb2.RankRequest(
            query=query,
            candidates=list(candidates),
            fusion=fusion,  # type: ignore[arg-type]
            limit=limit,
            weights=dict(weights or {}),
            query_tags=list(query_tags),
            focus=focus,
            recency_bias=recency_bias,  # type: ignore[arg-type]
            profile=profile,
        )
        async with translate_errors(NAME):
            reply = await self._stub.Rank(request, timeout=timeout)
        return list(reply.results)
