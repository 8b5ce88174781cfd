from pathlib import Path

import pytest

from engram_core.errors import Unavailable
from engram_embed import EmbedSettings, HashingEmbedder, make_embedder
from engram_embed.factory import similar_cosine
from engram_embed.http import OpenAICompatibleEmbedder


def test_every_setting_has_a_default_and_a_description() -> None:
    EmbedSettings()
    for name, field in EmbedSettings.model_fields.items():
        assert field.description, name


def test_local_is_the_default_and_its_model_lives_under_engram_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    s = EmbedSettings()
    assert s.provider == "local"
    assert s.model_dir == tmp_path / "models" / "bge-small-en-v1.5-q"


def test_hashing_provider() -> None:
    emb = make_embedder(EmbedSettings(provider="hashing", dimension=48))
    assert isinstance(emb, HashingEmbedder)
    assert emb.dimension == 48


async def test_openai_provider() -> None:
    emb = make_embedder(EmbedSettings(provider="openai", model="m", dimension=1536))
    assert isinstance(emb, OpenAICompatibleEmbedder)
    assert (emb.model_name, emb.dimension) == ("m", 1536)
    await emb.close()


def test_local_provider_without_a_built_model_says_to_run_make_models(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.onnx"
    with pytest.raises(Unavailable, match=f"{missing} is missing: run `make models`"):
        make_embedder(EmbedSettings(model_dir=missing.parent))


def test_similar_cosine_is_the_configured_models(tmp_path: Path) -> None:
    minilm = tmp_path / "any-folder"
    minilm.mkdir()
    (minilm / "manifest.json").write_text('{"model_name": "all-MiniLM-L6-v2"}')
    assert similar_cosine(EmbedSettings(model_dir=minilm)) == 0.85
    # No manifest (not built yet): the folder's name, as `make models` names it.
    assert similar_cosine(EmbedSettings(model_dir=tmp_path / "bge-small-en-v1.5-q")) == 0.92
    assert similar_cosine(EmbedSettings(model_dir=tmp_path / "some-other-model")) is None
    assert similar_cosine(EmbedSettings(provider="openai", model="m")) is None
