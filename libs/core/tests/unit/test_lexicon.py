"""Lexicons are data: what a file holds is what is extracted, and a bad file is named."""

from __future__ import annotations

import pytest

from engram_core.entities import EntityRules, extract_entities
from engram_core.lexicon import (
    LexiconError,
    LexiconFile,
    builtin_lexicon,
    lexicon_files,
    parse_lexicon,
    shipped_text,
)


def keys(text: str, rules: EntityRules | None = None) -> set[str]:
    return {e.key for e in extract_entities(text, rules)}


def shipped_with(concepts: str, **replaced: str) -> EntityRules:
    files = [LexiconFile(n, replaced.get(n, shipped_text(n))) for n in lexicon_files(concepts)]
    return EntityRules(parse_lexicon(files))


def test_a_replaced_lexicon_changes_what_is_extracted() -> None:
    text = "We deploy Zephyr with Docker."
    assert keys(text, shipped_with("concepts")) == {"tools:docker", "people:zephyr"}
    rules = shipped_with("concepts", **{"tools.txt": "Zephyr | zephyr-rtos\n"})
    # Docker is no tool of this lexicon: a capitalised word, hence a name.
    assert keys(text, rules) == {"tools:zephyr", "people:docker"}
    assert keys("flashed with zephyr-rtos", rules) == {"tools:zephyr"}


def test_an_empty_file_removes_its_terms() -> None:
    rules = shipped_with("concepts", **{"places.txt": "# none\n\n"})
    assert keys("She moved to Lisbon.", rules) == {"places:lisbon"}  # travel rule
    assert keys("Lisbon is lovely", rules) == set()
    assert keys("Lisbon is lovely", shipped_with("concepts")) == {"places:lisbon"}


def test_the_conversation_topics_are_only_in_the_conversation_concepts() -> None:
    text = "We talked about adoption, mental health and self-care, and machine learning."
    conversation = EntityRules(builtin_lexicon("concepts.conversation"))
    default = EntityRules(builtin_lexicon("concepts"))
    assert keys(text, conversation) == {
        "concepts:adoption",
        "concepts:mental-health",
        "concepts:self-care",
        "concepts:machine-learning",
    }
    assert keys(text, default) == {"concepts:machine-learning"}
    assert keys("The LGBTQ group met.", default) == set()


def test_the_speaker_rule_runs_only_when_asked() -> None:
    text = "Caroline: see you at the gym"
    lexicon = builtin_lexicon("concepts")
    assert keys(text, EntityRules(lexicon, speaker_names=True)) == {"people:caroline"}
    assert keys(text, EntityRules(lexicon, speaker_names=False)) == set()
    assert keys(text) == {"people:caroline"}  # the default keeps the conversation rules


def test_capitalised_files_need_a_capital_not_at_a_sentence_start() -> None:
    rules = shipped_with("concepts", **{"tools.capitalised.txt": "Bolt\n"})
    assert keys("we bolt it on", rules) == set()
    assert keys("Bolt it on.", rules) == set()
    assert keys("We ship on Bolt daily.", rules) == {"tools:bolt"}


@pytest.mark.parametrize(
    ("name", "text", "line", "reason"),
    [
        ("tools.txt", "Docker\n# fine\n\nKafka | | kafka streams\n", 4, "empty name"),
        ("concepts.txt", "Agile\n!!! | bang\n", 2, "no letter or digit"),
        ("places.txt", "Paris\n|\n", 2, "empty name"),
    ],
)
def test_a_bad_line_is_named_with_its_file_and_number(
    name: str, text: str, line: int, reason: str
) -> None:
    with pytest.raises(LexiconError) as raised:
        parse_lexicon([LexiconFile(name, text)])
    assert (raised.value.source, raised.value.line) == (name, line)
    assert str(raised.value).startswith(f"{name} line {line}: ")
    assert reason in str(raised.value)


def test_a_file_of_no_known_kind_is_refused() -> None:
    with pytest.raises(LexiconError, match=r"people\.txt"):
        parse_lexicon([LexiconFile("people.txt", "Sarah\n")])
