"""Settings: every rule constant is a setting that builds engram_core's dataclass."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engram_consolidate.bootstrap import schedule_of
from engram_consolidate.config import Settings
from engram_consolidate.service import PassName
from engram_core.associations import AssociationSettings
from engram_core.clusters import ClusterSettings
from engram_core.forgetting import ForgetSettings
from engram_core.relevance import DecaySettings, descriptions


def test_defaults_are_the_core_rules() -> None:
    s = Settings()
    assert s.decay.core() == DecaySettings()
    assert s.forget.core() == ForgetSettings()
    assert s.associate.core() == AssociationSettings()
    assert s.cluster.core() == ClusterSettings()
    for model, rules in (
        (s.decay, DecaySettings),
        (s.forget, ForgetSettings),
        (s.associate, AssociationSettings),
        (s.cluster, ClusterSettings),
    ):
        for name, text in descriptions(rules).items():
            assert type(model).model_fields[name].description == text


def test_the_environment_sets_nested_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_DECAY__RATE", "0.02")
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_FORGET__ARCHIVE_BELOW", "0.1")
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_FORGET__PROTECT_TAGS", '["keep"]')
    monkeypatch.setenv("ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S", "0")
    s = Settings()
    assert s.decay.core().rate == 0.02
    assert s.forget.core().archive_below == 0.1
    assert s.forget.core().protect_tags == ("keep",)
    assert schedule_of(s).intervals[PassName.ASSOCIATE] == 0.0
    assert schedule_of(s).intervals[PassName.DECAY] == 86_400.0


def test_the_core_checks_refuse_bad_rules() -> None:
    with pytest.raises(ValidationError, match="delete_below"):
        Settings(forget={"archive_below": 0.1, "delete_below": 0.5})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="min_size"):
        Settings(cluster={"min_size": 1})  # type: ignore[arg-type]
