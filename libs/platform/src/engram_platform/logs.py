"""Process-wide logging: one line per record, service name first."""

from __future__ import annotations

import logging
import sys


def configure_logging(service: str, level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s engram-{service} %(name)s: %(message)s",
        force=True,
    )
