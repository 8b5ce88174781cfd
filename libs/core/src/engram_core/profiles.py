"""Profiles: what recall, scoring and entity extraction assume about the memories stored.

Some rules pay only when memories are chat turns: the answer is often the turn after
the one that matches (the timeline context step and the ``context`` weight), a question's
answer reads better with the question before it, a speaker's name in the query says little
about the topic, lines start with ``Name:``, and a client tag names the speaker
(``label``). For agents storing facts, decisions, preferences and code context those
rules are noise or cost, so they live in the ``conversation`` profile, and ``default``
leaves them off. A service picks its profile from a setting; a recall may name one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from engram_core.errors import InvalidArgument

DEFAULT = "default"
CONVERSATION = "conversation"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    # Recall: timeline neighbours of the best candidates join the pool (the context step).
    timeline_context: bool
    # Reranking: a memory that ends in "?" is read with the memory before it.
    question_before: bool
    # Dense query: the people the query names are left out of the text embedded.
    drop_names_from_dense_query: bool
    # Entity extraction: a ``Name:`` prefix at a line start names a person.
    speaker_names: bool
    # Entity extraction: the concept lexicon file, ``<concepts>.txt`` (engram_core.lexicon).
    concepts: str
    # Scoring: weights replaced over the service's configured ones (engram_core.scoring).
    weight_overrides: Mapping[str, float]

    def __hash__(self) -> int:
        return hash(self.name)


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        DEFAULT: Profile(
            name=DEFAULT,
            timeline_context=False,
            question_before=False,
            drop_names_from_dense_query=False,
            speaker_names=False,
            concepts="concepts",
            weight_overrides=MappingProxyType({"label": 0.0, "context": 0.0}),
        ),
        CONVERSATION: Profile(
            name=CONVERSATION,
            timeline_context=True,
            question_before=True,
            drop_names_from_dense_query=True,
            speaker_names=True,
            concepts="concepts.conversation",
            weight_overrides=MappingProxyType({}),
        ),
    }
)


def profile_named(name: str, field: str = "profile") -> Profile:
    """The profile called ``name``; InvalidArgument naming ``field`` when there is none."""
    profile = PROFILES.get(name)
    if profile is None:
        raise InvalidArgument(
            field, f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}"
        )
    return profile
