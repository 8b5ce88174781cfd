"""Candidate generation end to end on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_candidates import CandidateGenerationEndToEnd


class TestEmbeddedCandidates(CandidateGenerationEndToEnd):
    pass
