"""Recall as a pipeline of stages over a plan (pipeline.py; the stages in stages/)."""

from __future__ import annotations

from engram_gateway.service.recall.config import PostRank, ReadConfig
from engram_gateway.service.recall.pipeline import Deps, RecallContext, Stage, run
from engram_gateway.service.recall.plan import Plan, RecallMode, RecallRequest
from engram_gateway.service.recall.planner import plan_recall
from engram_gateway.service.recall.rounds import answer

__all__ = [
    "Deps",
    "Plan",
    "PostRank",
    "ReadConfig",
    "RecallContext",
    "RecallMode",
    "RecallRequest",
    "Stage",
    "answer",
    "plan_recall",
    "run",
]
