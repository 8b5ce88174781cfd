"""Tag normalisation and prefixes: ``entity/people:Sarah`` → ``entity:people:sarah``."""

from __future__ import annotations

from collections.abc import Iterable

from engram_core.limits import MAX_TAG_LENGTH


def normalise_tag(tag: str) -> str:
    return tag.strip().lower().replace("/", ":")


def tag_prefixes(tags: Iterable[str]) -> tuple[str, ...]:
    """Every prefix of every tag at a separator, the tags themselves included, sorted."""
    out: set[str] = set()
    for tag in tags:
        parts = [p for p in normalise_tag(tag).split(":") if p]
        for i in range(1, len(parts) + 1):
            out.add(":".join(parts[:i]))
    return tuple(sorted(out))


def tag_problem(tag: str) -> str | None:
    """Why a raw tag is not acceptable, or None."""
    if not tag.strip():
        return "must not be empty"
    if len(tag) > MAX_TAG_LENGTH:
        return f"longer than {MAX_TAG_LENGTH} characters"
    if any(ch.isspace() for ch in tag.strip()):
        return "must not contain whitespace"
    return None
