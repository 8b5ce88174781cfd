"""Client of engram.scoring.v1.ScoringService."""

from __future__ import annotations

import grpc

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_platform.grpc_client import translate_errors

NAME = "scoring"


class ScoringClient:
    """Thin: the gateway builds the request itself (it merges streams into candidates and
    fills each candidate's memory from the bytes it already has)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = scoring_pb2_grpc.ScoringServiceStub(channel)

    async def rank(
        self, request: scoring_pb2.RankRequest, timeout: float | None = None
    ) -> list[common_pb2.ScoredMemory]:
        async with translate_errors(NAME):
            reply = await self._stub.Rank(request, timeout=timeout)
        return list(reply.results)
