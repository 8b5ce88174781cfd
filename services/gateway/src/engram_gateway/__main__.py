"""``engram-gateway`` / ``python -m engram_gateway``: read settings once and serve, in one
process or, with ``workers`` > 1, in that many on the one port (engram_platform.workers)."""

from __future__ import annotations

from engram_gateway import server
from engram_gateway.config import Settings
from engram_platform import workers


def main() -> None:
    settings = Settings()
    workers.main(server.NAME, settings, settings.workers, server.serve)


if __name__ == "__main__":
    main()
