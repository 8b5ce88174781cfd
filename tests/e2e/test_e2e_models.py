"""Query-side models end to end on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_models import QueryModelsEndToEnd


class TestEmbeddedQueryModels(QueryModelsEndToEnd):
    pass
