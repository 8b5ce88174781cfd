"""The fault suite: each scenario on a stack of its own, each recording its figures here.

The summary line is printed last; a lost, duplicated, leaked or wedged write or an
INTERNAL answer to input fails the run even when no scenario asserted on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_testing.devstack import DevStack
from engram_testing.faults import Figures, start_fault_stack

_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    return _FIGURES


@pytest.fixture
def fault_stack(tmp_path: Path) -> Iterator[DevStack]:
    """A fresh stack for one scenario."""
    running = start_fault_stack(tmp_path / "home")
    yield running
    running.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if any(_FIGURES.totals.values()) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _FIGURES.lines:
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's own closing line, so the summary is the run's last line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and (_FIGURES.scenarios or config.option.markexpr == "faults"):
        reporter.write_line(_FIGURES.summary())
