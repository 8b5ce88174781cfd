"""Every ENGRAM_<SERVICE>_… variable the repository names (code, chart, CI, bench, docs)
is a setting of that service: a renamed setting leaves no caller behind."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

from engram_platform.settings import ServiceSettings, is_setting
from engram_testing.devstack import START_ORDER

REPO = Path(__file__).resolve().parents[2]
SERVICES = "|".join(s.upper() for s in START_ORDER)
NAME = re.compile(rf"\bENGRAM_({SERVICES})_([A-Z0-9_]*[A-Z0-9])")
SKIP = ("libs/api/", "uv.lock")


def _settings(component: str) -> type[ServiceSettings]:
    cls = importlib.import_module(f"engram_{component}.config").Settings
    assert issubclass(cls, ServiceSettings)
    return cls


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [REPO / p for p in out.split("\0") if p and not p.startswith(SKIP)]


def test_every_variable_the_repository_names_is_a_setting() -> None:
    settings = {c.upper(): _settings(c) for c in START_ORDER}
    wrong = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for m in NAME.finditer(text):
            if not is_setting(settings[m.group(1)], m.group(2)):
                wrong.append(f"{path.relative_to(REPO)}: {m.group(0)}")
    assert not wrong, "not settings:\n" + "\n".join(wrong)
