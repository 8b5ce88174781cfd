"""RankerPort over the scoring service's client (which takes the request as built here)."""

from __future__ import annotations

from collections.abc import Sequence

from engram_clients.scoring import ScoringClient
from engram_core.scoring import Candidate, Focus, Fusion, RecencyBias, ScoredCandidate
from engram_gateway.mapping import rank_request, scored_from_proto


class ScoringRanker:
    def __init__(self, client: ScoringClient) -> None:
        self._client = client

    async def rank(
        self,
        query: str,
        candidates: Sequence[Candidate],
        fusion: Fusion | None,
        limit: int,
        query_tags: Sequence[str],
        timeout: float | None = None,
        focus: Focus | None = None,
        recency_bias: RecencyBias | None = None,
        profile: str = "",
    ) -> list[ScoredCandidate]:
        request = rank_request(
            query, candidates, fusion, limit, query_tags, focus, recency_bias, profile
        )
        results = await self._client.rank(request, timeout=timeout)
        # The scoring service was sent a slim copy of each memory (SCORED_FIELDS); put the
        # gateway's own, complete memory back instead of decoding the reply's (the saving
        # is measured in services/gateway/README.md, step 7).
        ours = {c.memory.id: c.memory for c in candidates}
        return [scored_from_proto(r, ours.get(r.memory.id)) for r in results]
