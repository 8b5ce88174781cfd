"""Entity extraction as a deployment configures it: the profile and its lexicon files.

The lexicons shipped with engram_core can be replaced file by file: a directory holding
``tools.txt`` replaces the shipped tools, an empty file removes them, and a file it does not
hold stays the shipped one. Every service that extracts entities (ingest, and the replays of
consolidate) must be given the same settings, or the same memory gets other entity tags.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from engram_core.entities import EntityRules
from engram_core.lexicon import (
    Lexicon,
    LexiconError,
    LexiconFile,
    builtin_lexicon,
    check_file_name,
    lexicon_files,
    parse_lexicon,
    shipped_text,
)
from engram_core.profiles import DEFAULT, profile_named
from engram_platform.settings import ProfileName


class EntitySettings(BaseModel):
    """How entities are extracted from memory contents."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: ProfileName = Field(
        DEFAULT,
        description="Profile whose extraction rules apply: default, or conversation for chat "
        "turns (speaker prefixes name people; chat-topic concepts). Changing it changes the "
        "entity tags of memories written afterwards.",
    )
    lexicon_dir: Path | None = Field(
        None,
        description="Directory of lexicon files (tools.txt, places.capitalised.txt, "
        "concepts.txt, …: one 'Name | alias' a line) replacing the shipped ones of the same "
        "name; unset = the shipped lexicons.",
    )

    def rules(self) -> EntityRules:
        """The rules these settings name; LexiconError names a bad file and line."""
        profile = profile_named(self.profile)
        return EntityRules(load_lexicon(profile.concepts, self.lexicon_dir), profile.speaker_names)


def load_lexicon(concepts: str, directory: Path | None = None) -> Lexicon:
    """The lexicon with concept file ``<concepts>.txt``, from ``directory`` where it holds a
    file and from the shipped files where it does not."""
    if directory is None:
        return builtin_lexicon(concepts)
    if not directory.is_dir():
        raise LexiconError(str(directory), 0, "not a directory")
    for path in sorted(directory.glob("*.txt")):
        check_file_name(path.name, str(path))  # a misspelt file would be ignored
    return parse_lexicon([_file(directory, name) for name in lexicon_files(concepts)])


def _file(directory: Path, name: str) -> LexiconFile:
    path = directory / name
    if not path.is_file():
        return LexiconFile(name, shipped_text(name))
    try:
        return LexiconFile(name, path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise LexiconError(str(path), 0, f"cannot be read: {e}") from e
