"""The recall's settings, one nested model per step (``ENGRAM_GATEWAY_<STEP>__<FIELD>``).

Each model's fields carry the names of the config dataclass the step takes (service/), so
``recall_config`` builds those with ``as_config`` instead of copying field by field; a
step's ``budget`` is its share of the call's deadline.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engram_core.errors import InvalidArgument
from engram_gateway.service.multiquery import DEFAULT_MAX_QUERIES
from engram_gateway.service.postrank import parse_group_by
from engram_platform.settings import SEARCH_MANY_MAX_FILTERS, SEARCH_MANY_MAX_HITS

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class Budget(BaseModel):
    """A backend call's share of the caller's remaining time: min(cap_s, fraction × remaining)."""

    model_config = _FROZEN

    fraction: float = Field(0.5, gt=0, le=1, description="Share of the remaining deadline.")
    cap_s: float = Field(2.0, gt=0, description="Upper bound in seconds, whatever the deadline.")


class ShortBudget(Budget):
    """The share of a step that reads little (relations, neighbours, expansion): its own
    defaults, so setting one of its fields keeps the other's."""

    fraction: float = Field(0.3, gt=0, le=1, description="Share of the remaining deadline.")
    cap_s: float = Field(0.5, gt=0, description="Upper bound in seconds, whatever the deadline.")


class ScoringBudget(Budget):
    """Scoring's share of what retrieval left."""

    cap_s: float = Field(1.0, gt=0, description="Upper bound in seconds, whatever the deadline.")


class StreamsSettings(BaseModel):
    """The retrieval streams (vector, lexical, graph) and their candidate pools."""

    model_config = _FROZEN

    max_pool: int = Field(200, ge=1, description="Most candidates fetched per stream.")
    tag_pool_factor: int = Field(
        2,
        ge=1,
        description="The vector stream's pool × this when the request's tags scope the search "
        "(a filtered approximate search finds fewer good neighbours); at most max_pool.",
    )
    hybrid_graph_stream: bool = Field(
        False,
        description="Search the graph service for memories mentioning the query's entities "
        "in the default hybrid mode with weighted fusion too. Off: the scoring service's "
        "graph weight is 0 by default, so that stream changes no ranking and only costs CPU. "
        "Turn it on with ENGRAM_SCORING_WEIGHTS__GRAPH > 0. The graph and hybrid_graph modes "
        "and fusion=rrf always search it.",
    )
    dense_without_people: bool = Field(
        True,
        description="Leave the people a query names out of the text the vector embeds, "
        "for a profile that drops them (conversation).",
    )
    vector_budget: Budget = Field(
        default_factory=Budget, description="Vector search share of the deadline."
    )
    lexical_budget: Budget = Field(
        default_factory=Budget, description="Lexical search share of the deadline."
    )
    graph_budget: Budget = Field(
        default_factory=Budget, description="Graph search share of the deadline."
    )


class RelationsSettings(BaseModel):
    """Relations among the top candidates: the relation component and supersession."""

    model_config = _FROZEN

    pool: int = Field(
        50, ge=0, description="Top candidates whose relations feed the relation component."
    )
    system_edges: bool = Field(
        False,
        description="Let edges consolidation drew (origin system: SIMILAR_TO, PRECEDED_BY…) "
        "feed the relation component too; off, only edges agents made count.",
    )
    supersession_max_hops: int = Field(
        4, ge=0, description="Rounds of relation fetches that extend supersession chains."
    )
    budget: ShortBudget = Field(
        default_factory=ShortBudget, description="Share of the deadline of the relation reads."
    )


class ContextSettings(BaseModel):
    """Timeline neighbours of the best candidates (service/context.py, ContextConfig)."""

    model_config = _FROZEN

    seeds: int = Field(
        5,
        ge=0,
        le=SEARCH_MANY_MAX_FILTERS,
        description="Best candidates whose timeline neighbours are read (hybrid); 0 = off.",
    )
    distance: int = Field(
        2, ge=1, description="Neighbours up to this many steps away on the timeline."
    )
    window_s: float = Field(
        3600.0, ge=0, description="Neighbours are read this far either side of a seed."
    )
    limit: int = Field(
        64,
        ge=1,
        le=SEARCH_MANY_MAX_HITS // SEARCH_MANY_MAX_FILTERS,
        description="Most memories read per seed window (all windows are one vector call).",
    )
    thread: str = Field(
        "",
        description="One timeline per thread, keyed as diversify_by is (tag:<prefix>, "
        "metadata:<key>): memories are neighbours only within one. '' = the tenant's one.",
    )
    budget: ShortBudget = Field(
        default_factory=ShortBudget,
        description="Share of the deadline of reading the timeline neighbours.",
    )

    @field_validator("thread")
    @classmethod
    def _thread_parses(cls, value: str) -> str:
        try:
            parse_group_by(value, "context.thread")
        except InvalidArgument as e:
            raise ValueError(str(e)) from e
        return value


class CandidatesSettings(BaseModel):
    """Candidate generation beyond one query (service/multiquery.py, CandidateConfig)."""

    model_config = _FROZEN

    max_queries: int = Field(
        DEFAULT_MAX_QUERIES,
        ge=1,
        le=32,
        description="Most sub-queries per recall (query, queries, decomposed).",
    )
    decompose: bool = Field(
        False,
        description="Split questions into entity/topic sub-queries when a request leaves "
        "decompose unset.",
    )
    decompose_max_parts: int = Field(
        4, ge=1, le=16, description="Most sub-queries the rule-based decomposer adds."
    )


class FeedbackSettings(BaseModel):
    """Pseudo-relevance feedback (service/feedback.py, FeedbackConfig): the first search's
    best candidates ask the lexical and vector streams once more."""

    model_config = _FROZEN

    default: bool = Field(
        False, description="Run it for every recall with text (a second search); off: never."
    )
    docs: int = Field(3, ge=1, le=50, description="First-search candidates taken as relevant.")
    terms: int = Field(
        5, ge=0, le=64, description="Words of theirs asked of the lexical stream; 0 = none."
    )
    lexical_weight: float = Field(
        0.15, ge=0, le=1, description="Share of the expansion's BM25 added to the first; 0 = off."
    )
    vector_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the similarity to the query embedded with the feedback "
        "documents in each memory's vector score; 0 = no vector feedback.",
    )
    vector_chars: int = Field(
        400, ge=1, description="Characters of each feedback document embedded after the query."
    )
    budget: Budget = Field(
        default_factory=lambda: Budget(fraction=0.5, cap_s=1.0),
        description="Share of the deadline of the second search.",
    )


class PostRankSettings(BaseModel):
    """Filters and post-ranking (service/postrank.py, PostRank); off by default except
    duplicate ids and duplicate content, so a plain recall ranks as scoring did."""

    model_config = _FROZEN

    near_duplicates: bool = Field(
        True, description="Drop results whose content nearly duplicates a better one."
    )
    near_duplicate_threshold: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Shingle Jaccard at which two results count as one; 0 = the same words.",
    )
    shingle_size: int = Field(3, ge=1, description="Words per shingle (near duplicates).")
    floor_ratio: float = Field(
        0.0, ge=0, le=1, description="Cut results under this share of the top score; 0 = off."
    )
    max_gap: float = Field(
        0.0, ge=0, le=1, description="Cut the tail after a drop > this share of the top; 0 = off."
    )
    min_keep: int = Field(1, ge=1, description="Results the floor never cuts.")
    default_max_per_group: int = Field(
        2, ge=1, description="max_per_group when a request sets diversify_by but not it."
    )
    chars_per_token: float = Field(
        4.0, gt=0, description="ASCII characters per token in the token-budget estimate."
    )
    overfetch: int = Field(
        3, ge=1, description="Results asked of scoring per limit when post-ranking may cut."
    )


class ScoringStepSettings(BaseModel):
    """The call to the scoring service that fuses and ranks the candidates."""

    model_config = _FROZEN

    escalation_floor: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Best score (weighted; RRF: share of the best possible) under which the "
        "pool is doubled once and the recall re-run; 0 = off.",
    )
    budget: ScoringBudget = Field(
        default_factory=ScoringBudget,
        description="Scoring's share of what is left after retrieval.",
    )


class ExpandSettings(BaseModel):
    """Expansion after ranking (service/expand.py, ExpandConfig)."""

    model_config = _FROZEN

    seeds: int = Field(
        5, ge=1, le=100, description="Best results (at most limit) whose links are expanded."
    )
    per_seed: int = Field(
        3, ge=1, le=100, description="Neighbours per seed when a request's expand_per_seed is 0."
    )
    limit: int = Field(
        10, ge=1, le=100, description="Expanded results in all when a request's expand_limit is 0."
    )
    entity_factor: float = Field(
        0.5,
        ge=0,
        le=1,
        description="An entity-expanded memory scores this × the score of the best seed "
        "sharing an entity with it (a flat share).",
    )
    budget: ShortBudget = Field(
        default_factory=ShortBudget,
        description="Share of the deadline of the graph reads after ranking: expansion and "
        "the hybrid_graph rerank.",
    )


class GraphRerankSettings(BaseModel):
    """The hybrid_graph mode's personalised-PageRank rerank (service/pagerank.py,
    GraphRerankConfig)."""

    model_config = _FROZEN

    alpha: float = Field(
        0.1,
        ge=0,
        le=1,
        description="PageRank's weight in the blend when a request's graph_rerank.alpha is 0.",
    )
    seeds: int = Field(10, ge=1, description="Best results the PageRank walk restarts from.")
    pool: int = Field(50, ge=2, le=100, description="Results asked of scoring and reranked.")
    damping: float = Field(0.85, gt=0, lt=1, description="Chance the walk follows an edge.")
    entity_weight: float = Field(
        0.5,
        ge=0,
        description="Weight of a memory–entity edge for the rarest shared entity (rarer in "
        "the pool = heavier; one every result mentions = 0).",
    )
