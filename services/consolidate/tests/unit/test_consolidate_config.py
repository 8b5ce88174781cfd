"""Settings: every rule constant is a setting that builds engram_core's dataclass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from engram_consolidate.bootstrap import pass_settings, schedule_of
from engram_consolidate.config import Settings
from engram_consolidate.service import PassName
from engram_core.associations import AssociationSettings
from engram_core.clusters import ClusterSettings
from engram_core.forgetting import ForgetSettings
from engram_core.relevance import DecaySettings, descriptions
from engram_embed.factory import EmbedSettings
from engram_embed.paths import BGE_SMALL_Q, MINILM


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
            assert (type(model).model_fields[name].description or "").startswith(text)


def _model_dir(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "models" / "folder"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"model_name": name}))
    return folder


@pytest.mark.parametrize(("model", "near"), [(MINILM, 0.85), (BGE_SMALL_Q, 0.92)])
def test_near_is_the_embedding_models_own(tmp_path: Path, model: str, near: float) -> None:
    """SIMILAR_TO and cluster thresholds follow the model `embed` names in its manifest."""
    s = Settings(embed=EmbedSettings(model_dir=_model_dir(tmp_path, model)))
    passes = pass_settings(s)
    assert passes.associate.similar_min_cosine == near
    assert passes.cluster.min_cosine == near


def test_a_set_threshold_wins_and_an_unknown_model_takes_the_default(tmp_path: Path) -> None:
    minilm = EmbedSettings(model_dir=_model_dir(tmp_path, MINILM))
    s = Settings(
        embed=minilm,
        associate={"similar_min_cosine": 0.9},  # type: ignore[arg-type]
        cluster={"min_cosine": 0.95},  # type: ignore[arg-type]
    )
    assert (pass_settings(s).associate.similar_min_cosine, pass_settings(s).cluster.min_cosine) == (
        0.9,
        0.95,
    )
    remote = Settings(embed=EmbedSettings(provider="openai", model="m"))
    assert pass_settings(remote).associate == AssociationSettings()
    assert pass_settings(remote).cluster == ClusterSettings()


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
