"""List, export and import on the embedded stack (fixtures in conftest.py)."""

from __future__ import annotations

from engram_testing.e2e_transfer import TransferEndToEnd


class TestEmbeddedTransfer(TransferEndToEnd):
    pass
