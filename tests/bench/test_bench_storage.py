"""The quality bench's two storages: what each writes down for the same LoCoMo turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.quality import load, memory_input, memory_tags


def _locomo(tmp_path: Path) -> Path:
    """One conversation of two sessions in the LoCoMo layout, one question on it."""
    turn = {"speaker": "Caroline Ray", "dia_id": "D1:1", "text": "I went to a support group."}
    data = [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Caroline Ray",
                "speaker_b": "Mel",
                "session_1": [turn, {"speaker": "Mel", "dia_id": "D1:2", "text": "How was it?"}],
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_2": [{"speaker": "Mel", "dia_id": "D2:1", "text": "Back again."}],
                "session_2_date_time": "10:00 am on 9 May, 2023",
            },
            "qa": [{"question": "Where did Caroline go?", "evidence": ["D1:1"], "category": 4}],
        }
    ]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_tagged_writes_the_speaker_tag_and_flat_does_not(tmp_path: Path) -> None:
    (conv,), _, _ = load(_locomo(tmp_path))
    first = conv.turns[0]
    assert memory_tags(conv.sample_id, first, "tagged") == (
        "conv:conv-x",
        "session:1",
        "speaker:caroline-ray",
    )
    assert memory_tags(conv.sample_id, first, "flat") == ("conv:conv-x", "session:1")
    flat = memory_input(conv, first, "flat")
    assert not [t for t in flat.tags if t.startswith("speaker:")]


def test_both_storages_keep_the_speaker_in_the_content_and_one_time_per_session(
    tmp_path: Path,
) -> None:
    (conv,), _, _ = load(_locomo(tmp_path))
    a, b, c = (memory_input(conv, t, "flat") for t in conv.turns)
    assert a.content == "Caroline Ray: I went to a support group."
    assert a.timestamp == b.timestamp  # the session's date-time, not one per turn
    assert c.timestamp.seconds > a.timestamp.seconds
    assert memory_input(conv, conv.turns[0], "tagged").content == a.content


def test_an_unknown_storage_is_refused(tmp_path: Path) -> None:
    (conv,), _, _ = load(_locomo(tmp_path))
    with pytest.raises(ValueError, match="storage 'plain'"):
        memory_tags(conv.sample_id, conv.turns[0], "plain")
