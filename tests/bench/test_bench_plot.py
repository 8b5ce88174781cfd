"""The plot script reads the newest quality report of each profile and storage."""

from __future__ import annotations

import json
from pathlib import Path

from bench.plot import draw, newest_cells, table


def _report(path: Path, profile: str, storage: str, r10: float) -> None:
    overall = {"r@10": r10, "s_h@5": 0.9, "s_r@5": 0.8, "mrr": 0.6}
    modes = {"hybrid": {"overall": overall}, "bm25": {"overall": overall}}
    path.write_text(json.dumps({"profile": profile, "storage": storage, "modes": modes}))


def test_the_newest_report_of_each_profile_and_storage_is_drawn(tmp_path: Path) -> None:
    _report(tmp_path / "quality-20260101T000000.json", "conversation", "tagged", 0.1)
    _report(tmp_path / "quality-20260102T000000.json", "conversation", "tagged", 0.8)
    _report(tmp_path / "quality-20260103T000000.json", "default", "flat", 0.7)
    (tmp_path / "quality-20260104T000000.json").write_text(json.dumps({"modes": {}}))
    cells = newest_cells(tmp_path)
    assert [(c.profile, c.storage, c.figures["r@10"]) for c in cells] == [
        ("conversation", "tagged", 0.8),
        ("default", "flat", 0.7),
    ]
    assert (
        table(cells).splitlines()[2] == "| conversation | tagged | 0.800 | 0.900 | 0.800 | 0.600 |"
    )
    out = tmp_path / "plots" / "q.png"
    draw(cells, out)
    assert out.read_bytes().startswith(b"\x89PNG")
