"""RankerPort over the scoring service's client (which takes Candidate protos)."""

from __future__ import annotations

from collections.abc import Sequence

from engram_clients.scoring import ScoringClient
from engram_core.scoring import Candidate, Focus, Fusion, RecencyBias, ScoredCandidate
from engram_gateway.mapping import candidate_to_proto, fusion_to_scoring, scored_from_proto
from engram_platform.convert import focus_to_proto, recency_bias_to_proto


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
        results = await self._client.rank(
            query,
            [candidate_to_proto(c) for c in candidates],
            fusion_to_scoring(fusion),
            limit,
            query_tags=query_tags,
            timeout=timeout,
            focus=focus_to_proto(focus) if focus else None,
            recency_bias=recency_bias_to_proto(recency_bias),
            profile=profile,
        )
        # The scoring service was sent a slim copy of each memory (SCORED_FIELDS); put the
        # gateway's own, complete memory back instead of decoding the reply's (the saving
        # is measured in services/gateway/README.md, step 7).
        ours = {c.memory.id: c.memory for c in candidates}
        return [scored_from_proto(r, ours.get(r.memory.id)) for r in results]
