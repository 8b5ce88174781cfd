"""Write each service README's settings reference from the service's settings models
(``make docs``); with --check, write nothing and fail when a README's table differs."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from pydantic_settings import BaseSettings

from engram_testing.devstack import START_ORDER
from engram_testing.settings_docs import settings_table, with_table

REPO = Path(__file__).resolve().parents[1]


def readme(service: str) -> Path:
    return REPO / "services" / service / "README.md"


def settings_of(service: str) -> type[BaseSettings]:
    cls: type[BaseSettings] = importlib.import_module(f"engram_{service}.config").Settings
    return cls


def generated(service: str) -> tuple[str, str]:
    """The README as committed and as the generator writes it."""
    text = readme(service).read_text(encoding="utf-8")
    return text, with_table(text, settings_table(settings_of(service)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail on a stale table; write none")
    args = parser.parse_args(argv)
    stale = []
    for service in START_ORDER:
        old, new = generated(service)
        if old != new:
            stale.append(str(readme(service).relative_to(REPO)))
            if not args.check:
                readme(service).write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale settings reference in {', '.join(stale)}: run `make docs`", file=sys.stderr)
        return 1
    for path in [] if args.check else stale:
        print(f"wrote the settings reference of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
