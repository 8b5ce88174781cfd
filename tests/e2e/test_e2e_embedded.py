"""The end-to-end suite on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e import GatewayEndToEnd


class TestEmbeddedStack(GatewayEndToEnd):
    pass
