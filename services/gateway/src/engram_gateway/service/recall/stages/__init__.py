"""The stages of a recall, in order: adding a stage is a module here and a line below."""

from __future__ import annotations

from engram_gateway.service.recall.pipeline import Stage
from engram_gateway.service.recall.stages.answer import Answer, Provenance
from engram_gateway.service.recall.stages.candidates import Candidates, NoneFound
from engram_gateway.service.recall.stages.expand import Expand
from engram_gateway.service.recall.stages.feedback import Feedback
from engram_gateway.service.recall.stages.graph_rerank import GraphRerank
from engram_gateway.service.recall.stages.listing import Listing
from engram_gateway.service.recall.stages.neighbours import Neighbours
from engram_gateway.service.recall.stages.pinned import Pinned
from engram_gateway.service.recall.stages.preceding import Preceding
from engram_gateway.service.recall.stages.prepare import Decompose, Hyde
from engram_gateway.service.recall.stages.relations import Relations
from engram_gateway.service.recall.stages.rerank import Rerank
from engram_gateway.service.recall.stages.retrieve import Retrieve
from engram_gateway.service.recall.stages.scoring import Scoring
from engram_gateway.service.recall.stages.state import State

# Once per recall, before the first round.
PREPARE: tuple[Stage, ...] = (Hyde(), Decompose())

# One round of a recall with text; escalation may run a second over a wider pool.
SEARCH: tuple[Stage, ...] = (
    Retrieve(),
    Candidates(),
    Feedback(),
    Pinned(),
    NoneFound(),
    Relations(),
    Neighbours(),
    Scoring(),
    GraphRerank(),
    State(),
    Preceding(),
    Rerank(),
    Expand(),
    Provenance(),
    Answer(),
)

# A trending recall: a listing instead of streams and ranking.
TRENDING: tuple[Stage, ...] = (Listing(), State(when_empty=False), Answer())

__all__ = ["PREPARE", "SEARCH", "TRENDING"]
