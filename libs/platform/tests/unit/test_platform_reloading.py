"""Values read from files follow the files, at most once per interval, never to a broken one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_platform.reloading import Reloading


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _replace(path: Path, text: str) -> None:
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def _number(path: Path) -> int:
    return int(path.read_text())  # ValueError on a half-written file


def test_a_change_is_read_at_the_first_look_after_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "n"
    path.write_text("1")
    clock = Clock()
    value = Reloading([path], lambda: _number(path), interval_s=5.0, clock=clock)
    _replace(path, "2")
    assert value.get() == 1  # within the interval: not looked at
    clock.now += 5.0
    assert value.get() == 2


def test_a_broken_file_keeps_the_last_good_value_until_it_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "n"
    path.write_text("1")
    value = Reloading([path], lambda: _number(path))
    _replace(path, "half")
    assert value.get() == 1
    path.unlink()
    assert value.get() == 1
    _replace(path, "3")
    assert value.get() == 3


def test_a_broken_file_stops_the_first_load(tmp_path: Path) -> None:
    path = tmp_path / "n"
    path.write_text("x")
    with pytest.raises(ValueError, match="invalid literal"):
        Reloading([path], lambda: _number(path))
