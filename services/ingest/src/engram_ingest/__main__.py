"""``engram-ingest`` / ``python -m engram_ingest``: read settings once and consume until SIGTERM."""

from __future__ import annotations

import asyncio

from engram_ingest import consumer
from engram_ingest.config import Settings
from engram_platform.logs import configure_logging
from engram_platform.metrics import configure_metrics
from engram_platform.telemetry import configure_tracing


def main() -> None:
    settings = Settings()
    configure_logging(consumer.NAME, settings.log_level, settings.log_format)
    configure_tracing(consumer.NAME, settings.tracing)
    configure_metrics(consumer.NAME, settings)
    asyncio.run(consumer.serve(settings))


if __name__ == "__main__":
    main()
