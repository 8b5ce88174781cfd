"""``engram-scoring`` / ``python -m engram_scoring``: read settings once and serve."""

from __future__ import annotations

import asyncio

from engram_platform.logs import configure_logging
from engram_platform.metrics import configure_metrics
from engram_platform.telemetry import configure_tracing
from engram_scoring import server
from engram_scoring.config import Settings


def main() -> None:
    settings = Settings()
    configure_logging(server.NAME, settings.log_level, settings.log_format)
    configure_tracing(server.NAME, settings.tracing)
    configure_metrics(server.NAME, settings)
    asyncio.run(server.serve(settings))


if __name__ == "__main__":
    main()
