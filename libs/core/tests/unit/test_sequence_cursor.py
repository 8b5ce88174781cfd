"""The cursor of a scan by sequence: what a page hands back is what the next page takes."""

from __future__ import annotations

import pytest

from engram_core.errors import InvalidArgument
from engram_core.sequence_cursor import SequenceCursor, decode, encode


@pytest.mark.parametrize(
    "cursor",
    [SequenceCursor(0, ""), SequenceCursor(42, "a"), SequenceCursor(2**63 - 1, "x:y")],
)
def test_a_cursor_round_trips(cursor: SequenceCursor) -> None:
    assert decode(encode(cursor)) == cursor


@pytest.mark.parametrize(
    "value", ["", "7", ":a", "-1:a", "1.5:a", "²:a", f"{2**63}:a", "7: a", "7:" + "a" * 257]
)
def test_anything_else_is_named_by_its_field(value: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        decode(value, "page.cursor")
    assert err.value.field == "page.cursor"
