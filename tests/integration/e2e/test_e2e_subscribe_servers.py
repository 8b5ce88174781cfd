"""Subscribe end to end on the server stack (fixtures in conftest.py): the feed reads
the same JetStream the servers' ingest does."""

from __future__ import annotations

from engram_testing.e2e_subscribe import SubscribeEndToEnd


class TestServerSubscribe(SubscribeEndToEnd):
    pass
