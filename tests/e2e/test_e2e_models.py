"""Query-side models end to end on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_models import LocalRerankerEndToEnd, QueryModelsEndToEnd


class TestEmbeddedQueryModels(QueryModelsEndToEnd):
    pass


class TestEmbeddedLocalReranker(LocalRerankerEndToEnd):
    pass
