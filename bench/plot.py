"""The figures' plot: hybrid recall on LoCoMo dev by recall profile and storage.

Reads the newest bench/results/quality-*.json of each (profile, storage) pair that
``python -m bench.quality`` wrote, prints the table docs/benchmarks.md shows and draws
turn R@10, session hit@5, session R@5 and MRR as grouped bars into docs/plots/:

    uv run python -m bench.plot [--results bench/results] [--out docs/plots/quality.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A Figure of its own, not pyplot: no display backend, so it draws on a server or in CI.
from matplotlib.figure import Figure

from bench.common import RESULTS, ROOT
from bench.quality import DEFAULT_MODE, SESSION_K

# Report key → label, in the order of the table and the bars.
FIGURES = {
    "r@10": "turn R@10",
    f"s_h@{SESSION_K}": f"session hit@{SESSION_K}",
    f"s_r@{SESSION_K}": f"session R@{SESSION_K}",
    "mrr": "MRR",
}
PLOT = ROOT / "docs" / "plots" / "quality-profiles.png"


@dataclass(frozen=True, slots=True)
class Cell:
    profile: str
    storage: str
    figures: Mapping[str, float]
    report: str  # the file name, for the record


def cell_of(name: str, report: Mapping[str, Any]) -> Cell | None:
    """One report's hybrid figures; None for a report without the default mode."""
    mode = report.get("modes", {}).get(DEFAULT_MODE)
    if mode is None:
        return None
    overall = mode["overall"]
    return Cell(
        profile=str(report.get("profile") or "before profiles"),
        storage=str(report.get("storage") or "tagged"),
        figures={k: float(overall[k]) for k in FIGURES},
        report=name,
    )


def newest_cells(results: Path) -> list[Cell]:
    """The newest report of each (profile, storage); file names sort by their time."""
    cells: dict[tuple[str, str], Cell] = {}
    for path in sorted(results.glob("quality-*.json")):
        cell = cell_of(path.name, json.loads(path.read_text(encoding="utf-8")))
        if cell is not None:
            cells[(cell.profile, cell.storage)] = cell
    # By profile, then the bench's default storage (tagged) before the others.
    return [cells[k] for k in sorted(cells, key=lambda k: (k[0], k[1] != "tagged", k[1]))]


def table(cells: Sequence[Cell]) -> str:
    head = "| profile | storage | " + " | ".join(FIGURES.values()) + " |"
    rule = "|---|---|" + "---|" * len(FIGURES)
    rows = [
        f"| {c.profile} | {c.storage} | "
        + " | ".join(f"{c.figures[k]:.3f}" for k in FIGURES)
        + " |"
        for c in cells
    ]
    return "\n".join([head, rule, *rows])


def draw(cells: Sequence[Cell], out: Path) -> None:
    width = 0.8 / len(cells)
    fig = Figure(figsize=(8, 4), dpi=100)
    ax = fig.subplots()
    for i, c in enumerate(cells):
        xs = [j + (i - (len(cells) - 1) / 2) * width for j in range(len(FIGURES))]
        bars = ax.bar(xs, [c.figures[k] for k in FIGURES], width, label=f"{c.profile}, {c.storage}")
        ax.bar_label(bars, fmt="%.3f", fontsize=6, padding=1)
    ax.set_xticks(range(len(FIGURES)), list(FIGURES.values()))
    ax.set_ylim(0, 1)
    ax.set_title("LoCoMo dev, hybrid recall through the API, by profile and storage")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="quality-*.json here")
    parser.add_argument("--out", type=Path, default=PLOT, help="the PNG to write")
    args = parser.parse_args()
    cells = newest_cells(args.results)
    if not cells:
        print(f"no quality-*.json with {DEFAULT_MODE} figures in {args.results}", file=sys.stderr)
        return 1
    print(table(cells))
    print("reports: " + ", ".join(c.report for c in cells))
    draw(cells, args.out)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
