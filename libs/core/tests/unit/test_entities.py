"""Rule-based entity extraction: exact entity sets for real (LoCoMo-like) sentences.

Every expected set is written from reading the sentence against the rules in the
module docstring, not from a run of the code.
"""

from __future__ import annotations

import pytest

from engram_core.entities import extract_entities, slugify
from engram_core.model import ENTITY_KINDS, Entity


def keys(text: str) -> set[str]:
    return {e.key for e in extract_entities(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Caroline: I went to a LGBTQ support group yesterday",
            {"people:caroline", "concepts:lgbtq"},
        ),
        (
            "Melanie: I'm planning a trip to Paris with Docker folks at Google",
            {"people:melanie", "places:paris", "tools:docker", "organizations:google"},
        ),
        (
            "Melanie: Hey Caroline! Good to see you! I'm swamped with the kids & work.",
            {"people:melanie", "people:caroline"},
        ),
        (
            "Caroline: The transgender stories were so inspiring! Thanks, Melanie.",
            {"people:caroline", "people:melanie", "concepts:transgender"},
        ),
        (
            "Yesterday Jon and Gina talked about opening a dance studio in Boston.",
            {"people:jon", "people:gina", "places:boston"},
        ),
        (
            "We moved the ingest worker from Redis to postgres and deploy it with k8s.",
            {"tools:redis", "tools:postgres", "tools:kubernetes"},
        ),
        (
            "Decision: use PostgreSQL over MySQL for the Engram project.",
            {"tools:postgres", "tools:mysql", "projects:engram"},
        ),
        (
            "Project Phoenix ships in March; see github.com/acme/phoenix-api and #infra.",
            {"projects:phoenix", "projects:acme-phoenix-api", "projects:infra"},
        ),
        (
            "Sarah Connor joined Acme Corp after a PhD at the University of Michigan.",
            {
                "people:sarah-connor",
                "organizations:acme-corp",
                "organizations:university-of-michigan",
            },
        ),
        (
            "Tim flew to Lisbon for a conference, then moved to Austin in June.",
            {"places:lisbon", "places:austin"},
        ),
    ],
)
def test_exact_entity_sets(text: str, expected: set[str]) -> None:
    assert keys(text) == expected


def test_sentence_start_words_common_words_and_acronyms_are_not_people() -> None:
    # Single capitalised words at a sentence start, days, months, greetings, the
    # pronoun I and acronyms say nothing about a person.
    assert keys("Tomorrow is Monday. Thanks! I think the API and the CLI are fine.") == set()
    assert keys("Nate went home. Then he called.") == set()


def test_multi_word_names_are_joined_and_first_names_folded_into_them() -> None:
    ents = extract_entities("I met Sarah Connor today. Later Sarah sent me a note.")
    assert [(e.kind, e.slug, e.name) for e in ents] == [("people", "sarah-connor", "Sarah Connor")]


def test_possessives_and_titles() -> None:
    assert keys("I went to Sarah's party with Dr. Smith.") == {"people:sarah", "people:smith"}


def test_tool_lexicon_is_case_insensitive_but_english_words_need_a_capital() -> None:
    assert keys("i use DOCKER, Python and vscode") == {
        "tools:docker",
        "tools:python",
        "tools:vscode",
    }
    assert keys("The old bike has rust and we slack off.") == set()
    assert keys("The service is written in Rust and we chat on Slack.") == {
        "tools:rust",
        "tools:slack",
    }
    # A capital that only starts the sentence proves nothing.
    assert keys("Go ahead and merge it.") == set()


def test_acronym_aliases_count_only_in_capitals() -> None:
    assert keys("who said what") == set()
    assert keys("The WHO and the UN met in LA.") == {
        "organizations:world-health-organization",
        "organizations:united-nations",
        "places:los-angeles",
    }


def test_aliases_share_one_slug_and_the_canonical_name() -> None:
    ents = extract_entities("k8s, Kubernetes and kubectl; C++ and cpp; node.js and NodeJS")
    assert [(e.kind, e.slug, e.name) for e in ents] == [
        ("tools", "cpp", "C++"),
        ("tools", "kubernetes", "Kubernetes"),
        ("tools", "node-js", "Node.js"),
    ]


def test_longest_lexicon_match_wins() -> None:
    assert keys("We host it on Google Cloud near New York City.") == {
        "tools:gcp",
        "places:new-york",
    }


def test_repo_like_pairs_but_not_word_pairs_dates_or_paths() -> None:
    assert keys("Fork facebook/react, and/or read the TCP/IP notes from 12/25.") == {
        "projects:facebook-react"
    }
    assert keys("Logs are in /var/log/engram and mail me at dev@google.com") == set()


def test_hashtags_need_a_letter() -> None:
    assert keys("Closed #42 for #search-quality") == {"projects:search-quality"}


def test_travel_verbs_find_places_not_possessives() -> None:
    assert keys("She lives in Ohio but went to Jenny's wedding.") == {
        "places:ohio",
        "people:jenny",
    }
    assert keys("I was born in Tbilisi.") == {"places:tbilisi"}


def test_organization_suffixes_drop_leading_common_words() -> None:
    assert keys("At Globex Corporation we met Initech LLC.") == {
        "organizations:globex-corporation",
        "organizations:initech-llc",
    }


def test_output_is_sorted_deduplicated_and_deterministic() -> None:
    text = "Docker, docker and DOCKER at Google; Google again.\nCaroline: Hi Melanie!"
    first = extract_entities(text)
    assert first == extract_entities(text)
    assert [e.key for e in first] == [
        "organizations:google",
        "people:caroline",
        "people:melanie",
        "tools:docker",
    ]
    assert all(e.kind in ENTITY_KINDS for e in first)


def test_entity_tag() -> None:
    assert Entity("people", "sarah-connor", "Sarah Connor").tag == "entity:people:sarah-connor"


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Sarah Connor", "sarah-connor"),
        ("José Álvarez", "jose-alvarez"),
        ("facebook/react", "facebook-react"),
        ("  --Node.js--  ", "node-js"),
        ("", ""),
    ],
)
def test_slugify(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_empty_and_plain_text() -> None:
    assert extract_entities("") == []
    assert extract_entities("nothing here but lower case words.") == []
