"""A deployment's lexicon directory and entity profile, as ingest and consolidate read them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from engram_core.entities import extract_entities
from engram_core.lexicon import LexiconError
from engram_platform.lexicons import EntitySettings, load_lexicon


def keys(text: str, settings: EntitySettings) -> set[str]:
    return {e.key for e in extract_entities(text, settings.rules())}


def test_a_file_in_the_directory_replaces_the_shipped_one_of_its_name(tmp_path: Path) -> None:
    (tmp_path / "concepts.txt").write_text("Feature Flags | feature flag\n", encoding="utf-8")
    text = "We put the machine learning model behind a feature flag in Docker."
    assert keys(text, EntitySettings(profile="default")) == {
        "concepts:machine-learning",
        "tools:docker",
    }
    assert keys(text, EntitySettings(profile="default", lexicon_dir=tmp_path)) == {
        "concepts:feature-flags",
        "tools:docker",  # tools.txt is not in the directory: the shipped one stays
    }


def test_the_profile_picks_the_concepts_and_the_speaker_rule() -> None:
    text = "Caroline: the adoption agency called"
    chat = {"people:caroline", "concepts:adoption"}
    assert keys(text, EntitySettings(profile="conversation")) == chat
    assert keys(text, EntitySettings(profile="default")) == keys(text, EntitySettings()) == set()


def test_a_bad_line_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "tools.txt").write_text("Docker\nKafka ||\n", encoding="utf-8")
    with pytest.raises(LexiconError) as raised:
        EntitySettings(lexicon_dir=tmp_path).rules()
    assert str(raised.value).startswith(f"{tmp_path / 'tools.txt'} line 2: ")


def test_a_misspelt_file_name_fails_rather_than_being_ignored(tmp_path: Path) -> None:
    (tmp_path / "tool.txt").write_text("Docker\n", encoding="utf-8")
    with pytest.raises(LexiconError, match=r"tool\.txt: not a lexicon file name"):
        load_lexicon("concepts", tmp_path)


def test_an_undecodable_file_and_a_missing_directory_fail(tmp_path: Path) -> None:
    with pytest.raises(LexiconError, match="not a directory"):
        load_lexicon("concepts", tmp_path / "absent")
    (tmp_path / "places.txt").write_bytes(b"Paris\n\xff\xfe\n")
    with pytest.raises(LexiconError, match=r"places\.txt: cannot be read"):
        load_lexicon("concepts", tmp_path)


def test_an_unknown_profile_is_refused_by_the_settings() -> None:
    with pytest.raises(ValidationError, match="unknown profile 'chat'"):
        EntitySettings(profile="chat")
