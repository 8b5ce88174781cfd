"""Scoring logic over engram_core.scoring: request knobs on top of the configured defaults."""

from engram_scoring.service.ranker import Limits, Ranker

__all__ = ["Limits", "Ranker"]
