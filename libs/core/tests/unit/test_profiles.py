"""Profiles: the built-in two, their names, and what each switches."""

from __future__ import annotations

import pytest

from engram_core.errors import InvalidArgument
from engram_core.lexicon import builtin_lexicon
from engram_core.profiles import CONVERSATION, DEFAULT, PROFILES, profile_named
from engram_core.scoring import Weights


def test_profiles_are_found_by_name() -> None:
    assert profile_named("default").name == DEFAULT
    assert profile_named("conversation").name == CONVERSATION
    assert set(PROFILES) == {DEFAULT, CONVERSATION}


def test_an_unknown_name_is_invalid_and_names_the_field() -> None:
    with pytest.raises(InvalidArgument) as raised:
        profile_named("chat")
    assert raised.value.field == "profile"
    assert "known: conversation, default" in str(raised.value)
    with pytest.raises(InvalidArgument) as raised:
        profile_named("", field="entity_profile")
    assert raised.value.field == "entity_profile"


def test_conversation_switches_every_chat_rule_on_and_keeps_the_weights() -> None:
    p = profile_named(CONVERSATION)
    switches = (p.timeline_context, p.question_before, p.drop_names_from_dense_query)
    assert switches == (True, True, True)
    assert p.speaker_names
    assert dict(p.weight_overrides) == {}


def test_default_switches_every_chat_rule_off() -> None:
    p = profile_named(DEFAULT)
    switches = (p.timeline_context, p.question_before, p.drop_names_from_dense_query)
    assert switches == (False, False, False)
    assert not p.speaker_names
    assert dict(p.weight_overrides) == {"label": 0.0, "context": 0.0}
    assert Weights().with_overrides(p.weight_overrides).context == 0.0


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_names_real_weights_and_a_shipped_concept_file(name: str) -> None:
    p = profile_named(name)
    Weights().with_overrides(p.weight_overrides)  # an unknown weight name raises
    assert builtin_lexicon(p.concepts).terms


def test_a_profile_cannot_be_changed() -> None:
    p = profile_named(DEFAULT)
    with pytest.raises(AttributeError):
        p.speaker_names = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.weight_overrides["label"] = 1.0  # type: ignore[index]
