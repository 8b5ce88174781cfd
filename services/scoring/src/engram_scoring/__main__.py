"""``engram-scoring`` / ``python -m engram_scoring``: read settings once and serve, in one
process or, with ``workers`` > 1, in that many on the one port (engram_platform.workers)."""

from __future__ import annotations

from engram_platform import workers
from engram_scoring import server
from engram_scoring.config import Settings


def main() -> None:
    settings = Settings()
    workers.main(server.NAME, settings, settings.workers, server.serve)


if __name__ == "__main__":
    main()
