"""Subscribe end to end on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_subscribe import SubscribeEndToEnd


class TestEmbeddedSubscribe(SubscribeEndToEnd):
    pass
