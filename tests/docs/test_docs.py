"""The user docs stay short and their links resolve.

README.md is for users; measurement history lives in docs/benchmarks.md. Each
service or library README keeps what a user needs; its settings table sits
between generation markers and does not count toward its length.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
PART_README_MAX_LINES = 150
BEGIN = "<!-- BEGIN GENERATED SETTINGS -->"
END = "<!-- END GENERATED SETTINGS -->"
# [text](target) and [text]: target; the target ends at whitespace or ')'.
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def part_readmes() -> list[Path]:
    return sorted([*ROOT.glob("services/*/README.md"), *ROOT.glob("libs/*/README.md")])


def linked_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def lines_outside_generated(text: str) -> int:
    """Lines of text, not counting the generated block or its markers."""
    count, inside = 0, False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"nested {BEGIN}")
            inside = True
        elif stripped == END:
            if not inside:
                raise ValueError(f"{END} without {BEGIN}")
            inside = False
        elif not inside:
            count += 1
    if inside:
        raise ValueError(f"{BEGIN} without {END}")
    return count


def relative_links(text: str) -> list[str]:
    """Targets of the links that point into the repository (no scheme, no bare anchor)."""
    prose = FENCE.sub("", text)
    targets = INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    return broken


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("readme", part_readmes(), ids=lambda p: str(p.relative_to(ROOT)))
def test_part_readme_is_short(readme: Path) -> None:
    lines = lines_outside_generated(readme.read_text(encoding="utf-8"))
    assert lines <= PART_README_MAX_LINES, (
        f"{readme.relative_to(ROOT)} has {lines} lines outside the generated settings "
        f"(at most {PART_README_MAX_LINES})"
    )


@pytest.mark.parametrize("doc", linked_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    assert broken_links(doc) == [], f"{doc.relative_to(ROOT)} links to missing files"


def test_readme_python_examples_compile() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, "README.md shows no Python example"
    for block in blocks:
        compile(block, "README.md", "exec")


def test_generated_block_is_not_counted() -> None:
    text = "a\n" + BEGIN + "\n| x |\n| y |\n" + END + "\nb\n"
    assert lines_outside_generated(text) == 2


def test_unclosed_generated_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="without"):
        lines_outside_generated("a\n" + BEGIN + "\n| x |\n")


def test_links_in_code_and_to_urls_are_ignored() -> None:
    text = (
        "[a](docs/x.md#y) [b](https://example.com) [c](#local)\n"
        "```\n[d](nowhere.md)\n```\n[e]: ../f.md\n"
    )
    assert relative_links(text) == ["docs/x.md#y", "../f.md"]
