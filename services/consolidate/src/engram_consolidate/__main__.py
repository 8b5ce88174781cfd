"""``engram-consolidate`` / ``python -m engram_consolidate``: read settings once, consume
until SIGTERM."""

from __future__ import annotations

import asyncio

from engram_consolidate import consumer
from engram_consolidate.config import Settings
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
