"""What the gateway relies on from its RankerPort, asserted of the unit tests' fake and of
the real adapter (adapters.ranker.ScoringRanker over the scoring service).

Each subclass provides ``port``, ``down`` (a port whose service cannot be reached) and
``service_profile`` (the profile a request naming none is ranked with).
"""

from __future__ import annotations

from typing import Any

import pytest

from engram_clients.scoring import ScoringClient
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.scoring import Candidate, Fusion, StreamScore
from engram_gateway.adapters.ranker import ScoringRanker
from engram_gateway.service.ports import RankerPort
from engram_scoring.config import Settings as ScoringSettings
from engram_testing.contracts.common import full_memory, mem

MAX_LIMIT = 1000  # the largest limit the services take by default
QUERY = "deploy pipeline"

BOTH = Candidate(
    full_memory(),  # every field set: the gateway's own copy must come back whole
    {"vector": StreamScore(0.9, 1), "keyword": StreamScore(7.5, 1)},
)
VECTOR = Candidate(mem("b", "the deploy pipeline"), {"vector": StreamScore(0.5, 2)})
KEYWORD = Candidate(
    mem("c", "deploy notes", minutes=-60 * 24 * 30),  # a month older than the others
    {"keyword": StreamScore(2.5, 2)},
)
CANDIDATES = [VECTOR, BOTH, KEYWORD]


class RankerPortContract:
    @pytest.fixture
    def port(self) -> RankerPort:
        raise NotImplementedError

    @pytest.fixture
    def down(self) -> RankerPort:
        raise NotImplementedError

    @pytest.fixture
    def service_profile(self) -> str:
        raise NotImplementedError

    @pytest.mark.parametrize("fusion", [None, Fusion.WEIGHTED, Fusion.RRF])
    async def test_best_first_within_the_limit(
        self, port: RankerPort, fusion: Fusion | None
    ) -> None:
        ranked = await port.rank(QUERY, CANDIDATES, fusion, 2, ())
        assert len(ranked) == 2
        assert ranked[0].memory.id == BOTH.memory.id  # first in both streams
        assert ranked[0].score >= ranked[1].score

    async def test_results_carry_the_gateways_memory_and_streams(self, port: RankerPort) -> None:
        ranked = await port.rank(QUERY, CANDIDATES, None, 10, ())
        sent = {c.memory.id: c for c in CANDIDATES}
        assert sorted(r.memory.id for r in ranked) == sorted(sent)
        for r in ranked:
            assert r.memory == sent[r.memory.id].memory
            assert dict(r.streams) == dict(sent[r.memory.id].streams)
            assert r.components  # what the response shows per component

    async def test_no_candidates_rank_to_nothing(self, port: RankerPort) -> None:
        assert await port.rank(QUERY, [], None, 10, ()) == []

    async def test_no_profile_ranks_as_the_services_own(
        self, port: RankerPort, service_profile: str
    ) -> None:
        unnamed = await port.rank(QUERY, CANDIDATES, None, 10, ())
        named = await port.rank(QUERY, CANDIDATES, None, 10, (), profile=service_profile)
        assert [r.memory.id for r in unnamed] == [r.memory.id for r in named]
        assert [r.score for r in unnamed] == pytest.approx([r.score for r in named])

    async def test_an_unknown_profile_is_refused_by_field(self, port: RankerPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.rank(QUERY, CANDIDATES, None, 10, (), profile="no-such-profile")
        assert err.value.field == "profile"

    async def test_a_limit_above_the_maximum_is_refused(self, port: RankerPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.rank(QUERY, CANDIDATES, None, MAX_LIMIT + 1, ())
        assert err.value.field == "limit"

    async def test_a_candidate_twice_is_refused(self, port: RankerPort) -> None:
        # The gateway merges the streams' hits into one candidate per memory.
        with pytest.raises(InvalidArgument) as err:
            await port.rank(QUERY, [BOTH, VECTOR, BOTH], None, 10, ())
        assert err.value.field == "candidates[2].memory.id"

    async def test_an_unreachable_service_is_unavailable(self, down: RankerPort) -> None:
        with pytest.raises(Unavailable):
            await down.rank(QUERY, CANDIDATES, None, 10, (), timeout=5.0)


class TestFakeRanker(RankerPortContract):
    @pytest.fixture
    def port(self, harness: Any) -> RankerPort:
        ranker: RankerPort = harness.ranker
        return ranker

    @pytest.fixture
    def down(self, harness: Any) -> RankerPort:
        harness.ranker.fail = Unavailable("scoring: connection refused")
        ranker: RankerPort = harness.ranker
        return ranker

    @pytest.fixture
    def service_profile(self, harness: Any) -> str:
        return str(harness.ranker.default_profile)


class TestScoringRanker(RankerPortContract):
    @pytest.fixture
    def port(self, scoring_ranker: ScoringRanker) -> RankerPort:
        return scoring_ranker

    @pytest.fixture
    def down(self, closed_channel: Any) -> RankerPort:
        return ScoringRanker(ScoringClient(closed_channel))

    @pytest.fixture
    def service_profile(self) -> str:
        return ScoringSettings().profile

    def test_the_fake_ranks_with_the_services_default_profile(self, harness: Any) -> None:
        assert harness.ranker.default_profile == ScoringSettings().profile
