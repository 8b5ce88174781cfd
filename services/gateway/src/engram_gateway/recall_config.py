"""The recall's config dataclasses from the settings: wiring, not copying.

Each step's settings model (recall_settings.py) names its fields as the step's config
does, so ``as_config`` builds it; only the values held in another form are given here.
"""

from __future__ import annotations

from types import MappingProxyType

from engram_core.validation import Limits
from engram_gateway.config import Settings
from engram_gateway.recall_settings import Budget as BudgetSettings
from engram_gateway.service.context import ContextConfig
from engram_gateway.service.deadline import Budget
from engram_gateway.service.expand import ExpandConfig
from engram_gateway.service.feedback import FeedbackConfig
from engram_gateway.service.multiquery import CandidateConfig
from engram_gateway.service.pagerank import GraphRerankConfig
from engram_gateway.service.postrank import parse_group_by
from engram_gateway.service.reads import PostRank, ReadConfig
from engram_platform.settings import as_config


def budget(b: BudgetSettings) -> Budget:
    return as_config(b, Budget)


def read_config(settings: Settings, limits: Limits) -> ReadConfig:
    s = settings
    streams, relations, context = s.streams, s.relations, s.context
    return ReadConfig(
        limits=limits,
        max_pool=streams.max_pool,
        tag_pool_factor=streams.tag_pool_factor,
        hybrid_graph_stream=streams.hybrid_graph_stream,
        dense_without_people=streams.dense_without_people,
        profile=s.profile,
        tenant_profiles=MappingProxyType(dict(s.tenant_profiles)),
        vector_budget=budget(streams.vector_budget),
        lexical_budget=budget(streams.lexical_budget),
        graph_budget=budget(streams.graph_budget),
        relation_pool=relations.pool,
        relation_system_edges=relations.system_edges,
        supersession_max_hops=relations.supersession_max_hops,
        relations_budget=budget(relations.budget),
        context=as_config(context, ContextConfig, thread=parse_group_by(context.thread)),
        context_budget=budget(context.budget),
        candidates=as_config(s.candidates, CandidateConfig),
        feedback=as_config(s.feedback, FeedbackConfig),
        feedback_budget=budget(s.feedback.budget),
        scoring_budget=budget(s.scoring.budget),
        escalation_floor=s.scoring.escalation_floor,
        post=as_config(s.postrank, PostRank),
        expand=as_config(s.expand, ExpandConfig),
        expand_budget=budget(s.expand.budget),
        graph_rerank=as_config(s.graph_rerank, GraphRerankConfig),
        default_timezone=s.default_timezone,
        backend_timeout_s=s.backend_timeout_s,
        min_sequence_poll_s=s.min_sequence_poll_ms / 1000.0,
    )
