"""Settings and construction of the configured embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from engram_core.ports import Embedder
from engram_embed.paths import SIMILAR_COSINE, default_model_dir


class EmbedSettings(BaseModel):
    """Embedded in each service's settings (e.g. ``ENGRAM_INGEST_EMBED__PROVIDER``)."""

    provider: Literal["local", "openai", "hashing"] = Field(
        "local",
        description="local: the ONNX model from `make models`; openai: an OpenAI-compatible "
        "HTTP endpoint; hashing: a bag-of-words stand-in for unit tests only.",
    )
    model_dir: Path = Field(
        default_factory=default_model_dir,
        description="Folder with model.onnx and tokenizer.json (local provider); "
        "default $ENGRAM_HOME/models/bge-small-en-v1.5-q (int8); "
        "$ENGRAM_HOME/models/bge-small-en-v1.5 (fp32) or all-MiniLM-L6-v2 for the others.",
    )
    query_instruction: str | None = Field(
        None,
        description="Text put before a search query when it is embedded. None: the local "
        "model's own (from its manifest: bge-small-en-v1.5 has one, MiniLM none), '' for "
        "the openai provider.",
    )
    batch_size: int = Field(
        16,
        ge=1,
        le=2048,
        description="Texts per inference run or request. Small runs of length-sorted texts "
        "waste little on padding, so a small batch is faster per text than a large one.",
    )
    threads: int = Field(
        1,
        ge=0,
        description="onnxruntime intra-op threads (local provider); 0 = one per core. One "
        "suits a machine shared by several services; raise it on a dedicated node.",
    )
    max_tokens: int = Field(
        256, ge=8, le=512, description="Longer texts are truncated to this many tokens (local)."
    )
    base_url: str = Field(
        "https://api.openai.com/v1", description="OpenAI-compatible API root; /embeddings is added."
    )
    model: str = Field(
        "text-embedding-3-small", description="Model name sent to the openai provider."
    )
    dimension: int = Field(
        384,
        ge=2,
        description="Vector size of the openai and hashing providers (the local one reads it "
        "from its model); must match what the openai model returns.",
    )
    api_key_file: Path | None = Field(
        None, description="File holding the openai provider's API key; none sends no key."
    )
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one openai request, seconds.")


def make_embedder(settings: EmbedSettings) -> Embedder:
    """The configured provider. The local one loads its model here (Unavailable if missing)."""
    if settings.provider == "local":
        from engram_embed.local import OnnxEmbedder

        return OnnxEmbedder(
            settings.model_dir,
            batch_size=settings.batch_size,
            threads=settings.threads,
            max_tokens=settings.max_tokens,
            query_instruction=settings.query_instruction,
        )
    if settings.provider == "openai":
        from engram_embed.http import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder(
            settings.base_url,
            settings.model,
            settings.dimension,
            api_key_file=settings.api_key_file,
            timeout_s=settings.timeout_s,
            batch_size=settings.batch_size,
            query_instruction=settings.query_instruction or "",
        )
    from engram_embed.hashing import HashingEmbedder

    return HashingEmbedder(settings.dimension)


def similar_cosine(settings: EmbedSettings) -> float | None:
    """The configured model's cosine for "near" (``paths.SIMILAR_COSINE``), read from its
    manifest without loading it; None for a model without one (openai, hashing)."""
    if settings.provider != "local":
        return None
    from engram_embed.local import model_name_of

    return SIMILAR_COSINE.get(model_name_of(settings.model_dir))
