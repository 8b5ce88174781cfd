"""Expansion after ranking and hybrid_graph end to end on the embedded stack (fixtures in
conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_expansion import ExpansionEndToEnd


class TestEmbeddedExpansion(ExpansionEndToEnd):
    pass
