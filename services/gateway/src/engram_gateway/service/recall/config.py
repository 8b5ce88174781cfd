"""Settings of the read path, as bootstrap builds them from the gateway's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engram_core import profiles
from engram_core import validation as v
from engram_gateway.service.context import ContextConfig
from engram_gateway.service.deadline import Budget
from engram_gateway.service.expand import ExpandConfig
from engram_gateway.service.feedback import FeedbackConfig
from engram_gateway.service.multiquery import CandidateConfig
from engram_gateway.service.pagerank import GraphRerankConfig


@dataclass(frozen=True, slots=True)
class PostRank:
    """Settings of post-ranking; the request adds limit, min_score, diversify_by, …."""

    near_duplicates: bool = True  # drop near-identical content (off: ids only)
    near_duplicate_threshold: float = 0.0  # 0: the same words only
    shingle_size: int = 3
    floor_ratio: float = 0.0  # 0: off
    max_gap: float = 0.0  # 0: off
    min_keep: int = 1
    default_max_per_group: int = 2
    chars_per_token: float = 4.0
    # Ask scoring for this many × limit results when a knob may cut some (never > max_pool).
    overfetch: int = 3


@dataclass(frozen=True, slots=True)
class ReadConfig:
    limits: v.Limits
    max_pool: int
    tag_pool_factor: int
    relation_pool: int
    vector_budget: Budget
    lexical_budget: Budget
    graph_budget: Budget
    relations_budget: Budget
    scoring_budget: Budget
    backend_timeout_s: float
    min_sequence_poll_s: float
    # Consolidation's edges (origin system) in the relation component too.
    relation_system_edges: bool = False
    # The graph stream in hybrid mode with weighted fusion (its weight is 0 by default).
    hybrid_graph_stream: bool = False
    # Timeline neighbours of the best candidates (hybrid mode; seeds=0 turns it off).
    context: ContextConfig = field(default_factory=ContextConfig)
    context_budget: Budget = field(default_factory=lambda: Budget(fraction=0.3, cap_s=0.5))
    # Leave the people a query names out of the text the vector stream embeds (when the
    # recall's profile drops them too).
    dense_without_people: bool = True
    # The recall's profile when the request names none: the tenant's, else this one.
    profile: str = profiles.DEFAULT
    tenant_profiles: Mapping[str, str] = field(default_factory=dict)
    # Post-ranking (service/postrank.py); off by default except duplicate ids.
    post: PostRank = field(default_factory=PostRank)
    default_timezone: str = ""  # for time_query when the request names none
    supersession_max_hops: int = 4  # rounds of relation fetches extending supersession chains
    # Tier escalation: below this best score (weighted; RRF: share of the best possible), the
    # pool is doubled once and the recall re-run. 0: off.
    escalation_floor: float = 0.0
    # After ranking: expansion (service/expand.py) and the hybrid_graph rerank (pagerank.py).
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    graph_rerank: GraphRerankConfig = field(default_factory=GraphRerankConfig)
    expand_budget: Budget = field(default_factory=lambda: Budget(fraction=0.3, cap_s=0.5))
    candidates: CandidateConfig = field(default_factory=CandidateConfig)  # multi-query, trending
    # Pseudo-relevance feedback (service/feedback.py): a second search of the streams.
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    feedback_budget: Budget = field(default_factory=lambda: Budget(fraction=0.5, cap_s=1.0))
