"""Where the local model lives. Read when called, never at import time."""

from __future__ import annotations

import os
from pathlib import Path

BGE_SMALL_Q = "bge-small-en-v1.5-q"  # bge-small-en-v1.5 with int8 weights
BGE_SMALL = "bge-small-en-v1.5"  # the same in fp32
MINILM = "all-MiniLM-L6-v2"  # the first default: fp32, no Maven needed to build it
MODEL_NAME = BGE_SMALL_Q  # the default
MODELS = (BGE_SMALL_Q, BGE_SMALL, MINILM)  # embedding models
# The cosine above which two texts count as near (consolidation's SIMILAR_TO edges and
# clusters), per model: each gives the share of near neighbour pairs MiniLM gives at 0.85
# (libs/embed/README.md). bge's cosines sit higher.
SIMILAR_COSINE = {BGE_SMALL_Q: 0.92, BGE_SMALL: 0.92, MINILM: 0.85}
RERANKER = "ms-marco-MiniLM-L-12-v2"  # the cross-encoder of the gateway's rerank stage
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"


def engram_home() -> Path:
    """$ENGRAM_HOME, else ./.engram (the same rule as engram_platform.settings)."""
    return Path(os.environ.get("ENGRAM_HOME", ".engram")).resolve()


def default_model_dir(name: str = MODEL_NAME) -> Path:
    return engram_home() / "models" / name


def default_cache_dir() -> Path:
    # Outside models/ so a rebuild can wipe the output without fetching the wheel again.
    return engram_home() / "cache" / "embed"
