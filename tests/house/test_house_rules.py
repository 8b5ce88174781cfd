"""House rules (DESIGN §8) that review alone lets slip, checked over every src/ tree.

Comments and docstrings say why: not when (dates), not which run (benchmark figures),
not which ticket (issue numbers, which are not in the repository). Functions stay short.
The generated API (libs/api) is not ours to style.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MAX_FUNCTION_LINES = 60

# A quoted or literal span (``2024-02``, "after 2024-03-01") is an example of an input,
# not a date of the project's: it is left out before matching.
_QUOTED = re.compile(r"``[^`]*``|`[^`]*`|\"[^\"]*\"")
_FORBIDDEN = {
    "a date": re.compile(r"\b20\d\d-[01]\d(?:-[0-3]\d)?\b"),
    "an issue number": re.compile(r"(?<![\w&])#\d+\b|\bissues? #?\d+", re.IGNORECASE),
    "a run figure": re.compile(
        r"\b(?:R@\d+|recall@\d+|hit@\d+|MRR|nDCG(?:@\d+)?)\b[^.;]{0,40}?\d\.\d{2,}"
        r"|\d\.\d{2,}\s+(?:\w+\s+){0,3}(?:R@|hit@|MRR\b)"
        r"|\bfrom \d+\.\d+ to \d+\.\d+|\d\.\d+ → \d\.\d+"
        r"|\bmake bench(?:-quality)?\b[^\n)]*\d"
        r"|\b\d+k bench\b|\bon the \d+k\b|\b\d+(?:\.\d+)?x (?:faster|slower)\b"
    ),
}


def _sources() -> Iterator[Path]:
    for tree in ("libs", "services"):
        for path in sorted((ROOT / tree).glob("*/src/**/*.py")):
            if not path.is_relative_to(ROOT / "libs" / "api"):
                yield path


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment, docstring and ``description=`` of a module."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
        elif isinstance(node, ast.keyword) and node.arg == "description":
            for part in ast.walk(node.value):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    yield part.lineno, part.value


def findings(source: str) -> list[str]:
    """What a module's comments and docstrings say that they should not, by line."""
    found = []
    for line, text in _prose(source):
        bare = _QUOTED.sub("", text)
        for what, pattern in _FORBIDDEN.items():
            for match in pattern.finditer(bare):
                found.append(f"{line}: {what}: {match.group(0)!r}")
    return found


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function, nested ones too, over MAX_FUNCTION_LINES."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                out.append((node.name, lines))
    return out


@pytest.mark.parametrize(
    "text",
    [
        "# Off until then (make bench-quality, 2026-11-30).",
        '"""Forgetting (issue #5): keep, archive or delete."""',
        "# See issue 12.",
        "# hybrid turn R@10 fell from 0.625 to 0.512 here",
        "# worth about +0.04 turn R@10 on the dev set",
        "x = Field(1, description='off until #5.')",
    ],
)
def test_the_scan_finds_what_it_is_for(text: str) -> None:
    assert findings(text + "\n")


@pytest.mark.parametrize(
    "text",
    [
        '"""Periods: month ``2024-02``, date ``2024-02-29``, "after 2024-03-01"."""',
        "# Relations per graph call: under the graph service's MAX_BATCH (1000).",
        "x = m.group(1)  # the first word",
        "# Weights sum to 1.0; 0.25 of it is recency.",
    ],
)
def test_the_scan_leaves_what_says_why(text: str) -> None:
    assert findings(text + "\n") == []


def test_src_comments_name_no_dates_run_figures_or_issues() -> None:
    bad = {}
    for path in _sources():
        found = findings(path.read_text(encoding="utf-8"))
        if found:
            bad[_rel(path)] = found
    assert bad == {}


def test_the_long_function_scan_counts_nested_lines() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}") == [("f", MAX_FUNCTION_LINES + 1)]
    assert long_functions(f"def f():\n{body[: -len(body.splitlines()[-1]) - 1]}") == []


def test_no_function_in_src_is_over_60_lines() -> None:
    long = {
        (_rel(path), name): lines
        for path in _sources()
        for name, lines in long_functions(path.read_text(encoding="utf-8"))
    }
    assert long == {}
