"""What a recall asks for: the request as the client sent it, and the plan made of it.

The plan is the validated request with the settings it depends on. It is data: the
recall cache key is its canonical form, so a field added to the plan is in the key
without being listed anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from engram_core import profiles, scoring
from engram_core.model import Filter, TagMatch, TagMode
from engram_core.ordering import Sort
from engram_core.state import StateMode
from engram_gateway.service.expand import ExpandOptions, ExpandRequest
from engram_gateway.service.postrank import PostRankOptions
from engram_gateway.service.recall.canonical import KEYED, canonical


class RecallMode(Enum):
    """Which retrieval streams a recall queries; scoring ranks the rest."""

    HYBRID = "hybrid"  # every stream: vector, lexical, graph
    VECTOR = "vector"
    BM25 = "bm25"
    GRAPH = "graph"
    HYBRID_GRAPH = "hybrid_graph"  # hybrid, then the PageRank rerank (service/pagerank.py)

    @property
    def backends(self) -> frozenset[str]:
        return _MODE_BACKENDS[self]

    @property
    def hybrid(self) -> bool:
        return self in (RecallMode.HYBRID, RecallMode.HYBRID_GRAPH)


_MODE_BACKENDS: dict[RecallMode, frozenset[str]] = {
    RecallMode.HYBRID: frozenset({"vector", "lexical", "graph"}),
    RecallMode.VECTOR: frozenset({"vector"}),
    RecallMode.BM25: frozenset({"lexical"}),
    RecallMode.GRAPH: frozenset({"graph"}),
    RecallMode.HYBRID_GRAPH: frozenset({"vector", "lexical", "graph"}),
}


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """A recall as the client sent it (unvalidated)."""

    query: str
    limit: int = 0
    tags: Sequence[str] = ()
    tag_mode: TagMode = TagMode.ANY
    tag_match: TagMatch = TagMatch.EXACT
    exclude_tags: Sequence[str] = ()
    types: Sequence[str] = ()
    start: str = ""
    end: str = ""
    min_sequence: int = 0
    fusion: scoring.Fusion | None = None
    include_archived: bool = False
    mode: RecallMode = RecallMode.HYBRID
    time_query: str = ""
    timezone: str = ""
    state_mode: StateMode | None = None  # None: current, or all with include_archived
    diversify_by: str = ""
    max_per_group: int = 0  # 0: the configured default
    token_budget: int = 0
    min_score: float = 0.0
    exclude_types: Sequence[str] = ()
    expand: ExpandRequest = field(default_factory=ExpandRequest)  # service/expand.py
    graph_alpha: float = 0.0  # hybrid_graph; 0: the configured default
    hyde: bool | None = None  # None: the setting's default (service/models.py)
    rerank: bool | None = None
    # Candidate generation (service/multiquery.py, decompose.py, trending.py).
    queries: Sequence[str] = ()
    per_query_limit: int = 0  # 0: the pool
    decompose: bool | None = None  # None: the setting's default
    sort: str = ""  # trending only: importance (default) | recency | relevance | access_count
    focus: scoring.Focus = field(default_factory=scoring.Focus)  # validated by the planner
    recency_bias: scoring.RecencyBias | None = None  # None: the scoring service's default
    embedding: Sequence[float] = ()  # the query's vector: the model is skipped
    profile: str = ""  # engram_core.profiles; "": the tenant's, else the gateway's


@dataclass(frozen=True, slots=True)
class Plan:
    """A validated recall. Every field is part of the cache key unless its metadata says
    ``keyed=False``; the time window is in ``flt`` as instants, so a relative
    ``time_query`` ("last 7 days") keys on what it resolved to."""

    query: str
    limit: int
    flt: Filter
    fusion: scoring.Fusion | None
    # The cache entry's watermark covers it: an entry is served only at or past it.
    min_sequence: int = field(default=0, metadata={KEYED: False})
    mode: RecallMode = RecallMode.HYBRID
    state_mode: StateMode = StateMode.CURRENT
    post: PostRankOptions = field(default_factory=PostRankOptions)
    escalation_floor: float = 0.0
    expand: ExpandOptions = field(default_factory=ExpandOptions)
    graph_alpha: float = 0.0
    hyde: bool = False
    rerank: bool = False
    queries: tuple[str, ...] = ()  # beside `query` ("" when only these were sent)
    per_query_limit: int = 0
    decompose: bool = False
    feedback: bool = False
    sort: Sort | None = None  # set: a trending recall
    focus: scoring.Focus = field(default_factory=scoring.Focus)
    recency_bias: scoring.RecencyBias | None = None
    embedding: tuple[float, ...] = ()
    profile: str = profiles.DEFAULT  # resolved: the request's, the tenant's or the gateway's

    @property
    def text(self) -> str:
        """What scoring and the context step read: ``query``, else ``queries`` together."""
        return self.query or " ".join(self.queries)

    @property
    def hyde_subject(self) -> str:
        """What HyDE writes its answer to: ``query``, else the first of ``queries`` (a
        passage answering all of them at once would match none); "" = nothing to ask."""
        return self.query or next(iter(self.queries), "")

    def fingerprint(self) -> str:
        """Identifies the answer: the plan's canonical form (the cache digests it)."""
        return canonical(self)
