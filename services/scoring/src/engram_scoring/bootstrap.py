"""Builds the scoring service from settings. Scoring has no store, hence no adapters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from engram_core.model import utcnow
from engram_core.profiles import profile_named
from engram_core.scoring import Normalisation, Params, RecencyBias, RecencyMode
from engram_scoring.config import Settings
from engram_scoring.service import Limits, Ranker


def build_ranker(settings: Settings, clock: Callable[[], datetime] = utcnow) -> Ranker:
    defaults = Params(
        weights=settings.weights.to_core(),
        recency_mode=RecencyMode(settings.recency_mode),
        recency_window_days=settings.recency_window_days,
        recency_half_life_days=settings.recency_half_life_days,
        rrf_k=settings.rrf_k,
        limit=settings.default_limit,
        normalisation=Normalisation(settings.normalisation),
        time_half_life_days=settings.time_half_life_days,
        context_decay=settings.context_decay,
        relevance_gate=settings.relevance_gate,
        recency_bias=RecencyBias(settings.recency_bias),
    )
    limits = Limits(
        default_limit=settings.default_limit,
        max_limit=settings.max_limit,
        max_candidates=settings.max_candidates,
    )
    return Ranker(defaults, limits, clock, profile_named(settings.profile))
