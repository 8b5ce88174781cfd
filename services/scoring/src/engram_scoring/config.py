"""Settings of the scoring service (env prefix ENGRAM_SCORING_, nested with ``__``).

Weights: ``ENGRAM_SCORING_WEIGHTS__VECTOR=0.5`` and so on. Their defaults come from
``engram_core.scoring.Weights`` so the math and the settings cannot disagree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import SettingsConfigDict

from engram_core import profiles, scoring
from engram_platform.settings import (
    MetricsSettings,
    ProfileName,
    ServiceSettings,
    metrics_on,
    workers_field,
)

_W = scoring.Weights()


class WeightSettings(BaseModel):
    """Default weight of each component (weighted fusion) and each stream (RRF)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vector: float = Field(_W.vector, ge=0, description="Vector similarity, normalised.")
    keyword: float = Field(_W.keyword, ge=0, description="BM25 score, normalised.")
    metadata: float = Field(
        _W.metadata, ge=0, description="Share of query words found in metadata string values."
    )
    relation: float = Field(
        _W.relation, ge=0, description="Summed relation strength to other candidates, capped at 1."
    )
    tag: float = Field(_W.tag, ge=0, description="Share of the query tags the memory carries.")
    label: float = Field(
        _W.label, ge=0, description="1 when the query names the last part of a client tag."
    )
    exact: float = Field(_W.exact, ge=0, description="1 when the whole query is in the content.")
    recency: float = Field(_W.recency, ge=0, description="Recency of the memory's timestamp.")
    importance: float = Field(_W.importance, ge=0, description="The memory's importance.")
    confidence: float = Field(_W.confidence, ge=0, description="The memory's confidence.")
    relevance: float = Field(
        _W.relevance, ge=0, description="relevance_score written by consolidation; 0: not counted."
    )
    graph: float = Field(_W.graph, ge=0, description="Graph stream score, normalised.")
    time: float = Field(
        _W.time, ge=0, description="Closeness of the timestamp to a date the query names."
    )
    context: float = Field(
        _W.context,
        ge=0,
        description="Post-step: this × the best timeline neighbour's (decayed) score is added.",
    )
    focus_tag: float = Field(
        _W.focus_tag,
        ge=0,
        description="Bonus when the memory carries a tag of the request's focus.",
    )
    focus_type: float = Field(
        _W.focus_type, ge=0, description="Bonus when the memory's type is one of the focus's."
    )
    focus_keyword: float = Field(
        _W.focus_keyword,
        ge=0,
        description="Bonus when a focus keyword is a word of a metadata value or a tag part.",
    )
    focus_id: float = Field(
        _W.focus_id, ge=0, description="Bonus when the memory is one of the focus's ids."
    )
    recency_bias: float = Field(
        _W.recency_bias,
        ge=0,
        description="With recency bias on: this × the timestamp min-max normalised over the "
        "comparable matches (at least half the best match) × the match as a share of the best.",
    )
    rrf_vector: float = Field(_W.rrf_vector, ge=0, description="RRF weight of the vector stream.")
    rrf_keyword: float = Field(
        _W.rrf_keyword, ge=0, description="RRF weight of the keyword stream."
    )
    rrf_graph: float = Field(_W.rrf_graph, ge=0, description="RRF weight of the graph stream.")

    def to_core(self) -> scoring.Weights:
        return scoring.Weights(**self.model_dump())


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_SCORING_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9468)
    workers: int = workers_field()

    weights: WeightSettings = Field(
        default_factory=WeightSettings, description="Default weights; a request may override any."
    )
    profile: ProfileName = Field(
        profiles.DEFAULT,
        description="Profile of a request that names none: its weight overrides apply over "
        "`weights` (default: label and context 0; conversation: none, for chat turns).",
    )
    recency_mode: Literal["linear", "half_life"] = Field(
        "linear", description="Recency as a linear fall over a window, or an exponential half-life."
    )
    recency_window_days: float = Field(
        scoring.DEFAULT_RECENCY_WINDOW_DAYS,
        gt=0,
        description="Linear mode: age in days at which recency reaches 0.",
    )
    recency_half_life_days: float = Field(
        scoring.DEFAULT_RECENCY_HALF_LIFE_DAYS,
        gt=0,
        description="Half-life mode: age in days at which recency is 0.5.",
    )
    rrf_k: float = Field(
        scoring.DEFAULT_RRF_K, ge=0, description="RRF constant k in w / (k + rank)."
    )
    normalisation: Literal["zscore", "raw"] = Field(
        scoring.Normalisation.ZSCORE.value,
        description=(
            "Stream scores → components: standard scores among the candidates (zscore), or "
            "raw (cosine clamped; BM25 and graph / best)."
        ),
    )
    time_half_life_days: float = Field(
        scoring.DEFAULT_TIME_HALF_LIFE_DAYS,
        gt=0,
        description="Time component: days outside a date the query names at which it is 0.5.",
    )
    context_decay: float = Field(
        scoring.DEFAULT_CONTEXT_DECAY,
        ge=0,
        le=1,
        description="Context step: factor per timeline step beyond the first neighbour.",
    )
    relevance_gate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Below this best topical component (vector, keyword, graph, metadata, "
        "label, exact, time), recency, importance, confidence and relevance are scaled by "
        "evidence / gate; 0 = off.",
    )
    recency_bias: Literal["off", "on", "auto"] = Field(
        scoring.RecencyBias.AUTO.value,
        description="Recency bias when a request leaves it unset: auto = on when the query "
        "asks for the latest (latest, newest, most recent, currently, now…).",
    )
    default_limit: int = Field(10, ge=1, le=1000, description="Results returned when limit is 0.")
    max_limit: int = Field(1000, ge=1, description="Largest limit a request may ask for.")
    max_candidates: int = Field(
        5000, ge=1, description="Most candidates one Rank request may carry."
    )
