"""The cursor of a scan in sequence order (`VectorIndex.scan_by_sequence`, List).

A memory's place in that order is (version, id): the log sequence of the write that last
touched it, ties (one event writing many memories) broken by id. The cursor names the last
place a page reached; the next page starts after it. An empty id means the whole of that
version was read.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_core.errors import InvalidArgument

MAX_ID_CHARS = 256  # ids are UUIDs where they come from a caller; stores take any short id


@dataclass(frozen=True, slots=True)
class SequenceCursor:
    version: int
    id: str  # "" = every memory of `version` was read


def encode(cursor: SequenceCursor) -> str:
    return f"{cursor.version}:{cursor.id}"


def decode(value: str, field_path: str = "cursor") -> SequenceCursor:
    """A cursor a scan by sequence returned; anything else is InvalidArgument(field_path)."""
    version, sep, id_ = value.partition(":")
    ok = sep and version.isascii() and version.isdigit() and int(version) < 2**63
    if not ok or len(id_) > MAX_ID_CHARS or id_ != id_.strip():
        raise InvalidArgument(field_path, "not a cursor a listing returned")
    return SequenceCursor(int(version), id_)
