"""``engram-gateway`` / ``python -m engram_gateway``: read settings once and serve, in one
process or, with ``workers`` > 1, in that many on the one port (engram_platform.workers)."""

from __future__ import annotations

import sys

from engram_gateway import server
from engram_gateway.config import Settings
from engram_platform import workers
from engram_platform.logs import configure_logging


def main() -> None:
    settings = Settings()
    if settings.workers > 1:
        configure_logging(server.NAME, settings.log_level, settings.log_format)
        sys.exit(workers.supervise(server.NAME, settings, settings.workers, server.run_worker))
    server.run(settings)


if __name__ == "__main__":
    main()
